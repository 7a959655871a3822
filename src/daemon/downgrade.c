// SPDX-License-Identifier: MIT
/*
 * Downgrade: a connection leaves its circuit for its companion kernel
 * sockets, bytes and all, when a holder is about to hand a descriptor of it
 * to code the library does not run in (exec of a program, SCM_RIGHTS to
 * another process): from then on the kernel carries it, for every holder,
 * and the new owner sees an ordinary TCP socket with the connection's
 * bytes in order. The requester holds all four holders' locks, so neither
 * ring moves while its bytes are copied into the kernel.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/shuntd.h"

/* A peer that keeps changing its state word gives up its own connection's last shutdowns. */
enum { KERNEL_TRIES = 64 };

/* The shutdowns in @st not in @done, said again on kernel socket @fd; all of them now. */
static uint32_t replay_shutdowns(uint32_t st, uint32_t done, int fd)
{
	uint32_t todo = st & ~done;

	if (todo & SHUNT_END_WR_SHUT)
		shutdown(fd, SHUT_WR);
	if (todo & SHUNT_END_RD_SHUT)
		shutdown(fd, SHUT_RD);
	return done | (st & (SHUNT_END_WR_SHUT | SHUNT_END_RD_SHUT));
}

/* What each end had said, said again on its kernel socket @fd; the shutdowns replayed. */
static uint32_t replay_state(struct circuit *c, unsigned end, int fd)
{
	uint32_t st = atomic_load(&c->hdr->end[end].state);

	if (st & SHUNT_END_CLOSED) {
		/* Nobody holds it but us: closing ours is its close, a reset if it reset. */
		if (st & SHUNT_END_RESET) {
			struct linger l = { 1, 0 };

			setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
		}
		return SHUNT_END_WR_SHUT | SHUNT_END_RD_SHUT;
	}
	return replay_shutdowns(st, 0, fd);
}

/*
 * The KERNEL bit of end @end, set in the same step as the last look at its
 * shutdowns: one a holder made after the replay above is replayed too, and
 * one made after the bit is the holder's to make on the kernel, which it
 * knows from the bit in the word it changed (shunt_conn_shutdown). Without
 * this, a shutdown racing the move was lost: no FIN ever (Node's
 * test-cluster-send-handle-twice hung on it).
 */
static void set_kernel(struct circuit *c, unsigned end, int fd, uint32_t done)
{
	_Atomic uint32_t *word = &c->hdr->end[end].state;
	uint32_t st = atomic_load(word);

	for (int i = 0; i < KERNEL_TRIES; i++) {
		if (!(st & SHUNT_END_CLOSED))
			done = replay_shutdowns(st, done, fd);
		if (atomic_compare_exchange_weak_explicit(word, &st, st | SHUNT_END_KERNEL,
							  memory_order_release, memory_order_relaxed))
			return;
	}
	atomic_fetch_or_explicit(word, SHUNT_END_KERNEL, memory_order_release);
}

static uint64_t inode_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

void shuntd_downgrade(struct shuntd *d, struct session *s, const struct shunt_msg_downgrade *m,
		      int fd)
{
	struct circuit *c = shunt_map_get(&d->circuits, m->circuit);
	int kfd[2] = { -1, -1 }, r = 0;
	unsigned mine;

	/* A channel's circuit gets its companions when it first needs them: now. */
	if (c && c->chan && !c->companion) {
		/* The peer's journal says which socket it took the connection with. */
		c = shuntd_journal_read_holders(d, c, s);
		if (c)
			shuntd_companion_adopt(c, fd);
	}
	/* The requester proves which end it holds with that end's kernel socket. */
	if (!c || !c->companion || c->downgraded) {
		r = !c ? -ENOENT : c->downgraded ? 0 : -EOPNOTSUPP;
		close(fd);
		shuntd_session_reply_status(s, SHUNT_MSG_DOWNGRADE, m->h.seq, r);
		return;
	}
	mine = inode_of(fd) == c->kino[1] ? 1 : 0;
	if (inode_of(fd) != c->kino[mine] || !shuntd_hold_find_end(s, c, mine)) {
		close(fd);
		shuntd_session_reply_status(s, SHUNT_MSG_DOWNGRADE, m->h.seq, -EPERM);
		return;
	}
	kfd[mine] = fd;
	kfd[mine ^ 1] = shuntd_companion_fetch(d, c, mine ^ 1);
	if (kfd[mine ^ 1] < 0)
		r = kfd[mine ^ 1];
	if (r == 0)
		r = shuntd_companion_release(c, kfd);
	if (r == 0) {
		uint32_t done[2];

		for (unsigned e = 0; e < 2; e++) {
			struct shunt_ring_ctl *ring = &c->hdr->ring[e];

			done[e] = replay_state(c, e, kfd[e]);
			/* Every unread byte is in the kernel now: nothing is left to read here. */
			atomic_store(&ring->head, atomic_load(&ring->tail));
		}
		for (unsigned e = 0; e < 2; e++)
			set_kernel(c, e, kfd[e], done[e]);
		c->downgraded = true;
		shunt_debug("circuit %llu moved onto the kernel for session %llu (pid %d)",
			    (unsigned long long)c->id, (unsigned long long)s->id, (int)s->pid);
	} else {
		shunt_warn("circuit %llu cannot move onto the kernel: %s", (unsigned long long)c->id,
			   strerror(-r));
	}
	/* The kernel sockets live from now on exactly as long as the programs hold them. */
	for (unsigned e = 0; e < 2; e++)
		if (kfd[e] >= 0)
			close(kfd[e]);
	shuntd_session_reply_status(s, SHUNT_MSG_DOWNGRADE, m->h.seq, r);
	if (r == 0)
		for (unsigned e = 0; e < 2; e++)
			shuntd_circuit_wake(d, c, e);
}
