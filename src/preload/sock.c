// SPDX-License-Identifier: MIT
/*
 * Socket objects and their lifetime. Memory is never returned to malloc:
 * freed objects go to a pool and are reused as sockets, which is what lets
 * fdtable.c take references without a lock.
 */
#include <stdlib.h>
#include <string.h>

#include "preload/chan.h"
#include "preload/conn.h"
#include "preload/control.h"
#include "preload/epoll.h"
#include "preload/family.h"
#include "preload/fork.h"
#include "preload/listenwait.h"
#include "preload/recycle.h"
#include "preload/sock.h"
#include "preload/spare.h"
#include "preload/util.h"

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_sock *pool;	/* under pool_lock */
static struct shunt_sock *all;	/* under pool_lock: every socket object ever made */

struct shunt_sock *shunt_sock_new(int domain, bool nonblock)
{
	struct shunt_sock *s;

	pthread_mutex_lock(&pool_lock);
	s = pool;
	if (s)
		pool = s->next_free;
	pthread_mutex_unlock(&pool_lock);
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		pthread_mutex_init(&s->lock, NULL);
		pthread_mutex_lock(&pool_lock);
		s->all_next = all;
		all = s;
		pthread_mutex_unlock(&pool_lock);
	}
	s->next_free = NULL;
	s->domain = domain;
	atomic_store(&s->state, SHUNT_SOCK_FRESH);
	atomic_store(&s->nonblock, nonblock);
	atomic_store(&s->rcvtimeo_us, 0);
	atomic_store(&s->sndtimeo_us, 0);
	atomic_store(&s->rcvlowat, 1);
	atomic_store(&s->linger_abort, false);
	atomic_store(&s->sndbuf, 0);
	atomic_store(&s->rcvbuf, 0);
	atomic_store(&s->opts, 0);
	atomic_store(&s->so_error, 0);
	s->connect_report = SHUNT_CONNECT_NONE;
	s->listener = 0;
	s->family_slot = SHUNT_FAMILY_NONE;
	s->bells = s->doorbell = s->announce = -1;
	s->accept_ep = s->accept_bells = s->accept_baton = -1;
	s->announce_pid = 0;
	s->conn = NULL;
	s->retired = NULL;
	s->inherit = 0;
	atomic_store(&s->reuseaddr, false);
	s->laddr_known = false;
	atomic_store(&s->unbound, false);
	atomic_store(&s->spare, false);
	s->spare_bound = false;
	memset(&s->port_past, 0, sizeof(s->port_past));
	atomic_store(&s->recycled, false);
	atomic_store(&s->spare_fd, -1);
	s->spare_pool = -1;
	shunt_list_init(&s->watchers);
	s->f.kind = SHUNT_FILE_SOCK;
	atomic_store_explicit(&s->f.ident, 0, memory_order_relaxed);
	/* Release: the fields above are visible to whoever gets a reference. */
	atomic_store_explicit(&s->f.refs, 1, memory_order_release);
	return s;
}

void shunt_sock_retire_conn(struct shunt_sock *s, bool abort)
{
	struct shunt_conn *c = s->conn;

	if (!c)
		return;
	shunt_conn_shut(c, abort);
	c->retired_next = s->retired;
	s->retired = c;
	s->conn = NULL;
}

void shunt_sock_drop_listener(struct shunt_sock *s, bool shutdown)
{
	if (s->listener) {
		shunt_ctl_unlisten(s->listener, s->family_slot,
				   shutdown ? SHUNT_UNLISTEN_SHUT : SHUNT_UNLISTEN_CLOSE);
		shunt_chan_forget_listener(s->listener);
	} else {
		shunt_family_leave(s->family_slot, false);
	}
	s->listener = 0;
	s->family_slot = SHUNT_FAMILY_NONE;
}

