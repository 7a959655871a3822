// SPDX-License-Identifier: MIT
/*
 * A connection over a circuit: the byte stream, its shutdown and close, and
 * the error states of the kernel's TCP that programs observe.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/circuit.h"
#include "common/lock.h"
#include "common/log.h"
#include "common/sys.h"
#include "preload/chan.h"
#include "preload/conn.h"
#include "preload/control.h"
#include "preload/cork.h"
#include "preload/fault.h"
#include "preload/notice.h"
#include "preload/plink.h"
#include "preload/spin.h"
#include "preload/stats.h"
#include "preload/trim.h"
#include "preload/util.h"
#include "preload/wait.h"

enum {
	/*
	 * Bytes moved between publishing indices: small enough that producer
	 * and consumer work on different parts of the ring at the same time,
	 * large enough that the index cache lines rarely move.
	 */
	CHUNK = 64 << 10,
	/*
	 * A blocking send up to this size that fits the socket's share of the
	 * ring waits until all of it fits, then goes in whole: tcp_sendmsg
	 * appends small sends to a segment of up to 64 KiB without a pause,
	 * so threads sending records on one socket never see them torn apart.
	 */
	WHOLE_MAX = 64 << 10,
	/*
	 * The kernel's receive window on loopback, which a sender whose
	 * SO_SNDBUF is set can fill on top of its own buffer, unless the peer
	 * set SO_RCVBUF (then half of that, the rest being overhead).
	 */
	RCV_SHARE = 64 << 10,
	/* Never less, whatever the peer wrote: a share of 0 would stop us for good. */
	SHARE_MIN = 4096,
	/*
	 * Held bytes (TCP_CORK, MSG_MORE) go out in full segments of
	 * loopback's MSS, as tcp_push sends full segments and keeps the rest.
	 */
	CORK_SEGMENT = 65483,
};

/* The kernel's ceiling on holding bytes back (TCP_CORK, MSG_MORE): 200 ms. */
#define CORK_DELAY_NS (200 * 1000 * 1000LL)

/* A position in an iovec array. */
struct iov_cursor {
	const struct iovec *iov;
	int cnt;
	size_t off;
};

/* How much of the current iovec to take, at most @want; its bytes at *@at. */
static size_t cursor_take(struct iov_cursor *cur, size_t want, char **at)
{
	size_t n = cur->iov->iov_len - cur->off;

	*at = (char *)cur->iov->iov_base + cur->off;
	return n < want ? n : want;
}

/* Move past @n bytes taken from the current iovec. */
static void cursor_advance(struct iov_cursor *cur, size_t n)
{
	cur->off += n;
	if (cur->off == cur->iov->iov_len) {
		cur->iov++;
		cur->cnt--;
		cur->off = 0;
	}
}

/*
 * Copy @len bytes from the program's buffers at @cur into the ring past our
 * tail. 0, or -EFAULT when a buffer could not be read: then none of the
 * @len bytes counts, as tcp_sendmsg counts none of a chunk whose copy
 * faulted.
 */
static int copy_to_ring(struct shunt_ring *r, struct iov_cursor *cur, size_t len)
{
	for (size_t done = 0, n; done < len; done += n) {
		char *at;

		n = cursor_take(cur, len - done, &at);
		if (shunt_ring_put_by(r, done, at, n, shunt_ucopy, shunt_ucopy_nt))
			return -EFAULT;
		cursor_advance(cur, n);
	}
	return 0;
}

/*
 * Copy @len bytes at @ring_off past our head into the program's buffers,
 * from @cur. 0, or -EFAULT when a buffer could not be written: then none of
 * the @len bytes counts (the caller consumes nothing of them), as
 * tcp_recvmsg counts none of an skb whose copy faulted.
 */
static int copy_from_ring(struct shunt_ring *r, size_t ring_off, struct iov_cursor *cur,
			  size_t len)
{
	for (size_t done = 0, n; done < len; done += n) {
		char *at;

		n = cursor_take(cur, len - done, &at);
		if (shunt_ring_get_by(r, ring_off + done, at, n, shunt_ucopy))
			return -EFAULT;
		cursor_advance(cur, n);
	}
	return 0;
}

/* Total length of an iovec array, or -EINVAL past SSIZE_MAX. */
static ssize_t iov_total(const struct iovec *iov, int cnt)
{
	size_t total = 0;

	for (int i = 0; i < cnt; i++) {
		if (iov[i].iov_len > (size_t)SSIZE_MAX - total)
			return -EINVAL;
		total += iov[i].iov_len;
	}
	return (ssize_t)total;
}

/* Skip empty leading iovecs so the copy loops always make progress. */
static void cursor_init(struct iov_cursor *cur, const struct iovec *iov, int cnt)
{
	cur->iov = iov;
	cur->cnt = cnt;
	cur->off = 0;
	while (cur->cnt && !cur->iov->iov_len) {
		cur->iov++;
		cur->cnt--;
	}
}

/*
 * The holders' pids (shunt_circuit_end.pid): each process holding an end
 * writes its own there, as it opens the connection or, after fork, in the
 * child; a peer reads them to learn that every holder is gone at once,
 * where shuntd would tell it a little later. Only pids of one pid
 * namespace, ours, mean anything to us.
 */
static pthread_once_t pids_once = PTHREAD_ONCE_INIT;
static uint64_t my_pidns;			/* set once */
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_list all_conns = { &all_conns, &all_conns };	/* under all_lock */

static bool pid_gone(uint32_t pid)
{
	return shunt_syscall(SYS_kill, (pid_t)pid, 0) < 0 && errno == ESRCH;
}

/* Write @pid into end @e's holders, as one of namespace my_pidns. */
static void hold_pid(struct shunt_circuit_end *e, uint32_t pid)
{
	uint64_t ns = 0;
	uint32_t v;

	if (!my_pidns || (!atomic_compare_exchange_strong(&e->pidns, &ns, my_pidns) &&
			  ns != my_pidns)) {
		atomic_store(&e->pid_overflow, 1);
		return;
	}
	for (unsigned i = 0; i < SHUNT_ROUTES; i++)
		if (atomic_load(&e->pid[i]) == pid)
			return;
	for (unsigned i = 0; i < SHUNT_ROUTES; i++) {
		v = 0;
		if (atomic_compare_exchange_strong(&e->pid[i], &v, pid))
			return;
	}
	/* No free entry: take one whose process is gone (it died holding it). */
	for (unsigned i = 0; i < SHUNT_ROUTES; i++) {
		v = atomic_load(&e->pid[i]);
		if (v && pid_gone(v) && atomic_compare_exchange_strong(&e->pid[i], &v, pid))
			return;
	}
	atomic_store(&e->pid_overflow, 1);
}

static void drop_pid(struct shunt_circuit_end *e, uint32_t pid)
{
	for (unsigned i = 0; i < SHUNT_ROUTES; i++) {
		uint32_t v = pid;

		atomic_compare_exchange_strong(&e->pid[i], &v, 0);
	}
}

static void all_fork_prepare(void)
{
	pthread_mutex_lock(&all_lock);
}

