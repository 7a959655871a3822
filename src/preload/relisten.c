// SPDX-License-Identifier: MIT
/* Listeners across a shuntd restart: doorbells of a dead session drained, registrations renewed. */
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/chan.h"
#include "preload/control.h"
#include "preload/epoll.h"
#include "preload/explain.h"
#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/fork.h"
#include "preload/relisten.h"
#include "preload/sock.h"
#include "preload/util.h"

enum relisten_work {
	WORK_LOST = 1u << 0,	/* the session died */
	WORK_RENEW = 1u << 1,	/* a session that knows none of our listeners was opened */
};

/* Set under ctl_lock (control.c), taken whole by the thread that does the work. */
static _Atomic unsigned pending;

void shunt_relisten_lost(void)
{
	atomic_fetch_or(&pending, WORK_LOST);
}

void shunt_relisten_renew(void)
{
	atomic_fetch_or(&pending, WORK_RENEW);
}

/* Empty a doorbell (non-blocking, a semaphore eventfd): nothing it counts can be accepted. */
static void drain(int bell)
{
	uint64_t v;

	while (shunt_syscall(SYS_read, bell, &v, sizeof(v)) == (long)sizeof(v))
		;
}

/* Add @n to doorbell @bell: connections queued in our channels that it must count. */
static void count(int bell, uint32_t n)
{
	uint64_t v = n;

	if (n)
		(void)!shunt_syscall(SYS_write, bell, &v, sizeof(v));
}

/* Whether descriptors @a and @b are the same open file: 1, 0, or -1 if we cannot tell. */
static int same_file(int a, int b)
{
	long r = shunt_syscall(SYS_kcmp, shunt_pid, shunt_pid, KCMP_FILE, a, b);

	return r < 0 ? -1 : r == 0;
}

/*
 * Doorbells replaced by a renewal, kept open (and counting 1) until the next
 * one: a poll() asleep on the old descriptor number looks at that number
 * again when woken, and must find it there, ready (a kernel poll registers
 * its wait on the files it saw first, and never on a file put under the
 * same number since). Under retired_lock, taken only inside
 * shunt_relisten_run, so never held across a fork.
 */
static pthread_mutex_t retired_lock = PTHREAD_MUTEX_INITIALIZER;
static int *retired;
static size_t nretired, retired_cap;

static void retire(int bell)
{
	pthread_mutex_lock(&retired_lock);
	if (nretired == retired_cap) {
		size_t cap = retired_cap ? 2 * retired_cap : 8;
		int *r = realloc(retired, cap * sizeof(*r));

		if (!r) {
			pthread_mutex_unlock(&retired_lock);
			shunt_close_hidden(bell);	/* a sleeper may stay asleep: no memory */
			return;
		}
		retired = r;
		retired_cap = cap;
	}
	retired[nretired++] = bell;
	pthread_mutex_unlock(&retired_lock);
}

/* Close what the previous renewal retired: its sleepers woke long ago. */
static void close_retired(void)
{
	pthread_mutex_lock(&retired_lock);
	while (nretired)
		shunt_close_hidden(retired[--nretired]);
	pthread_mutex_unlock(&retired_lock);
}

/*
 * Move @s onto doorbell @bell (hidden, taken over) of registration @id:
 * epoll instances from the old doorbell to the new one, and threads asleep
 * in accept() or poll() on the old one woken to look again (at the new
 * one). Under s->lock.
 */
static void swap_bell(struct shunt_sock *s, uint64_t id, int bell)
{
	/* Ids of two daemons never meet: the same id is the same registration. */
	int same = id == s->listener ? 1 : same_file(bell, s->doorbell), old = s->doorbell;

	if (same == 1) {
		shunt_close_hidden(bell);
		s->listener = id;
		return;
	}
	shunt_epoll_sock_bell(s, false);
	/*
	 * What clients queued in our channels before shuntd died is taken
	 * under the new registration, counted on its doorbell.
	 */
	count(bell, shunt_chan_move_listener(s->listener, id));
	s->doorbell = bell;
	s->listener = id;
	shunt_epoll_sock_bell(s, true);
	/*
	 * A count nobody takes away any more (its daemon is gone, or dropped
	 * that registration): it only wakes the sleepers. Not on what may be
	 * the live doorbell of a registration we did not recognise, where an
	 * extra count would never go away.
	 */
	if (same == 0)
		shunt_eventfd_signal(old);
	retire(old);
}

