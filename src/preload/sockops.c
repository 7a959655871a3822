// SPDX-License-Identifier: MIT
/*
 * Connection setup on shunt sockets: socket, listen, connect, accept, the
 * names they report, shutdown, close and dup. A socket that cannot get a
 * circuit simply stays a kernel socket (DESIGN decision 10).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <linux/close_range.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "common/addr.h"
#include "common/log.h"
#include "common/sys.h"
#include "preload/chan.h"
#include "preload/conn.h"
#include "preload/control.h"
#include "preload/directory.h"
#include "preload/epoll.h"
#include "preload/explain.h"
#include "preload/fault.h"
#include "preload/notice.h"
#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/fork.h"
#include "preload/journal.h"
#include "preload/libc.h"
#include "preload/listenwait.h"
#include "preload/netns.h"
#include "preload/ops.h"
#include "preload/recycle.h"
#include "preload/relisten.h"
#include "preload/sandbox.h"
#include "preload/seccomp.h"
#include "preload/sock.h"
#include "preload/spare.h"
#include "preload/stats.h"
#include "preload/tcpinfo.h"
#include "preload/util.h"
#include "preload/wait.h"

static long libc_ret(long r)
{
	return r < 0 ? -errno : r;
}

int shunt_copy_addr(const struct shunt_wire_addr *w, struct sockaddr *out, socklen_t *outlen)
{
	struct sockaddr_storage ss;
	int have, len = (int)shunt_addr_from_wire(w, &ss);

	/* move_addr_to_user, in its order: both pointers are the program's. */
	if (shunt_get_user(&have, outlen, sizeof(have)))
		return -EFAULT;
	if (have > len)
		have = len;
	if (have < 0)
		return -EINVAL;
	if (have && shunt_put_user(out, &ss, (size_t)have))
		return -EFAULT;
	return shunt_put_user(outlen, &len, sizeof(len));
}

int shunt_op_socket(int domain, int type, int protocol)
{
	int base = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
	bool ours = shunt_enabled() && (domain == AF_INET || domain == AF_INET6) &&
		    base == SOCK_STREAM && (protocol == 0 || protocol == IPPROTO_TCP) &&
		    !shunt_netns_left();
	uint64_t ident = 0;
	struct shunt_sock *s;
	int fd, kept = -1;

	/* The half of a connection this process had, if one is spare: no socket to make. */
	s = ours ? shunt_sock_new(domain, type & SOCK_NONBLOCK) : NULL;
	fd = s ? shunt_spare_take_bound(domain, type & (SOCK_NONBLOCK | SOCK_CLOEXEC), &ident,
					&s->port_past, &kept)
	       : -1;
	if (fd < 0)
		fd = SHUNT_LIBC(socket)(domain, type, protocol);
	if (fd < 0) {
		int e = errno;

		if (s)
			shunt_sock_put(s);
		return -e;
	}
	shunt_fdt_forget(fd);
	/* Without memory it is just a kernel socket: nothing breaks. */
	if (!s)
		return fd;
	shunt_spare_adopt(s, kept, true);
	if (ident) {
		atomic_store_explicit(&s->f.ident, ident, memory_order_relaxed);
		s->spare_bound = true;
		shunt_recycle_note(s);
	} else {
		atomic_store_explicit(&s->unbound, true, memory_order_relaxed);
	}
	/* Made here and held by nobody else yet: a spare at close if nothing changes that. */
	atomic_store_explicit(&s->spare, true, memory_order_relaxed);
	shunt_fdt_set(fd, &s->f);
	shunt_sock_put(s);
	shunt_stats_saw_fd(fd);
	return fd;
}

int shunt_op_bind(struct shunt_sock *s, int fd, const struct sockaddr *addr, socklen_t len)
{
	int r;

	/* Connected sockets are bound, whatever their kernel half says. */
	if (shunt_sock_sync(s) == SHUNT_SOCK_CONNECTED || shunt_sock_state(s) == SHUNT_SOCK_CONNECTING)
		return -EINVAL;
	r = shunt_recycle_fresh(s, fd);
	if (r < 0)
		return r;
	atomic_store_explicit(&s->unbound, false, memory_order_relaxed);
	/* Bound by the program: the port is its own, never a spare's. */
	atomic_store_explicit(&s->spare, false, memory_order_relaxed);
	return (int)libc_ret(SHUNT_LIBC(bind)(fd, addr, len));
}

int shunt_op_listen(struct shunt_sock *s, int fd, int backlog)
{
	int st, r;

	shunt_fork_enter();
	pthread_mutex_lock(&s->lock);
	st = shunt_sock_state(s);
	if (st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING) {
		r = -EINVAL;
		goto out;
	}
	/* A recycled half would listen on its old address and port. */
	r = shunt_recycle_fresh(s, fd);
	if (r < 0)
		goto out;
	/* listen() binds an unbound socket to a port of its own. */
	atomic_store_explicit(&s->unbound, false, memory_order_relaxed);
	atomic_store_explicit(&s->spare, false, memory_order_relaxed);
	r = (int)libc_ret(SHUNT_LIBC(listen)(fd, backlog));
	if (r < 0)
		goto out;
	/* Bound by now (listen() binds an unbound socket): the first accept asks where. */
	s->laddr_known = false;
	atomic_store_explicit(&s->state, SHUNT_SOCK_LISTENING, memory_order_release);
	if (s->listener) {
		uint64_t id;

		/* A second listen() changes the backlog; shuntd follows. */
		shunt_ctl_listen(fd, s->listener, &id, NULL);
	} else {
		int e;

		/* A socket listening anew after a shutdown: a new registration. */
		shunt_sock_close_bells(s);
		e = shunt_sock_register(s, fd);
		if (e < 0) {
			char what[40];

			snprintf(what, sizeof(what), "listener on fd %d", fd);
			shunt_explain_fallback(what, e);
		}
	}
	shunt_epoll_sock_moved(s);
out:
	pthread_mutex_unlock(&s->lock);
	shunt_fork_leave();
	return r;
}

void shunt_sock_listener_refresh(struct shunt_sock *s, int fd)
{
	uint64_t id;

	shunt_fork_enter();
	pthread_mutex_lock(&s->lock);
	if (shunt_sock_state(s) == SHUNT_SOCK_LISTENING && s->listener)
		shunt_ctl_listen(fd, s->listener, &id, NULL);
	pthread_mutex_unlock(&s->lock);
	shunt_fork_leave();
}

/* Leave the connection to the kernel and stop looking at this descriptor. */
static int kernel_connect(struct shunt_sock *s, int fd, const struct sockaddr *addr,
			  socklen_t len)
{
	int r = (int)libc_ret(SHUNT_LIBC(connect)(fd, addr, len));

	if (r == 0 || r == -EINPROGRESS) {
		/* Its epoll registrations become the kernel's before we forget it. */
		atomic_store(&s->so_error, 0);
		shunt_epoll_sock_moved(s);
		struct shunt_file *t = shunt_fdt_take(fd);

		shunt_stats.kernel_connect++;
		if (t)
			shunt_file_put(t);
	}
	return r;
}

