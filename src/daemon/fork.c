// SPDX-License-Identifier: MIT
/*
 * fork(): the child holds every socket its parent holds. Before forking the
 * library names a ticket and its secret (FORK, not answered); shuntd makes
 * it a session of its own that holds what the parent holds (and counts it
 * in each circuit end's holders), so a parent that closes its copy right
 * after fork does not end a connection the child still has (until the
 * parent hears from shuntd again, its closes ask: preload/conn.c). The
 * child claims the ticket in its first HELLO, with the secret, which only
 * the parent and the child know; a claim read before its FORK reads the
 * parent's requests first, FORK among them. FORK_DONE tells shuntd the
 * child's pid, so that a child that dies before claiming (kill -9 right
 * after fork) releases what the ticket held.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proto.h"
#include "common/sys.h"
#include "daemon/shuntd.h"

struct session *shuntd_ticket_new(struct shuntd *d, struct session *parent)
{
	struct session *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->watch = SHUNTD_WATCH_TICKET;
	t->id = shuntd_new_id(d);
	t->fd = -1;
	t->pidfd = -1;
	t->timerfd = -1;
	t->timer_watch = SHUNTD_WATCH_EXEC_TIMER;
	t->ticket = true;
	shunt_list_init(&t->due_node);
	t->uid = parent->uid;
	t->gid = parent->gid;
	t->parent_pid = parent->pid;
	t->facts = parent->facts;
	t->tenant = parent->tenant;
	/* The child has its parent's name until it execs, and its pid once it claims this. */
	memcpy(t->comm, parent->comm, sizeof(t->comm));
	t->comm_known = parent->comm_known;
	shunt_list_init(&t->holds);
	shunt_map_init(&t->links);
	shunt_list_init(&t->channels);
	shunt_map_init(&t->chans_given);
	/* A fork ticket's secret is its parent's to name (shuntd_fork); an exec ticket has none. */
	if (shunt_map_put(&d->sessions, t->id, t) < 0) {
		free(t);
		return NULL;
	}
	return t;
}

/* Give the ticket a hold on everything the parent holds. */
static int copy_holds(struct shuntd *d, struct session *parent, struct session *t)
{
	struct shunt_list *pos;

	shunt_list_for_each(pos, &parent->holds) {
		struct hold *h = shunt_container_of(pos, struct hold, session_node);

		if (h->circuit) {
			if (!shuntd_hold_end(h->circuit, h->end, t))
				return -ENOMEM;
			atomic_fetch_add(&h->circuit->hdr->end[h->end].holders, 1);
		} else if (!shuntd_hold_listener(d, h->listener, t)) {
			return -ENOMEM;
		}
	}
	return 0;
}

void shuntd_fork(struct shuntd *d, struct session *s, const struct shunt_msg_fork *m)
{
	struct session *t;

	/* A name taken (by chance, or by a parent that reuses one): its child claims nothing. */
	if (s->ticket || !m->ticket || shunt_map_get(&d->tickets, m->ticket)) {
		shunt_info("session %llu (pid %d): fork ticket refused", (unsigned long long)s->id,
			   (int)s->pid);
		return;
	}
	t = shuntd_ticket_new(d, s);
	if (!t)
		return;
	t->secret = m->secret;
	t->name = m->ticket;
	t->parent_session = s->id;
	if (shunt_map_put(&d->tickets, t->name, t) < 0 || copy_holds(d, s, t) < 0) {
		shuntd_session_close(d, t);
		return;
	}
	shunt_debug("session %llu (pid %d) forks: ticket %llu", (unsigned long long)s->id,
		    (int)s->pid, (unsigned long long)t->id);
}

pid_t shuntd_parent_of(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	p = strstr(buf, "\nPPid:");
	return p ? (pid_t)strtol(p + 6, NULL, 10) : -1;
}

/*
 * Whether process @pid has exited (gone, or a zombie): its children then
 * have another parent already, as a daemon's child has the moment the
 * parent calls _exit after fork, often before its FORK_DONE is read.
 */
static bool exited(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return true;
	buf[n] = 0;
	p = strrchr(buf, ')');
	return !p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X';
}

/*
 * Watch ticket @t's child, named by FORK_DONE, until it claims the ticket:
 * one that dies first releases what the ticket holds. Released now if the
 * pid is gone already, or is not its parent's child.
 */
static void watch_child(struct shuntd *d, struct session *t)
{
	t->pidfd = (int)syscall(SYS_pidfd_open, t->pid, 0);
	/*
	 * Gone already, or a pid that is not this parent's child: nobody holds
	 * it. A parent that exited has no children to tell by: its word is
	 * taken (the claim still needs the secret).
	 */
	if (t->pidfd >= 0 && shuntd_parent_of(t->pid) != t->parent_pid && !exited(t->parent_pid)) {
		shunt_info("ticket %llu: pid %d is not its parent's child",
			   (unsigned long long)t->id, (int)t->pid);
		close(t->pidfd);
		t->pidfd = -1;
	}
	if (t->pidfd < 0 || shuntd_loop_watch(d, t->pidfd, t) < 0)
		shuntd_session_close(d, t);
}