static void all_fork_parent(void)
{
	pthread_mutex_unlock(&all_lock);
}

/* The child holds every connection the parent held: it says so in each. */
static void all_fork_child(void)
{
	struct shunt_list *n;

	pthread_mutex_init(&all_lock, NULL);
	shunt_list_for_each(n, &all_conns) {
		struct shunt_conn *c = shunt_container_of(n, struct shunt_conn, all);

		if (!c->let_go)
			hold_pid(c->me, shunt_pid);
	}
}

static void pids_init(void)
{
	struct stat st;

	if (stat("/proc/self/ns/pid", &st) == 0)
		my_pidns = (uint64_t)st.st_ino;
	pthread_atfork(all_fork_prepare, all_fork_parent, all_fork_child);
}

/* A connection on mapped circuit @hdr; NULL without memory. */
static struct shunt_conn *conn_new(struct shunt_circuit_hdr *hdr, uint32_t ring_size,
				   unsigned end, uint64_t circuit,
				   const struct shunt_wire_addr *local,
				   const struct shunt_wire_addr *remote)
{
	struct shunt_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->hdr = hdr;
	c->ring_size = ring_size;
	c->end = end;
	c->circuit = circuit;
	c->me = &hdr->end[c->end];
	c->peer = &hdr->end[c->end ^ 1];
	c->local = *local;
	c->remote = *remote;
	c->slot = SHUNT_NO_SLOT;
	c->route = -1;
	shunt_list_init(&c->trim_node);
	shunt_ring_attach(&c->tx, hdr, shunt_tx_ring(c->end), c->ring_size, 1);
	shunt_ring_attach(&c->rx, hdr, shunt_rx_ring(c->end), c->ring_size, 0);
	pthread_once(&pids_once, pids_init);
	pthread_mutex_lock(&all_lock);
	shunt_list_add_tail(&all_conns, &c->all);
	hold_pid(c->me, shunt_pid);
	pthread_mutex_unlock(&all_lock);
	return c;
}

struct shunt_conn *shunt_conn_open(struct shunt_grant *g, int *err)
{
	struct shunt_conn *c;
	struct shunt_circuit_hdr *hdr;
	int r;

	/* Without the hub nobody here could sleep on this circuit: refuse it. */
	if (shunt_notice_hub() < 0) {
		shunt_grant_discard(g);
		*err = -EMFILE;
		return NULL;
	}
	r = shunt_circuit_map_at(g->memfd, g->offset, g->msg.ring_size, &hdr);
	shunt_close_reply(g->memfd);
	g->memfd = -1;
	if (r < 0) {
		shunt_warn("cannot map circuit %llu: %s", (unsigned long long)g->msg.circuit,
			   strerror(-r));
		shunt_grant_discard(g);
		*err = r;
		return NULL;
	}
	c = conn_new(hdr, g->msg.ring_size, g->msg.end, g->msg.circuit, &g->msg.local,
		     &g->msg.peer);
	if (!c) {
		shunt_circuit_unmap(hdr, g->msg.ring_size);
		shunt_grant_discard(g);
		*err = -ENOMEM;
		return NULL;
	}
	c->in_slot = g->offset != 0;
	return c;
}

struct shunt_conn *shunt_conn_attach(struct shunt_chan *chan, struct shunt_circuit_hdr *hdr,
				     unsigned end, uint64_t circuit,
				     const struct shunt_wire_addr *local,
				     const struct shunt_wire_addr *remote)
{
	struct shunt_conn *c = conn_new(hdr, shunt_chan_ring_size(chan), end, circuit, local,
					remote);

	if (!c) {
		shunt_chan_put(chan);
		return NULL;
	}
	c->chan = chan;
	c->in_slot = true;
	return c;
}

/* Wake the peer's holders (futex sleepers, and watchers through their routes). */
static void wake_peer(struct shunt_conn *c, unsigned why)
{
	if (shunt_wake_end(c->peer, why))
		shunt_notice_post(c->peer, c->peer_links);
}

/* Wake the other holders of our own end: other threads, other processes sharing it. */
static void wake_self(struct shunt_conn *c, unsigned why)
{
	if (shunt_wake_end(c->me, why))
		shunt_notice_post(c->me, c->self_links);
}

/* Publish a state bit of our end and wake the peer to look at it. */
/* Set @bits in our end's state and tell the peer; the state before. */
static uint32_t publish_state(struct shunt_conn *c, uint32_t bits)
{
	/* Release: bytes published before the FIN are seen with it. */
	uint32_t was = atomic_fetch_or_explicit(&c->me->state, bits, memory_order_release);

	wake_peer(c, SHUNT_WAKE_ALL);
	return was;
}

static uint32_t my_state(struct shunt_conn *c)
{
	uint32_t st = atomic_load_explicit(&c->me->state, memory_order_acquire);

	/* A KERNEL bit found to be a lie (shunt_conn_kernel_lie) is not there. */
	if (atomic_load_explicit(&c->kernel_lie, memory_order_relaxed))
		st &= ~(uint32_t)SHUNT_END_KERNEL;
	return st;
}

static bool is_dead(struct shunt_conn *c)
{
	return atomic_load_explicit(&c->me->flags, memory_order_acquire) & SHUNT_FLAG_DEAD;
}

/* Mark the connection reset, with @err pending unless another holder did it first. */
static bool make_dead(struct shunt_conn *c, uint32_t err)
{
	if (atomic_fetch_or(&c->me->flags, SHUNT_FLAG_DEAD) & SHUNT_FLAG_DEAD)
		return false;
	atomic_store(&c->me->sk_err, err);
	return true;
}

/*
 * Turn what the peer published into the kernel's error state: its reset
 * arrives as a pending ECONNRESET and a dead socket (data already received
 * stays readable first).
 */
static uint32_t sync_peer(struct shunt_conn *c)
{
	uint32_t ps = atomic_load_explicit(&c->peer->state, memory_order_acquire);

	if ((ps & SHUNT_END_RESET) && !is_dead(c))
		make_dead(c, ECONNRESET);
	return ps;
}

/*
 * The peer published something that cannot be (@lie says what): treat the
 * connection as reset. No notice of it comes from the peer, so our own
 * poll and epoll watchers (other threads, other holders) hear of it from us.
 */
static void reset_for_lie(struct shunt_conn *c, const char *lie)
{
	if (make_dead(c, ECONNRESET)) {
		shunt_warn("circuit %llu: peer %s; resetting", (unsigned long long)c->circuit, lie);
		wake_self(c, SHUNT_WAKE_ALL);
	}
}

static void broken(struct shunt_conn *c)
{
	reset_for_lie(c, "published impossible ring indices");
}

void shunt_conn_kernel_lie(struct shunt_conn *c)
{
	atomic_store(&c->kernel_lie, true);
	reset_for_lie(c, "claimed the connection moved onto the kernel, which still has it "
		      "in repair mode");
}

/*
 * The pending error, cleared. The word is shared memory: anything but an
 * error a TCP socket can have is read as a reset.
 */