/*
 * The connection moved onto the kernel sockets (another holder handed a
 * descriptor to exec or SCM_RIGHTS): from now on the kernel socket is the
 * socket. Under s->lock.
 */
static void to_kernel_locked(struct shunt_sock *s)
{
	struct shunt_conn *c = s->conn;

	shunt_conn_let_go(c);
	c->retired_next = s->retired;
	s->retired = c;
	s->conn = NULL;
	atomic_store_explicit(&s->state, SHUNT_SOCK_KERNEL, memory_order_release);
	shunt_epoll_sock_moved(s);
}

/* Whether descriptor @fd is socket @s now (the table's reference is given back). */
static bool is_fd_of(int fd, struct shunt_sock *s)
{
	struct shunt_sock *t = shunt_fdt_get(fd);

	if (t)
		shunt_sock_put(t);
	return t == s;
}

/*
 * Whether the kernel really carries @s's connection now. The KERNEL bit
 * that says so is in the circuit, which the peer can write; shuntd sets it
 * only after taking this socket out of TCP repair mode, so a socket still
 * in repair mode (or none to ask) means the bit is a lie, and so does one
 * the kernel never connected (no companion). A connection the kernel
 * carried and ended since (FINs both ways, or a reset) is closed too, but
 * it sent or received segments on the way, which a socket made in repair
 * mode and never connected did not. Any descriptor of @s names the same
 * kernel socket; a rare path, so a scan finds one.
 */
static bool kernel_took_over(struct shunt_sock *s)
{
	size_t high = shunt_fdt_high();

	for (size_t fd = 0; fd < high; fd++) {
		int repair = 1;
		socklen_t len = sizeof(repair);

		if (!is_fd_of((int)fd, s))
			continue;
		/* Out of repair, and connected now or before (a socket without companion never is). */
		return SHUNT_LIBC(getsockopt)((int)fd, IPPROTO_TCP, TCP_REPAIR, &repair, &len) == 0 &&
		       repair == 0 && shunt_tcpinfo_carried((int)fd);
	}
	return false;
}

/* A descriptor of @s in this process, or -1 (a rare path: a scan finds one). */
static int fd_of(struct shunt_sock *s)
{
	size_t high = shunt_fdt_high();

	for (size_t fd = 0; fd < high; fd++)
		if (is_fd_of((int)fd, s))
			return (int)fd;
	return -1;
}

/*
 * The kernel half of @s once its circuit is gone and the socket lives on:
 * an unconnected socket again, as the kernel's own would be. A companion
 * frozen ESTABLISHED in repair mode leaves it (only shuntd may do that),
 * and takes the program's SO_REUSEADDR back, which leaving repair mode
 * resets. With @shut both its sides are shut, as tcp_done leaves a socket
 * that a reset or refusal ended (poll then says POLLIN|POLLRDHUP too).
 * Under s->lock; @fd may be -1 (one is looked for).
 */
static void restore_half(struct shunt_sock *s, int fd, bool shut)
{
	int repair = 0, one = 1;
	socklen_t len = sizeof(repair);

	if (fd < 0)
		fd = fd_of(s);
	if (fd < 0)
		return;
	if (SHUNT_LIBC(getsockopt)(fd, IPPROTO_TCP, TCP_REPAIR, &repair, &len) == 0 && repair) {
		int r = shunt_ctl_unrepair(fd);

		if (r < 0)
			shunt_warn("fd %d stays a frozen companion after its circuit ended: %s", fd,
				   strerror(-r));
		if (atomic_load(&s->reuseaddr))
			SHUNT_LIBC(setsockopt)(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	}
	if (shut)
		SHUNT_LIBC(shutdown)(fd, SHUT_RDWR);	/* ENOTCONN, having set sk_shutdown */
}

/*
 * A socket a failure left unconnected gets its shutdown bits cleared by the
 * kernel's next disconnect (tcp_disconnect), as connect() does when it
 * reports the failure.
 */
static void clear_shut(int fd)
{
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };

	SHUNT_LIBC(connect)(fd, &unspec, sizeof(unspec));
}

int shunt_sock_sync(struct shunt_sock *s)
{
	int st = shunt_sock_state(s);

	if (st == SHUNT_SOCK_CONNECTED && !shunt_conn_moved(s->conn))
		return st;
	if (st != SHUNT_SOCK_CONNECTING && st != SHUNT_SOCK_CONNECTED)
		return st;
	pthread_mutex_lock(&s->lock);
	st = shunt_sock_state(s);
	if (st == SHUNT_SOCK_CONNECTED && shunt_conn_moved(s->conn)) {
		if (kernel_took_over(s)) {
			to_kernel_locked(s);
			st = SHUNT_SOCK_KERNEL;
		} else {
			shunt_conn_kernel_lie(s->conn);
		}
	} else if (st == SHUNT_SOCK_CONNECTING) {
		uint32_t setup = atomic_load(&s->conn->hdr->setup);

		/*
		 * Shared memory: shuntd moves it off PENDING, and then the
		 * acceptor may write it too. Anything but a refusal means that
		 * the connection was accepted: established.
		 */
		if (setup != SHUNT_SETUP_PENDING && setup != SHUNT_SETUP_REFUSED) {
			shunt_stats.shm_connect++;
			st = SHUNT_SOCK_CONNECTED;
		} else if (setup == SHUNT_SETUP_REFUSED) {
			/* Like a SYN answered by a reset: unconnected, ECONNREFUSED pending. */
			atomic_store(&s->so_error, ECONNREFUSED);
			st = SHUNT_SOCK_FRESH;
		}
		atomic_store_explicit(&s->state, st, memory_order_release);
		if (st == SHUNT_SOCK_FRESH) {
			shunt_sock_retire_conn(s, false);
			restore_half(s, -1, true);
		}
	}
	pthread_mutex_unlock(&s->lock);
	return st;
}

static bool setup_decided(void *arg)
{
	struct shunt_conn *c = arg;

	return atomic_load_explicit(&c->hdr->setup, memory_order_acquire) != SHUNT_SETUP_PENDING;
}

