// SPDX-License-Identifier: MIT
/*
 * Spare kernel halves (spare.h). A half is kept only while nothing else
 * could have seen it used, which sock->spare records: the library made it
 * for an accepted circuit (not shuntd's companion), or the program made it
 * with socket() and connected it to a circuit or never used it; no other
 * descriptor or process has held it (dup, fork, exec, SCM_RIGHTS and
 * io_uring clear the flag); and the program set no option on it that the
 * library cannot put back as a fresh socket has it (opts.c,
 * shunt_opts_reset).
 *
 * There are two kinds. An unbound half (an accepted circuit's, or a socket
 * never used) is the next accepted connection's. A connecting socket's
 * half is bound to the port the connection had (the library binds it
 * before it queues the connection, so that the port is the kernel's to
 * give and to refuse): it is the next socket()'s, presented as fresh
 * (recycle.c), and its port the next connection's if that one goes
 * through a channel from the same address and the port's last connection
 * is over at both ends (chan.c, shunt_chan_port_free): the kernel never
 * carries two live connections of one address and port pair either (it
 * keeps the pair in TIME_WAIT, which a new connect may reuse on
 * loopback). While kept, its port stays bound: a bind() of that very port
 * elsewhere fails with EADDRINUSE, as it may for any port of the
 * ephemeral range that an outgoing connection holds (docs/connect.md,
 * "Client halves").
 *
 * shuntd finds a circuit end's kernel socket by its inode in the process
 * that journaled it (daemon/companion.c), and turns it into the
 * connection's companion in place (connected, after repair mode). So a
 * half is kept only if it is still as the connection left it (unbound, or
 * bound and unconnected) and out of repair mode once the journal says its
 * end was let go of (shuntd reads a holder's journal before it makes a
 * companion, so none is made after that), and handed out again only once
 * shuntd has read that entry (until then it could look for the end's
 * socket here).
 *
 * A spare handed out keeps its hidden descriptor open for the connection's
 * close (spare.h, shunt_spare_take's kept copy), so that a connection per
 * request costs no copy and no look at the number at its close.
 *
 * Every call goes through the seccomp gate (common/sys.h): one a filter
 * forbids costs the spare, never the process.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sys/socket.h>

#include "common/addr.h"
#include "common/sys.h"
#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/journal.h"
#include "preload/ops.h"
#include "preload/sock.h"
#include "preload/spare.h"
#include "preload/util.h"

/*
 * Per family and kind: enough for a server that accepts and closes
 * connections (or a client that makes them) while shuntd catches up with
 * the journal, which it reads every 2-10 ms (a prefork worker closing
 * 12,000 connections a second closes 25-125 in between). Each costs a
 * hidden descriptor and an idle socket (about 3.5 KiB of kernel memory).
 * Without a reserve above the program's descriptor limit the hidden
 * descriptors are the program's, which then reaches EMFILE that many
 * early: at most 1/SPARE_SHARE of its range is spent on the unbound
 * spares of a family, half that on the bound ones.
 */
enum { SPARE_MAX = 64, SPARE_SHARE = 64 };

/* A kept half, as it was left: what its next owner may find different. */
struct spare {
	int fd;				/* hidden */
	bool nonblock;			/* O_NONBLOCK, the one file flag it may have */
	uint32_t set;			/* options set on it (s->inherit's bits) */
	uint64_t ident;
	struct shunt_journal_mark closed;	/* the journal just after its CLOSED */
	struct shunt_port_past past;	/* a bound one's: its port's last connection */
};

/* Oldest first: the first not read past yet means none after it is. */
static pthread_mutex_t spare_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	struct spare v[SPARE_MAX];
	unsigned first, n;
} pool[4];				/* pool_of(): family, and unbound or bound */

enum { POOLS = sizeof(pool) / sizeof(pool[0]) };

/*
 * Copies kept by sockets since take handed them out (spare.h), per pool:
 * at most room() of them, so that spares take at most twice the numbers
 * the pool alone would.
 */
static _Atomic unsigned kept_out[POOLS];

static unsigned pool_of(int domain, bool bound)
{
	return (domain == AF_INET6) + 2 * bound;
}

/* Close the oldest spare of family @i, which has one (under spare_lock, or in a fork's child). */
static void close_first(unsigned i)
{
	shunt_close_hidden(pool[i].v[pool[i].first].fd);
	pool[i].first = (pool[i].first + 1) % SPARE_MAX;
	pool[i].n--;
}

/*
 * The oldest spare of family @i that shuntd is done with, into @sp. One
 * marked in a journal a restart replaced would never be read past, and
 * would hold up all the others: it goes.
 */
static bool pop_ready(unsigned i, struct spare *sp)
{
	bool r = false;

	pthread_mutex_lock(&spare_lock);
	while (pool[i].n && shunt_journal_replaced(&pool[i].v[pool[i].first].closed))
		close_first(i);
	if (pool[i].n && shunt_journal_read_past(&pool[i].v[pool[i].first].closed)) {
		*sp = pool[i].v[pool[i].first];
		pool[i].first = (pool[i].first + 1) % SPARE_MAX;
		pool[i].n--;
		r = true;
	}
	pthread_mutex_unlock(&spare_lock);
	return r;
}

