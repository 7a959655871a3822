// SPDX-License-Identifier: MIT
/*
 * Exec tickets: a process about to exec a program that runs the library
 * too keeps its connections on their circuits. Its session dies with the
 * exec (the control socket is close-on-exec), so before exec a ticket
 * bound to its pid takes a hold on each circuit end and listener whose
 * socket survives exec; the new image's first HELLO claims it (same pid,
 * which SO_PEERCRED proves) and fetches each end's circuit with EXEC_NEXT.
 * A ticket is dropped when the exec failed (EXEC_DONE), when the process
 * exits unclaimed (its pidfd), or at the claim deadline: then what it held
 * is released as a process that died would release it. A spawn ticket is
 * the same for the child of a posix_spawn: the parent keeps its own holds,
 * and reports the child's pid after the spawn; a child that asks before
 * that takes its parent's one unbound spawn ticket (the library spawns one
 * child at a time per process).
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/shuntd.h"

/* The exec ticket of process @pid, or NULL. Tickets are few: a walk is enough. */
static struct session *ticket_of(struct shuntd *d, pid_t pid)
{
	struct session *t;
	uint64_t key;
	size_t it = 0;

	while ((t = shunt_map_next(&d->sessions, &it, &key)))
		if (t->ticket && t->exec && t->pid == pid)
			return t;
	return NULL;
}

/* A spawn ticket of @parent whose child's pid is not known yet, or NULL. */
static struct session *unbound_spawn_of(struct shuntd *d, pid_t parent)
{
	struct session *t;
	uint64_t key;
	size_t it = 0;

	while ((t = shunt_map_next(&d->sessions, &it, &key)))
		if (t->ticket && t->exec && t->spawn && !t->pid && t->parent_pid == parent)
			return t;
	return NULL;
}

/* Whether the process behind pidfd @pidfd has exited (a pidfd is readable then). */
static bool exited(int pidfd)
{
	struct pollfd p = { pidfd, POLLIN, 0 };

	return poll(&p, 1, 0) != 0;
}

/* Watch @t's process (its pid known), to drop the ticket when it exits. 0 or -errno. */
static int watch_pid(struct shuntd *d, struct session *t)
{
	int r;

	t->pidfd = (int)syscall(SYS_pidfd_open, t->pid, 0);
	if (t->pidfd < 0)
		return -errno;
	r = shuntd_loop_watch(d, t->pidfd, t);
	if (r < 0) {
		close(t->pidfd);
		t->pidfd = -1;
	}
	return r;
}

/* Arm @t's claim deadline. 0 or -errno. */
static int watch(struct shuntd *d, struct session *t)
{
	struct itimerspec its = { .it_value = { SHUNT_EXEC_CLAIM_MS / 1000,
						(SHUNT_EXEC_CLAIM_MS % 1000) * 1000000L } };
	int r;

	if (t->pid && (r = watch_pid(d, t)) < 0)
		return r;
	t->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (t->timerfd < 0)
		return -errno;
	if (timerfd_settime(t->timerfd, 0, &its, NULL) < 0 ||
	    (r = shuntd_loop_watch(d, t->timerfd, &t->timer_watch)) < 0) {
		r = -errno;
		close(t->timerfd);
		t->timerfd = -1;
		return r;
	}
	return 0;
}

void shuntd_exec(struct shuntd *d, struct session *s, const struct shunt_msg_exec *m)
{
	struct shunt_msg_exec_reply r;
	struct session *t;
	int err;

	bool spawn = m->kind == SHUNT_EXEC_SPAWN;

	if (s->ticket || (m->kind != SHUNT_EXEC_IMAGE && !spawn)) {
		shuntd_session_reply_status(s, SHUNT_MSG_EXEC, m->h.seq, -EINVAL);
		return;
	}
	/*
	 * One at a time: a ticket left by an exec or a spawn that never
	 * reported how it went goes (a child would not know which to claim).
	 */
	t = spawn ? unbound_spawn_of(d, s->pid) : ticket_of(d, s->pid);
	if (t)
		shuntd_session_close(d, t);
	t = shuntd_ticket_new(d, s);
	if (!t) {
		shuntd_session_reply_status(s, SHUNT_MSG_EXEC, m->h.seq, -ENOMEM);
		return;
	}
	t->exec = true;
	t->spawn = spawn;
	t->pid = spawn ? 0 : s->pid;
	err = watch(d, t);
	if (err < 0) {
		shuntd_session_close(d, t);
		shuntd_session_reply_status(s, SHUNT_MSG_EXEC, m->h.seq, err);
		return;
	}
	shunt_proto_init(&r, SHUNT_MSG_EXEC | SHUNT_MSG_REPLY, sizeof(r), m->h.seq);
	r.ticket = t->id;
	if (shuntd_session_reply(s, &r, NULL, 0) < 0)
		shuntd_session_close(d, t);
	shunt_debug("session %llu (pid %d) is about to %s: ticket %llu", (unsigned long long)s->id,
		    (int)s->pid, spawn ? "spawn" : "exec", (unsigned long long)t->id);
}

static uint64_t inode_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) ? (uint64_t)st.st_ino : 0;
}