/* A blocking connect() whose circuit waits for room in the backlog. */
static int wait_established(struct shunt_sock *s, int fd)
{
	int64_t deadline = shunt_deadline(shunt_sock_opt_sndtimeo(s));
	int r = shunt_wait_end(s->conn->me, s->conn->peer, &s->conn->me->tx_waiters,
			       setup_decided, s->conn, deadline);

	if (r == -ETIMEDOUT)
		return -EINPROGRESS;
	if (r < 0)
		return r;
	switch (shunt_sock_sync(s)) {
	case SHUNT_SOCK_CONNECTED:
		pthread_mutex_lock(&s->lock);
		s->connect_report = SHUNT_CONNECT_DONE;
		pthread_mutex_unlock(&s->lock);
		return 0;
	case SHUNT_SOCK_FRESH:
		/* Reported here, so consumed, and the socket is unconnected. */
		pthread_mutex_lock(&s->lock);
		atomic_store(&s->so_error, 0);
		s->connect_report = SHUNT_CONNECT_NONE;
		clear_shut(fd);
		pthread_mutex_unlock(&s->lock);
		shunt_epoll_sock_moved(s);
		return -ECONNREFUSED;
	default:
		return -EINPROGRESS;
	}
}

/*
 * connect(AF_UNSPEC) on a connection: tcp_disconnect resets the peer and
 * leaves an unconnected socket with ECONNRESET pending. Under s->lock.
 */
static int disconnect_locked(struct shunt_sock *s, int fd, const struct sockaddr *addr,
			     socklen_t len)
{
	/* A companion kernel half is ESTABLISHED too: it goes back to unconnected. */
	SHUNT_LIBC(connect)(fd, addr, len);
	shunt_sock_retire_conn(s, true);
	s->connect_report = SHUNT_CONNECT_NONE;
	atomic_store(&s->so_error, ECONNRESET);
	atomic_store_explicit(&s->state, SHUNT_SOCK_FRESH, memory_order_release);
	shunt_epoll_sock_moved(s);
	return 0;
}

/*
 * The policy left a connect to the kernel: say who the two ends are, what
 * decided, and the rule that would give them shared memory (SHUNT_LOG=info:
 * the policy is the operator's choice, not an error).
 */
static void explain_policy(const char *what, const struct shunt_msg_connect_kernel *why)
{
	char from[SHUNT_TENANT_LEN + 1] = { 0 }, to[SHUNT_TENANT_LEN + 1] = { 0 };
	char rule[SHUNT_RULE_LEN + 1] = { 0 }, dflt[sizeof(why->dflt) + 1] = { 0 };

	memcpy(from, why->from, sizeof(why->from));
	memcpy(to, why->to, sizeof(why->to));
	memcpy(rule, why->rule, sizeof(why->rule));
	memcpy(dflt, why->dflt, sizeof(why->dflt));
	shunt_info("%s: tenant %s to tenant %s is left to the kernel by %s%s%s; a rule "
		   "'from = %s, to = %s, action = allow' %sin shuntd's policy would give it "
		   "shared memory (`shunt status` lists them)", what, from, to,
		   rule[0] ? "rule " : "the default policy (", rule[0] ? rule : dflt,
		   rule[0] ? "" : ")", from, to, rule[0] ? "before that rule " : "");
}

/*
 * connect() on a socket whose non-blocking connect ended (reset, refused,
 * closed both ways) before any connect() call reported it: the kernel's
 * __inet_stream_connect finds TCP_CLOSE and reports the pending error, or
 * ECONNABORTED, leaving the socket unconnected and ready to connect again.
 * Under s->lock.
 */
static int connect_failed_locked(struct shunt_sock *s, int fd)
{
	int err = atomic_exchange(&s->so_error, 0);

	if (!err && s->conn)
		err = shunt_conn_take_error(s->conn);
	if (s->conn) {
		shunt_sock_retire_conn(s, false);
		restore_half(s, fd, false);
	}
	clear_shut(fd);
	s->connect_report = SHUNT_CONNECT_NONE;
	atomic_store_explicit(&s->state, SHUNT_SOCK_FRESH, memory_order_release);
	shunt_epoll_sock_moved(s);
	return err ? -err : -ECONNABORTED;
}

/*
 * Connect through the channel kept for @dst, if the library can make the
 * connection itself here (docs/connect.md): 0 with *@conn, -ENOENT (no
 * channel: ask shuntd), -EAGAIN (a full accept queue: ask shuntd for a
 * circuit of its own), -ENOSPC (no free slot: ask shuntd, which may give
 * another channel), or -errno from binding the socket. Under s->lock.
 */
static int connect_through_channel(struct shunt_sock *s, int fd, const struct shunt_wire_addr *dst,
				   struct shunt_conn **conn)
{
	/* Without a journal shuntd would never learn of it; without the hub nobody could wait on it. */
	if (!shunt_journal_ready() || shunt_notice_hub() < 0 || shunt_sandbox_forbids_circuits() ||
	    !shunt_ctl_alive())
		return -ENOENT;
	(void)s;
	return shunt_chan_connect(fd, dst, conn);
}

/* What connect() does once the fork lock is released: nothing more, or wait, or the kernel. */
enum connect_next {
	CONNECT_DONE,
	CONNECT_WAIT,		/* for room in the backlog */
	CONNECT_WAIT_AGAIN,	/* the same, then EALREADY */
	CONNECT_KERNEL,		/* a connection shunt does not carry */
	CONNECT_LIBC,		/* a call the kernel answers as it is */
};

static int connect_start(struct shunt_sock *s, int fd, const struct sockaddr *addr, socklen_t len,
			 enum connect_next *next)
{
	bool nonblock = shunt_sock_opt_nonblock(s);
	struct shunt_msg_connect_kernel why;
	struct shunt_wire_addr dst;
	struct shunt_grant g;
	struct shunt_conn *conn;
	bool established = true;
	uint32_t flags;
	int st, r, err;