/*
 * As the connection left it: an accepted circuit's half never bound (no
 * companion was made of it: shuntd binds one first), a connecting one's
 * not connected (a companion is; the half was bound before its connection
 * was queued, and nothing unbinds a socket).
 */
static bool as_left(int fd, int domain, bool bound)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct shunt_wire_addr w;

	if (bound)
		return shunt_syscall(SYS_getpeername, fd, &ss, &len) < 0 && errno == ENOTCONN;
	return shunt_syscall(SYS_getsockname, fd, &ss, &len) == 0 &&
	       shunt_addr_to_wire((struct sockaddr *)&ss, len, &w) == 0 && w.family == domain &&
	       w.port == 0;
}

/* ...and never in repair mode, which reads SK_FORCE_REUSE (no program can set it). */
static bool pristine(int fd, int domain, bool bound)
{
	int reuse = 0;
	socklen_t len = sizeof(reuse);

	return as_left(fd, domain, bound) &&
	       shunt_syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_REUSEADDR, &reuse, &len) == 0 &&
	       reuse != 2;
}

static bool count_kept(unsigned i);
static void give_back(int kept, unsigned i);

/* A spare of pool_of(@domain, @bound) handed out as shunt_spare_take says. */
static int take(int domain, bool bound, int flags, uint32_t inherit, uint64_t *ident,
		struct shunt_port_past *past, int *kept)
{
	bool nonblock = flags & SOCK_NONBLOCK;
	struct spare sp;
	int fd;

	if (!pop_ready(pool_of(domain, bound), &sp))
		return -1;
	/* A companion shuntd began before it read that the end was let go of. */
	if (!as_left(sp.fd, domain, bound)) {
		shunt_close_hidden(sp.fd);
		return -1;
	}
	/* The lowest free number, as socket() would give. */
	fd = (int)shunt_syscall(SYS_fcntl, sp.fd, flags & SOCK_CLOEXEC ? F_DUPFD_CLOEXEC : F_DUPFD,
				0);
	/* The hidden copy stays for this connection's close, while few do (spare.h). */
	if (fd >= 0 && count_kept(pool_of(domain, bound))) {
		*kept = sp.fd;
	} else {
		shunt_close_hidden(sp.fd);
		*kept = -1;
	}
	if (fd < 0)
		return -1;
	/* What the listener passes on the caller sets anyway: the rest as fresh. */
	if (shunt_opts_reset(domain, fd, sp.set & ~inherit) < 0 ||
	    (sp.nonblock != nonblock &&
	     shunt_syscall(SYS_fcntl, fd, F_SETFL, nonblock ? O_NONBLOCK : 0) < 0)) {
		shunt_syscall(SYS_close, fd);
		give_back(*kept, pool_of(domain, bound));
		*kept = -1;
		return -1;
	}
	*ident = sp.ident;
	if (past)
		*past = sp.past;
	return fd;
}

int shunt_spare_take(int domain, int flags, uint32_t inherit, uint64_t *ident, int *kept)
{
	return take(domain, false, flags, inherit, ident, NULL, kept);
}

int shunt_spare_take_bound(int domain, int flags, uint64_t *ident, struct shunt_port_past *past,
			   int *kept)
{
	return take(domain, true, flags, 0, ident, past, kept);
}

/* How many spares pool @i may keep now. */
static unsigned room(unsigned i)
{
	long share;

	if (shunt_fdlimit_reserve_start() != LONG_MAX)
		return SPARE_MAX;
	/* Numbers of the program's own: at most 1/64 of its range (16 of 1,024), 1/128 bound. */
	share = shunt_fdlimit_open_max() / SPARE_SHARE / (i >= pool_of(AF_INET, true) ? 2 : 1);
	return share < SPARE_MAX ? (unsigned)(share > 0 ? share : 0) : SPARE_MAX;
}

/*
 * One more copy kept by a socket of pool @i, if room() allows. Not where
 * the library shares the program's range and the program came near its
 * limit: there the numbers it frees are how the room for replies grows
 * back (fdroom.c), and a spare handed out frees one.
 */
static bool count_kept(unsigned i)
{
	unsigned n = atomic_load_explicit(&kept_out[i], memory_order_relaxed);

	if (shunt_fdlimit_shares_range() && shunt_fdlimit_near())
		return false;
	do {
		if (n >= room(i))
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&kept_out[i], &n, n + 1,
							memory_order_relaxed, memory_order_relaxed));
	return true;
}

/* Copy @kept (if any), counted in pool @i, given to no socket after all: closed. */
static void give_back(int kept, unsigned i)
{
	if (kept < 0)
		return;
	shunt_close_hidden(kept);
	atomic_fetch_sub_explicit(&kept_out[i], 1, memory_order_relaxed);
}

