// SPDX-License-Identifier: MIT
/* Where a blocking accept() sleeps: see listenwait.h. */
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "common/sys.h"
#include "preload/chan.h"
#include "preload/fdlimit.h"
#include "preload/listenwait.h"
#include "preload/seccomp.h"
#include "preload/sock.h"
#include "preload/util.h"

/*
 * The epoll data of what the instance holds, each edge-triggered: a
 * level-triggered entry is put back on the ready list by the sleeper that
 * takes it, which then wakes the next sleeper if the entry is still
 * readable, and that one the next: every sleeper in turn, until the first
 * has accepted. An edge (a client's ring, a connection in the kernel's
 * queue) wakes one sleeper; the baton, an eventfd, is rung by a sleeper
 * that took one connection of several, for the next.
 */
enum {
	KERNEL_SLOT = 0,	/* p[0] */
	BELLS_SLOT = 1,		/* p[1] */
	BATON_SLOT = 2,		/* p[1] too: look at the bells */
	SMALL_LIMIT = 1024,	/* descriptors, below which none is spent on speed */
};

/* A ppoll() that only looks. */
static const struct timespec look_only = { 0, 0 };

void shunt_listen_wait_close(struct shunt_sock *s)
{
	int ep = s->accept_ep, baton = s->accept_baton;

	/* Unpublished first: a wait that starts now ppolls. */
	s->accept_ep = s->accept_bells = s->accept_baton = -1;
	if (ep >= 0)
		shunt_close_hidden(ep);
	if (baton >= 0)
		shunt_close_hidden(baton);
}

/* Put @fd in instance @ep as @slot, readable. */
static int add(int ep, int fd, uint32_t slot)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u32 = slot };

	return (int)shunt_syscall(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, fd, &ev);
}

void shunt_listen_wait_open(struct shunt_sock *s, int fd)
{
	int ep, baton;

	shunt_listen_wait_close(s);
	/*
	 * A filter may forbid what the instance takes; and without a reserve
	 * above the program's descriptor limit its two descriptors are the
	 * program's, which a small limit cannot spare. accept() ppolls then.
	 */
	if (s->bells < 0 || shunt_seccomp_active() ||
	    (shunt_fdlimit_reserve_start() == LONG_MAX && shunt_fdlimit_open_max() < SMALL_LIMIT))
		return;
	ep = (int)shunt_syscall(SYS_epoll_create1, EPOLL_CLOEXEC);
	if (ep >= 0)
		ep = shunt_fd_hide(ep);
	if (ep < 0)
		return;
	baton = (int)shunt_syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (baton >= 0)
		baton = shunt_fd_hide(baton);
	if (baton < 0) {
		shunt_close_hidden(ep);
		return;
	}
	/*
	 * The kernel socket stays in it while the socket lives, whichever
	 * descriptor of it was closed: an epoll registration goes with the
	 * file, not with the number it was made under.
	 */
	s->accept_ep = ep;
	s->accept_baton = baton;
	if (add(ep, fd, KERNEL_SLOT) < 0 || add(ep, s->bells, BELLS_SLOT) < 0 ||
	    add(ep, baton, BATON_SLOT) < 0) {
		shunt_listen_wait_close(s);
		return;
	}
	s->accept_bells = s->bells;
}

void shunt_listen_wait_rebell(struct shunt_sock *s, int old, int bell)
{
	if (s->accept_ep < 0)
		return;
	s->accept_bells = -1;
	if (shunt_seccomp_active())
		return;
	/*
	 * A process forked from ours may have moved the instance on first
	 * (ENOENT, EEXIST). Sleepers in it sleep on the new bells from now on,
	 * so the old ones ringing for good (relisten.c) need not reach them.
	 */
	(void)!shunt_syscall(SYS_epoll_ctl, s->accept_ep, EPOLL_CTL_DEL, old, NULL);
	if (bell >= 0 && (add(s->accept_ep, bell, BELLS_SLOT) == 0 || errno == EEXIST))
		s->accept_bells = bell;
}

/* @tsp in milliseconds for epoll_wait(), rounded up: a sleep never ends early. */
static int millis(const struct timespec *tsp)
{
	if (!tsp)
		return -1;
	if (tsp->tv_sec >= INT_MAX / 1000 - 1)
		return INT_MAX;
	return (int)(tsp->tv_sec * 1000 + (tsp->tv_nsec + 999999) / 1000000);
}

int shunt_listen_wait(struct shunt_sock *s, struct pollfd p[2], const struct timespec *tsp,
		      bool *shared)
{
	struct epoll_event ev[3];
	int ep = atomic_load_explicit(&s->accept_ep, memory_order_relaxed), n;

	*shared = false;
	/* Without the bells (they ring for nothing), or ones it does not hold. */
	if (ep < 0 || p[1].fd < 0 ||
	    p[1].fd != atomic_load_explicit(&s->accept_bells, memory_order_relaxed) ||
	    shunt_seccomp_active())
		return (int)shunt_syscall(SYS_ppoll, p, 2, tsp, NULL, 8);
	n = (int)shunt_syscall(SYS_epoll_pwait, ep, ev, 3, millis(tsp), NULL, 8);
	if (n < 0 && errno != EINTR)
		return (int)shunt_syscall(SYS_ppoll, p, 2, tsp, NULL, 8);
	if (n <= 0)
		return n;	/* a signal, or the time is up */
	*shared = true;
	/*
	 * What to do is what is there now, not the edge that woke us: the
	 * baton says only "look", and a shut-down listener its hang-up once.
	 */
	return (int)shunt_syscall(SYS_ppoll, p, 2, &look_only, NULL, 8);
}

void shunt_listen_wait_pass(struct shunt_sock *s, int kfd, int bells)
{
	struct pollfd p[2] = { { kfd, POLLIN, 0 }, { bells, POLLIN, 0 } };
	uint64_t one = 1;
	int baton = atomic_load_explicit(&s->accept_baton, memory_order_relaxed);

	if (baton < 0 || bells != atomic_load_explicit(&s->accept_bells, memory_order_relaxed))
		return;
	/* Queued in our channels (shared memory says so), in the kernel, or on the bells. */
	if (!shunt_chan_pending(s->listener) &&
	    shunt_syscall(SYS_ppoll, p, 2, &look_only, NULL, 8) <= 0)
		return;
	(void)!shunt_syscall(SYS_write, baton, &one, sizeof(one));
}