	st = shunt_sock_sync(s);
	pthread_mutex_lock(&s->lock);
	st = shunt_sock_state(s);
	if (addr && len >= sizeof(sa_family_t) && addr->sa_family == AF_UNSPEC &&
	    (st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING)) {
		r = disconnect_locked(s, fd, addr, len);
		pthread_mutex_unlock(&s->lock);
		return r;
	}
	if ((st == SHUNT_SOCK_CONNECTED && s->connect_report == SHUNT_CONNECT_PENDING &&
	     shunt_conn_closed(s->conn)) ||
	    (st == SHUNT_SOCK_FRESH && s->connect_report == SHUNT_CONNECT_PENDING)) {
		r = connect_failed_locked(s, fd);
		pthread_mutex_unlock(&s->lock);
		return r;
	}
	if (st == SHUNT_SOCK_CONNECTED) {
		/* The first call after an EINPROGRESS reports success, later ones EISCONN. */
		r = s->connect_report == SHUNT_CONNECT_PENDING ? 0 : -EISCONN;
		s->connect_report = SHUNT_CONNECT_DONE;
		pthread_mutex_unlock(&s->lock);
		return r;
	}
	if (st == SHUNT_SOCK_CONNECTING) {
		pthread_mutex_unlock(&s->lock);
		if (nonblock)
			return -EALREADY;
		/* Waits again for SO_SNDTIMEO, then says it is already in progress. */
		*next = CONNECT_WAIT_AGAIN;
		return 0;
	}
	/* Whatever we cannot carry, the kernel answers exactly. */
	if (st != SHUNT_SOCK_FRESH || shunt_addr_to_wire(addr, len, &dst) < 0 ||
	    (dst.family == AF_INET6 && s->domain == AF_INET)) {
		r = shunt_recycle_fresh(s, fd);
		pthread_mutex_unlock(&s->lock);
		if (r == 0)
			*next = CONNECT_LIBC;
		return r;
	}
	r = connect_through_channel(s, fd, &dst, &conn);
	if (r == 0)
		goto attached;
	/* Only a channel's connection takes a recycled half's port (chan.c): the rest bind anew. */
	if (r == -ENOENT || r == -EAGAIN || r == -ENOSPC) {
		err = shunt_recycle_fresh(s, fd);
		if (err < 0) {
			pthread_mutex_unlock(&s->lock);
			return err;
		}
	}
	if (r != -ENOENT && r != -EAGAIN && r != -ENOSPC) {
		/* The socket could not be bound as connect() binds it: its error. */
		pthread_mutex_unlock(&s->lock);
		return r;
	}
	/* The first connect of a session: the directory comes with its HELLO. */
	if (r == -ENOENT)
		shunt_ctl_open_session();
	/* Nobody under shunt listens there: asking could only be answered "the kernel". */
	if (r == -ENOENT && shunt_directory_nobody_listens(&dst)) {
		shunt_stats.kernel_unlistened++;
		pthread_mutex_unlock(&s->lock);
		*next = CONNECT_KERNEL;
		return 0;
	}
	flags = (nonblock ? SHUNT_CONNECT_NONBLOCK : 0) |
		(r == -EAGAIN ? SHUNT_CONNECT_NO_CHANNEL : 0) |
		(r == -ENOSPC ? SHUNT_CONNECT_CHANNEL_FULL : 0);
	r = shunt_ctl_connect(fd, &dst, flags, &g, &why);
	if (r == SHUNT_USE_CHANNEL) {
		/* From now on this process connects there by itself; this time too. */
		r = shunt_chan_install_client(&g, &dst);
		if (r == 0)
			r = connect_through_channel(s, fd, &dst, &conn);
		if (r == 0)
			goto attached;
		if (r != -ENOENT && r != -EAGAIN && r != -ENOSPC && r != -EMFILE && r != -ENOMEM &&
		    r != -EPROTO) {
			pthread_mutex_unlock(&s->lock);
			return r;
		}
		r = shunt_ctl_connect(fd, &dst, SHUNT_CONNECT_NO_CHANNEL |
				      (nonblock ? SHUNT_CONNECT_NONBLOCK : 0), &g, &why);
	}
	if (r == -ECONNREFUSED) {
		/*
		 * The policy refuses it: as a connection refused by the peer,
		 * at once when blocking, through SO_ERROR when not.
		 */
		shunt_stats.policy_refused++;
		shunt_info("connect on fd %d: refused by shuntd's policy", fd);
		if (nonblock) {
			atomic_store(&s->so_error, ECONNREFUSED);
			shunt_epoll_sock_moved(s);
			r = -EINPROGRESS;
		}
		pthread_mutex_unlock(&s->lock);
		return r;
	}
	if (r != 0) {
		char what[40];

		snprintf(what, sizeof(what), "connect on fd %d", fd);
		if (r == SHUNT_KERNEL_POLICY)
			shunt_stats.fallback_policy++;
		else if (r == SHUNT_KERNEL_LIMIT)
			shunt_stats.fallback_limit++;
		if (r == SHUNT_KERNEL_POLICY)
			explain_policy(what, &why);
		else if (r == SHUNT_KERNEL_LIMIT)
			shunt_info("%s: a tenant's limit is reached; using the kernel", what);
		else if (r == -ETIMEDOUT)
			shunt_debug("%s: shuntd did not answer in time; using the kernel", what);
		else if (r == SHUNT_KERNEL_RESOURCES || r < 0)
			shunt_explain_fallback(what, r < 0 ? r : -ENOMEM);
		if (r < 0 && r != -ENOTCONN && r != -ETIMEDOUT)
			shunt_stats.fallback_error++;
		pthread_mutex_unlock(&s->lock);
		*next = CONNECT_KERNEL;
		return 0;
	}
	conn = shunt_conn_open(&g, &err);
	if (!conn) {
		char what[40];

		snprintf(what, sizeof(what), "connect on fd %d", fd);
		shunt_explain_fallback(what, err);
		/* shuntd bound us; the kernel can still connect the socket. */
		shunt_ctl_close(g.msg.circuit, g.msg.end, false);
		shunt_stats.fallback_error++;
		pthread_mutex_unlock(&s->lock);
		*next = CONNECT_KERNEL;
		return 0;
	}
	established = g.msg.flags & SHUNT_CIRCUIT_ESTABLISHED;
attached:
	/* Its kernel half, bound to the connection's port, may be the next socket()'s (spare.c). */
	s->spare_bound = true;
	shunt_recycle_done(s);
	s->conn = conn;
	shunt_sock_opts_to_circuit(s);
	shunt_notice_bind(conn, s);
	s->connect_report = nonblock ? SHUNT_CONNECT_PENDING : SHUNT_CONNECT_DONE;
	if (established) {
		st = SHUNT_SOCK_CONNECTED;
		shunt_stats.shm_connect++;
	} else {
		st = SHUNT_SOCK_CONNECTING;
	}
	atomic_store_explicit(&s->state, st, memory_order_release);
	/* Its epoll registrations now follow the circuit. */
	shunt_epoll_sock_moved(s);
	pthread_mutex_unlock(&s->lock);
	/* Like the kernel, a non-blocking connect always says EINPROGRESS. */
	if (nonblock)
		return -EINPROGRESS;
	if (st != SHUNT_SOCK_CONNECTED)
		*next = CONNECT_WAIT;
	return 0;
}

int shunt_op_connect(struct shunt_sock *s, int fd, const struct sockaddr *uaddr, socklen_t len)
{
	enum connect_next next = CONNECT_DONE;
	struct sockaddr_storage copy;
	const struct sockaddr *addr = uaddr;
	int r;

	/* move_addr_to_kernel comes first; from then on the address is ours. */
	if ((int)len < 0 || len > sizeof(copy))
		return -EINVAL;
	if (len) {
		if (shunt_get_user(&copy, uaddr, len))
			return -EFAULT;
		addr = (const struct sockaddr *)&copy;
	}
	/* Waits and kernel connects happen outside the fork lock: they may be long. */
	shunt_fork_enter();
	r = connect_start(s, fd, addr, len, &next);
	shunt_fork_leave();
	/* Whoever connects it (the kernel, shuntd, a channel) binds it first. */
	atomic_store_explicit(&s->unbound, false, memory_order_relaxed);
	/* The kernel's connection: its half is the connection, never a spare. */
	if (next == CONNECT_KERNEL || next == CONNECT_LIBC)
		atomic_store_explicit(&s->spare, false, memory_order_relaxed);
	switch (next) {
	case CONNECT_WAIT:
		return wait_established(s, fd);
	case CONNECT_WAIT_AGAIN:
		r = wait_established(s, fd);
		return r == -EINPROGRESS ? -EALREADY : r;
	case CONNECT_KERNEL:
		return kernel_connect(s, fd, addr, len);
	case CONNECT_LIBC:
		return (int)libc_ret(SHUNT_LIBC(connect)(fd, addr, len));
	case CONNECT_DONE:
		break;
	}
	return r;
}