static int take_error(struct shunt_conn *c)
{
	uint32_t err;

	if (!atomic_load_explicit(&c->me->sk_err, memory_order_relaxed))
		return 0;
	err = atomic_exchange(&c->me->sk_err, 0);
	switch (err) {
	case 0:
	case ECONNRESET:
	case EPIPE:
	case ECONNREFUSED:
	case ETIMEDOUT:
	case EFAULT:		/* left by recvmmsg (shunt_conn_set_error) */
		return (int)err;
	default:
		return ECONNRESET;
	}
}

static bool error_pending(struct shunt_conn *c)
{
	return atomic_load_explicit(&c->me->sk_err, memory_order_relaxed) != 0;
}

static bool peer_gone(uint32_t ps)
{
	return ps & (SHUNT_END_CLOSED | SHUNT_END_RESET);
}

/*
 * How long a call waits for a holders' lock before it looks around. A lock
 * is held only while bytes are copied; one held this long belongs to a
 * holder that stopped, or is a word the peer wrote (the locks live in the
 * circuit, where the peer can write too), whose owner may never let go.
 */
enum { LOCK_PATIENCE_US = 100 * 1000 };

/* Whether the call's timeout has passed (never, without one). */
static bool timed_out(struct shunt_timer *t)
{
	int64_t deadline = shunt_timer_deadline(t);

	return deadline && shunt_now_ns() >= deadline;
}

/*
 * Just took a holders' lock (@other: another process held it since we
 * did): our copy of the index may be stale.
 */
static void ring_locked(struct shunt_conn *c, struct shunt_ring *ring, int producer, bool other)
{
	uint32_t h;

	if (other && !producer) {
		shunt_ring_resync(ring, producer);
	} else if (other) {
		/*
		 * A producer writes past the tail by the bytes held back
		 * (TCP_CORK). The count is shared memory: a count the ring
		 * cannot hold is none, and the bytes are lost, as are bytes
		 * the peer overwrote.
		 */
		ring->pos = atomic_load_explicit(&ring->ctl->tail, memory_order_relaxed);
		ring->seen = atomic_load_explicit(&ring->ctl->head, memory_order_acquire);
		h = atomic_load_explicit(&c->me->corked, memory_order_relaxed);
		if (ring->pos - ring->seen > c->ring_size ||
		    h > c->ring_size - (ring->pos - ring->seen)) {
			h = 0;
			atomic_store_explicit(&c->me->corked, 0, memory_order_relaxed);
		}
		ring->pos += h;
		ring->held = ring->held_told = h;
	}
}

/*
 * The holders' locks (common/lock.h). Taking one re-reads our index, which
 * another process holding the socket may have moved. A lock that cannot be
 * had makes the call say EAGAIN once its deadline is past, or after
 * LOCK_PATIENCE_US for a non-blocking call, which must not wait long; and
 * ECONNRESET when the peer is gone, since then nobody may ever release it.
 */
static int ring_lock(struct shunt_conn *c, _Atomic uint32_t *w, struct shunt_ring *ring,
		     int producer, struct shunt_timer *t, bool nonblock)
{
	bool other;

	while (!shunt_lock_try(w, shunt_pid, &other)) {
		int64_t deadline = shunt_timer_deadline(t), soon = shunt_deadline(LOCK_PATIENCE_US);

		if (!shunt_lock_wait(w, shunt_pid, deadline && deadline < soon ? deadline : soon,
				     &other))
			break;
		if (peer_gone(atomic_load_explicit(&c->peer->state, memory_order_acquire)))
			return -ECONNRESET;
		if (nonblock || timed_out(t))
			return -EAGAIN;
	}
	ring_locked(c, ring, producer, other);
	return 0;
}

static int tx_lock(struct shunt_conn *c, struct shunt_timer *t, bool nonblock)
{
	return ring_lock(c, &c->me->tx_lock, &c->tx, 1, t, nonblock);
}

static void tx_unlock(struct shunt_conn *c)
{
	shunt_unlock(&c->me->tx_lock, shunt_pid);
}

static int rx_lock(struct shunt_conn *c, struct shunt_timer *t, bool nonblock)
{
	return ring_lock(c, &c->me->rx_lock, &c->rx, 0, t, nonblock);
}

static void rx_unlock(struct shunt_conn *c)
{
	shunt_unlock(&c->me->rx_lock, shunt_pid);
}

/*
 * How much of the ring this end's bytes may fill: all of it, unless the
 * program set SO_SNDBUF (which turns the kernel's buffer sizing off); then
 * about what the kernel would hold for a loopback connection, its own
 * buffer and the peer's receive window, so that a non-blocking writer
 * stops as soon as the kernel's would. Both are read from shared memory:
 * whatever they say, the share stays within SHARE_MIN and the ring.
 */
static size_t tx_share(struct shunt_conn *c)
{
	uint32_t snd = atomic_load_explicit(&c->me->sndbuf, memory_order_relaxed), rcv;
	uint64_t share;

	if (!snd)
		return c->ring_size;
	rcv = atomic_load_explicit(&c->peer->rcvbuf, memory_order_relaxed);
	share = (uint64_t)snd + (rcv ? rcv / 2 : RCV_SHARE);
	if (share < SHARE_MIN)
		share = SHARE_MIN;
	return share < c->ring_size ? (size_t)share : c->ring_size;
}

/* Bytes written and held back (TCP_CORK, MSG_MORE). Under the tx lock. */
static size_t held(struct shunt_conn *c)
{
	return (size_t)c->tx.held;
}

/*
 * Make all written bytes visible but the last @keep, and wake the reader.
 * Under the tx lock.
 */
static void release_held(struct shunt_conn *c, size_t keep)
{
	if (held(c) > keep) {
		shunt_ring_publish_held(&c->tx, keep);
		wake_peer(c, SHUNT_WAKE_RX);
	} else {
		/* Held streaming stores are published by whoever pushes them: fence them here. */
		shunt_ring_fence(&c->tx);
	}
	/*
	 * Stores only on a change: the peer reads this block (the state) on
	 * every call, and a write would take its cache line away each time.
	 * The count last told is ours to know, the deadline 0 whenever it is.
	 */
	if (c->tx.held_told != keep) {
		if (!keep)
			atomic_store_explicit(&c->me->cork_deadline, 0, memory_order_relaxed);
		atomic_store_explicit(&c->me->corked, (uint32_t)keep, memory_order_relaxed);
		c->tx.held_told = keep;
	}
}

/*
 * After a send copied bytes: what tcp_push would send. Corked (TCP_CORK
 * or MSG_MORE) only full segments go; the rest waits for more, for the
 * cork to come off, or for the 200 ms the kernel holds it at most, which
 * the cork timer (cork.c) keeps. Under the tx lock.
 */