/*
 * Most children claim their ticket within a millisecond of the fork: the
 * watch (a pidfd, the child's parent read from /proc, about 30 µs of
 * shuntd's time) is made only for one that has not claimed it by then.
 * One that dies sooner is found dead then, and its ticket released.
 */
enum { WATCH_AFTER_MS = 20 };

void shuntd_fork_done(struct shuntd *d, struct session *s, const struct shunt_msg_fork_done *m)
{
	struct session *t = shunt_map_get(&d->tickets, m->ticket);

	if (!t || !t->ticket || t->exec || t->parent_pid != s->pid || t->pid)
		return;
	if (m->pid <= 0) {
		shuntd_session_close(d, t);	/* fork failed: nobody will claim it */
		return;
	}
	t->pid = m->pid;
	t->due_at = shunt_sys_now_ms() + WATCH_AFTER_MS;
	shunt_list_add_tail(&d->tickets_unwatched, &t->due_node);
}

/*
 * The ticket named @name for claimer @s, reading the requests of session
 * @parent first if it is not there yet: the parent sent FORK before the
 * child existed, so its FORK is among them. Never the claimer's own (a
 * claim naming itself would have its later requests read inside its
 * HELLO), and not while reading another session's requests already (a
 * claim cannot come from there; nothing recurses).
 */
static struct session *ticket_named(struct shuntd *d, struct session *s, uint64_t name,
				    uint64_t parent)
{
	static bool reading;
	struct session *t = shunt_map_get(&d->tickets, name), *p;

	while (!t && !reading && (p = shunt_map_get(&d->sessions, parent)) && p != s &&
	       !p->ticket && p->fd >= 0) {
		bool more;

		reading = true;
		more = shuntd_session_input(d, p);
		reading = false;
		t = shunt_map_get(&d->tickets, name);
		if (!more)
			break;
	}
	return t;
}

int shuntd_fork_claim(struct shuntd *d, struct session *s, const struct shunt_msg_hello *m)
{
	struct session *t = ticket_named(d, s, m->ticket, m->parent);
	struct shunt_list *pos, *tmp;

	if (!t || !t->ticket || t->exec || t->secret != m->secret || (t->pid && t->pid != s->pid))
		return -EPERM;
	shunt_list_for_each_safe(pos, tmp, &t->holds) {
		struct hold *h = shunt_container_of(pos, struct hold, session_node);

		shunt_list_del(&h->session_node);
		h->session = s;
		shunt_list_add_tail(&s->holds, &h->session_node);
	}
	shunt_debug("session %llu (pid %d) claims ticket %llu", (unsigned long long)s->id,
		    (int)s->pid, (unsigned long long)t->id);
	shuntd_session_close(d, t);	/* holds nothing any more */
	return 0;
}

void shuntd_fork_ticket_exited(struct shuntd *d, struct session *t)
{
	shunt_debug("ticket %llu: pid %d exited before claiming it", (unsigned long long)t->id,
		    (int)t->pid);
	shuntd_session_close(d, t);
}

enum { ORPHAN_TICKET_MS = 1000 };	/* long enough for a child's claim to be read */

void shuntd_fork_parent_gone(struct shuntd *d, struct session *s)
{
	int64_t at = shunt_sys_now_ms() + ORPHAN_TICKET_MS;
	struct session *t;
	uint64_t key;
	size_t it = 0;

	while ((t = shunt_map_next(&d->tickets, &it, &key)))
		if (t->parent_session == s->id && !t->pid && !shunt_list_linked(&t->due_node)) {
			t->due_at = at;
			shunt_list_add_tail(&d->tickets_orphaned, &t->due_node);
		}
}

/* Milliseconds until the first of @list is due, or -1 if it is empty. */
static int due_in(struct shunt_list *list, int64_t now)
{
	int64_t left;

	if (shunt_list_empty(list))
		return -1;
	left = shunt_list_first(list, struct session, due_node)->due_at - now;
	return left < 0 ? 0 : (int)left;
}

int shuntd_fork_next_tick(struct shuntd *d)
{
	int64_t now = shunt_sys_now_ms();

	return shuntd_sooner(due_in(&d->tickets_orphaned, now), due_in(&d->tickets_unwatched, now));
}

void shuntd_fork_tick(struct shuntd *d)
{
	int64_t now = shunt_sys_now_ms();

	while (due_in(&d->tickets_orphaned, now) == 0) {
		struct session *t = shunt_list_first(&d->tickets_orphaned, struct session,
						     due_node);

		shunt_debug("ticket %llu: its parent went before naming the child; released",
			    (unsigned long long)t->id);
		shuntd_session_close(d, t);	/* takes it off the list */
	}
	while (due_in(&d->tickets_unwatched, now) == 0) {
		struct session *t = shunt_list_first(&d->tickets_unwatched, struct session,
						     due_node);

		shunt_list_del(&t->due_node);
		watch_child(d, t);
	}
}
