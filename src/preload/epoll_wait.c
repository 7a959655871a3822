// SPDX-License-Identifier: MIT
/*
 * epoll_wait over a shunt epoll instance: kernel events (the application's
 * own, passed through with their data, and our LISTENER sentinels turned
 * back into one event with the application's data) plus the ready list of
 * CIRCUIT registrations, which notices fill. The thread spins briefly, then
 * sleeps in the kernel instance, which holds the notice hub and the bell.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload/epoll.h"
#include "preload/notice.h"
#include "preload/ops.h"
#include "preload/sock.h"
#include "preload/util.h"
#include "preload/wait.h"

#define TOMBSTONE ((void *)1)

enum { KBUF = 64 };

/* What one harvest of kernel events gave. */
struct harvest {
	struct epoll_event *out;	/* the application's array */
	int n, max;
	bool hub_fired;
};

/*
 * Sort kernel events: ours (hub, bell, LISTENER sentinels) are consumed or
 * translated, the application's are copied out as they are. A LISTENER's
 * two kernel registrations may both fire: they make one event.
 */
static void absorb(struct shunt_epoll *ep, const struct epoll_event *k, int nk, struct harvest *h)
{
	for (int i = 0; i < nk; i++) {
		struct shunt_reg *r;

		if (k[i].data.ptr == &ep->hub_mark) {
			h->hub_fired = true;
			continue;
		}
		if (k[i].data.ptr == &ep->bell_mark)
			continue;	/* the ready list says what the bell meant */
		pthread_mutex_lock(&ep->lock);
		r = shunt_map_get(&ep->sentinels, k[i].data.u64);
		pthread_mutex_unlock(&ep->lock);
		if (r == TOMBSTONE)
			continue;
		if (!r) {
			h->out[h->n++] = k[i];
			continue;
		}
		uint32_t mask = k[i].events & (r->events | EPOLLERR | EPOLLHUP);
		int j;

		for (j = 0; j < h->n; j++)
			if (h->out[j].data.u64 == r->data.u64 && (h->out[j].events & EPOLLIN))
				break;
		if (j < h->n) {
			h->out[j].events |= mask;
		} else if (mask) {
			h->out[h->n].events = mask;
			h->out[h->n++].data = r->data;
		}
	}
}

/* Harvest kernel events into @h without blocking, up to the room left. */
static int harvest_now(struct shunt_epoll *ep, int epfd, struct harvest *h)
{
	struct epoll_event k[KBUF];
	int room = h->max - h->n, nk;

	/* Never take more than fits: an edge-triggered event taken is gone. */
	nk = (int)syscall(SYS_epoll_wait, epfd, k, room < KBUF ? room : KBUF, 0);
	if (nk < 0)
		return -errno;
	absorb(ep, k, nk, h);
	return nk;
}

/* Report ready CIRCUIT registrations, as the kernel's ep_send_events does. */
static void collect(struct shunt_epoll *ep, struct harvest *h)
{
	pthread_mutex_lock(&ep->lock);
	/* Each registration is looked at once per call, even the ones put back. */
	for (struct shunt_list *end = ep->ready.prev, *pos = ep->ready.next;
	     !shunt_list_empty(&ep->ready) && h->n < h->max;) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, ready_node);
		bool last = pos == end;
		uint32_t mask = r->armed ? (shunt_sock_poll_mask(r->sock, r->fd) &
					    (r->events | EPOLLERR | EPOLLHUP)) : 0;

		pos = pos->next;
		shunt_list_del(&r->ready_node);
		r->queued = false;
		if (mask) {
			h->out[h->n].events = mask;
			h->out[h->n++].data = r->data;
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

/* Sleep in the kernel instance until an event, the timeout or a signal. */
static int sleep_kernel(struct shunt_epoll *ep, int epfd, struct harvest *h, int64_t deadline,
			const sigset_t *mask)
{
	struct epoll_event k[KBUF];
	struct timespec ts, *tsp = NULL;
	int room = h->max - h->n, nk;

	if (deadline >= 0) {
		int64_t left = deadline - shunt_now_ns();

		if (left < 0)
			left = 0;
		ts.tv_sec = left / 1000000000;
		ts.tv_nsec = left % 1000000000;
		tsp = &ts;
	}
	nk = (int)syscall(SYS_epoll_pwait2, epfd, k, room < KBUF ? room : KBUF, tsp, mask,
			  mask ? _NSIG / 8 : 0);
	if (nk < 0)
		return -errno;
	absorb(ep, k, nk, h);
	return nk;
}

int shunt_epoll_wait(struct shunt_epoll *ep, int epfd, struct epoll_event *events, int max,
		     int64_t timeout_ns, const sigset_t *mask)
{
	int64_t start = shunt_now_ns();
	int64_t deadline = timeout_ns >= 0 ? start + timeout_ns : -1;
	int64_t spin_ns = mask ? 0 : shunt_wait_spin_ns();
	struct harvest h = { .out = events, .max = max };
	bool circuits;

	if (max <= 0 || max > INT_MAX / (int)sizeof(struct epoll_event))
		return -EINVAL;
	if (!events)
		return -EFAULT;
	for (unsigned round = 0;; round++) {
		int r;

		pthread_mutex_lock(&shunt_notice_lock);
		circuits = !shunt_list_empty(&ep->regs);
		pthread_mutex_unlock(&shunt_notice_lock);
		/* While spinning, ask the kernel only now and then: it is a system call. */
		if (round == 0 || !(round % 32) || !circuits) {
			r = harvest_now(ep, epfd, &h);
			if (r < 0)
				return r;
		}
		shunt_notice_drain(h.hub_fired);
		h.hub_fired = false;
		collect(ep, &h);
		if (h.n || timeout_ns == 0)
			return h.n;
		int64_t now = shunt_now_ns();

		if (deadline >= 0 && now >= deadline)
			return 0;
		if (circuits && now - start < spin_ns) {
			shunt_cpu_relax();
			continue;
		}
		/*
		 * Sleep: announce ourselves (to notifiers through the links, to
		 * routers through the bell), look once more, then wait.
		 */
		pthread_mutex_lock(&ep->lock);
		ep->sleepers++;
		pthread_mutex_unlock(&ep->lock);
		shunt_notice_sleepers(+1);
		r = 0;
		if (!shunt_notice_drain(false) && !shunt_epoll_has_ready(ep))
			r = sleep_kernel(ep, epfd, &h, deadline, mask);
		shunt_notice_sleepers(-1);
		pthread_mutex_lock(&ep->lock);
		ep->sleepers--;
		pthread_mutex_unlock(&ep->lock);
		if (r < 0)
			return r;	/* EINTR: epoll_wait is never restarted */
		shunt_notice_drain(h.hub_fired);
		h.hub_fired = false;
		collect(ep, &h);
		if (h.n)
			return h.n;
	}
}
