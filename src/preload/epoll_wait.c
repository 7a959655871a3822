// SPDX-License-Identifier: MIT
/*
 * epoll_wait over a shunt epoll instance: kernel events (the application's
 * own, passed through with their data; our sentinels turned back into the
 * application's events) plus the ready list of CIRCUIT registrations, which
 * notices fill. The thread spins while that can pay (spin.h), then sleeps
 * in the instance, with the notice hub in it for as long as someone sleeps
 * there. Kernel calls use our own descriptor of the instance: the
 * application's may be closed by another thread meanwhile, and the kernel's
 * epoll_wait goes on.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/sys.h"
#include "preload/chan.h"
#include "preload/epoll.h"
#include "preload/fault.h"
#include "preload/fork.h"
#include "preload/notice.h"
#include "preload/ops.h"
#include "preload/seccomp.h"
#include "preload/sock.h"
#include "preload/spin.h"
#include "preload/util.h"
#include "preload/wait.h"

#define TOMBSTONE ((void *)1)

enum {
	NAP_MIN_NS = 50 * 1000,		/* naps, when the hub cannot be slept on */
	NAP_MAX_NS = 2 * 1000 * 1000,
};

/*
 * epoll_pwait2 with a relative timeout (NULL: none), or, when a seccomp
 * filter forbids it, epoll_pwait and then epoll_wait (milliseconds, rounded
 * up): the calls a filter that lets the program wait in epoll may allow.
 * The result, or -1 with errno.
 */
static long kernel_wait(int kfd, struct epoll_event *k, int n, const struct timespec *ts,
			const sigset_t *mask)
{
	long r = shunt_syscall(SYS_epoll_pwait2, kfd, k, n, ts, mask, mask ? _NSIG / 8 : 0);
	int64_t ms;

	if (r >= 0 || errno != SHUNT_SYS_DENIED)
		return r;
	ms = ts ? ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000 : -1;
	if (ms > INT_MAX)
		ms = INT_MAX;
	r = shunt_syscall(SYS_epoll_pwait, kfd, k, n, ms, mask, mask ? _NSIG / 8 : 0);
	if (r >= 0 || errno != SHUNT_SYS_DENIED || mask)
		return r;
	return shunt_syscall(SYS_epoll_wait, kfd, k, n, ms);
}

/*
 * The events being gathered, straight into the program's array: the kernel
 * writes its own there (with its rules for a slot it cannot write: that
 * event stays queued), and ours are written through fault.h.
 */
struct harvest {
	struct epoll_event *out;	/* the program's array */
	int n, max;
	bool hub_fired;			/* the notice hub was among the kernel's events */
	bool full;			/* the next slot could not be written */
};

static bool get_event(struct harvest *h, int at, struct epoll_event *ev)
{
	return !shunt_get_user(ev, &h->out[at], sizeof(*ev));
}

static bool put_event(struct harvest *h, int at, const struct epoll_event *ev)
{
	return !shunt_put_user(&h->out[at], ev, sizeof(*ev));
}

/* Add @mask for registration @r, once per call: a listener's two kernel halves make one. */
static void report(struct harvest *h, struct shunt_reg *r, uint32_t mask)
{
	struct epoll_event ev;

	for (int j = 0; r->mode == SHUNT_REG_LISTENER && j < h->n; j++) {
		if (get_event(h, j, &ev) && ev.data.u64 == r->data.u64) {
			ev.events |= mask;
			put_event(h, j, &ev);
			return;
		}
	}
	if (mask && h->n < h->max) {
		ev.events = mask;
		ev.data = r->data;
		if (put_event(h, h->n, &ev))
			h->n++;
		else
			h->full = true;
	}
}

/*
 * Sort the @nk kernel events at slot @first (= h->n) on: the bell and the
 * hub are ours alone (the ready list and the links say what they meant),
 * sentinels are translated, the application's are kept as they are. The
 * array is compacted in place: h->n never passes the slot being read.
 */
static void absorb(struct shunt_epoll *ep, int first, int nk, struct harvest *h)
{
	for (int i = first; i < first + nk; i++) {
		struct epoll_event k;
		struct shunt_reg *r;
		uint32_t want;

		if (!get_event(h, i, &k)) {
			h->full = true;		/* unmapped since the kernel wrote it */
			return;
		}
		if (k.data.ptr == &ep->bell_mark)
			continue;
		if (k.data.ptr == &ep->hub_mark) {
			h->hub_fired = true;
			continue;
		}
		pthread_mutex_lock(&ep->lock);
		r = shunt_map_get(&ep->sentinels, k.data.u64);
		pthread_mutex_unlock(&ep->lock);
		if (r == TOMBSTONE)
			continue;
		if (!r) {
			if (h->n == i || put_event(h, h->n, &k))
				h->n++;
			continue;
		}
		want = r->events | EPOLLERR | EPOLLHUP;
		if (r->mode == SHUNT_REG_NESTED) {
			/* Stale entries of the inner instance must not make it look ready. */
			if (shunt_epoll_readable(r->inner))
				report(h, r, k.events & want);
			continue;
		}
		/* A listener with a queued connection: what inet_csk_listen_poll says. */
		report(h, r, (k.events | (k.events & EPOLLIN ? EPOLLRDNORM : 0)) & want);
	}
}

