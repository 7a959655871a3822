// SPDX-License-Identifier: MIT
/*
 * The idle trimmer: one thread per process, started once a second
 * connection is armed or one sends more than SHUNT_TRIM_EAGER_BYTES, that
 * looks at each connection a while after it sent and gives back the ring
 * pages its bytes have left once it went quiet: all but one at first, that
 * one after a longer rest. With nothing armed it sleeps without a timeout:
 * a process at rest is never woken for it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "common/list.h"
#include "common/log.h"
#include "common/sys.h"
#include "preload/conn.h"
#include "preload/thread.h"
#include "preload/trim.h"
#include "preload/util.h"

/*
 * Lock order: a connection's tx lock, then this lock (arm). The thread
 * never takes a tx lock with this one held: it marks the connection busy
 * and lets go first, and forget waits for busy to clear. Nothing else is
 * ever taken under it, so fork's prepare takes it last.
 */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed;		/* under lock: the queue got an earlier time */
static pthread_cond_t idle;		/* under lock: busy was cleared */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool used;		/* set once by init: anything was ever armed */
/*
 * Under lock: the armed connections (shunt_conn.trim_node), by time, to be
 * looked at a first time (soon) or a last time (later). Every time in one
 * queue is "when queued" plus the same delay, so appending keeps it sorted.
 */
static struct shunt_list soon = { &soon, &soon };
static struct shunt_list later = { &later, &later };
static struct shunt_conn *busy;		/* under lock: the one the thread looks at */
static uint32_t running;		/* under lock: pid of the process whose thread runs */
static unsigned listed;			/* under lock: connections on the queues */
_Atomic bool shunt_trim_put_off;	/* written under lock: armed, and no thread yet */
static int64_t sleeping_until;		/* under lock: the thread's wake-up, INT64_MAX:
					   none, 0: it is awake and will look at the queue */
static bool warned;			/* under lock */

static void enqueue(struct shunt_conn *c, bool rest, int64_t now)
{
	c->trim_at = now + (rest ? SHUNT_TRIM_REST_NS : SHUNT_TRIM_DELAY_NS);
	c->trim_rest = rest;
	c->trim_listed = true;
	listed++;
	shunt_list_add_tail(rest ? &later : &soon, &c->trim_node);
}

/* The connection to look at first, or NULL. Under lock. */
static struct shunt_conn *first(void)
{
	struct shunt_conn *a = NULL, *b = NULL;

	if (!shunt_list_empty(&soon))
		a = shunt_list_first(&soon, struct shunt_conn, trim_node);
	if (!shunt_list_empty(&later))
		b = shunt_list_first(&later, struct shunt_conn, trim_node);
	return !a || (b && b->trim_at < a->trim_at) ? b : a;
}

static void dequeue(struct shunt_conn *c)
{
	shunt_list_del(&c->trim_node);
	c->trim_listed = false;
	listed--;
}

static struct timespec abs_time(int64_t ns)
{
	return (struct timespec){ .tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000 };
}

static void *trim_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	for (;;) {
		struct shunt_conn *c = first();
		int64_t now;
		bool rest;
		int next;

		if (!c) {
			sleeping_until = INT64_MAX;
			pthread_cond_wait(&changed, &lock);
			sleeping_until = 0;
			continue;
		}
		now = shunt_now_ns();
		if (c->trim_at > now) {
			struct timespec ts = abs_time(c->trim_at);

			sleeping_until = c->trim_at;
			pthread_cond_timedwait(&changed, &lock, &ts);
			sleeping_until = 0;
			continue;
		}
		rest = c->trim_rest;
		dequeue(c);
		busy = c;
		pthread_mutex_unlock(&lock);
		next = shunt_conn_trim(c, rest);
		pthread_mutex_lock(&lock);
		busy = NULL;
		/* Unless it was done, or a send armed it again meanwhile. */
		if (next != SHUNT_TRIM_DONE && !c->trim_listed && !atomic_load(&c->trim_gone))
			enqueue(c, next == SHUNT_TRIM_LATER, shunt_now_ns());
		pthread_cond_broadcast(&idle);
	}
	return NULL;
}

