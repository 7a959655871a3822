// SPDX-License-Identifier: MIT
/*
 * Sessions: one per connected process. Identity comes from SO_PEERCRED at
 * connect time; every message is checked before it is acted on, and a
 * malformed one is answered with an error, never trusted.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proto.h"
#include "common/sys.h"
#include "daemon/shuntd.h"

/*
 * What /proc/PID/comm says of the session's process, read the first time a
 * log line or `shunt status` needs it: a process that connects once and
 * exits never costs shuntd the read. Only ever shown, never decided on.
 */
const char *shuntd_session_comm(struct session *s)
{
	char path[64];
	ssize_t n = -1;
	int fd;

	if (s->comm_known || s->pid <= 0)
		return s->comm;
	snprintf(path, sizeof(path), "/proc/%d/comm", (int)s->pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		n = read(fd, s->comm, SHUNT_COMM_LEN - 1);
		close(fd);
	}
	if (n <= 0)
		return "";
	s->comm[n] = 0;
	s->comm[strcspn(s->comm, "\n")] = 0;
	s->comm_known = true;
	return s->comm;
}

void shuntd_session_accept(struct shuntd *d)
{
	for (;;) {
		struct ucred cred;
		socklen_t len = sizeof(cred);
		struct session *s;
		int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				shunt_warn("accept on the control socket: %s", strerror(errno));
			return;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
			shunt_warn("SO_PEERCRED: %s; dropping the client", strerror(errno));
			close(fd);
			continue;
		}
		s = calloc(1, sizeof(*s));
		if (!s) {
			close(fd);
			continue;
		}
		s->watch = SHUNTD_WATCH_SESSION;
		s->id = shuntd_new_id(d);
		s->fd = fd;
		s->pidfd = -1;
		s->timerfd = -1;
		s->pid = cred.pid;
		s->uid = cred.uid;
		s->gid = cred.gid;
		shuntd_tenant_identify(d, s);
		shunt_list_init(&s->holds);
		shunt_map_init(&s->links);
		shunt_list_init(&s->channels);
		shunt_map_init(&s->chans_given);
		if (shunt_map_put(&d->sessions, s->id, s) < 0 || shuntd_loop_watch(d, fd, s) < 0) {
			shunt_map_del(&d->sessions, s->id);
			close(fd);
			free(s);
			continue;
		}
		d->sessions_total++;
		d->live_sessions++;
		shunt_debug("session %llu: pid %d uid %u (%s), tenant %s", (unsigned long long)s->id,
			    (int)s->pid, (unsigned)s->uid,
			    shunt_log_enabled(SHUNT_LOG_DEBUG) ? shuntd_session_comm(s) : "",
			    s->tenant ? s->tenant->name : "?");
	}
}

int shuntd_session_reply(struct session *s, void *msg, const int *fds, unsigned nfds)
{
	int r = shunt_proto_send(s->fd, msg, fds, nfds);

	if (r < 0)
		shunt_debug("session %llu: reply: %s", (unsigned long long)s->id, strerror(-r));
	return r;
}

int shuntd_session_reply_status(struct session *s, uint16_t type, uint32_t seq, int status)
{
	struct shunt_msg_hdr h;

	shunt_proto_init(&h, type | SHUNT_MSG_REPLY, sizeof(h), seq);
	h.status = status;
	return shuntd_session_reply(s, &h, NULL, 0);
}

/* HELLO: the session's daemon link, its journal and its namespace's directory. */
static void shuntd_session_hello(struct shuntd *d, struct session *s,
				 const struct shunt_msg_hello *m)
{
	struct shunt_msg_hello_reply r;
	int fds[5];
	unsigned nfds = 2;

	shunt_proto_init(&r, SHUNT_MSG_HELLO | SHUNT_MSG_REPLY, sizeof(r), m->h.seq);
	/*
	 * Its namespace's view lives while it does: connects from there reuse
	 * it. Made at HELLO, not when the session is accepted: a probe (shunt
	 * run's look at whether shuntd answers, `shunt status`) never needs it.
	 */
	if (!s->ns)
		s->ns = shuntd_netns_of_pid(d, s->pid, s->facts.netns);
	if (m->flags & SHUNT_HELLO_CLAIM)
		r.claim = shuntd_fork_claim(d, s, m);
	else if (m->flags & SHUNT_HELLO_EXEC)
		r.claim = shuntd_exec_claim(d, s);
	if (!s->dlink && shuntd_link_daemon(d, s) < 0) {
		shuntd_session_reply_status(s, SHUNT_MSG_HELLO, m->h.seq, -ENOMEM);
		return;
	}
	r.session = s->id;
	r.ring_size = d->cfg.ring_size;
	r.link = s->dlink->id;
	fds[0] = s->dlink->memfd;
	fds[1] = s->dlink->efd[0];
	/* Without a journal it simply asks for every connection, as before. */
	if (s->journal || shuntd_journal_make(d, s) == 0) {
		/* The directory comes only with a journal: 2, 4 or 5 descriptors. */
		int dir = shuntd_directory_fd(d, s->ns);

		fds[nfds++] = s->journal->memfd;
		fds[nfds++] = s->journal->kick;
		if (dir >= 0)
			fds[nfds++] = dir;
	}
	shuntd_session_reply(s, &r, fds, nfds);
}

