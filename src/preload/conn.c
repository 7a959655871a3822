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
#include <sys/socket.h>

#include "common/circuit.h"
#include "common/lock.h"
#include "common/log.h"
#include "preload/conn.h"
#include "preload/control.h"
#include "preload/fault.h"
#include "preload/notice.h"
#include "preload/plink.h"
#include "preload/stats.h"
#include "preload/util.h"
#include "preload/wait.h"

/*
 * Bytes moved between publishing indices: small enough that producer and
 * consumer work on different parts of the ring at the same time, large
 * enough that the index cache lines rarely move.
 */
enum { CHUNK = 64 << 10 };

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
	r = shunt_circuit_map(g->memfd, g->msg.ring_size, &hdr);
	shunt_close_internal(g->memfd);
	g->memfd = -1;
	if (r < 0) {
		shunt_warn("cannot map circuit %llu: %s", (unsigned long long)g->msg.circuit,
			   strerror(-r));
		shunt_grant_discard(g);
		*err = r;
		return NULL;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		shunt_circuit_unmap(hdr, g->msg.ring_size);
		shunt_grant_discard(g);
		*err = -ENOMEM;
		return NULL;
	}
	c->hdr = hdr;
	c->ring_size = g->msg.ring_size;
	c->end = g->msg.end;
	c->circuit = g->msg.circuit;
	c->me = &hdr->end[c->end];
	c->peer = &hdr->end[c->end ^ 1];
	c->local = g->msg.local;
	c->remote = g->msg.peer;
	c->slot = SHUNT_NO_SLOT;
	c->route = -1;
	shunt_ring_attach(&c->tx, hdr, shunt_tx_ring(c->end), c->ring_size, 1);
	shunt_ring_attach(&c->rx, hdr, shunt_rx_ring(c->end), c->ring_size, 0);
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
static void publish_state(struct shunt_conn *c, uint32_t bits)
{
	/* Release: bytes published before the FIN are seen with it. */
	atomic_fetch_or_explicit(&c->me->state, bits, memory_order_release);
	wake_peer(c, SHUNT_WAKE_ALL);
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
	/* Another process held it since we did: our copy of the index may be stale. */
	if (other)
		shunt_ring_resync(ring, producer);
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

/* Send readiness, for the wait loop: made without the lock, from shared indices. */
static bool tx_ready(void *arg)
{
	struct shunt_conn *c = arg;
	uint32_t ps = atomic_load_explicit(&c->peer->state, memory_order_acquire);

	return shunt_ring_used_shared(&c->tx) != c->ring_size || peer_gone(ps) || is_dead(c) ||
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
	/*
	 * Like the kernel's socket release, which only the last reference
	 * triggers: held by this process alone (the count is shuntd's), we
	 * publish at once; shared after fork, shuntd says who is last.
	 */
	if (atomic_load(&c->me->holders) <= 1) {
		publish_close(c, abort);
		shunt_ctl_close(c->circuit, c->end, false);
	} else {
		r = shunt_ctl_close(c->circuit, c->end, true);
		/* Without shuntd's word, better a connection ended early than one never ended. */
		if (r == SHUNT_LAST || r < 0)
			publish_close(c, abort);
	}
	atomic_fetch_add(&shunt_stats.shm_tx_bytes, shunt_conn_tx_bytes(c));
	atomic_fetch_add(&shunt_stats.shm_rx_bytes, shunt_conn_rx_bytes(c));
}

void shunt_conn_free(struct shunt_conn *c)
{
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
	shunt_ctl_close(c->circuit, c->end, false);
	atomic_fetch_add(&shunt_stats.shm_tx_bytes, shunt_conn_tx_bytes(c));
	atomic_fetch_add(&shunt_stats.shm_rx_bytes, shunt_conn_rx_bytes(c));
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
	if (r == 0)
		r = shunt_ctl_downgrade(c->circuit, fd);
	while (held--)
		shunt_unlock(locks[held], shunt_pid);
	if (r < 0)
		shunt_warn("circuit %llu cannot move onto the kernel (%s): the program it is "
			   "handed to will not see its bytes", (unsigned long long)c->circuit,
			   strerror(-r));
	return r;
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

	if (err)
		return -err;
	if (is_dead(c) || (my_state(c) & SHUNT_END_WR_SHUT))
		return -EPIPE;
	if ((ps & SHUNT_END_CLOSED) ||
	    (ps & (SHUNT_END_RD_SHUT | SHUNT_END_WR_SHUT)) == (SHUNT_END_RD_SHUT | SHUNT_END_WR_SHUT)) {
		/*
		 * Data for a socket that is gone, or that shut down both ways
		 * (FIN_WAIT with RCV_SHUTDOWN): the kernel sends it, the peer
		 * answers with a reset, and only the next call fails: EPIPE,
		 * since its FIN came first. A peer still open is reset too.
		 */
		make_dead(c, EPIPE);
		publish_state(c, SHUNT_END_RESET);
		*pretend = (ssize_t)left;
		return 1;
	}
	return 0;
}

ssize_t shunt_conn_send(struct shunt_conn *c, const struct iovec *iov, int iovcnt, int flags,
			struct shunt_io *io)
{
	bool nonblock = io->nonblock || (flags & MSG_DONTWAIT);
	ssize_t total = iov_total(iov, iovcnt), pretend = 0;
	struct shunt_timer timer = { .timeout_us = io->timeout_us };
	struct iov_cursor cur;
	size_t done = 0;
	int r;

	if (total < 0)
		return total;
	cursor_init(&cur, iov, iovcnt);
	r = tx_lock(c, &timer, nonblock);
	if (r)
		return r;
	for (;;) {
		size_t space, n;

		/* Moved onto the kernel: the rest goes there (the caller sends it). */
		if (my_state(c) & SHUNT_END_KERNEL) {
			io->moved = true;
			r = 0;
			break;
		}
		r = send_blocked(c, done, (size_t)total - done, &pretend);
		if (r)
			break;
		space = shunt_ring_space_cached(&c->tx);
		if (space < (size_t)total - done) {
			long sp = shunt_ring_space(&c->tx);

			if (sp < 0) {
				broken(c);
				continue;
			}
			space = (size_t)sp;
		}
		n = space < (size_t)total - done ? space : (size_t)total - done;
		if (n > CHUNK)
			n = CHUNK;
		if (n) {
			/* A buffer it cannot read: what went before is sent, this chunk is not. */
			r = copy_to_ring(&c->tx, &cur, n);
			if (r)
				break;
			shunt_ring_publish(&c->tx, n);
			wake_peer(c, SHUNT_WAKE_RX);
			done += n;
		}
		if (done == (size_t)total)
			break;
		if (n)
			continue;	/* the next chunk may fit already */
		/* Also when woken over and over without room: the time is up. */
		if (nonblock || timed_out(&timer))
			break;
		/*
		 * Sleep without the lock, as the kernel's sk_stream_wait_memory
		 * releases the socket: other holders may send, time out or get
		 * EAGAIN meanwhile. (So may their bytes come between ours, as
		 * with the kernel, for a send too large to fit at once.)
		 */
		tx_unlock(c);
		r = shunt_wait_end(c->me, &c->me->tx_waiters, tx_ready, c,
				   shunt_timer_deadline(&timer));
		if (r == -ETIMEDOUT)
			r = -EAGAIN;
		if (!r)
			r = tx_lock(c, &timer, false);
		if (r)
			goto unlocked;
	}
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
			/* Peeking never consumes: copy again from the head each time. */
			copied = (size_t)avail < (size_t)total ? (size_t)avail : (size_t)total;
			cursor_init(&cur, iov, iovcnt);
			r = copy_from_ring(&c->rx, 0, &cur, copied);
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
		r = shunt_wait_end(c->me, &c->me->rx_waiters, rx_ready, &want,
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
	sync_peer(c);
	if (how == SHUT_RD || how == SHUT_RDWR) {
		atomic_fetch_or_explicit(&c->me->state, SHUNT_END_RD_SHUT, memory_order_release);
		/* Our own blocked readers now see EOF. */
		wake_self(c, SHUNT_WAKE_ALL);
	}
	if ((how == SHUT_WR || how == SHUT_RDWR) &&
	    !(my_state(c) & SHUNT_END_WR_SHUT)) {
		publish_state(c, SHUNT_END_WR_SHUT);
		wake_self(c, SHUNT_WAKE_ALL);
	}
	return is_dead(c) ? -ENOTCONN : 0;
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
	/* Writable with a third of the ring free, as sk_stream_is_writeable. */
	if (snd_shut || out > c->ring_size || c->ring_size - out >= c->ring_size / 3)
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
	if (is_dead(c))
		return 0;
	return n > c->ring_size ? 0 : (size_t)n;
}

bool shunt_conn_closed(struct shunt_conn *c)
{
	uint32_t ps = sync_peer(c);

	/* Reset, or FINs both ways: the kernel's TCP_CLOSE (the time-wait is elsewhere). */
	return is_dead(c) || ((my_state(c) & SHUNT_END_WR_SHUT) &&
					 (ps & (SHUNT_END_WR_SHUT | SHUNT_END_CLOSED)));
}

uint64_t shunt_conn_tx_bytes(struct shunt_conn *c)
{
	return atomic_load(&c->tx.ctl->tail);
}

uint64_t shunt_conn_rx_bytes(struct shunt_conn *c)
{
	return atomic_load(&c->rx.ctl->head);
}
