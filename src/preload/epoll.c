// SPDX-License-Identifier: MIT
/*
 * epoll instances and registrations (see epoll.h for the model): creation,
 * epoll_ctl with the kernel's checks and errors, moving registrations when
 * their sockets change, and routing notices onto ready lists.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/conn.h"
#include "preload/chan.h"
#include "preload/epoll.h"
#include "preload/fdtable.h"
#include "preload/libc.h"
#include "preload/notice.h"
#include "preload/ops.h"
#include "preload/recycle.h"
#include "preload/sock.h"
#include "preload/util.h"

/* A sentinel whose registration is gone: its stale events are dropped. */
#define TOMBSTONE ((void *)1)

/* What EPOLLEXCLUSIVE may be combined with (the kernel's EPOLLEXCLUSIVE_OK_BITS). */
#define EXCLUSIVE_OK (EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | \
		      EPOLLEXCLUSIVE)

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_epoll *ep_pool;	/* under pool_lock; type-stable, as fdtable.c needs */
static struct shunt_reg *reg_pool;	/* under pool_lock; type-stable, as sentinels need */
static struct shunt_epoll *ep_all;	/* under pool_lock: every instance object ever made */

static long kctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	return shunt_syscall(SYS_epoll_ctl, epfd, op, fd, ev) < 0 ? -errno : 0;
}

static struct shunt_epoll *ep_new(void)
{
	struct shunt_epoll *ep;

	pthread_mutex_lock(&pool_lock);
	ep = ep_pool;
	if (ep)
		ep_pool = ep->next_free;
	pthread_mutex_unlock(&pool_lock);
	if (!ep) {
		ep = calloc(1, sizeof(*ep));
		if (!ep)
			return NULL;
		pthread_mutex_init(&ep->lock, NULL);
		pthread_mutex_lock(&pool_lock);
		ep->all_next = ep_all;
		ep_all = ep;
		pthread_mutex_unlock(&pool_lock);
	}
	ep->f.kind = SHUNT_FILE_EPOLL;
	atomic_store_explicit(&ep->f.ident, 0, memory_order_relaxed);
	ep->kfd = ep->bell = -1;
	ep->bell_set = false;
	ep->sleepers = 0;
	shunt_list_init(&ep->asleep_node);
	atomic_store(&ep->exposed, false);
	shunt_list_init(&ep->regs);
	shunt_list_init(&ep->watchers);
	shunt_list_init(&ep->ready);
	ep->circuit_first = false;
	shunt_map_init(&ep->sentinels);
	atomic_store_explicit(&ep->f.refs, 1, memory_order_release);
	return ep;
}

static void ep_free(struct shunt_epoll *ep)
{
	if (ep->bell >= 0)
		shunt_close_hidden(ep->bell);
	if (ep->kfd >= 0)
		shunt_close_hidden(ep->kfd);
	shunt_map_free(&ep->sentinels);
	pthread_mutex_lock(&pool_lock);
	ep->next_free = ep_pool;
	ep_pool = ep;
	pthread_mutex_unlock(&pool_lock);
}

static struct shunt_reg *reg_new(void)
{
	struct shunt_reg *r;

	pthread_mutex_lock(&pool_lock);
	r = reg_pool;
	if (r)
		reg_pool = r->next_free;
	pthread_mutex_unlock(&pool_lock);
	if (!r && !(r = calloc(1, sizeof(*r))))
		return NULL;
	memset(r, 0, sizeof(*r));
	shunt_list_init(&r->ep_node);
	shunt_list_init(&r->sock_node);
	shunt_list_init(&r->ready_node);
	return r;
}

static void reg_free(struct shunt_reg *r)
{
	pthread_mutex_lock(&pool_lock);
	r->next_free = reg_pool;
	reg_pool = r;
	pthread_mutex_unlock(&pool_lock);
}