/* Give ticket @t a hold on what @m names, which @s holds, with socket inode @ino. */
static int keep(struct shuntd *d, struct session *s, struct session *t,
		const struct shunt_msg_exec_keep *m, uint64_t ino)
{
	struct circuit *c;
	struct listener *l;
	struct hold *h;

	if (m->listener) {
		l = m->circuit ? NULL : shunt_map_get(&d->listeners, m->listener);
		if (!l || l->inode != ino || !shuntd_hold_find_listener(s, l))
			return -ENOENT;
		if (shuntd_hold_find_listener(t, l))
			return 0;
		return shuntd_hold_listener(d, l, t) ? 0 : -ENOMEM;
	}
	c = shunt_map_get(&d->circuits, m->circuit);
	if (!c || m->end > 1 || !shuntd_hold_find_end(s, c, m->end))
		return -ENOENT;
	/* With a companion the socket proves which end it is, as for a downgrade. */
	if (c->companion && c->kino[m->end] != ino)
		return -EPERM;
	if ((c->memfd < 0 && !c->chan) || c->downgraded)
		return -EOPNOTSUPP;
	if (shuntd_hold_find_end(t, c, m->end))
		return 0;
	h = shuntd_hold_end(c, m->end, t);
	if (!h)
		return -ENOMEM;
	h->inode = ino;
	h->xflags = m->flags & SHUNT_EXEC_CONNECT_PENDING;
	h->exec_pending = true;
	atomic_fetch_add(&c->hdr->end[m->end].holders, 1);
	return 0;
}

void shuntd_exec_keep(struct shuntd *d, struct session *s, const struct shunt_msg_exec_keep *m,
		      int fd)
{
	struct session *t = shunt_map_get(&d->sessions, m->ticket);
	uint64_t ino = inode_of(fd);
	int r;

	close(fd);
	if (!t || !t->ticket || !t->exec || t->parent_pid != s->pid || s->ticket)
		r = -ENOENT;
	else if (!ino)
		r = -ENOTSOCK;
	else
		r = keep(d, s, t, m, ino);
	shuntd_session_reply_status(s, SHUNT_MSG_EXEC_KEEP, m->h.seq, r);
}

void shuntd_exec_done(struct shuntd *d, struct session *s, const struct shunt_msg_exec_done *m)
{
	struct session *t = shunt_map_get(&d->sessions, m->ticket);

	if (!t || !t->ticket || !t->exec || t->parent_pid != s->pid || s->ticket)
		return;
	/* The child spawned: from now on its pid claims the ticket, and its exit drops it. */
	if (t->spawn && !t->pid && m->pid > 0) {
		t->pid = m->pid;
		if (shuntd_parent_of(m->pid) != s->pid || watch_pid(d, t) < 0)
			shuntd_session_close(d, t);
		return;
	}
	/* The exec or the spawn failed: the process holds everything still, through its own session. */
	if (!t->spawn || !t->pid)
		shuntd_session_close(d, t);
}

int shuntd_exec_claim(struct shuntd *d, struct session *s)
{
	struct session *t = s->ticket ? NULL : ticket_of(d, s->pid);
	struct shunt_list *pos, *tmp;
	int n = 0;

	/* A pid whose process exited, reused before we heard: not the process that exec'd. */
	if (t && (t->pidfd < 0 || exited(t->pidfd)))
		t = NULL;
	/* A spawned child whose parent has not said its pid yet: its parent's one spawn. */
	if (!t && !s->ticket)
		t = unbound_spawn_of(d, shuntd_parent_of(s->pid));
	if (!t)
		return -ENOENT;
	shunt_list_for_each_safe(pos, tmp, &t->holds) {
		struct hold *h = shunt_container_of(pos, struct hold, session_node);

		shunt_list_del(&h->session_node);
		h->session = s;
		shunt_list_add_tail(&s->holds, &h->session_node);
		n += h->exec_pending;
	}
	shunt_debug("session %llu (pid %d) takes over exec ticket %llu: %d connection(s)",
		    (unsigned long long)s->id, (int)s->pid, (unsigned long long)t->id, n);
	shuntd_session_close(d, t);	/* holds nothing any more */
	return n;
}

void shuntd_exec_next(struct shuntd *d, struct session *s, const struct shunt_msg_exec_next *m)
{
	struct shunt_msg_exec_end r;
	struct shunt_list *pos;

	(void)d;
	shunt_list_for_each(pos, &s->holds) {
		struct hold *h = shunt_container_of(pos, struct hold, session_node);
		struct circuit *c = h->circuit;

		if (!c || !h->exec_pending)
			continue;
		h->exec_pending = false;
		shunt_proto_init(&r, SHUNT_MSG_EXEC_NEXT | SHUNT_MSG_REPLY, sizeof(r), m->h.seq);
		r.circuit = c->id;
		r.ring_size = c->ring_size;
		r.end = (uint8_t)h->end;
		r.flags = (uint16_t)h->xflags;
		r.local = c->local[h->end];
		r.peer = c->peer[h->end];
		r.inode = h->inode;
		/* A channel's circuit: its slot of the channel's memfd. */
		if (c->chan) {
			r.offset = shunt_chan_slot_offset(c->chan->slots, c->ring_size, c->slot);
			shuntd_session_reply(s, &r, &c->chan->memfd, 1);
			return;
		}
		shuntd_session_reply(s, &r, &c->memfd, 1);
		return;
	}
	shuntd_session_reply_status(s, SHUNT_MSG_EXEC_NEXT, m->h.seq, SHUNT_NONE);
}

void shuntd_exec_expired(struct shuntd *d, struct session *t)
{
	shunt_info("pid %d exec'd a program that did not take its connections over within "
		   "%d ms; they end", (int)t->pid, SHUNT_EXEC_CLAIM_MS);
	shuntd_session_close(d, t);
}