/*
 * The kernel socket of an accepted circuit: the ESTABLISHED companion shuntd
 * made (it arrived first, on the lowest free number, as accept() would put
 * it), or an unconnected one of the library's (*@own: a spare, whose
 * identity goes in *@ident and its kept copy in *@kept, or a fresh one).
 * Either way with accept4's @flags.
 */
static int accepted_fd(struct shunt_sock *s, struct shunt_grant *g, int flags, bool *own,
		       uint64_t *ident, int *kept)
{
	int fd = g->kernel_half;

	g->kernel_half = -1;
	*own = fd < 0;
	if (fd < 0) {
		fd = shunt_spare_take(s->domain, flags, s->inherit, ident, kept);
		if (fd >= 0)
			return fd;
		fd = SHUNT_LIBC(socket)(s->domain, SOCK_STREAM | flags, IPPROTO_TCP);
		return fd < 0 ? -errno : fd;
	}
	if (!(flags & SOCK_CLOEXEC))
		SHUNT_LIBC(fcntl)(fd, F_SETFD, 0);
	if (flags & SOCK_NONBLOCK)
		SHUNT_LIBC(fcntl)(fd, F_SETFL, O_RDWR | O_NONBLOCK);
	return fd;
}

/*
 * @conn, taken for listener @s held as @fd, as a new accepted socket (its
 * descriptor); journaled with @je if it came from a channel.
 */
static int adopt_accepted(struct shunt_sock *s, int fd, struct shunt_conn *conn,
			  struct shunt_grant *g, struct shunt_journal_entry *je,
			  struct sockaddr *addr, socklen_t *alen, int flags)
{
	struct shunt_sock *ns = NULL;
	uint64_t ident = 0;
	bool own;
	int nfd, r, kept = -1;

	/* After the circuit's memfd is closed, so the lowest number is free. */
	nfd = accepted_fd(s, g, flags, &own, &ident, &kept);
	/*
	 * One look at the new socket's identity (a spare's is known): for the
	 * journal and the fd table both.
	 */
	if (nfd >= 0 && !ident)
		ident = shunt_fdt_sock_ident(nfd);
	if (je)
		shunt_chan_journal(je, nfd, ident == SHUNT_FDT_IDENT_UNKNOWN ? 0 : ident);
	ns = nfd >= 0 ? shunt_sock_new(s->domain, flags & SOCK_NONBLOCK) : NULL;
	if (!ns) {
		shunt_conn_close(conn, true);
		if (nfd >= 0)
			SHUNT_LIBC(close)(nfd);
		shunt_spare_unadopted(kept, s->domain, false);
		return nfd < 0 ? nfd : -ENOMEM;
	}
	atomic_store_explicit(&ns->f.ident, ident, memory_order_relaxed);
	shunt_spare_adopt(ns, kept, false);
	shunt_opts_inherit(s, fd, ns, nfd);
	atomic_store_explicit(&ns->spare, own, memory_order_relaxed);
	ns->conn = conn;
	shunt_sock_opts_to_circuit(ns);
	shunt_notice_bind(conn, ns);
	ns->connect_report = SHUNT_CONNECT_DONE;
	atomic_store_explicit(&ns->state, SHUNT_SOCK_CONNECTED, memory_order_release);
	shunt_fdt_set(nfd, &ns->f);
	shunt_sock_put(ns);
	shunt_stats_saw_fd(nfd);
	shunt_stats.shm_accept++;
	/* An address that cannot be stored: the kernel's do_accept closes the new socket. */
	if (addr) {
		r = shunt_copy_addr(&conn->remote, addr, alen);
		if (r < 0) {
			shunt_op_close(nfd);
			return r;
		}
	}
	return nfd;
}

/*
 * The address listener @s (as @fd) is bound to: one getsockname per
 * listen(), not one per accepted connection. 0 or -EAGAIN.
 */
static int listener_addr(struct shunt_sock *s, int fd, struct shunt_wire_addr *out)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int r = 0;

	pthread_mutex_lock(&s->lock);
	if (!s->laddr_known) {
		if (SHUNT_LIBC(getsockname)(fd, (struct sockaddr *)&ss, &len) < 0 ||
		    shunt_addr_to_wire((struct sockaddr *)&ss, len, &s->laddr) < 0)
			r = -EAGAIN;
		else
			s->laddr_known = true;
	}
	if (r == 0)
		*out = s->laddr;
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* The oldest connection queued in our channels of listener @s (as @fd), as a new socket. */
static int accept_from_channels(struct shunt_sock *s, int fd, uint64_t listener,
				struct sockaddr *addr, socklen_t *alen, int flags)
{
	struct shunt_grant none = { .kernel_half = -1, .memfd = -1, .bell = -1 };
	struct shunt_journal_entry je;
	struct shunt_wire_addr laddr;
	struct shunt_conn *conn;
	int r;

	if (!shunt_chan_pending(listener) || listener_addr(s, fd, &laddr) < 0)
		return -EAGAIN;
	r = shunt_chan_accept(listener, &laddr, &conn, &je);
	if (r < 0)
		return r == -ENOMEM ? -ECONNABORTED : r;
	return adopt_accepted(s, fd, conn, &none, &je, addr, alen, flags);
}

/*
 * Keep channel @g of registration @listener, unless another thread closed
 * or unregistered @s meanwhile (its channels were forgotten then: one kept
 * now would stay mapped for good). Under s->lock, as forgetting is.
 */