/* Start this process's thread. Under lock. */
static void start(void)
{
	static const struct shunt_thread trimmer = { trim_main, "shunt-trim" };
	int r;

	if (running == shunt_pid)
		return;
	/* Not put off any more, started or not: a failure is tried again at an arm, not a send. */
	atomic_store_explicit(&shunt_trim_put_off, false, memory_order_relaxed);
	r = shunt_thread_start(&trimmer);
	if (r) {
		if (!warned)
			shunt_warn("cannot start the idle trimmer (%s): connections keep the ring "
				   "pages they used until they close", strerror(r));
		warned = true;
		return;
	}
	running = shunt_pid;
	sleeping_until = 0;
}

static void init_conds(void)
{
	pthread_condattr_t attr;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&changed, &attr);
	pthread_condattr_destroy(&attr);
	pthread_cond_init(&idle, NULL);
}

static void init(void)
{
	init_conds();
	atomic_store(&used, true);
}

void shunt_trim_arm(struct shunt_conn *c)
{
	/*
	 * Under a seccomp filter, a thread of ours might make a call the
	 * filter kills the process for (clone3, a futex wait): no trimming.
	 */
	if (atomic_load_explicit(&shunt_sys_gate, memory_order_acquire))
		return;
	pthread_once(&once, init);
	pthread_mutex_lock(&lock);
	/* Pairs with forget's store (seq_cst both): it sees used, or we see gone. */
	if (atomic_load(&c->trim_gone) || c->trim_listed)
		goto out;
	enqueue(c, false, shunt_now_ns());
	/* Put off while this is the only one armed and it sent little (trim.h). */
	if (running == shunt_pid || listed > 1 || c->tx.pos - c->trim_from > SHUNT_TRIM_EAGER_BYTES)
		start();
	else
		atomic_store_explicit(&shunt_trim_put_off, true, memory_order_relaxed);
	/* Wake the thread only if it sleeps past this: at most once per quiet spell. */
	if (running == shunt_pid && sleeping_until > c->trim_at)
		pthread_cond_signal(&changed);
out:
	pthread_mutex_unlock(&lock);
}

void shunt_trim_start(void)
{
	pthread_mutex_lock(&lock);
	if (listed)
		start();
	else
		atomic_store_explicit(&shunt_trim_put_off, false, memory_order_relaxed);
	pthread_mutex_unlock(&lock);
}

void shunt_trim_forget(struct shunt_conn *c)
{
	atomic_store(&c->trim_gone, true);
	if (!atomic_load(&used))
		return;
	pthread_mutex_lock(&lock);
	while (busy == c)
		pthread_cond_wait(&idle, &lock);
	if (c->trim_listed)
		dequeue(c);
	if (!listed)
		atomic_store_explicit(&shunt_trim_put_off, false, memory_order_relaxed);
	pthread_mutex_unlock(&lock);
}

void shunt_trim_fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

void shunt_trim_fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

/*
 * Only this thread exists: nothing is busy, no thread runs. What the parent
 * armed, the parent trims (under the tx lock every holder takes, so both
 * may); the child forgets it and arms what it sends on itself, so that a
 * child that never touches its inherited connections costs no thread.
 */
void shunt_trim_fork_child(void)
{
	struct shunt_list *n, *tmp;

	pthread_mutex_init(&lock, NULL);
	if (atomic_load(&used))
		init_conds();
	for (struct shunt_list *q = &soon; q; q = q == &soon ? &later : NULL) {
		shunt_list_for_each_safe(n, tmp, q) {
			struct shunt_conn *c = shunt_container_of(n, struct shunt_conn, trim_node);

			dequeue(c);
			atomic_store_explicit(&c->trim_armed, false, memory_order_relaxed);
		}
	}
	if (busy)
		atomic_store_explicit(&busy->trim_armed, false, memory_order_relaxed);
	busy = NULL;
	running = 0;
	sleeping_until = 0;
	atomic_store_explicit(&shunt_trim_put_off, false, memory_order_relaxed);
}