int shunt_epoll_create(int flags)
{
	struct epoll_event bell = { .events = EPOLLIN };
	/* The application's own call, for its seccomp filters to judge. */
	int fd = (int)shunt_syscall_app(SYS_epoll_create1, flags);
	struct shunt_epoll *ep;

	if (fd < 0)
		return -errno;
	shunt_fdt_forget(fd);
	ep = shunt_enabled() ? ep_new() : NULL;
	if (!ep)
		return fd;	/* a plain kernel instance: nothing breaks */
	ep->kfd = shunt_fd_dup_hidden(fd);
	ep->bell = (int)shunt_syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (ep->bell >= 0)
		ep->bell = shunt_fd_hide(ep->bell);
	bell.data.ptr = &ep->bell_mark;
	/* Waiters sleep on the hub next to the instance, so it must exist. */
	if (ep->kfd < 0 || ep->bell < 0 || shunt_notice_hub() < 0 ||
	    kctl(ep->kfd, EPOLL_CTL_ADD, ep->bell, &bell)) {
		shunt_warn("epoll instance %d stays kernel-only: cannot set it up", fd);
		ep_free(ep);
		return fd;
	}
	shunt_fdt_set(fd, &ep->f);
	shunt_file_put(&ep->f);
	return fd;
}

/*
 * Set the bell if someone may be waiting or watching. Watched from outside,
 * every notice is a new edge, even with the bell already set: the kernel's
 * ep_poll_callback wakes the outer instance whenever an item fires, queued
 * or not, and an edge-triggered outer registration counts on it.
 * Under ep->lock.
 */
static void ring_locked(struct shunt_epoll *ep)
{
	bool exposed = atomic_load(&ep->exposed);
	uint64_t one = 1;

	if ((ep->bell_set && !exposed) || (!ep->sleepers && !exposed))
		return;
	if (shunt_syscall(SYS_write, ep->bell, &one, sizeof(one)) == sizeof(one))
		ep->bell_set = true;
}

void shunt_epoll_unring_locked(struct shunt_epoll *ep)
{
	uint64_t v;

	if (!ep->bell_set || !shunt_list_empty(&ep->ready))
		return;
	(void)!shunt_syscall(SYS_read, ep->bell, &v, sizeof(v));
	ep->bell_set = false;
}

void shunt_epoll_expose(struct shunt_epoll *ep)
{
	if (atomic_exchange(&ep->exposed, true))
		return;
	pthread_mutex_lock(&ep->lock);
	if (!shunt_list_empty(&ep->ready))
		ring_locked(ep);
	pthread_mutex_unlock(&ep->lock);
}

/* The events a registration has now, as poll(2) would give them. */
static uint32_t reg_mask(struct shunt_reg *r);

/* Prune @ep's ready list and those of instances nested in it. Under the notice lock. */
static void nested_prune(struct shunt_epoll *ep)
{
	struct shunt_list *pos, *tmp;

	shunt_epoll_ready_now(ep);
	shunt_list_for_each_safe(pos, tmp, &ep->regs) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, ep_node);

		if (r->mode == SHUNT_REG_NESTED)
			nested_prune(r->inner);
	}
}

bool shunt_epoll_ready_now(struct shunt_epoll *ep)
{
	struct shunt_list *pos, *tmp;
	bool r;

	pthread_mutex_lock(&ep->lock);
	shunt_list_for_each_safe(pos, tmp, &ep->ready) {
		struct shunt_reg *g = shunt_container_of(pos, struct shunt_reg, ready_node);

		if (g->armed && reg_mask(g))
			continue;
		shunt_list_del(&g->ready_node);
		g->queued = false;
	}
	shunt_epoll_unring_locked(ep);
	r = !shunt_list_empty(&ep->ready);
	pthread_mutex_unlock(&ep->lock);
	return r;
}

bool shunt_epoll_readable(struct shunt_epoll *ep)
{
	struct pollfd p = { ep->kfd, POLLIN, 0 };
	struct timespec zero = { 0, 0 };
	struct shunt_list *pos, *tmp;

	if (shunt_epoll_ready_now(ep))
		return true;
	/*
	 * Instances nested in this one set their bells for entries that may
	 * have stopped being ready since: prune them first (the kernel bounds
	 * nesting, so does this recursion), then ask the kernel.
	 */
	pthread_mutex_lock(&shunt_notice_lock);
	shunt_list_for_each_safe(pos, tmp, &ep->regs) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, ep_node);

		if (r->mode == SHUNT_REG_NESTED)
			nested_prune(r->inner);
	}
	pthread_mutex_unlock(&shunt_notice_lock);
	return shunt_syscall(SYS_ppoll, &p, 1, &zero, NULL, 0) > 0 && (p.revents & POLLIN);
}