void shunt_spare_adopt(struct shunt_sock *s, int kept, bool bound)
{
	/* Until its close says (keep): a release without one still knows since when. */
	s->spare_refusals = shunt_journal_refusals();
	s->spare_pool = kept >= 0 ? (int)pool_of(s->domain, bound) : -1;
	atomic_store_explicit(&s->spare_fd, kept, memory_order_release);
}

/* @s's copy, taken from it (-1: none); counted off if take counted it. */
static int unkeep(struct shunt_sock *s)
{
	int fd = atomic_exchange_explicit(&s->spare_fd, -1, memory_order_acquire);

	if (fd >= 0 && s->spare_pool >= 0) {
		atomic_fetch_sub_explicit(&kept_out[s->spare_pool], 1, memory_order_relaxed);
		s->spare_pool = -1;
	}
	return fd;
}

void shunt_spare_unadopted(int kept, int domain, bool bound)
{
	give_back(kept, pool_of(domain, bound));
}

void shunt_spare_drop(struct shunt_sock *s)
{
	int fd = unkeep(s);

	if (fd >= 0)
		shunt_close_hidden(fd);
}

static bool full(unsigned i)
{
	unsigned most = room(i);
	bool r;

	pthread_mutex_lock(&spare_lock);
	r = pool[i].n >= most;
	pthread_mutex_unlock(&spare_lock);
	return r;
}

void shunt_spare_keep(struct shunt_sock *s, int fd)
{
	uint64_t ident = atomic_load_explicit(&s->f.ident, memory_order_relaxed);
	int h;

	if (!atomic_load_explicit(&s->spare, memory_order_relaxed))
		return;
	s->spare_refusals = shunt_journal_refusals();
	/* Kept since it was handed out (take): the copy is the half, whatever @fd holds now. */
	if (atomic_load_explicit(&s->spare_fd, memory_order_relaxed) >= 0 ||
	    full(pool_of(s->domain, s->spare_bound)))
		return;
	/*
	 * Still our socket under @fd: a raw close behind the library's back
	 * may have left the number to another file, which must never be
	 * handed out as a connection.
	 */
	if (!ident || ident == SHUNT_FDT_IDENT_UNKNOWN || shunt_fdt_sock_ident(fd) != ident)
		return;
	h = shunt_fd_dup_hidden(fd);
	/* A copy made here is the pool's alone to count. */
	s->spare_pool = -1;
	atomic_store_explicit(&s->spare_fd, h >= 0 ? h : -1, memory_order_release);
}

void shunt_spare_put(struct shunt_sock *s)
{
	struct spare sp = {
		.fd = unkeep(s),
		.nonblock = atomic_load(&s->nonblock),
		.set = atomic_load(&s->inherit),
		.ident = atomic_load_explicit(&s->f.ident, memory_order_relaxed),
		.past = s->port_past,
	};
	unsigned i = pool_of(s->domain, s->spare_bound);

	if (sp.fd < 0)
		return;
	/*
	 * Without a journal, or with one too full to take the CLOSED (any
	 * refusal since it was kept may have been that one), shuntd is told
	 * by message: no way to know when it read it. A companion made of it
	 * (connected, or left in repair mode) is the connection's, and goes now,
	 * as the kernel's socket would: shuntd reads this journal before it
	 * makes any other, so none comes later.
	 */
	if (atomic_load_explicit(&s->spare, memory_order_relaxed) && shunt_journal_mark(&sp.closed) &&
	    shunt_journal_refusals() == s->spare_refusals &&
	    pristine(sp.fd, s->domain, s->spare_bound)) {
		unsigned most = room(i);

		pthread_mutex_lock(&spare_lock);
		if (pool[i].n < most) {
			pool[i].v[(pool[i].first + pool[i].n) % SPARE_MAX] = sp;
			pool[i].n++;
			sp.fd = -1;
		}
		pthread_mutex_unlock(&spare_lock);
	}
	if (sp.fd >= 0)
		shunt_close_hidden(sp.fd);
}

void shunt_spare_fork_drop(struct shunt_sock *s)
{
	/* Counted no more: shunt_spare_fork_child started the counts afresh. */
	s->spare_pool = -1;
	shunt_spare_drop(s);
}

void shunt_spare_fork_prepare(void)
{
	pthread_mutex_lock(&spare_lock);
}

void shunt_spare_fork_parent(void)
{
	pthread_mutex_unlock(&spare_lock);
}

void shunt_spare_fork_child(void)
{
	/* The parent hands its spares out: two processes must not hold one. */
	pthread_mutex_init(&spare_lock, NULL);
	for (unsigned i = 0; i < POOLS; i++) {
		while (pool[i].n)
			close_first(i);
		/* The sockets' copies are closed by sock.c's handler (shunt_spare_fork_drop). */
		atomic_store_explicit(&kept_out[i], 0, memory_order_relaxed);
	}
}