static int install_channel(struct shunt_sock *s, uint64_t listener, struct shunt_grant *g)
{
	int r = -EAGAIN;

	pthread_mutex_lock(&s->lock);
	if (shunt_sock_state(s) == SHUNT_SOCK_LISTENING && s->listener == listener)
		r = shunt_chan_install_listener(g, listener);
	else
		shunt_grant_discard(g);
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Whether listener bells @bell count a connection not taken yet. */
static bool bells_ring(int bell)
{
	struct pollfd p = { bell, POLLIN, 0 };
	struct timespec zero = { 0, 0 };

	/* A filter that forbids the look: ask shuntd, as before. */
	return bell < 0 || shunt_syscall(SYS_ppoll, &p, 1, &zero, NULL, 8) != 0;
}

/*
 * Whether shuntd made a channel to listener @s since it last told us it had
 * no more for us: one we have not mapped may hold a connection whose count
 * another entry used up (a client that queued without counting).
 */
static bool channels_changed(struct shunt_sock *s)
{
	return shunt_directory_chan_epoch(s->listener) !=
	       atomic_load_explicit(&s->chan_epoch, memory_order_relaxed);
}

/*
 * Hand out a circuit queued on our listener as a new socket. The bells
 * count what is queued, in each channel and at shuntd (docs/connect.md,
 * "The doorbell"): bells still ringing with our channels empty mean shuntd
 * may hold one or a channel we have not mapped, or a count is one to
 * spare. A channel shuntd made since we last asked is asked for whatever
 * the bells say.
 */
static int accept_circuit(struct shunt_sock *s, int fd, struct sockaddr *addr, socklen_t *alen,
			  int flags)
{
	struct shunt_conn *conn = NULL;
	struct shunt_grant g;
	uint32_t epoch;
	int r, err;

	uint64_t listener = s->listener;

	/* What our channels hold first, then what shuntd queued itself. */
	for (bool yielded = false;; yielded = true) {
		r = accept_from_channels(s, fd, listener, addr, alen, flags);
		if (r != -EAGAIN)
			return r;
		if (channels_changed(s))
			break;
		/*
		 * Another acceptor (a prefork sibling woken by the same bells)
		 * took what it counted: nothing is left for shuntd to hand out either.
		 */
		if (!bells_ring(s->bells))
			return -EAGAIN;
		if (yielded)
			break;
		/*
		 * A sibling that took an entry and has not counted it off yet,
		 * or a count to spare: give the CPU away once, then look again
		 * before a round trip through shuntd.
		 */
		shunt_syscall(SYS_sched_yield);
	}
	shunt_stats.accept_asks++;
	/* Read before asking: a channel made after it moves the epoch again. */
	epoch = shunt_directory_chan_epoch(listener);
	r = shunt_ctl_accept(fd, listener, &g);
	while (r == SHUNT_USE_CHANNEL) {
		/* A channel we did not have: its queue may hold what its bell counted. */
		if (install_channel(s, listener, &g) < 0)
			return -EAGAIN;
		/* As an EAGAIN would say (below), without asking once more to hear it. */
		if (g.chan.flags & SHUNT_CHAN_LAST)
			atomic_store_explicit(&s->chan_epoch, epoch, memory_order_relaxed);
		r = accept_from_channels(s, fd, listener, addr, alen, flags);
		/*
		 * Its EPOLLEXCLUSIVE registrations hold the new bell from now on:
		 * put in after the connection that brought it was taken, as a bell
		 * that counts when put in wakes every such instance.
		 */
		shunt_epoll_sock_chans(s);
		if (r != -EAGAIN)
			return r;
		r = shunt_ctl_accept(fd, listener, &g);
	}
	if (r == -ETIMEDOUT)
		return -EAGAIN;
	if (r == -ENOTCONN) {
		/*
		 * No shuntd: what it queued went with it, and its doorbell left
		 * our bells. What rings for nothing now is a channel's count to
		 * spare, which nobody else will take.
		 */
		shunt_chan_settle(listener);
	} else if (r == -EAGAIN) {
		/*
		 * shuntd says EAGAIN only with no channel left to give us (with
		 * a circuit of its own queued it hands that out first): every
		 * channel made by the time we read the epoch is ours.
		 */
		atomic_store_explicit(&s->chan_epoch, epoch, memory_order_relaxed);
	}
	if (r == -ENOTCONN || r == -EAGAIN) {
		/*
		 * The bells rang, and nobody held anything for them: the counts
		 * to spare were taken. Still ringing: a new connection's count
		 * (its entry is there), or more than a settling takes at once
		 * (shunt_op_accept's @stale).
		 */
		r = accept_from_channels(s, fd, listener, addr, alen, flags);
		if (r != -EAGAIN)
			return r;
		return bells_ring(s->bells) ? -EALREADY : -EAGAIN;
	}
	if (r == -ENOENT) {
		/*
		 * shuntd no longer knows the registration (another thread shut
		 * the listener down, or shuntd restarted): from now on the
		 * kernel's accept queue is the only one.
		 */
		pthread_mutex_lock(&s->lock);
		if (s->listener == listener) {
			/* Its epoll registrations let go of the bells of its channels first. */
			shunt_epoll_sock_chans(s);
			shunt_epoll_sock_bell(s, false);
			s->listener = 0;
		}
		pthread_mutex_unlock(&s->lock);
		shunt_chan_forget_listener(listener);
		return -EAGAIN;
	}
	if (r < 0)
		return r;
	conn = shunt_conn_open(&g, &err);
	if (!conn) {
		shunt_grant_discard(&g);
		return -ECONNABORTED;
	}
	return adopt_accepted(s, fd, conn, &g, NULL, addr, alen, flags);
}

static int kernel_accept(int fd, struct sockaddr *addr, socklen_t *alen, int flags)
{
	int r = SHUNT_LIBC(accept4)(fd, addr, alen, flags);

	if (r < 0)
		return -errno;
	shunt_fdt_forget(r);
	shunt_stats.kernel_accept++;
	/* Perhaps because shuntd died: see whether one answers again. */
	shunt_relisten_poke();
	return r;
}

/*
 * Whether an EINTR from one of our internal waits should restart the call,
 * as the kernel restarts accept() after a handler installed with
 * SA_RESTART. We cannot tell which signal ran, so restart only if every
 * installed handler asked for it.
 */
static bool handlers_restart(void)
{
	for (int sig = 1; sig < NSIG; sig++) {
		struct sigaction sa;

		if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, NULL, &sa) < 0)
			continue;
		if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN)
			continue;
		if (!(sa.sa_flags & SA_RESTART))
			return false;
	}
	return true;
}

/*
 * Our own reference to the kernel socket, for a wait that may outlast the
 * application's descriptor: a thread blocked in accept() keeps the socket
 * alive when another one closes the fd, as the kernel's file reference does.
 * Hidden in the library's reserve, out of the application's way.
 */
static int hold_kernel_fd(int fd)
{
	return shunt_fd_dup_hidden(fd);
}

/* SO_RCVTIMEO of @fd as the kernel has it, in microseconds. */
static int64_t timeout_of(int fd)
{
	struct timeval tv;
	socklen_t len = sizeof(tv);

	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) < 0)
		return 0;
	return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

enum {
	STALE_WAIT_NS = 10 * 1000 * 1000,	/* see shunt_op_accept's @stale */
};