/*
 * Whether a malformed request of this type is answered (with -EPROTO): only
 * one that is always answered. An "error reply" to a CLOSE or to a status
 * record would itself be malformed, refused by the client's shunt_proto_check.
 */
static bool answered_always(uint16_t type)
{
	const struct shunt_request_kind *k = shunt_request_kind(type);

	return k && k->answered == SHUNT_ANSWER_ALWAYS;
}

/* A request, to its handler: the table of include/shunt/proto.h says which and how. */
static void dispatch(struct shuntd *d, struct session *s, const void *buf, int *fds, unsigned nfds)
{
	const struct shunt_msg_hdr *h = buf;
	const struct shunt_request_kind *k = shunt_request_kind(h->type);
	int64_t t0 = shunt_sys_now_ns();

	if (!k || nfds != k->fds) {
		shunt_info("session %llu (pid %d): message type %u with %u descriptors refused",
			   (unsigned long long)s->id, (int)s->pid, h->type, nfds);
		shunt_proto_close_fds(fds, nfds);
		if (answered_always(h->type))
			shuntd_session_reply_status(s, h->type, h->seq, -EPROTO);
		return;
	}
	/* Nothing it asks may overtake what it journaled before asking. */
	shuntd_journal_read(d, s);
	switch (h->type) {
#define TAKES_0(handler) handler(d, s, buf)
#define TAKES_1(handler) handler(d, s, buf, fds[0])
#define CASE(type, request, reply, nfds, answered, handler) \
	case SHUNT_MSG_##type: \
		TAKES_##nfds(handler); \
		break;
	SHUNT_REQUESTS(CASE)
#undef CASE
#undef TAKES_1
#undef TAKES_0
	}
	d->requests[h->type]++;
	d->request_ns[h->type] += (uint64_t)(shunt_sys_now_ns() - t0);
}

bool shuntd_session_input(struct shuntd *d, struct session *s)
{
	/* Room for more of a STATUS reply: its requests wait until all of it went. */
	if (s->status.active) {
		shuntd_status_continue(d, s);
		if (s->status.active)
			return false;
	}
	/* A bounded batch per wakeup keeps one busy client from starving others. */
	for (int i = 0; i < 32; i++) {
		_Alignas(8) char buf[SHUNT_MSG_MAX];
		int fds[SHUNT_MSG_MAX_FDS];
		unsigned nfds = 0;
		ssize_t n = shunt_proto_recv(s->fd, buf, fds, &nfds, MSG_DONTWAIT);

		if (n == -EAGAIN)
			return false;
		if (n == 0 || (n < 0 && n != -EPROTO)) {
			shuntd_session_close(d, s);
			return false;
		}
		if (n < 0 || shunt_proto_check(buf, (size_t)n) < 0) {
			/* Truncated, unknown or malformed: answer if we can tell what it was. */
			shunt_info("session %llu (pid %d): malformed message refused",
				   (unsigned long long)s->id, (int)s->pid);
			shunt_proto_close_fds(fds, nfds);
			if (n >= (ssize_t)sizeof(struct shunt_msg_hdr)) {
				const struct shunt_msg_hdr *h = (const void *)buf;

				if (answered_always(h->type))
					shuntd_session_reply_status(s, h->type, h->seq, -EPROTO);
			}
			continue;
		}
		dispatch(d, s, buf, fds, nfds);
		if (s->status.active)
			return false;
	}
	return true;
}

void shuntd_session_close(struct shuntd *d, struct session *s)
{
	struct shunt_list *pos, *tmp;

	shunt_debug("session %llu (pid %d) gone", (unsigned long long)s->id, (int)s->pid);
	/* What it did before it went counts: connections it made, ends it let go of. */
	shuntd_journal_read(d, s);
	shuntd_journal_free(d, s);
	shuntd_chan_client_gone(d, s);
	if (s->fd >= 0) {
		shuntd_loop_unwatch(d, s->fd);
		close(s->fd);
		d->live_sessions--;
	}
	if (s->pidfd >= 0) {
		shuntd_loop_unwatch(d, s->pidfd);
		close(s->pidfd);
	}
	if (s->timerfd >= 0) {
		shuntd_loop_unwatch(d, s->timerfd);
		close(s->timerfd);
	}
	shunt_map_del(&d->sessions, s->id);
	if (s->name && shunt_map_get(&d->tickets, s->name) == s)
		shunt_map_del(&d->tickets, s->name);
	if (s->ticket && shunt_list_linked(&s->due_node))
		shunt_list_del(&s->due_node);
	/* A process: the tickets it made and never named a child for are let go soon. */
	if (!s->ticket)
		shuntd_fork_parent_gone(d, s);
	/* The process went away without closing what it held: as the kernel does at exit. */
	shunt_list_for_each_safe(pos, tmp, &s->holds)
		shuntd_hold_release(d, shunt_container_of(pos, struct hold, session_node), true);
	/* Links last: releasing the ends above may still have needed them to wake peers. */
	shuntd_link_session_gone(d, s);
	shuntd_netns_put(d, s->ns);
	s->watch = SHUNTD_WATCH_GONE;
	s->timer_watch = SHUNTD_WATCH_GONE;
	shuntd_loop_bury(d, s);
}