/*
 * Kernel events ready now, as many as the array has room for (an edge taken
 * is gone), in one call: a second would report level-triggered ones again.
 */
static int harvest_now(struct shunt_epoll *ep, struct harvest *h)
{
	int first = h->n, room = h->max - first, nk;

	if (h->full || room <= 0)
		return 0;
	nk = (int)shunt_syscall(SYS_epoll_wait, ep->kfd, h->out + first, room, 0);
	if (nk < 0 && errno == SHUNT_SYS_DENIED) {
		struct timespec zero = { 0, 0 };

		nk = (int)kernel_wait(ep->kfd, h->out + first, room, &zero, NULL);
	}
	if (nk < 0 && errno == EFAULT) {
		h->full = true;		/* the kernel kept the event it could not write */
		return 0;
	}
	if (nk < 0)
		return -errno;
	absorb(ep, first, nk, h);
	return 0;
}

/* Report ready CIRCUIT registrations, as the kernel's ep_send_events does. */
static void collect(struct shunt_epoll *ep, struct harvest *h)
{
	pthread_mutex_lock(&ep->lock);
	/* Each registration is looked at once per call, even the ones put back. */
	for (struct shunt_list *end = ep->ready.prev, *pos = ep->ready.next;
	     !shunt_list_empty(&ep->ready) && h->n < h->max && !h->full;) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, ready_node);
		bool last = pos == end;
		uint32_t mask = r->armed ? (shunt_sock_poll_mask(r->sock, r->fd) &
					    (r->events | EPOLLERR | EPOLLHUP)) : 0;
		struct epoll_event ev = { .events = mask, .data = r->data };

		pos = pos->next;
		shunt_list_del(&r->ready_node);
		r->queued = false;
		if (mask && !put_event(h, h->n, &ev)) {
			/* A slot it cannot write: back at the head, as ep_send_events puts it. */
			shunt_list_add_tail(ep->ready.next, &r->ready_node);
			r->queued = true;
			h->full = true;
			break;
		}
		if (mask) {
			h->n++;
			if (r->events & EPOLLONESHOT) {
				r->armed = false;
			} else if (!(r->events & EPOLLET)) {
				/* Level-triggered: it stays until it is no longer ready. */
				shunt_list_add_tail(&ep->ready, &r->ready_node);
				r->queued = true;
			}
		}
		if (last)
			break;
	}
	shunt_epoll_unring_locked(ep);
	pthread_mutex_unlock(&ep->lock);
}

/*
 * Everything ready now, kernel and circuit events in turn first from one
 * call to the next, so that with a small maxevents neither kind starves
 * (the kernel's ready list is round-robin too).
 */
static int gather(struct shunt_epoll *ep, struct harvest *h, bool ask_kernel)
{
	bool circuits_first;
	int r = 0;

	pthread_mutex_lock(&ep->lock);
	circuits_first = ep->circuit_first = !ep->circuit_first;
	pthread_mutex_unlock(&ep->lock);
	if (circuits_first)
		collect(ep, h);
	if (ask_kernel)
		r = harvest_now(ep, h);
	if (!circuits_first)
		collect(ep, h);
	return r < 0 ? r : h->n;
}

/*
 * Sleep in the kernel instance until an event, the timeout or a signal, as
 * epoll_pwait2 does (EINTR after a stop and continue too, where ppoll would
 * restart). The notice hub sits in the instance only while someone sleeps
 * there: always there, it would add a level of nesting and make the
 * instance look ready from outside on every notice. Returns >= 0 or -errno.
 */
static int sleep_kernel(struct shunt_epoll *ep, struct harvest *h, int64_t deadline,
			const sigset_t *mask)
{
	struct timespec ts, *tsp = NULL;
	int first = h->n, room = h->max - first, nk;

	if (deadline >= 0) {
		int64_t left = deadline - shunt_now_ns();

		if (left < 0)
			left = 0;
		ts.tv_sec = left / 1000000000;
		ts.tv_nsec = left % 1000000000;
		tsp = &ts;
	}
	if (deadline < 0 || ts.tv_sec || ts.tv_nsec)
		shunt_chan_let_go();
	nk = (int)kernel_wait(ep->kfd, h->out + first, room, tsp, mask);
	if (nk < 0 && errno == EFAULT) {
		h->full = true;		/* the kernel kept the event it could not write */
		return 0;
	}
	if (nk < 0)
		return -errno;
	absorb(ep, first, nk, h);
	return nk;
}

