// SPDX-License-Identifier: MIT
/*
 * The cork timer: one thread per process, started the first time a
 * connection holds bytes back, sleeping until the earliest 200 ms ceiling
 * of the connections on its list and sending what they still hold then.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "preload/conn.h"
#include "preload/cork.h"
#include "preload/thread.h"
#include "preload/util.h"

/*
 * Lock order: a connection's tx lock, then this lock (arm). The thread
 * never takes a tx lock with this one held: it marks the connection busy
 * and lets go first, and forget waits for busy to clear.
 */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed;		/* under lock: the list got an earlier time */
static pthread_cond_t idle;		/* under lock: busy was cleared */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool used;		/* set once by init: anything was ever armed */
static struct shunt_conn *list;		/* under lock */
static struct shunt_conn *busy;		/* under lock: the one the thread looks at */
static uint32_t running;		/* under lock: pid of the process whose thread runs */
static int64_t sleeping_until;		/* under lock: the thread's wake-up, 0: none */
static bool warned;			/* under lock */

static void unlink_conn(struct shunt_conn *c)
{
	for (struct shunt_conn **p = &list; *p; p = &(*p)->cork_next) {
		if (*p == c) {
			*p = c->cork_next;
			break;
		}
	}
	c->cork_next = NULL;
	c->cork_listed = false;
}

static struct timespec abs_time(int64_t ns)
{
	return (struct timespec){ .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
}

static void *timer_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	for (;;) {
		struct shunt_conn *due = NULL;
		int64_t now = shunt_now_ns(), next = 0;

		for (struct shunt_conn *c = list; c && !due; c = c->cork_next) {
			if (c->cork_at <= now)
				due = c;
			else if (!next || c->cork_at < next)
				next = c->cork_at;
		}
		if (!due) {
			struct timespec ts = abs_time(next);

			sleeping_until = next;
			if (next)
				pthread_cond_timedwait(&changed, &lock, &ts);
			else
				pthread_cond_wait(&changed, &lock);
			sleeping_until = 0;
			continue;
		}
		busy = due;
		pthread_mutex_unlock(&lock);
		next = shunt_conn_cork_expire(due);
		pthread_mutex_lock(&lock);
		busy = NULL;
		if (next)
			due->cork_at = next;
		else
			unlink_conn(due);
		pthread_cond_broadcast(&idle);
	}
	return NULL;
}

/* Start this process's thread. Under lock. */
static void start(void)
{
	static const struct shunt_thread timer = { timer_main, "shunt-cork" };
	int r;

	if (running == shunt_pid)
		return;
	r = shunt_thread_start(&timer);
	if (r) {
		if (!warned)
			shunt_warn("cannot start the cork timer (%s): bytes held back by TCP_CORK "
				   "or MSG_MORE wait for the next send, uncork or close",
				   strerror(r));
		warned = true;
		return;
	}
	running = shunt_pid;
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

/*
 * The child holds the connections the parent held back bytes on, with
 * their deadlines in the circuit, but not the parent's thread: it starts
 * its own, and whichever process comes first sends them.
 */
static void fork_child(void)
{
	pthread_mutex_init(&lock, NULL);
	busy = NULL;
	running = 0;
	sleeping_until = 0;
	if (list)
		start();
}

static void init(void)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&changed, &attr);
	pthread_condattr_destroy(&attr);
	pthread_cond_init(&idle, NULL);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	atomic_store(&used, true);
}

void shunt_cork_arm(struct shunt_conn *c, int64_t at)
{
	pthread_once(&once, init);
	pthread_mutex_lock(&lock);
	/* Pairs with forget's store (seq_cst both): it sees used, or we see gone. */
	if (atomic_load(&c->cork_gone))
		goto out;
	if (!c->cork_listed) {
		c->cork_next = list;
		list = c;
		c->cork_listed = true;
		c->cork_at = at;
	} else if (at < c->cork_at) {
		c->cork_at = at;
	}
	start();
	/* Wake the thread only if it sleeps past this: at most once per idle spell. */
	if (!sleeping_until || at < sleeping_until)
		pthread_cond_signal(&changed);
out:
	pthread_mutex_unlock(&lock);
}

void shunt_cork_forget(struct shunt_conn *c)
{
	atomic_store(&c->cork_gone, true);
	if (!atomic_load(&used))
		return;
	pthread_mutex_lock(&lock);
	while (busy == c)
		pthread_cond_wait(&idle, &lock);
	if (c->cork_listed)
		unlink_conn(c);
	pthread_mutex_unlock(&lock);
}