/* The mode a registration of @s should have now. */
static enum shunt_reg_mode mode_of(struct shunt_sock *s)
{
	int st = shunt_sock_state(s);

	if (st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING || atomic_load(&s->so_error))
		return SHUNT_REG_CIRCUIT;
	if (st == SHUNT_SOCK_LISTENING && s->bells >= 0)
		return SHUNT_REG_LISTENER;
	return SHUNT_REG_KERNEL;
}

static uint32_t reg_mask(struct shunt_reg *r)
{
	uint32_t want = r->events | EPOLLERR | EPOLLHUP;

	return shunt_sock_poll_mask(r->sock, r->fd) & want;
}

/* Queue a CIRCUIT registration that is ready. Under the notice lock. */
static void queue_if_ready(struct shunt_reg *r)
{
	struct shunt_epoll *ep = r->ep;

	if (r->mode != SHUNT_REG_CIRCUIT || !r->armed || !reg_mask(r))
		return;
	pthread_mutex_lock(&ep->lock);
	if (!r->queued) {
		shunt_list_add_tail(&ep->ready, &r->ready_node);
		r->queued = true;
	}
	ring_locked(ep);
	pthread_mutex_unlock(&ep->lock);
}

static void dequeue(struct shunt_reg *r)
{
	pthread_mutex_lock(&r->ep->lock);
	if (r->queued) {
		shunt_list_del(&r->ready_node);
		r->queued = false;
	}
	shunt_epoll_unring_locked(r->ep);
	pthread_mutex_unlock(&r->ep->lock);
}

/* The circuit end whose `evented` counts this registration. */
static struct shunt_circuit_end *end_of(struct shunt_reg *r)
{
	return r->sock->conn ? r->sock->conn->me : NULL;
}

struct member_op {
	struct shunt_reg *r;
	int op;
};

static void member_apply(int fd, void *arg)
{
	struct member_op *m = arg;
	struct epoll_event ev = {
		.events = m->r->events & (EPOLLIN | EPOLLET | EPOLLONESHOT | EPOLLEXCLUSIVE),
		.data.u64 = (uint64_t)(uintptr_t)m->r,
	};

	kctl(m->r->ep->kfd, m->op, fd, m->op == EPOLL_CTL_DEL ? NULL : &ev);
}

/*
 * Add (EPOLL_CTL_ADD) or take out (EPOLL_CTL_DEL) what LISTENER
 * registration @r holds besides the listening socket: the listener's bells,
 * an epoll instance; or with EPOLLEXCLUSIVE, which the kernel refuses on
 * an epoll file, shuntd's doorbell, our session's announce (which counts
 * each channel shuntd makes until it hands it to us, so that a sleeper
 * asks for it) and the bells of the listener's channels this process has,
 * each with the flag. Under the notice lock.
 */
static void listener_members(struct shunt_reg *r, int op)
{
	struct shunt_sock *s = r->sock;
	struct member_op m = { r, op };

	if (!(r->events & EPOLLEXCLUSIVE)) {
		if (s->bells >= 0)
			member_apply(s->bells, &m);
		return;
	}
	if (s->doorbell >= 0)
		member_apply(s->doorbell, &m);
	if (s->announce >= 0)
		member_apply(s->announce, &m);
	if (s->listener)
		shunt_chan_each_bell(s->listener, member_apply, &m);
}

/*
 * Put a registration into the kernel instance as its mode wants. For a
 * LISTENER both the listening socket and its bells carry the
 * registration's address as data: absorb() turns their events back into
 * one event with the application's data. Under the notice lock.
 */