/*
 * Whether the hub can be put in the instance and drained: a seccomp filter
 * may forbid either, and then a sleeper naps instead (a ready hub left in
 * the instance would wake it at once, forever).
 */
static bool hub_sleep_ok(struct shunt_epoll *ep)
{
	int hub = shunt_notice_hub();

	if (hub < 0)
		return false;
	return !shunt_seccomp_active() ||
	       (shunt_seccomp_allows(SYS_epoll_ctl, ep->kfd, EPOLL_CTL_ADD, hub) &&
		shunt_seccomp_allows(SYS_epoll_ctl, ep->kfd, EPOLL_CTL_DEL, hub) &&
		shunt_seccomp_allows(SYS_epoll_wait, hub, 0, 32, 0));
}

/*
 * The notice hub is in one sleeping instance at a time, its holder's: a
 * notice wakes that instance's sleeper, which drains the hub and rings the
 * bells of the instances the notices are for. With the hub in every
 * sleeping instance, every notice woke a thread in each (wrk's eight
 * threads, each in an instance of its own, woke eight times per response).
 * The kernel cannot do this for us: EPOLLEXCLUSIVE is refused on an epoll
 * file, which the hub is. When the holder wakes, it drains first, then
 * hands the hub to another sleeping instance, if any (the ADD wakes that
 * one at once should a notice have come meanwhile); the next instance to
 * sleep takes it otherwise. Lock order: ep->lock, then hub_lock.
 */
static pthread_mutex_t hub_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_epoll *hub_holder;		/* under hub_lock */
static struct shunt_list asleep = { &asleep, &asleep };	/* under hub_lock: asleep_node */

static void hub_put(struct shunt_epoll *ep)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = &ep->hub_mark };

	shunt_syscall(SYS_epoll_ctl, ep->kfd, EPOLL_CTL_ADD, shunt_notice_hub(), &ev);
}

/* Count a sleeper in @ep; the first one asleep in the process takes the hub. */
static void hub_sleeper(struct shunt_epoll *ep, int delta)
{
	pthread_mutex_lock(&ep->lock);
	if (delta > 0 && ep->sleepers++ == 0) {
		pthread_mutex_lock(&hub_lock);
		shunt_list_add_tail(&asleep, &ep->asleep_node);
		if (!hub_holder) {
			hub_holder = ep;
			hub_put(ep);
		}
		pthread_mutex_unlock(&hub_lock);
	}
	if (delta < 0 && --ep->sleepers == 0) {
		pthread_mutex_lock(&hub_lock);
		shunt_list_del(&ep->asleep_node);
		pthread_mutex_unlock(&hub_lock);
	}
	pthread_mutex_unlock(&ep->lock);
}

/* Once awake and drained: the hub goes to another sleeping instance, or waits for one. */
static void hub_pass(struct shunt_epoll *ep)
{
	pthread_mutex_lock(&ep->lock);
	pthread_mutex_lock(&hub_lock);
	if (hub_holder == ep && !ep->sleepers) {
		shunt_syscall(SYS_epoll_ctl, ep->kfd, EPOLL_CTL_DEL, shunt_notice_hub(), NULL);
		hub_holder = NULL;
		if (!shunt_list_empty(&asleep)) {
			hub_holder = shunt_container_of(asleep.next, struct shunt_epoll, asleep_node);
			hub_put(hub_holder);
		}
	}
	pthread_mutex_unlock(&hub_lock);
	pthread_mutex_unlock(&ep->lock);
}

void shunt_epoll_hub_fork_child(void)
{
	pthread_mutex_init(&hub_lock, NULL);
	hub_holder = NULL;
	shunt_list_init(&asleep);
}

/*
 * epoll_wait with an array it cannot write (NULL, unmapped, read-only): the
 * kernel waits as usual and fails with EFAULT only when it has an event to
 * copy out (which stays queued). So we wait for readiness without taking
 * anything.
 */