static void push_after_send(struct shunt_conn *c, int flags)
{
	bool corked = (flags & MSG_MORE) ||
		      (atomic_load_explicit(&c->me->opts, memory_order_relaxed) & SHUNT_OPT_CORK);
	size_t keep = corked ? held(c) % CORK_SEGMENT : 0;

	release_held(c, keep);
	if (keep && !atomic_load_explicit(&c->me->cork_deadline, memory_order_relaxed)) {
		int64_t at = shunt_now_ns() + CORK_DELAY_NS;

		atomic_store_explicit(&c->me->cork_deadline, at, memory_order_relaxed);
		shunt_cork_arm(c, at);
	}
}

/*
 * Room for new bytes in the share, less what is unread and held; the
 * consumer's head is read again only when the last one seen leaves less
 * than @want. -EPROTO if the head the peer published is impossible.
 */
static long tx_room(struct shunt_conn *c, size_t share, size_t want)
{
	size_t used = c->ring_size - shunt_ring_space_cached(&c->tx);

	if (used >= share || share - used < want) {
		long sp = shunt_ring_space(&c->tx);

		if (sp < 0)
			return sp;
		used = c->ring_size - (size_t)sp;
	}
	return used < share ? (long)(share - used) : 0;
}

/*
 * After a send wrote bytes: the idle trimmer looks at the ring a while
 * from now, unless it will already. A peer told we were quiet is told we
 * are not (the word shares its line with sndbuf, which every send reads).
 * Under the tx lock, after @sent bytes; a load or two and a branch while
 * armed, so a busy connection pays nothing. While the trimmer's thread is
 * put off (trim.h), an armed connection that has sent enough since it was
 * armed starts it.
 */
static void trim_note(struct shunt_conn *c, size_t sent)
{
	if (atomic_load_explicit(&c->me->idle, memory_order_relaxed))
		atomic_store_explicit(&c->me->idle, 0, memory_order_relaxed);
	if (atomic_load_explicit(&c->trim_armed, memory_order_relaxed)) {
		if (__builtin_expect(atomic_load_explicit(&shunt_trim_put_off, memory_order_relaxed), 0) &&
		    c->tx.pos - c->trim_from > SHUNT_TRIM_EAGER_BYTES)
			shunt_trim_start();
		return;
	}
	atomic_store_explicit(&c->trim_armed, true, memory_order_relaxed);
	c->trim_mark = c->tx.pos;
	c->trim_from = c->tx.pos - sent;
	shunt_trim_arm(c);
}

int shunt_conn_trim(struct shunt_conn *c, bool rest)
{
	uint64_t head, from, page = (uint64_t)sysconf(_SC_PAGESIZE);
	bool other;

	/* Held: a send (or a push, a shutdown) is under way, so not quiet. */
	if (!shunt_lock_try(&c->me->tx_lock, shunt_pid, &other))
		return SHUNT_TRIM_SOON;
	ring_locked(c, &c->tx, 1, other);
	if (c->tx.pos != c->trim_mark) {
		c->trim_mark = c->tx.pos;
		tx_unlock(c);
		return SHUNT_TRIM_SOON;
	}
	/*
	 * Quiet. The consumer reads only [head, tail) and we, the only
	 * writer while we hold the lock, write only past our position: every
	 * page outside [head, position) is nobody's. The head comes from the
	 * peer (acquire, pairs with the release in shunt_ring_consume): one
	 * the ring cannot hold gives nothing back. At first the page the next
	 * byte goes to stays, so that a message after a pause costs no page
	 * fault on either side (a fresh page costs tens of microseconds on a
	 * cold CPU); only a longer rest gives it back too.
	 */
	head = atomic_load_explicit(&c->tx.ctl->head, memory_order_acquire);
	from = rest ? c->tx.pos : (c->tx.pos | (page - 1)) + 1;
	if (c->tx.pos - head <= c->ring_size) {
		if (head + c->ring_size > from &&
		    shunt_ring_give_back(&c->tx, from, head + c->ring_size) > 0)
			atomic_fetch_add_explicit(&shunt_stats.trim_idle, 1, memory_order_relaxed);
		/* Bytes still unread: the peer gives their pages back as it reads them. */
		if (c->tx.pos != head)
			atomic_store_explicit(&c->me->idle, 1, memory_order_relaxed);
	}
	if (rest)
		atomic_store_explicit(&c->trim_armed, false, memory_order_relaxed);
	tx_unlock(c);
	return rest ? SHUNT_TRIM_DONE : SHUNT_TRIM_LATER;
}

/* What a waiting sender needs: room for @need bytes, or any sign it cannot send. */
struct tx_want {
	struct shunt_conn *c;
	size_t need;
};

/* Send readiness, for the wait loop: made without the lock, from shared indices. */
static bool tx_ready(void *arg)
{
	struct tx_want *w = arg;
	struct shunt_conn *c = w->c;
	uint32_t ps = atomic_load_explicit(&c->peer->state, memory_order_acquire);
	uint64_t used = shunt_ring_used_shared(&c->tx) +
			atomic_load_explicit(&c->me->corked, memory_order_relaxed);
	size_t share = tx_share(c), need = w->need < share ? w->need : share;

	return used > c->ring_size || used + need <= share || peer_gone(ps) || is_dead(c) ||
	       error_pending(c) || (my_state(c) & (SHUNT_END_WR_SHUT | SHUNT_END_KERNEL));
}

/* Bytes we never read, from the shared indices (0 if they make no sense). */
static uint64_t unread(struct shunt_conn *c)
{
	uint64_t n = shunt_ring_used_shared(&c->rx);

	return n > c->ring_size ? 0 : n;
}

/* The last close of the end: a FIN, or a reset. */
static void publish_close(struct shunt_conn *c, bool abort)
{
	/* As the kernel: unread data or SO_LINGER 0 make close() a reset. */
	if (abort || unread(c) != 0)
		publish_state(c, SHUNT_END_CLOSED | SHUNT_END_RESET);
	else
		publish_state(c, SHUNT_END_CLOSED | SHUNT_END_WR_SHUT);
}

void shunt_conn_shut(struct shunt_conn *c, bool abort)
{
	int r;

	if (c->let_go)
		return;
	/* The kernel sockets carry it: their own close says what this close means. */
	if (shunt_conn_moved(c)) {
		shunt_conn_let_go(c);
		return;
	}
	c->let_go = true;
	shunt_notice_unbind(c);
	shunt_cork_forget(c);
	shunt_trim_forget(c);
	drop_pid(c->me, shunt_pid);
	/*
	 * Like the kernel's socket release, which only the last reference
	 * triggers: held by this process alone (the count is shuntd's), we
	 * publish at once; shared after fork, shuntd says who is last. Right
	 * after a fork shuntd may not count the other process yet (it reads
	 * FORK, or the child's claim, when it comes to it): we ask then too.
	 * Bytes held back (TCP_CORK) go out first, before a FIN as with
	 * tcp_send_fin, or now rather than from a timer this process no
	 * longer runs for it; a reset discards them, as it purges the
	 * kernel's send queue.
	 */
	if (atomic_load(&c->me->holders) <= 1 && shunt_ctl_holders_known()) {
		if (!abort && !unread(c))
			shunt_conn_push(c);
		publish_close(c, abort);
		/* A channel's slot: shuntd hears of it once nobody here can touch it (conn_free). */
		if (!c->in_slot)
			shunt_ctl_close(c->circuit, c->end, false);
	} else {
		if (!abort)
			shunt_conn_push(c);
		r = shunt_ctl_close(c->circuit, c->end, true);
		/*
		 * Without shuntd's word, better a connection ended early than one
		 * never ended; unless we are a fork child whose claim was refused,
		 * which holds nothing of its parent's (fork.c, orphan_inherited).
		 */
		if (r == SHUNT_LAST || (r < 0 && !shunt_ctl_claim_refused()))
			publish_close(c, abort);
	}
	atomic_fetch_add(&shunt_stats.shm_tx_bytes, shunt_conn_tx_bytes(c));
	atomic_fetch_add(&shunt_stats.shm_rx_bytes, shunt_conn_rx_bytes(c));
}