static long install(struct shunt_reg *r)
{
	struct shunt_epoll *ep = r->ep;
	struct epoll_event ev = { .events = r->events, .data = r->data };
	struct shunt_circuit_end *end;
	long e;

	switch (r->mode) {
	case SHUNT_REG_KERNEL:
		return kctl(ep->kfd, EPOLL_CTL_ADD, r->fd, &ev);
	case SHUNT_REG_LISTENER:
		ev.data.u64 = (uint64_t)(uintptr_t)r;
		e = kctl(ep->kfd, EPOLL_CTL_ADD, r->fd, &ev);
		if (e)
			return e;
		listener_members(r, EPOLL_CTL_ADD);
		pthread_mutex_lock(&ep->lock);
		shunt_map_put(&ep->sentinels, (uint64_t)(uintptr_t)r, r);
		pthread_mutex_unlock(&ep->lock);
		return 0;
	case SHUNT_REG_CIRCUIT:
		end = end_of(r);
		/* W1 of shunt_wake: the peer now posts notices for this end. */
		if (end)
			atomic_fetch_add_explicit(&end->evented, 1, memory_order_seq_cst);
		queue_if_ready(r);
		return 0;
	case SHUNT_REG_NESTED:
		/* The kernel checks loops and depth; we check readiness when it fires. */
		ev.data.u64 = (uint64_t)(uintptr_t)r;
		e = kctl(ep->kfd, EPOLL_CTL_ADD, r->fd, &ev);
		if (e)
			return e;
		pthread_mutex_lock(&ep->lock);
		shunt_map_put(&ep->sentinels, (uint64_t)(uintptr_t)r, r);
		pthread_mutex_unlock(&ep->lock);
		shunt_epoll_expose(r->inner);
		return 0;
	}
	return -EINVAL;
}

/* Take a registration out of the kernel instance. Under the notice lock. */
static void uninstall(struct shunt_reg *r)
{
	struct shunt_epoll *ep = r->ep;
	struct shunt_circuit_end *end;

	switch (r->mode) {
	case SHUNT_REG_KERNEL:
		kctl(ep->kfd, EPOLL_CTL_DEL, r->fd, NULL);
		break;
	case SHUNT_REG_LISTENER:
	case SHUNT_REG_NESTED:
		kctl(ep->kfd, EPOLL_CTL_DEL, r->fd, NULL);
		if (r->mode == SHUNT_REG_LISTENER)
			listener_members(r, EPOLL_CTL_DEL);
		/* Events already harvested by another thread must not reach the application. */
		pthread_mutex_lock(&ep->lock);
		shunt_map_put(&ep->sentinels, (uint64_t)(uintptr_t)r, TOMBSTONE);
		pthread_mutex_unlock(&ep->lock);
		break;
	case SHUNT_REG_CIRCUIT:
		end = end_of(r);
		if (end)
			atomic_fetch_sub_explicit(&end->evented, 1, memory_order_relaxed);
		dequeue(r);
		break;
	}
}

/* Update a registration in place (EPOLL_CTL_MOD). Under the notice lock. */
static long modify(struct shunt_reg *r)
{
	struct epoll_event ev = { .events = r->events, .data = r->data };
	long e;

	switch (r->mode) {
	case SHUNT_REG_KERNEL:
		return kctl(r->ep->kfd, EPOLL_CTL_MOD, r->fd, &ev);
	case SHUNT_REG_LISTENER:
		ev.data.u64 = (uint64_t)(uintptr_t)r;
		e = kctl(r->ep->kfd, EPOLL_CTL_MOD, r->fd, &ev);
		/* The kernel modifies no EPOLLEXCLUSIVE registration (EINVAL above). */
		if (!(r->events & EPOLLEXCLUSIVE) && r->sock->bells >= 0) {
			ev.events &= EPOLLIN | EPOLLET | EPOLLONESHOT;
			kctl(r->ep->kfd, EPOLL_CTL_MOD, r->sock->bells, &ev);
		}
		return e;
	case SHUNT_REG_CIRCUIT:
		dequeue(r);
		queue_if_ready(r);
		return 0;
	case SHUNT_REG_NESTED:
		ev.data.u64 = (uint64_t)(uintptr_t)r;
		return kctl(r->ep->kfd, EPOLL_CTL_MOD, r->fd, &ev);
	}
	return -EINVAL;
}