int shunt_sock_register(struct shunt_sock *s, int fd)
{
	struct shunt_listen_fds got;
	int r = shunt_ctl_listen(fd, 0, &s->listener, &got);

	if (r < 0) {
		s->listener = 0;
		s->bells = s->doorbell = s->announce = -1;
		return r;
	}
	s->bells = got.bells;
	s->doorbell = got.doorbell;
	s->announce = got.announce;
	s->announce_pid = shunt_pid;
	/* Registered again (a new shuntd): the family is the same. */
	if (s->family_slot == SHUNT_FAMILY_NONE)
		s->family_slot = shunt_family_join(s->listener);
	shunt_listen_wait_open(s, fd);
	return 0;
}

void shunt_sock_own_announce(struct shunt_sock *s, int fd)
{
	struct shunt_listen_fds got;
	uint64_t id;

	if (s->announce_pid == shunt_pid)
		return;
	shunt_fork_enter();
	pthread_mutex_lock(&s->lock);
	if (shunt_sock_state(s) == SHUNT_SOCK_LISTENING && s->listener &&
	    s->announce_pid != shunt_pid &&
	    shunt_ctl_listen(fd, s->listener, &id, &got) == 0) {
		if (s->announce >= 0)
			shunt_close_hidden(s->announce);
		s->announce = got.announce;
		s->announce_pid = shunt_pid;
	}
	pthread_mutex_unlock(&s->lock);
	shunt_fork_leave();
}

void shunt_sock_close_doorbells(struct shunt_sock *s)
{
	if (s->doorbell >= 0)
		shunt_close_hidden(s->doorbell);
	if (s->announce >= 0)
		shunt_close_hidden(s->announce);
	s->doorbell = s->announce = -1;
}

void shunt_sock_close_bells(struct shunt_sock *s)
{
	if (s->bells >= 0)
		shunt_close_hidden(s->bells);
	s->bells = -1;
	shunt_sock_close_doorbells(s);
	shunt_listen_wait_close(s);
}

static void release(struct shunt_sock *s)
{
	/* Like the kernel's eventpoll_release: the file's registrations go first. */
	shunt_epoll_sock_gone(s);
	if (s->conn) {
		/* A port only one live connection holds at a time (spare.c): what its next needs. */
		if (s->spare_bound)
			shunt_chan_port_past(s->conn, &s->port_past);
		shunt_conn_close(s->conn, shunt_sock_opt_linger_abort(s));
		s->conn = NULL;
	}
	/* After the end is let go of: the journal says so before the half is a spare. */
	shunt_spare_put(s);
	shunt_recycle_done(s);
	while (s->retired) {
		struct shunt_conn *c = s->retired;

		s->retired = c->retired_next;
		shunt_conn_free(c);
	}
	shunt_sock_drop_listener(s, false);
	shunt_sock_close_bells(s);
}

void shunt_sock_release(struct shunt_sock *s)
{
	release(s);
	pthread_mutex_lock(&pool_lock);
	s->next_free = pool;
	pool = s;
	pthread_mutex_unlock(&pool_lock);
}

void shunt_sock_fork_prepare(void)
{
	pthread_mutex_lock(&pool_lock);
}

void shunt_sock_fork_parent(void)
{
	/* Two processes hold every socket now: either may bind it, or see it used again. */
	for (struct shunt_sock *s = all; s; s = s->all_next) {
		atomic_store_explicit(&s->unbound, false, memory_order_relaxed);
		atomic_store_explicit(&s->spare, false, memory_order_relaxed);
	}
	pthread_mutex_unlock(&pool_lock);
}

void shunt_sock_fork_child(void)
{
	/* Only this thread exists: locks other threads held are free again. */
	pthread_mutex_init(&pool_lock, NULL);
	for (struct shunt_sock *s = all; s; s = s->all_next) {
		pthread_mutex_init(&s->lock, NULL);
		atomic_store_explicit(&s->unbound, false, memory_order_relaxed);
		atomic_store_explicit(&s->spare, false, memory_order_relaxed);
		/* A half kept in the parent is the parent's to hand out. */
		shunt_spare_fork_drop(s);
	}
}