int shunt_op_accept(struct shunt_sock *s, int fd, struct sockaddr *addr, socklen_t *alen,
		    int flags)
{
	struct pollfd p[2];
	int64_t deadline = 0;
	int kfd = fd, r;
	bool polled = false;	/* p's revents are a wait's answer, not yet acted on */
	bool lost = false;	/* the last look went by our channels alone, and found nothing */
	bool blocking = false;	/* the listener was found without O_NONBLOCK */
	/*
	 * The bells ring for nothing: counts no entry backs (a client rang
	 * its bell). It cannot be slept on then, and
	 * asking shuntd again at once would spin: the next wait leaves it
	 * out for STALE_WAIT_NS, and looks at our channels after.
	 */
	bool stale = false;
	bool shared = false;	/* the last wait woke in the listener's shared instance */

	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
		return -EINVAL;
	if (shunt_sock_state(s) != SHUNT_SOCK_LISTENING || !s->listener)
		return kernel_accept(fd, addr, alen, flags);
	for (;;) {
		struct timespec ts = { 0, 0 }, *tsp = &ts;
		bool skipped;

		/* Shut down or unregistered by another thread: the kernel answers. */
		if (shunt_sock_state(s) != SHUNT_SOCK_LISTENING || !s->listener) {
			r = kernel_accept(kfd, addr, alen, flags);
			break;
		}
		skipped = false;
		if (!polled) {
			p[0] = (struct pollfd){ kfd, POLLIN, 0 };
			p[1] = (struct pollfd){ s->bells, POLLIN, 0 };
			/*
			 * A connection queued in our channels is (or is about to
			 * be) counted on its bell: shared memory says what
			 * the poll would.
			 */
			if (!lost && (shunt_chan_pending(s->listener) || channels_changed(s))) {
				p[1].revents = POLLIN;
				skipped = true;
			} else if (shunt_syscall(SYS_ppoll, p, 2, &ts, NULL, 8) < 0 && errno != EINTR) {
				r = -errno;
				break;
			}
		}
		polled = false;
		lost = false;
		/* Shared-memory clients first: they are ready the moment we look. */
		if (p[1].revents & POLLIN) {
			shunt_fork_enter();
			r = accept_circuit(s, kfd, addr, alen, flags);
			shunt_fork_leave();
			if (r == -EALREADY) {
				stale = true;
				r = -EAGAIN;
			}
			if (r != -EAGAIN)
				break;
			/* Another acceptor was quicker: now the kernel's queue too. */
			if (skipped) {
				lost = true;
				continue;
			}
		}
		if (p[0].revents) {
			r = kernel_accept(kfd, addr, alen, flags);
			break;
		}
		if (!blocking) {
			/*
			 * O_NONBLOCK of the listener as the kernel has it (another
			 * process may share it), read once per call as the kernel's
			 * accept reads it: a blocking call goes on blocking.
			 */
			if ((int)shunt_syscall(SYS_fcntl, fd, F_GETFL) & O_NONBLOCK) {
				r = -EAGAIN;
				break;
			}
			blocking = true;
			deadline = shunt_deadline(shunt_sock_opt_rcvtimeo(s));
		}
		/* A client of ours queues without a system call: look before sleeping. */
		if (shunt_chan_spin_pending(s->listener, deadline))
			continue;
		/* Only a wait needs the hold: the spin touched no descriptor. */
		if (kfd == fd) {
			kfd = hold_kernel_fd(fd);
			if (kfd < 0) {
				r = kfd;
				kfd = fd;
				break;
			}
			/* What came meanwhile, the wait below sees at once. */
			p[0].fd = kfd;
		}
		if (deadline) {
			int64_t left = deadline - shunt_now_ns();

			if (left <= 0) {
				r = -EAGAIN;
				break;
			}
			ts.tv_sec = left / 1000000000;
			ts.tv_nsec = left % 1000000000;
		} else {
			tsp = NULL;
		}
		if (stale) {
			p[1].fd = -1;
			if (!tsp || ts.tv_sec || ts.tv_nsec > STALE_WAIT_NS)
				ts = (struct timespec){ 0, STALE_WAIT_NS };
			tsp = &ts;
			stale = false;
		}
		shunt_chan_let_go();
		r = shunt_listen_wait(s, p, tsp, &shared);
		if (r < 0 && errno == EINTR && (deadline || !handlers_restart())) {
			r = -EINTR;
			break;
		}
		/* What woke us is in p: no second look before acting on it. */
		polled = r > 0;
	}
	/* Woken alone for what may have been several: the next sleeper's turn. */
	if (shared)
		shunt_listen_wait_pass(s, kfd, p[1].fd);
	if (kfd != fd)
		shunt_close_hidden(kfd);
	return r;
}

int shunt_op_getsockname(struct shunt_sock *s, int fd, struct sockaddr *addr, socklen_t *len)
{
	int st = shunt_sock_sync(s);

	if (st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING)
		return shunt_copy_addr(&s->conn->local, addr, len);
	if (atomic_load_explicit(&s->recycled, memory_order_acquire))
		return shunt_recycle_getsockname(s, addr, len);
	return (int)libc_ret(SHUNT_LIBC(getsockname)(fd, addr, len));
}

int shunt_op_getpeername(struct shunt_sock *s, int fd, struct sockaddr *addr, socklen_t *len)
{
	int st = shunt_sock_sync(s);

	if (st == SHUNT_SOCK_CONNECTED && !shunt_conn_closed(s->conn))
		return shunt_copy_addr(&s->conn->remote, addr, len);
	if (st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING)
		return -ENOTCONN;
	return (int)libc_ret(SHUNT_LIBC(getpeername)(fd, addr, len));
}

/* The socket no longer listens: unregister, and it is a fresh socket again. */
static void forget_listener(struct shunt_sock *s)
{
	shunt_fork_enter();
	pthread_mutex_lock(&s->lock);
	/* Registrations move while the bells they name are still open. */
	atomic_store_explicit(&s->state, SHUNT_SOCK_FRESH, memory_order_release);
	shunt_epoll_sock_moved(s);
	shunt_sock_drop_listener(s, true);
	pthread_mutex_unlock(&s->lock);
	shunt_fork_leave();
}

/*
 * shutdown() of a connect still waiting for room in the backlog: the
 * kernel's inet_shutdown disconnects a SYN_SENT socket (the server never
 * sees it), which leaves it unconnected with ECONNRESET pending.
 */
static int shutdown_connecting(struct shunt_sock *s, int fd, int how)
{
	int st;

	shunt_fork_enter();
	pthread_mutex_lock(&s->lock);
	st = shunt_sock_state(s);
	if (st == SHUNT_SOCK_CONNECTING) {
		shunt_sock_retire_conn(s, false);
		restore_half(s, fd, false);
		s->connect_report = SHUNT_CONNECT_NONE;
		atomic_store(&s->so_error, ECONNRESET);
		atomic_store_explicit(&s->state, SHUNT_SOCK_FRESH, memory_order_release);
		shunt_epoll_sock_moved(s);
	}
	pthread_mutex_unlock(&s->lock);
	shunt_fork_leave();
	/* Established meanwhile: an ordinary shutdown. */
	if (st == SHUNT_SOCK_CONNECTED)
		return shunt_op_shutdown(s, fd, how);
	return 0;
}

