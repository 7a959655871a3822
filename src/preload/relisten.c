// SPDX-License-Identifier: MIT
/* Listeners across a shuntd restart: registrations renewed. */
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
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
#include "preload/family.h"
#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/fork.h"
#include "preload/listenwait.h"
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

/* Whether descriptors @a and @b are the same open file: 1, 0, or -1 if we cannot tell. */
static int same_file(int a, int b)
{
	long r = shunt_syscall(SYS_kcmp, shunt_pid, shunt_pid, KCMP_FILE, a, b);

	return r < 0 ? -1 : r == 0;
}

/*
 * Bells replaced by a renewal, kept open (and readable) until the next one:
 * a poll() asleep on the old descriptor number looks at that number again
 * when woken, and must find it there, ready (a kernel poll registers its
 * wait on the files it saw first, and never on a file put under the same
 * number since). With each, the eventfd that keeps it readable. Under
 * retired_lock, taken only inside shunt_relisten_run, so never held across
 * a fork.
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
 * Make bells @old readable for good, so that whoever sleeps on them wakes:
 * an eventfd that counts 1, in the instance, retired with it.
 */
static void ring_for_good(int old)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int efd = (int)shunt_syscall(SYS_eventfd2, 1, EFD_NONBLOCK | EFD_CLOEXEC);

	if (efd >= 0)
		efd = shunt_fd_hide(efd);
	if (efd < 0)
		return;	/* a sleeper stays asleep until a connection or a signal comes */
	(void)!shunt_syscall(SYS_epoll_ctl, old, EPOLL_CTL_ADD, efd, &ev);
	retire(efd);
}

/* Close what @got holds. */
static void close_got(const struct shunt_listen_fds *got)
{
	const int fds[3] = { got->bells, got->doorbell, got->announce };

	for (int i = 0; i < 3; i++)
		if (fds[i] >= 0)
			shunt_close_hidden(fds[i]);
}

/*
 * Move @s onto the bells, doorbell and announce in @got (hidden, taken
 * over; -1: none) of registration @id: epoll instances from the old ones
 * to the new ones, and threads asleep in accept() or poll() on the old
 * bells woken to look again (at the new ones). @same: whether they are the
 * old ones (1, 0, or -1: cannot tell). Under s->lock.
 */
static void swap_bell(struct shunt_sock *s, uint64_t id, const struct shunt_listen_fds *got,
		      int same)
{
	int old = s->bells, bell = got->bells;

	if (same == 1) {
		close_got(got);
		s->listener = id;
		return;
	}
	shunt_epoll_sock_bell(s, false);
	/*
	 * What clients queued in our channels before shuntd died is taken
	 * under the new registration, still counted on the channels' bells.
	 */
	shunt_chan_move_listener(s->listener, id, bell);
	s->bells = bell;
	shunt_listen_wait_rebell(s, old, bell);
	/* Only epoll instances held these, and they no longer do. */
	shunt_sock_close_doorbells(s);
	s->doorbell = got->doorbell;
	s->announce = got->announce;
	s->announce_pid = shunt_pid;
	s->listener = id;
	shunt_epoll_sock_bell(s, true);
	/*
	 * Readable for good, which only wakes the sleepers: nobody polls
	 * them any more (their daemon is gone, or dropped that registration).
	 * Not what may be the live bells of a registration we did not
	 * recognise, which would stay readable.
	 */
	if (same == 0)
		ring_for_good(old);
	retire(old);
}

/* Register listener @s, open as @fd, with the current session. */
static void renew(struct shunt_sock *s, int fd)
{
	struct shunt_sock *now;
	struct shunt_listen_fds got;
	uint64_t id = 0;
	int kfd, r;

	pthread_mutex_lock(&s->lock);
	if (shunt_sock_state(s) != SHUNT_SOCK_LISTENING || s->bells < 0)
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
		r = shunt_ctl_listen(kfd, 0, &id, &got);
	shunt_close_internal(kfd);
	if (r == 0) {
		/*
		 * A new shuntd counts no close made before it: from now on this
		 * process is a family of its own, whose closes wait (family.h).
		 */
		if (id != s->listener) {
			shunt_family_leave(s->family_slot, false);
			s->family_slot = shunt_family_join(id);
		}
		/* Ids of two daemons never meet: the same id is the same registration. */
		swap_bell(s, id, &got, id == s->listener ? 1 : same_file(got.bells, s->bells));
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
 * Registered with a session that died. Its bells hold, besides our
 * channels' bells, those of channels shuntd never handed us (their
 * connections are lost with it), which nobody can settle now: a count to
 * spare there would keep the listener readable for good. Bells of our own
 * instead, holding our channels' alone (the empty ones go: no client
 * queues in them any more), and what they count beyond their queues taken.
 */
static void lost(struct shunt_sock *s)
{
	int mine;

	pthread_mutex_lock(&s->lock);
	/* A registration made since, under this lock, would have opened a session. */
	if (shunt_sock_state(s) == SHUNT_SOCK_LISTENING && s->bells >= 0 &&
	    !shunt_ctl_has_session()) {
		mine = (int)shunt_syscall(SYS_epoll_create1, EPOLL_CLOEXEC);
		if (mine >= 0)
			mine = shunt_fd_hide(mine);
		if (mine >= 0) {
			struct shunt_listen_fds own = { mine, -1, -1 };

			shunt_chan_settle(s->listener);
			/* Our channels' bells are moved into it there. */
			swap_bell(s, s->listener, &own, 0);
		}
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
		if (i < nseen || shunt_sock_state(s) != SHUNT_SOCK_LISTENING || s->bells < 0) {
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

static _Atomic int64_t next_look;

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
	shunt_fork_leave();
}