/* Register listener @s, open as @fd, with the current session. */
static void renew(struct shunt_sock *s, int fd)
{
	struct shunt_sock *now;
	uint64_t id = 0;
	int bell = -1, kfd, r;

	pthread_mutex_lock(&s->lock);
	if (shunt_sock_state(s) != SHUNT_SOCK_LISTENING || s->doorbell < 0)
		goto out;
	/* Our own descriptor of the socket: the application may close @fd meanwhile. */
	kfd = (int)shunt_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, shunt_fdlimit_base());
	if (kfd < 0)
		goto out;
	now = shunt_fdt_get(fd);
	r = now == s ? 0 : -EBADF;
	if (now)
		shunt_sock_put(now);
	if (r == 0)
		r = shunt_ctl_listen(kfd, 0, &id, &bell);
	shunt_close_internal(kfd);
	if (r == 0) {
		swap_bell(s, id, bell);
		shunt_info("listener on fd %d registered again with shuntd", fd);
	} else if (r != -ENOTCONN && r != -EBADF) {
		char what[40];

		snprintf(what, sizeof(what), "listener on fd %d", fd);
		shunt_explain_fallback(what, r);
	}
out:
	pthread_mutex_unlock(&s->lock);
}

/*
 * Registered with a session that died: its doorbell counts circuits that
 * died with shuntd, and the connections clients queued in our channels,
 * which did not (shared memory we map): only those stay counted. A thread
 * of ours that takes one of them between the drain and the count can leave
 * the count one off: one short, a connection waits for the next one to be
 * accepted; one over, the accept() it wakes finds nothing and has it
 * counted again (shunt_ctl_accept). A single acceptor is exact.
 */
static void lost(struct shunt_sock *s)
{
	pthread_mutex_lock(&s->lock);
	/* A registration made since, under this lock, would have opened a session. */
	if (shunt_sock_state(s) == SHUNT_SOCK_LISTENING && s->doorbell >= 0 &&
	    !shunt_ctl_has_session()) {
		drain(s->doorbell);
		count(s->doorbell, shunt_chan_queued(s->listener));
	}
	pthread_mutex_unlock(&s->lock);
}

void shunt_relisten_run(void)
{
	struct shunt_sock **seen = NULL;
	size_t nseen = 0, cap = 0, high;
	unsigned work;
	bool renewing;

	if (!atomic_load_explicit(&pending, memory_order_relaxed))
		return;
	work = atomic_exchange(&pending, 0);
	renewing = shunt_ctl_has_session();
	if (!work || (renewing && !(work & WORK_RENEW)))
		return;
	close_retired();
	high = shunt_fdt_high();
	for (size_t fd = 0; fd < high; fd++) {
		struct shunt_sock *s = shunt_fdt_get((int)fd);
		size_t i;

		if (!s)
			continue;
		for (i = 0; i < nseen && seen[i] != s; i++)
			;
		/* Listeners with a registration, each once (dup'ed descriptors share one). */
		if (i < nseen || shunt_sock_state(s) != SHUNT_SOCK_LISTENING || s->doorbell < 0) {
			shunt_sock_put(s);
			continue;
		}
		if (nseen == cap) {
			struct shunt_sock **more = realloc(seen, (cap ? 2 * cap : 16) * sizeof(*seen));

			if (!more) {
				shunt_sock_put(s);
				break;
			}
			seen = more;
			cap = cap ? 2 * cap : 16;
		}
		seen[nseen++] = s;
		if (renewing)
			renew(s, (int)fd);
		else
			lost(s);
	}
	for (size_t i = 0; i < nseen; i++)
		shunt_sock_put(seen[i]);
	free(seen);
}

/* Whether this thread is the one to do what is done at most once a second, @next on. */
static bool once_a_second(_Atomic int64_t *next)
{
	int64_t now = shunt_now_ns(), at = atomic_load_explicit(next, memory_order_relaxed);

	return now >= at && atomic_compare_exchange_strong(next, &at, now + 1000000000);
}

static _Atomic int64_t next_look, next_count;

void shunt_relisten_poke(void)
{
	if (shunt_ctl_has_session() && !atomic_load_explicit(&pending, memory_order_relaxed) &&
	    !once_a_second(&next_look))
		return;
	shunt_fork_enter();
	/*
	 * The session we think open may be with a shuntd that died: a process
	 * that asked shuntd nothing since would never learn of it, and its
	 * listeners would stay on the kernel after a new shuntd came. One look
	 * (a ppoll) drops it if so, and the next poke opens a new one.
	 */
	if (!shunt_ctl_has_session() || !shunt_ctl_alive())
		shunt_ctl_session();
	/*
	 * Still none: count again what our channels hold (lost(), on the way
	 * out, once a second). A client that queued as shuntd died may have
	 * been counted off by the drain, and would wait for shuntd to come back.
	 */
	if (!shunt_ctl_has_session() && once_a_second(&next_count))
		shunt_relisten_lost();
	shunt_fork_leave();
}