int shunt_op_shutdown(struct shunt_sock *s, int fd, int how)
{
	int st = shunt_sock_sync(s), r;

	if (how != SHUT_RD && how != SHUT_WR && how != SHUT_RDWR)
		return -EINVAL;
	if (st == SHUNT_SOCK_CONNECTED) {
		r = shunt_conn_shutdown(s->conn, how);
		if (r != SHUNT_CONN_MOVED)
			return r;
		st = shunt_sock_sync(s);
		if (st != SHUNT_SOCK_KERNEL)
			return -ENOTCONN;	/* the move was a lie, and reset the connection */
	}
	if (st == SHUNT_SOCK_CONNECTING)
		return shutdown_connecting(s, fd, how);
	r = (int)libc_ret(SHUNT_LIBC(shutdown)(fd, how));
	/* A listener shut down for reading stops listening: so does its registration. */
	if (r == 0 && st == SHUNT_SOCK_LISTENING && how != SHUT_WR)
		forget_listener(s);
	return r;
}

int shunt_op_close(int fd)
{
	struct shunt_file *f;
	int r;

	/* The library's own descriptors, and its reserve, where the program has none. */
	if (shunt_fdt_is_hidden(fd) || shunt_fdlimit_reserved(fd))
		return -EBADF;
	if (!shunt_fdt_is_ours(fd))
		return (int)libc_ret(SHUNT_LIBC(close)(fd));
	/* Out of the table first, so a new descriptor with this number starts clean. */
	shunt_fork_enter();
	f = shunt_fdt_take(fd);
	if (f && f->kind == SHUNT_FILE_SOCK)
		shunt_spare_keep((struct shunt_sock *)f, fd);
	r = (int)libc_ret(SHUNT_LIBC(close)(fd));
	if (f)
		shunt_file_put(f);
	shunt_fork_leave();
	return r;
}

int shunt_op_close_range(unsigned first, unsigned last, int flags)
{
	size_t high = shunt_fdt_high();
	unsigned lo = first;

	if (first > last)
		return -EINVAL;
	/* The reserve above the program's limit is the library's (fdlimit.c). */
	if ((long)first >= shunt_fdlimit_reserve_start())
		return 0;
	if ((long)last >= shunt_fdlimit_reserve_start())
		last = (unsigned)(shunt_fdlimit_reserve_start() - 1);
	/* Close-on-exec only: our own descriptors have it already. */
	if (flags & CLOSE_RANGE_CLOEXEC)
		return (int)libc_ret(shunt_syscall_app(SYS_close_range, first, last, flags));
	/*
	 * Our sockets one by one (so each is released as close() would), and
	 * the rest in ranges around the library's own descriptors, which the
	 * application cannot close (a daemon closing "everything").
	 */
	for (size_t fd = first; fd < high && fd <= last; fd++) {
		if (shunt_fdt_is_ours((int)fd)) {
			shunt_op_close((int)fd);
		} else if (shunt_fdt_is_hidden((int)fd)) {
			if (lo < fd && shunt_syscall_app(SYS_close_range, lo, (unsigned)fd - 1, flags) < 0)
				return -errno;
			lo = (unsigned)fd + 1;
		}
	}
	if (lo > last)
		return 0;
	return (int)libc_ret(shunt_syscall_app(SYS_close_range, lo, last, flags));
}

void shunt_op_dup(int oldfd, int newfd)
{
	struct shunt_file *f;

	if (oldfd == newfd)
		return;
	shunt_fork_enter();
	f = shunt_fdt_get_file(oldfd);
	if (f) {
		/* Two descriptors hold its kernel half now: no spare (spare.h). */
		if (f->kind == SHUNT_FILE_SOCK)
			atomic_store_explicit(&((struct shunt_sock *)f)->spare, false,
					      memory_order_relaxed);
		/* Whatever @newfd was is dropped: the kernel closed it. */
		shunt_fdt_set(newfd, f);
		shunt_stats_saw_fd(newfd);
		shunt_file_put(f);
	} else {
		shunt_fdt_forget(newfd);
	}
	shunt_fork_leave();
}

int shunt_sock_downgrade(struct shunt_sock *s, int fd)
{
	int st = shunt_sock_sync(s), r;

	/* Handed on: another process may bind it, or see it used again. */
	if (shunt_recycle_fresh(s, fd) < 0)
		shunt_warn("fd %d is handed on bound to the port of an earlier connection", fd);
	atomic_store_explicit(&s->unbound, false, memory_order_relaxed);
	atomic_store_explicit(&s->spare, false, memory_order_relaxed);
	/* Another program's now: the half lives as long as it holds it, not us. */
	shunt_spare_drop(s);
	if (st == SHUNT_SOCK_CONNECTING) {
		shunt_warn("a connection still waiting for accept() cannot be handed on; "
			   "the program it is handed to will not see it connect");
		return -EINPROGRESS;
	}
	if (st != SHUNT_SOCK_CONNECTED)
		return 0;
	r = shunt_conn_downgrade(s->conn, fd);
	if (r == 0)
		shunt_sock_sync(s);
	return r;
}

void shunt_op_adopt_listener(int fd)
{
	struct shunt_sock *s;
	int domain = 0, type = 0, proto = 0, listening = 0, reuse = 0;
	socklen_t len = sizeof(int);
	struct stat st;
	long fl;

	/* Under a seccomp filter that leaves it kernel-only anyway, not even a look. */
	if (!shunt_enabled() || shunt_fdt_is_ours(fd) || shunt_fdt_is_hidden(fd) ||
	    shunt_sandbox_forbids_circuits() ||
	    fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return;
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 ||
	    (domain != AF_INET && domain != AF_INET6))
		return;
	len = sizeof(int);
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM)
		return;
	len = sizeof(int);
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) < 0 ||
	    proto != IPPROTO_TCP)
		return;
	len = sizeof(int);
	/* Connections stay the kernel's: one that moved off its circuit belongs there. */
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) < 0 ||
	    !listening)
		return;
	fl = shunt_syscall(SYS_fcntl, fd, F_GETFL);
	s = shunt_sock_new(domain, fl >= 0 && (fl & O_NONBLOCK));
	if (!s)
		return;
	atomic_store(&s->rcvtimeo_us, timeout_of(fd));
	/* What its connections inherit (a listener is never in repair mode). */
	len = sizeof(int);
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, &len) == 0)
		atomic_store(&s->reuseaddr, reuse == 1);
	atomic_store_explicit(&s->state, SHUNT_SOCK_LISTENING, memory_order_release);
	shunt_fork_enter();
	/* Not registered: a listener still, accepting what the kernel queues. */
	shunt_sock_register(s, fd);
	shunt_fdt_set(fd, &s->f);
	shunt_fork_leave();
	shunt_sock_put(s);
	shunt_stats_saw_fd(fd);
}