void shunt_conn_free(struct shunt_conn *c)
{
	/*
	 * Let go of already, as a rule; not so one a fork child found no
	 * session for (fork.c), which it may still send on: no timer may
	 * look at it once it is unmapped.
	 */
	shunt_cork_forget(c);
	shunt_trim_forget(c);
	pthread_mutex_lock(&all_lock);
	shunt_list_del(&c->all);
	pthread_mutex_unlock(&all_lock);
	/*
	 * A channel's slot stays mapped with its channel; shuntd gives it to
	 * a new connection once both ends told it they are done with it,
	 * which this process says only now that no thread of it can still
	 * be inside this connection.
	 */
	if (c->in_slot)
		shunt_ctl_close(c->circuit, c->end, false);
	if (c->chan)
		shunt_chan_put(c->chan);
	else
		shunt_circuit_unmap(c->hdr, c->ring_size);
	free(c);
}

void shunt_conn_close(struct shunt_conn *c, bool abort)
{
	shunt_conn_shut(c, abort);
	shunt_conn_free(c);
}

bool shunt_conn_moved(struct shunt_conn *c)
{
	return my_state(c) & SHUNT_END_KERNEL;
}

void shunt_conn_let_go(struct shunt_conn *c)
{
	if (c->let_go)
		return;
	c->let_go = true;
	shunt_notice_unbind(c);
	shunt_cork_forget(c);
	shunt_trim_forget(c);
	drop_pid(c->me, shunt_pid);
	if (!c->in_slot)
		shunt_ctl_close(c->circuit, c->end, false);
	atomic_fetch_add(&shunt_stats.shm_tx_bytes, shunt_conn_tx_bytes(c));
	atomic_fetch_add(&shunt_stats.shm_rx_bytes, shunt_conn_rx_bytes(c));
}

/*
 * Publish the bytes end @e of a circuit holds back, whoever wrote them,
 * with its tx lock held. The count is shared memory: one the ring cannot
 * hold is dropped. A holder's private write position stays right: it is
 * the tail now.
 */
static void flush_held(struct shunt_circuit_hdr *hdr, uint32_t ring_size, unsigned e)
{
	struct shunt_circuit_end *end = &hdr->end[e];
	struct shunt_ring_ctl *ctl = &hdr->ring[shunt_tx_ring(e)];
	uint32_t h = atomic_load_explicit(&end->corked, memory_order_relaxed);
	uint64_t tail = atomic_load_explicit(&ctl->tail, memory_order_relaxed);
	uint64_t used = tail - atomic_load_explicit(&ctl->head, memory_order_acquire);

	if (h && used <= ring_size && h <= ring_size - used)
		atomic_store_explicit(&ctl->tail, tail + h, memory_order_release);
	atomic_store_explicit(&end->corked, 0, memory_order_relaxed);
	atomic_store_explicit(&end->cork_deadline, 0, memory_order_relaxed);
}

int shunt_conn_downgrade(struct shunt_conn *c, int fd)
{
	/* Both ends' locks, always in the same order, so two downgraders never deadlock. */
	_Atomic uint32_t *locks[4] = {
		&c->hdr->end[0].tx_lock, &c->hdr->end[0].rx_lock,
		&c->hdr->end[1].tx_lock, &c->hdr->end[1].rx_lock,
	};
	int64_t deadline = shunt_deadline(1000000);
	int held = 0, r = 0;

	if (shunt_conn_moved(c))
		return 0;
	for (; held < 4; held++) {
		bool other;

		if (shunt_lock(locks[held], shunt_pid, deadline, &other) < 0) {
			r = -ETIMEDOUT;
			break;
		}
	}
	if (r == 0) {
		/*
		 * shuntd moves what the rings hold up to their tails: bytes
		 * either end holds back (TCP_CORK) join them first, as the
		 * kernel socket would send them eventually anyway.
		 */
		shunt_ring_fence(&c->tx);
		flush_held(c->hdr, c->ring_size, 0);
		flush_held(c->hdr, c->ring_size, 1);
		c->tx.held = c->tx.held_told = 0;
		r = shunt_ctl_downgrade(c->circuit, fd);
	}
	while (held--)
		shunt_unlock(locks[held], shunt_pid);
	if (r < 0)
		shunt_warn("circuit %llu cannot move onto the kernel (%s): the program it is "
			   "handed to will not see its bytes", (unsigned long long)c->circuit,
			   strerror(-r));
	return r;
}

/*
 * Whether every process holding the peer's end is gone: each wrote its pid
 * (hold_pid), all in our pid namespace, none is alive and the peer is not
 * known closed. shuntd learns it too, but only once it has run; the kernel
 * closes a dead process's sockets before its parent can reap it, so a
 * program that reaped the peer already sees the reset or FIN. A pid reused
 * since counts as alive, and then shuntd tells us.
 */
static bool peer_vanished(struct shunt_conn *c)
{
	unsigned n = 0;

	if (!my_pidns || atomic_load(&c->peer->pidns) != my_pidns ||
	    atomic_load(&c->peer->pid_overflow) ||
	    (atomic_load(&c->peer->state) & (SHUNT_END_CLOSED | SHUNT_END_KERNEL)) ||
	    atomic_load(&c->peer->corked))
		return false;
	for (unsigned i = 0; i < SHUNT_ROUTES; i++) {
		uint32_t pid = atomic_load(&c->peer->pid[i]);

		if (!pid)
			continue;
		if (!pid_gone(pid))
			return false;
		n++;
	}
	return n > 0;
}

/*
 * What shuntd does to the peer's end once its last holder is gone
 * (daemon/circuit.c), done by us who found out first: a reset if it left
 * bytes of ours unread, else a FIN. Our own watchers hear of it.
 */
static void bury_peer(struct shunt_conn *c)
{
	uint32_t st = shunt_ring_used_shared(&c->tx) ? SHUNT_END_CLOSED | SHUNT_END_RESET
						   : SHUNT_END_CLOSED | SHUNT_END_WR_SHUT;

	atomic_fetch_or_explicit(&c->peer->state, st, memory_order_release);
	wake_self(c, SHUNT_WAKE_ALL);
}