/* The registration of @fd in @ep among a watched object's watchers. */
static struct shunt_reg *find(struct shunt_epoll *ep, struct shunt_list *watchers, int fd)
{
	struct shunt_list *pos, *tmp;

	shunt_list_for_each_safe(pos, tmp, watchers) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, sock_node);

		if (r->ep == ep && r->fd == fd)
			return r;
	}
	return NULL;
}

static void unlink_reg(struct shunt_reg *r)
{
	shunt_list_del(&r->ep_node);
	shunt_list_del(&r->sock_node);
	reg_free(r);
}

/*
 * epoll_ctl for a shunt socket (@s) or a shunt epoll instance (@inner),
 * with the kernel's order of checks.
 */
static int ctl_file(struct shunt_epoll *ep, int op, int fd, struct shunt_sock *s,
		    struct shunt_epoll *inner, struct epoll_event *ev)
{
	struct shunt_list *watchers = s ? &s->watchers : &inner->watchers;
	struct shunt_reg *r;
	long e = 0;

	if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_MOD && op != EPOLL_CTL_DEL)
		return -EINVAL;
	if (op != EPOLL_CTL_DEL && (ev->events & EPOLLEXCLUSIVE) &&
	    (op == EPOLL_CTL_MOD || inner || (ev->events & ~EXCLUSIVE_OK)))
		return -EINVAL;
	pthread_mutex_lock(&shunt_notice_lock);
	r = find(ep, watchers, fd);
	switch (op) {
	case EPOLL_CTL_ADD:
		if (r) {
			e = -EEXIST;
			break;
		}
		r = reg_new();
		if (!r) {
			e = -ENOMEM;
			break;
		}
		r->ep = ep;
		r->sock = s;
		r->inner = inner;
		r->fd = fd;
		r->events = ev->events;
		r->data = ev->data;
		r->armed = true;
		r->mode = s ? mode_of(s) : SHUNT_REG_NESTED;
		shunt_list_add_tail(&ep->regs, &r->ep_node);
		shunt_list_add_tail(watchers, &r->sock_node);
		e = install(r);
		if (e)
			unlink_reg(r);
		break;
	case EPOLL_CTL_MOD:
		if (!r) {
			e = -ENOENT;
		} else if (r->events & EPOLLEXCLUSIVE) {
			e = -EINVAL;
		} else {
			r->events = ev->events;
			r->data = ev->data;
			r->armed = true;
			e = modify(r);
		}
		break;
	case EPOLL_CTL_DEL:
		if (!r) {
			e = -ENOENT;
			break;
		}
		uninstall(r);
		unlink_reg(r);
		break;
	}
	pthread_mutex_unlock(&shunt_notice_lock);
	return (int)e;
}

int shunt_epoll_ctl(struct shunt_epoll *ep, int epfd, int op, int fd, struct epoll_event *ev)
{
	struct shunt_file *f;
	int r;

	/* The kernel reads the event before it looks at the descriptors. */
	if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && !ev)
		return -EFAULT;
	f = fd == epfd ? NULL : shunt_fdt_get_file(fd);
	if (f && f->kind == SHUNT_FILE_URING) {
		shunt_file_put(f);	/* a ring is a kernel descriptor with a record */
		f = NULL;
	}
	if (!f)
		return (int)kctl(epfd, op, fd, ev);	/* kernel descriptors, as asked */
	/* A listener's exclusive sleepers hear of new channels on our session's announce. */
	if (f->kind == SHUNT_FILE_SOCK && op == EPOLL_CTL_ADD && (ev->events & EPOLLEXCLUSIVE))
		shunt_sock_own_announce((struct shunt_sock *)f, fd);
	/* The kernel's registration would be on a recycled half, which a fresh one may replace. */
	if (f->kind == SHUNT_FILE_SOCK && op != EPOLL_CTL_DEL &&
	    (r = shunt_recycle_fresh((struct shunt_sock *)f, fd)) < 0) {
		shunt_file_put(f);
		return r;
	}
	if (f->kind == SHUNT_FILE_SOCK)
		r = ctl_file(ep, op, fd, (struct shunt_sock *)f, NULL, ev);
	else
		r = ctl_file(ep, op, fd, NULL, (struct shunt_epoll *)f, ev);
	shunt_file_put(f);
	return r;
}