static int wait_null(struct shunt_epoll *ep, int64_t timeout_ns, const sigset_t *mask)
{
	int64_t deadline = timeout_ns >= 0 ? shunt_now_ns() + timeout_ns : -1;

	for (;;) {
		struct pollfd p[2] = { { ep->kfd, POLLIN, 0 }, { shunt_notice_hub(), POLLIN, 0 } };
		struct timespec ts, *tsp = NULL;

		shunt_notice_drain(true);
		if (shunt_epoll_readable(ep))
			return -EFAULT;
		if (deadline >= 0) {
			int64_t left = deadline - shunt_now_ns();

			if (left <= 0)
				return 0;
			ts.tv_sec = left / 1000000000;
			ts.tv_nsec = left % 1000000000;
			tsp = &ts;
		}
		shunt_notice_sleepers(+1);
		long r = shunt_syscall(SYS_ppoll, p, 2, tsp, mask, mask ? _NSIG / 8 : 0);

		shunt_notice_sleepers(-1);
		if (r < 0)
			return -errno;
	}
}

/* The spin of a wait is over, with @r: what the wait returns, or 0 when it goes to sleep. */
static int spin_done(struct shunt_spin **sp, int r)
{
	if (*sp) {
		shunt_spin_end(*sp, r > 0);
		*sp = NULL;
	}
	return r;
}

int shunt_epoll_wait(struct shunt_epoll *ep, int epfd, struct epoll_event *events, int max,
		     int64_t timeout_ns, const sigset_t *mask)
{
	int64_t start = shunt_now_ns();
	int64_t deadline = timeout_ns >= 0 ? start + timeout_ns : -1;
	int64_t nap = NAP_MIN_NS;
	struct harvest h = { .out = events, .max = max };
	struct epoll_event first;
	struct shunt_spin spin, *sp = NULL;
	int r;

	if (max <= 0 || max > INT_MAX / (int)sizeof(struct epoll_event))
		return -EINVAL;
	/* A fork child sleeps on its own routes (fork.h). */
	shunt_fork_settle();
	if (!shunt_user_range_ok(events, (size_t)max * sizeof(*events)))
		return -EFAULT;
	/* Not even the first slot can be written: wait as the kernel would, taking nothing. */
	if (!get_event(&h, 0, &first) || !put_event(&h, 0, &first))
		return wait_null(ep, timeout_ns, mask);
	/* Not with a signal mask: a signal it lets through must find us asleep. */
	if (!mask && timeout_ns != 0) {
		sp = &spin;
		shunt_spin_begin(sp, start, NULL);
	}
	for (unsigned round = 0;; round++) {
		bool circuits;

		/* Notices first: they fill the ready list and set inner bells. */
		shunt_notice_drain(h.hub_fired);
		h.hub_fired = false;
		pthread_mutex_lock(&shunt_notice_lock);
		circuits = !shunt_list_empty(&ep->regs);
		pthread_mutex_unlock(&shunt_notice_lock);
		/* While spinning, ask the kernel only now and then: it is a system call. */
		r = gather(ep, &h, round == 0 || !(round % 32) || !circuits);
		if (r < 0)
			return spin_done(&sp, r);
		if (h.n || timeout_ns == 0 || h.full)
			return spin_done(&sp, h.n ? h.n : h.full ? -EFAULT : 0);
		int64_t now = shunt_now_ns();

		if (deadline >= 0 && now >= deadline)
			return spin_done(&sp, 0);
		if (sp && circuits && shunt_spin_go_on(sp)) {
			shunt_cpu_relax();
			continue;
		}
		spin_done(&sp, 0);
		/*
		 * Sleep: announce ourselves (to notifiers through the links, to
		 * routers through the bell), look once more, then wait.
		 */
		if (circuits && !hub_sleep_ok(ep)) {
			/* Without the hub, circuits are looked at again after a nap. */
			int64_t until = now + nap;

			nap = nap * 2 < NAP_MAX_NS ? nap * 2 : NAP_MAX_NS;
			r = sleep_kernel(ep, &h, deadline >= 0 && deadline < until ? deadline : until,
					 mask);
			if (r < 0)
				return r;
			if (h.n)
				return h.n;
			round = UINT_MAX;
			continue;
		}
		hub_sleeper(ep, +1);
		shunt_notice_sleepers(+1);
		r = 0;
		if (!shunt_notice_drain(false) && !shunt_epoll_ready_now(ep))
			r = sleep_kernel(ep, &h, deadline, mask);
		shunt_notice_sleepers(-1);
		hub_sleeper(ep, -1);
		/* What the hub brought, before another instance can be woken by it. */
		if (h.hub_fired) {
			shunt_notice_drain(true);
			h.hub_fired = false;
		}
		hub_pass(ep);
		if (r < 0)
			return r;	/* EINTR: epoll_wait is never restarted */
		if (h.n || h.full)
			return h.n ? h.n : -EFAULT;
		/* Look at the kernel right away: round 1 of the next pass may not. */
		round = UINT_MAX;
	}
}