/*
 * Why a send cannot proceed right now, or 0. A pending error is consumed
 * only when nothing was sent yet (@done == 0): otherwise the partial count
 * is returned and the error waits for the next call, as in the kernel.
 * Called under the tx lock.
 */
static int send_blocked(struct shunt_conn *c, size_t done, size_t left, ssize_t *pretend)
{
	uint32_t ps = sync_peer(c);
	int err = done ? (error_pending(c) ? ECONNRESET : 0) : take_error(c);
	long room;

	if (err)
		return -err;
	if (is_dead(c) || (my_state(c) & SHUNT_END_WR_SHUT))
		return -EPIPE;
	/* The common case first, without looking at the ring. */
	if (!left || (!(ps & SHUNT_END_CLOSED) &&
		      (ps & (SHUNT_END_RD_SHUT | SHUNT_END_WR_SHUT)) !=
			      (SHUNT_END_RD_SHUT | SHUNT_END_WR_SHUT)))
		return 0;
	room = tx_room(c, tx_share(c), left);
	if ((ps & SHUNT_END_CLOSED) || room > 0) {
		/*
		 * Data for a socket that is gone, or that shut down both ways
		 * (FIN_WAIT with RCV_SHUTDOWN): the kernel takes what its send
		 * buffer holds (our ring's room) and sends it, the peer answers
		 * with a reset, and only the next call fails: EPIPE, since its
		 * FIN came first. So a send larger than the room is partial,
		 * and a program that writes the rest finds the error (libuv
		 * does, Node's test-net-error-twice counts on it). A peer still
		 * open is reset too, once data reaches it: not while its window
		 * (our ring) is full, nor for a send of nothing.
		 */
		make_dead(c, EPIPE);
		publish_state(c, SHUNT_END_RESET);
		*pretend = room > 0 && (size_t)room < left ? (ssize_t)room : (ssize_t)left;
		return 1;
	}
	return 0;
}

/*
 * sendmsg with control data the kernel refuses (@err): tcp_sendmsg first
 * wants a state that can send (else the pending error, or EPIPE), and only
 * then fails with @err. Under the tx lock.
 */
static int refuse_cmsg(struct shunt_conn *c, int err)
{
	sync_peer(c);
	if (is_dead(c) || (my_state(c) & SHUNT_END_WR_SHUT)) {
		int e = take_error(c);

		return e ? -e : -EPIPE;
	}
	return err;
}

ssize_t shunt_conn_send(struct shunt_conn *c, const struct iovec *iov, int iovcnt, int flags,
			struct shunt_io *io)
{
	bool nonblock = io->nonblock || (flags & MSG_DONTWAIT), whole;
	ssize_t total = iov_total(iov, iovcnt), pretend = 0;
	struct shunt_timer timer = { .timeout_us = io->timeout_us };
	struct tx_want want = { .c = c };
	struct iov_cursor cur;
	size_t done = 0;
	int r;

	if (total < 0)
		return total;
	cursor_init(&cur, iov, iovcnt);
	r = tx_lock(c, &timer, nonblock);
	if (r)
		return r;
	if (io->cmsg_err) {
		r = refuse_cmsg(c, io->cmsg_err);
		tx_unlock(c);
		return r;
	}
	whole = !nonblock && (size_t)total <= WHOLE_MAX;
	for (;;) {
		size_t share, left = (size_t)total - done, n;
		long room;

		/* Moved onto the kernel: the rest goes there (the caller sends it). */
		if (my_state(c) & SHUNT_END_KERNEL) {
			io->moved = true;
			r = 0;
			break;
		}
		r = send_blocked(c, done, left, &pretend);
		if (r)
			break;
		share = tx_share(c);
		/* Larger than the whole share (a tiny SO_SNDBUF): it goes in pieces. */
		if (left > share)
			whole = false;
		room = tx_room(c, share, left);
		if (room < 0) {
			broken(c);
			continue;
		}
		n = (size_t)room < left ? (size_t)room : left;
		if (n > CHUNK)
			n = CHUNK;
		if (whole && n < left)
			n = 0;
		if (n) {
			/* A buffer it cannot read: what went before is sent, this chunk is not. */
			r = copy_to_ring(&c->tx, &cur, n);
			if (r)
				break;
			shunt_ring_hold(&c->tx, n);
			done += n;
			push_after_send(c, flags);
		}
		if (done == (size_t)total)
			break;
		if (n)
			continue;	/* the next chunk may fit already */
		/* Also when woken over and over without room: the time is up. */
		if (nonblock || timed_out(&timer)) {
			/*
			 * No room because the peer died with our bytes unread?
			 * Then it is a reset, as with the kernel, not EAGAIN.
			 */
			if (!done && peer_vanished(c)) {
				bury_peer(c);
				continue;
			}
			/* Out of room after some bytes: tcp_sendmsg pushes them all. */
			if (done)
				release_held(c, 0);
			break;
		}
		/*
		 * Out of room: what is held goes out first, as tcp_sendmsg
		 * pushes before it sleeps, else the reader could never make
		 * room. Then sleep without the lock, as sk_stream_wait_memory
		 * releases the socket: other holders may send, time out or get
		 * EAGAIN meanwhile. (So may their bytes come between ours, as
		 * with the kernel, for a send too large to go in whole.)
		 */
		release_held(c, 0);
		if (done)
			trim_note(c, done);
		tx_unlock(c);
		want.need = whole ? left : 1;
		r = shunt_wait_end(c->me, c->peer, &c->me->tx_waiters, tx_ready, &want,
				   shunt_timer_deadline(&timer));
		if (r == -ETIMEDOUT)
			r = -EAGAIN;
		if (!r)
			r = tx_lock(c, &timer, false);
		if (r)
			goto unlocked;
	}
	if (done)
		trim_note(c, done);
	tx_unlock(c);
unlocked:
	if (io->moved)
		return (ssize_t)done;
	if (r == 1)
		return (ssize_t)done + pretend;
	if (done || total == 0)
		return (ssize_t)done;
	return r ? r : -EAGAIN;
}

/* What a waiting receiver needs: @need bytes, or any sign of EOF or error. */
struct rx_want {
	struct shunt_conn *c;
	size_t need;
};

/* Receive readiness, for the wait loop: made without the lock, from shared indices. */
static bool rx_ready(void *arg)
{
	struct rx_want *w = arg;
	struct shunt_conn *c = w->c;
	uint32_t ps = atomic_load_explicit(&c->peer->state, memory_order_acquire);
	uint64_t avail = shunt_ring_used_shared(&c->rx);

	return avail > c->ring_size || avail >= w->need || (ps & ~SHUNT_END_RD_SHUT) ||
	       (my_state(c) & (SHUNT_END_RD_SHUT | SHUNT_END_KERNEL)) || is_dead(c) ||
	       error_pending(c);
}

/*
 * After consuming: wake a sender that waits for space once a third of the
 * ring is free, the point at which the kernel calls a TCP socket writable.
 */
static void credit_returned(struct shunt_conn *c)
{
	size_t used = (size_t)(c->rx.seen - c->rx.pos);

	if (used <= c->ring_size - c->ring_size / 3)
		wake_peer(c, SHUNT_WAKE_TX);
}