void shunt_epoll_sock_changed(struct shunt_sock *s)
{
	struct shunt_list *pos, *tmp;
	struct shunt_reg *exclusive = NULL;

	shunt_list_for_each_safe(pos, tmp, &s->watchers) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, sock_node);

		if (!(r->events & EPOLLEXCLUSIVE)) {
			queue_if_ready(r);
		} else if (!exclusive) {
			/* EPOLLEXCLUSIVE: one of the exclusive instances hears of it. */
			exclusive = r;
			queue_if_ready(r);
		}
	}
	/* The next notice goes to the next exclusive instance, round-robin. */
	if (exclusive) {
		shunt_list_del(&exclusive->sock_node);
		shunt_list_add_tail(&s->watchers, &exclusive->sock_node);
	}
}

void shunt_epoll_sock_moved(struct shunt_sock *s)
{
	struct shunt_list *pos, *tmp;

	pthread_mutex_lock(&shunt_notice_lock);
	shunt_list_for_each_safe(pos, tmp, &s->watchers) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, sock_node);
		enum shunt_reg_mode m = mode_of(s);

		if (m == r->mode)
			continue;
		uninstall(r);
		r->mode = m;
		if (install(r))
			shunt_warn("fd %d: cannot move its epoll registration", r->fd);
	}
	pthread_mutex_unlock(&shunt_notice_lock);
}

void shunt_epoll_sock_bell(struct shunt_sock *s, bool attach)
{
	struct shunt_list *pos;

	pthread_mutex_lock(&shunt_notice_lock);
	shunt_list_for_each(pos, &s->watchers) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, sock_node);

		/* As install() and uninstall() do it for a LISTENER registration. */
		if (r->mode == SHUNT_REG_LISTENER)
			listener_members(r, attach ? EPOLL_CTL_ADD : EPOLL_CTL_DEL);
	}
	pthread_mutex_unlock(&shunt_notice_lock);
}

/* A channel's bell dropped: out of every EPOLLEXCLUSIVE registration of socket @arg. */
static void let_go_bell(int bell, void *arg)
{
	struct shunt_sock *s = arg;
	struct shunt_list *pos;

	shunt_list_for_each(pos, &s->watchers) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, sock_node);
		struct member_op m = { r, EPOLL_CTL_DEL };

		if (r->mode == SHUNT_REG_LISTENER && (r->events & EPOLLEXCLUSIVE))
			member_apply(bell, &m);
	}
}

void shunt_epoll_sock_chans(struct shunt_sock *s)
{
	struct shunt_list *pos;
	uint64_t listener = s->listener;

	if (!listener)
		return;
	pthread_mutex_lock(&shunt_notice_lock);
	shunt_chan_dropped_bells(listener, let_go_bell, s);
	shunt_list_for_each(pos, &s->watchers) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, sock_node);
		struct member_op m = { r, EPOLL_CTL_ADD };

		/* The ones it has already: EEXIST. */
		if (r->mode == SHUNT_REG_LISTENER && (r->events & EPOLLEXCLUSIVE))
			shunt_chan_each_bell(listener, member_apply, &m);
	}
	pthread_mutex_unlock(&shunt_notice_lock);
}

void shunt_epoll_sock_gone(struct shunt_sock *s)
{
	struct shunt_list *pos, *tmp;

	pthread_mutex_lock(&shunt_notice_lock);
	shunt_list_for_each_safe(pos, tmp, &s->watchers) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, sock_node);

		/* A kernel registration outlives our record: the socket is still open. */
		if (r->mode != SHUNT_REG_KERNEL)
			uninstall(r);
		unlink_reg(r);
	}
	pthread_mutex_unlock(&shunt_notice_lock);
}

void shunt_epoll_sock_forget(struct shunt_sock *s)
{
	struct shunt_list *pos, *tmp;

	pthread_mutex_lock(&shunt_notice_lock);
	shunt_list_for_each_safe(pos, tmp, &s->watchers) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, sock_node);

		if (r->mode != SHUNT_REG_KERNEL) {
			uninstall(r);
			/* A fired EPOLLONESHOT stays disarmed, as the kernel keeps only these bits. */
			if (!r->armed)
				r->events &= EPOLLONESHOT | EPOLLET | EPOLLWAKEUP | EPOLLEXCLUSIVE;
			r->mode = SHUNT_REG_KERNEL;
			if (install(r))
				shunt_warn("fd %d: cannot give its epoll registration to the kernel", r->fd);
		}
		unlink_reg(r);
	}
	pthread_mutex_unlock(&shunt_notice_lock);
}

/* shunt_epoll_members for @ep and, recursively, what is nested in it. Under the notice lock. */
static int members(struct shunt_epoll *ep, struct shunt_sock **socks, int *fds, int n, int max)
{
	struct shunt_list *pos;

	shunt_list_for_each(pos, &ep->regs) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, ep_node);

		if (n == max)
			break;
		if (r->mode == SHUNT_REG_NESTED) {
			n = members(r->inner, socks, fds, n, max);
		} else if (r->mode != SHUNT_REG_KERNEL) {
			shunt_file_ref(&r->sock->f);
			socks[n] = r->sock;
			fds[n++] = r->fd;
		}
	}
	return n;
}

int shunt_epoll_members(struct shunt_epoll *ep, struct shunt_sock **socks, int *fds, int max)
{
	int n;

	pthread_mutex_lock(&shunt_notice_lock);
	n = members(ep, socks, fds, 0, max);
	pthread_mutex_unlock(&shunt_notice_lock);
	return n;
}

bool shunt_epoll_kernel_only(struct shunt_epoll *ep)
{
	struct shunt_list *pos;
	bool r = true;

	pthread_mutex_lock(&shunt_notice_lock);
	shunt_list_for_each(pos, &ep->regs)
		if (shunt_container_of(pos, struct shunt_reg, ep_node)->mode != SHUNT_REG_KERNEL)
			r = false;
	pthread_mutex_unlock(&shunt_notice_lock);
	return r;
}

void shunt_epoll_release(struct shunt_epoll *ep)
{
	struct shunt_list *pos, *tmp;

	pthread_mutex_lock(&shunt_notice_lock);
	/* Where it is nested, the kernel drops it with its file; so do our records. */
	shunt_list_for_each_safe(pos, tmp, &ep->watchers) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, sock_node);

		pthread_mutex_lock(&r->ep->lock);
		shunt_map_put(&r->ep->sentinels, (uint64_t)(uintptr_t)r, TOMBSTONE);
		pthread_mutex_unlock(&r->ep->lock);
		unlink_reg(r);
	}
	shunt_list_for_each_safe(pos, tmp, &ep->regs) {
		struct shunt_reg *r = shunt_container_of(pos, struct shunt_reg, ep_node);

		if (r->mode == SHUNT_REG_CIRCUIT)
			uninstall(r);
		unlink_reg(r);
	}
	pthread_mutex_unlock(&shunt_notice_lock);
	ep_free(ep);
}

void shunt_epoll_fork_prepare(void)
{
	pthread_mutex_lock(&pool_lock);
}

void shunt_epoll_fork_parent(void)
{
	pthread_mutex_unlock(&pool_lock);
}

void shunt_epoll_fork_child(void)
{
	pthread_mutex_init(&pool_lock, NULL);
	/* The parent's sleepers are not ours: nobody here sleeps in any of them. */
	for (struct shunt_epoll *ep = ep_all; ep; ep = ep->all_next) {
		pthread_mutex_init(&ep->lock, NULL);
		ep->sleepers = 0;
		shunt_list_init(&ep->asleep_node);
	}
	shunt_epoll_hub_fork_child();
}