ssize_t shunt_conn_recv(struct shunt_conn *c, const struct iovec *iov, int iovcnt, int flags,
			struct shunt_io *io)
{
	bool nonblock = io->nonblock || (flags & MSG_DONTWAIT);
	ssize_t total = iov_total(iov, iovcnt);
	bool peek = flags & MSG_PEEK, discard = flags & MSG_TRUNC;
	struct rx_want want = { .c = c };
	struct shunt_timer timer = { .timeout_us = io->timeout_us };
	struct iov_cursor cur;
	size_t copied = 0, target;
	int r;

	if (total < 0)
		return total;
	if (flags & MSG_OOB)
		return -EINVAL;		/* no urgent data is ever pending */
	if (flags & MSG_ERRQUEUE)
		return -EAGAIN;		/* and the error queue is always empty */
	/* sock_rcvlowat: all of it with MSG_WAITALL, else SO_RCVLOWAT bytes. */
	target = (flags & MSG_WAITALL) ? (size_t)total : (size_t)io->lowat;
	if (target > (size_t)total)
		target = (size_t)total;
	cursor_init(&cur, iov, iovcnt);
	r = rx_lock(c, &timer, nonblock);
	if (r)
		return r;
	for (;;) {
		/* Peer state first: bytes published before its FIN are then visible. */
		uint32_t ps = sync_peer(c);
		long avail;

		/* Moved onto the kernel, every unread byte with it: read there from now on. */
		if (my_state(c) & SHUNT_END_KERNEL) {
			io->moved = true;
			r = 0;
			break;
		}
		avail = shunt_ring_avail(&c->rx);

		if (avail < 0) {
			broken(c);
			avail = 0;
		}
		if (!total)
			break;
		if (avail && peek) {
			/*
			 * Peeking never consumes: copy again from the head each
			 * time. With MSG_TRUNC nothing is copied, only counted.
			 */
			copied = (size_t)avail < (size_t)total ? (size_t)avail : (size_t)total;
			cursor_init(&cur, iov, iovcnt);
			r = discard ? 0 : copy_from_ring(&c->rx, 0, &cur, copied);
			if (r) {
				copied = 0;
				break;
			}
			if (copied >= target)
				break;
		} else if (avail) {
			size_t n = (size_t)total - copied;

			if ((size_t)avail < n)
				n = (size_t)avail;
			if (n > CHUNK)
				n = CHUNK;
			/* A buffer it cannot write: bytes copied before are returned, these stay. */
			if (!discard && copy_from_ring(&c->rx, 0, &cur, n)) {
				r = copied ? 0 : -EFAULT;
				break;
			}
			/*
			 * The sender went quiet (shunt_conn_trim): these bytes'
			 * pages go back before the head moves past them, since
			 * until then it cannot write there. Fewer bytes than a
			 * page fill no page: the word (on a line the sender
			 * writes) is not even read for them.
			 */
			if (n >= SHUNT_RING_MIN &&
			    atomic_load_explicit(&c->peer->idle, memory_order_relaxed) &&
			    shunt_ring_give_back(&c->rx, c->rx.pos, c->rx.pos + n) > 0)
				atomic_fetch_add_explicit(&shunt_stats.trim_read, 1,
							  memory_order_relaxed);
			shunt_ring_consume(&c->rx, n);
			credit_returned(c);
			copied += n;
			if (copied >= target)
				break;
			continue;	/* more may have come meanwhile */
		}
		/* tcp_recvmsg's order: a FIN received, then a pending error, then shutdown. */
		if (ps & SHUNT_END_WR_SHUT)
			break;		/* EOF: what we have, or 0 */
		if (error_pending(c)) {
			/* With data copied, the error waits for the next call. */
			r = copied ? 0 : -take_error(c);
			if (r || copied)
				break;
		}
		if (is_dead(c) || (ps & ~SHUNT_END_RD_SHUT) || (my_state(c) & SHUNT_END_RD_SHUT))
			break;		/* EOF: what we have, or 0 */
		/* Also when woken over and over without data: the time is up. */
		if (nonblock || timed_out(&timer)) {
			r = copied ? 0 : -EAGAIN;
			break;
		}
		/* Sleep without the lock, as the kernel's sk_wait_data releases the socket. */
		rx_unlock(c);
		want.need = peek ? target : target - copied;
		r = shunt_wait_end(c->me, c->peer, &c->me->rx_waiters, rx_ready, &want,
				   shunt_timer_deadline(&timer));
		if (r == -ETIMEDOUT)
			r = -EAGAIN;
		if (!r)
			r = rx_lock(c, &timer, false);
		if (r) {
			r = copied ? 0 : r;
			goto unlocked;
		}
	}
	rx_unlock(c);
unlocked:
	return r < 0 ? r : (ssize_t)copied;
}

int shunt_conn_shutdown(struct shunt_conn *c, int how)
{
	struct shunt_timer none = { 0 };
	uint32_t was = 0;

	/* TCP_CLOSE (after a reset, or FINs both ways: the kernel's TIME_WAIT is elsewhere). */
	if (shunt_conn_closed(c))
		return -ENOTCONN;
	if (how == SHUT_RD || how == SHUT_RDWR) {
		was |= atomic_fetch_or_explicit(&c->me->state, SHUNT_END_RD_SHUT,
						memory_order_release);
		/* Our own blocked readers now see EOF. */
		wake_self(c, SHUNT_WAKE_ALL);
	}
	if ((how == SHUT_WR || how == SHUT_RDWR) &&
	    !(my_state(c) & SHUNT_END_WR_SHUT)) {
		/*
		 * Under the tx lock, as the kernel's shutdown holds the socket:
		 * no send is half-way through a copy, and what is held back
		 * goes out before the FIN (tcp_send_fin). Without the lock
		 * (a holder stopped in a copy) the FIN goes anyway.
		 */
		bool locked = tx_lock(c, &none, true) == 0;

		if (locked && !(my_state(c) & SHUNT_END_KERNEL))
			release_held(c, 0);
		was |= publish_state(c, SHUNT_END_WR_SHUT);
		if (locked)
			tx_unlock(c);
		wake_self(c, SHUNT_WAKE_ALL);
	}
	/* Moved onto the kernel before our bits were set: shuntd replayed only the ones it saw. */
	if (was & SHUNT_END_KERNEL)
		return SHUNT_CONN_MOVED;
	return is_dead(c) ? -ENOTCONN : 0;
}

void shunt_conn_push(struct shunt_conn *c)
{
	struct shunt_timer none = { 0 };

	if (!atomic_load_explicit(&c->me->corked, memory_order_relaxed) ||
	    tx_lock(c, &none, true) != 0)
		return;
	if (!(my_state(c) & SHUNT_END_KERNEL))
		release_held(c, 0);
	tx_unlock(c);
}

int64_t shunt_conn_cork_expire(struct shunt_conn *c)
{
	struct shunt_timer none = { 0 };
	int64_t at, now;

	if (!atomic_load_explicit(&c->me->corked, memory_order_relaxed))
		return 0;
	/* A holder in the middle of a copy: come back soon. */
	if (tx_lock(c, &none, true) != 0)
		return shunt_now_ns() + CORK_DELAY_NS / 200;
	at = atomic_load_explicit(&c->me->cork_deadline, memory_order_relaxed);
	now = shunt_now_ns();
	if (my_state(c) & SHUNT_END_KERNEL) {
		at = 0;
	} else if (!held(c)) {
		at = 0;
	} else if (!at || at <= now) {
		release_held(c, 0);
		at = 0;
	}
	tx_unlock(c);
	return at;
}

void shunt_conn_bufs_changed(struct shunt_conn *c)
{
	/* Our share may have grown (SO_SNDBUF), or the peer's (SO_RCVBUF). */
	wake_self(c, SHUNT_WAKE_TX);
	wake_peer(c, SHUNT_WAKE_TX);
}

unsigned shunt_conn_poll(struct shunt_conn *c, int lowat)
{
	uint32_t ps = sync_peer(c), ms = my_state(c);
	struct shunt_ring_ctl *rx = c->rx.ctl, *tx = c->tx.ctl;
	/* Shared indices only: another thread may be inside send or recv. */
	uint64_t in = atomic_load_explicit(&rx->tail, memory_order_acquire) -
		      atomic_load_explicit(&rx->head, memory_order_relaxed);
	uint64_t out = atomic_load_explicit(&tx->tail, memory_order_relaxed) -
		       atomic_load_explicit(&tx->head, memory_order_acquire);
	bool dead = is_dead(c);
	bool rcv_shut = dead || (ps & ~SHUNT_END_RD_SHUT) || (ms & SHUNT_END_RD_SHUT);
	bool snd_shut = dead || (ms & SHUNT_END_WR_SHUT);
	unsigned mask = 0;

	if (in && in >= (uint64_t)lowat)
		mask |= POLLIN | POLLRDNORM;
	if (rcv_shut)
		mask |= POLLIN | POLLRDNORM | POLLRDHUP;
	if (rcv_shut && snd_shut)
		mask |= POLLHUP;
	size_t share = tx_share(c);

	/* Held bytes are queued, not sent: they count, as in the kernel's wmem_queued. */
	out += atomic_load_explicit(&c->me->corked, memory_order_relaxed);
	/* Writable with a third of the share free, as sk_stream_is_writeable. */
	if (snd_shut || out > c->ring_size || (out <= share && share - out >= share / 3))
		mask |= POLLOUT | POLLWRNORM;
	if (error_pending(c))
		mask |= POLLERR;
	return mask;
}

void shunt_conn_set_error(struct shunt_conn *c, int err)
{
	/* As do_recvmmsg's WRITE_ONCE(sk_err): nobody is woken for it. */
	atomic_store(&c->me->sk_err, (uint32_t)err);
}

int shunt_conn_take_error(struct shunt_conn *c)
{
	sync_peer(c);
	return take_error(c);
}

size_t shunt_conn_inq(struct shunt_conn *c)
{
	uint64_t n = atomic_load(&c->rx.ctl->tail) - atomic_load(&c->rx.ctl->head);

	return n > c->ring_size ? 0 : (size_t)n;
}

size_t shunt_conn_outq(struct shunt_conn *c)
{
	uint64_t n = atomic_load(&c->tx.ctl->tail) - atomic_load(&c->tx.ctl->head);

	/* A reset purges the send queue. */
	sync_peer(c);
	if (is_dead(c) || n > c->ring_size)
		return 0;
	/* Bytes held back are in the send queue too. */
	n += atomic_load_explicit(&c->me->corked, memory_order_relaxed);
	return n > c->ring_size ? c->ring_size : (size_t)n;
}

size_t shunt_conn_unsent(struct shunt_conn *c)
{
	uint32_t n = atomic_load_explicit(&c->me->corked, memory_order_relaxed);

	sync_peer(c);
	return is_dead(c) || n > c->ring_size ? 0 : n;
}

size_t shunt_conn_inq_hint(struct shunt_conn *c)
{
	size_t n = shunt_conn_inq(c);
	uint32_t ps = atomic_load_explicit(&c->peer->state, memory_order_acquire);

	/* tcp_inq_hint: after the FIN, 1 rather than 0, so the reader reads on (and sees EOF). */
	return n || !(ps & SHUNT_END_WR_SHUT) ? n : 1;
}

bool shunt_conn_closed(struct shunt_conn *c)
{
	uint32_t ps = sync_peer(c);

	/* Reset, or FINs both ways: the kernel's TCP_CLOSE (the time-wait is elsewhere). */
	return is_dead(c) || ((my_state(c) & SHUNT_END_WR_SHUT) &&
					 (ps & (SHUNT_END_WR_SHUT | SHUNT_END_CLOSED)));
}

bool shunt_conn_peer_closed(struct shunt_conn *c)
{
	uint32_t ps = atomic_load_explicit(&c->peer->state, memory_order_acquire);

	return (ps & SHUNT_END_CLOSED) && !(ps & SHUNT_END_KERNEL);
}

/* include/net/tcp_states.h: <netinet/tcp.h> cannot be included with <linux/tcp.h>. */
enum kernel_tcp_state {
	K_ESTABLISHED = 1,
	K_FIN_WAIT1 = 4,
	K_FIN_WAIT2 = 5,
	K_CLOSE = 7,
	K_CLOSE_WAIT = 8,
};

int shunt_conn_tcp_state(struct shunt_conn *c)
{
	uint32_t ps = sync_peer(c), ms = my_state(c);
	uint64_t out;

	if (is_dead(c))
		return K_CLOSE;
	if (ms & SHUNT_END_WR_SHUT) {
		if (ps & (SHUNT_END_WR_SHUT | SHUNT_END_CLOSED))
			return K_CLOSE;
		/* A FIN queued behind bytes the peer has no room for is not acknowledged yet. */
		out = atomic_load_explicit(&c->tx.ctl->tail, memory_order_relaxed) -
		      atomic_load_explicit(&c->tx.ctl->head, memory_order_acquire);
		return out >= c->ring_size ? K_FIN_WAIT1 : K_FIN_WAIT2;
	}
	return ps & (SHUNT_END_WR_SHUT | SHUNT_END_CLOSED) ? K_CLOSE_WAIT : K_ESTABLISHED;
}

bool shunt_conn_fin_sent(struct shunt_conn *c)
{
	return my_state(c) & SHUNT_END_WR_SHUT;
}

bool shunt_conn_fin_received(struct shunt_conn *c)
{
	/* A reset sets no WR_SHUT bit: only a FIN does. */
	return atomic_load_explicit(&c->peer->state, memory_order_acquire) & SHUNT_END_WR_SHUT;
}

uint64_t shunt_conn_tx_bytes(struct shunt_conn *c)
{
	return atomic_load(&c->tx.ctl->tail);
}

uint64_t shunt_conn_rx_bytes(struct shunt_conn *c)
{
	return atomic_load(&c->rx.ctl->head);
}
