// SPDX-License-Identifier: MIT
// epoll registrations made through io_uring (IORING_OP_EPOLL_CTL), as libuv
// 1.45+ makes them: a connected pair and a listener added, modified and
// deleted in batches (EEXIST, ENOENT, EBADF, EINVAL, EFAULT among them),
// linked entries and skipped successes, an instance nested through the
// ring, then ping-pong through epoll_wait; the NO_SQARRAY layout with
// libuv's EEXIST-then-MOD retry; and an SQPOLL ring.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_uring.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static int c, s, lfd, fresh, dead;
static struct t_addr laddr;

static struct epoll_event ev(uint32_t events, uint64_t data)
{
	return (struct epoll_event){ .events = events, .data.u64 = data };
}

static const char *label(int fd)
{
	return fd == c ? "c" : fd == s ? "s" : fd == lfd ? "listener" : "?";
}

// epoll_wait and print what came: "  data <d>: <events>".
static void wait_print(int ep, int timeout_ms, bool by_fd)
{
	struct epoll_event evs[8];
	int n = t_epoll_wait_sorted(ep, evs, 8, timeout_ms);

	printf("  epoll_wait = %d\n", n);
	for (int i = 0; i < n; i++) {
		if (by_fd)
			printf("    %s: %s\n", label(evs[i].data.fd), t_epoll_str(evs[i].events));
		else
			printf("    data %llu: %s\n", (unsigned long long)evs[i].data.u64,
			       t_epoll_str(evs[i].events));
	}
}

static void say(int fd, const char *what)
{
	T_REPORT("send", send(fd, what, strlen(what), 0));
}

static void hear(int fd)
{
	char buf[64] = { 0 };

	T_REPORT_DATA("recv", recv(fd, buf, sizeof(buf) - 1, 0), buf);
}

static struct t_ring open_plain(void)
{
	struct io_uring_params p = { 0 };
	struct t_ring r;
	int e = t_ring_open(&r, 64, &p);

	if (e == -ENOSYS || e == -EPERM)
		t_skip("io_uring_setup: %s (io_uring disabled here)", t_errname(-e));
	if (e < 0)
		t_fatal("io_uring_setup: %s", t_errname(-e));
	return r;
}

static void batch(struct t_ring *r, int ep)
{
	static struct epoll_event e[12];

	printf("-- one batch, as libuv flushes its epoll_ctl queue\n");
	e[1] = ev(EPOLLIN, 1);
	e[2] = ev(EPOLLIN, 2);
	e[3] = ev(EPOLLIN, 3);
	e[4] = ev(EPOLLIN, 1);
	e[5] = ev(EPOLLIN, 5);
	e[6] = ev(EPOLLIN, 6);
	t_ring_epoll_ctl(r, 1, ep, EPOLL_CTL_ADD, c, &e[1]);
	t_ring_epoll_ctl(r, 2, ep, EPOLL_CTL_ADD, s, &e[2]);
	t_ring_epoll_ctl(r, 3, ep, EPOLL_CTL_ADD, lfd, &e[3]);
	t_ring_epoll_ctl(r, 4, ep, EPOLL_CTL_ADD, c, &e[4]);		// EEXIST
	t_ring_epoll_ctl(r, 5, ep, EPOLL_CTL_MOD, fresh, &e[5]);	// ENOENT
	t_ring_epoll_ctl(r, 6, ep, EPOLL_CTL_ADD, dead, &e[6]);		// EBADF
	t_ring_epoll_ctl(r, 7, ep, EPOLL_CTL_ADD, -1, &e[6]);		// EBADF
	t_ring_epoll_ctl(r, 8, ep, 99, s, &e[6]);			// EINVAL
	// EFAULT while prepared: the kernel stops submitting there, so the
	// next two go with the next io_uring_enter (after the ping-pong).
	t_ring_epoll_ctl(r, 9, ep, EPOLL_CTL_ADD, c, NULL);
	t_ring_epoll_ctl(r, 10, ep, EPOLL_CTL_DEL, c, NULL);
	t_ring_epoll_ctl(r, 11, ep, EPOLL_CTL_ADD, ep, &e[6]);		// EINVAL
	t_ring_submit(r, 11);
	t_ring_print(r);
}

static void ping_pong(int ep)
{
	printf("-- ping-pong through epoll_wait\n");
	for (int i = 0; i < 3; i++) {
		say(c, i ? "ping again" : "ping");
		wait_print(ep, T_WAIT_MS, false);
		hear(s);
		say(s, "pong");
		wait_print(ep, T_WAIT_MS, false);
		hear(c);
	}
}

static void mod_del(struct t_ring *r, int ep)
{
	static struct epoll_event e[3];

	printf("-- MOD and DEL\n");
	e[0] = ev(EPOLLIN | EPOLLOUT, 2);
	e[1] = ev(EPOLLIN, 2);
	t_ring_epoll_ctl(r, 20, ep, EPOLL_CTL_MOD, s, &e[0]);
	t_ring_epoll_ctl(r, 21, ep, EPOLL_CTL_DEL, c, NULL);
	t_ring_submit(r, 2);
	t_ring_print(r);
	wait_print(ep, T_WAIT_MS, false);
	say(s, "to a deleted one");
	t_wait_inq(c, 16);
	wait_print(ep, T_WAIT_MS, false);
	hear(c);
	t_ring_epoll_ctl(r, 22, ep, EPOLL_CTL_MOD, s, &e[1]);
	t_ring_submit(r, 1);
	t_ring_print(r);
	wait_print(ep, 0, false);
}

static void listener(int ep)
{
	int nc, a;

	printf("-- a connection for the listener\n");
	nc = t_connect(&laddr);
	wait_print(ep, T_WAIT_MS, false);
	a = T_REPORT_FD("accept", accept(lfd, NULL, NULL));
	wait_print(ep, 0, false);
	close(nc);
	close(a);
}

static void links(struct t_ring *r, int ep)
{
	static struct epoll_event e[2];
	struct io_uring_sqe *sqe;

	printf("-- linked entries, skipped successes\n");
	e[0] = ev(EPOLLIN, 1);
	e[1] = ev(EPOLLIN | EPOLLRDHUP, 1);
	sqe = t_ring_epoll_ctl(r, 30, ep, EPOLL_CTL_ADD, c, &e[0]);
	sqe->flags = IOSQE_IO_LINK;
	t_ring_epoll_ctl(r, 31, ep, EPOLL_CTL_MOD, c, &e[1]);
	sqe = t_ring_epoll_ctl(r, 32, ep, EPOLL_CTL_ADD, c, &e[0]);	// EEXIST
	sqe->flags = IOSQE_IO_LINK;
	t_ring_epoll_ctl(r, 33, ep, EPOLL_CTL_MOD, c, &e[0]);		// ECANCELED
	sqe = t_ring_epoll_ctl(r, 34, ep, EPOLL_CTL_MOD, c, &e[0]);	// no completion
	sqe->flags = IOSQE_CQE_SKIP_SUCCESS;
	sqe = t_ring_epoll_ctl(r, 35, ep, EPOLL_CTL_MOD, fresh, &e[0]);	// ENOENT
	sqe->flags = IOSQE_CQE_SKIP_SUCCESS;
	t_ring_submit(r, 5);
	t_ring_print(r);
	say(s, "after the links");
	wait_print(ep, T_WAIT_MS, false);
	hear(c);
}

static void nested(struct t_ring *r, int ep)
{
	static struct epoll_event e = { .events = EPOLLIN, .data.u64 = 99 };
	int outer = epoll_create1(EPOLL_CLOEXEC);

	printf("-- an instance nested in another through the ring\n");
	t_ring_epoll_ctl(r, 40, outer, EPOLL_CTL_ADD, ep, &e);
	t_ring_submit(r, 1);
	t_ring_print(r);
	wait_print(outer, 0, false);
	say(c, "to the inner one");
	wait_print(outer, T_WAIT_MS, false);
	hear(s);
	t_ring_epoll_ctl(r, 41, outer, EPOLL_CTL_DEL, ep, NULL);
	t_ring_submit(r, 1);
	t_ring_print(r);
	close(outer);
}

// libuv's uv__epoll_ctl_prep: the entry in the slot the tail names, its
// event in a parallel array, user_data = op | slot << 2 | fd << 32.
static void uv_prep(struct t_ring *r, struct epoll_event *pe, int ep, int op, int fd,
		    struct epoll_event e)
{
	uint32_t slot = r->tail & r->sq_mask;
	struct io_uring_sqe *sqe;

	pe[slot] = e;
	sqe = t_ring_epoll_ctl(r, (uint64_t)op | slot << 2 | (uint64_t)fd << 32, ep, op, fd,
			       &pe[slot]);
	(void)sqe;
}

// libuv's uv__epoll_ctl_flush: submit all, wait for all, retry EEXIST with MOD.
static void uv_flush(struct t_ring *r, struct epoll_event *pe, int ep)
{
	struct epoll_event old[256];
	struct io_uring_cqe cq[64];
	uint32_t n;
	int got;

	t_ring_publish(r);
	n = r->tail - atomic_load(r->sq_head);
	printf("  flush %u: io_uring_enter = %ld\n", n, t_uring_enter(r->fd, n, n,
									IORING_ENTER_GETEVENTS));
	memcpy(old, pe, sizeof(old));
	got = t_ring_reap(r, cq, 64);
	for (int i = 0; i < got; i++) {
		int fd = (int)(cq[i].user_data >> 32), op = (int)(cq[i].user_data & 3);
		uint32_t slot = (uint32_t)(cq[i].user_data >> 2) & 255;

		if (cq[i].res == 0)
			continue;
		printf("  %s op %d: -%s\n", label(fd), op, t_errname(-cq[i].res));
		if (op == EPOLL_CTL_ADD && cq[i].res == -EEXIST)
			uv_prep(r, pe, ep, EPOLL_CTL_MOD, fd, old[slot]);
	}
}

static void no_sqarray(void)
{
	static struct epoll_event pe[256];
	struct io_uring_params p = { .flags = IORING_SETUP_NO_SQARRAY };
	struct epoll_event e = { .events = EPOLLIN };
	struct t_ring r;
	int ep = epoll_create1(EPOLL_CLOEXEC), err;

	printf("-- IORING_SETUP_NO_SQARRAY, as libuv sets its ring up\n");
	err = t_ring_open(&r, 256, &p);
	if (err == -EINVAL) {
		printf("  io_uring_setup: EINVAL (a kernel before 6.6)\n");
		close(ep);
		return;
	}
	if (err < 0)
		t_fatal("io_uring_setup(NO_SQARRAY): %s", t_errname(-err));
	e.data.fd = c;
	uv_prep(&r, pe, ep, EPOLL_CTL_ADD, c, e);
	e.data.fd = s;
	uv_prep(&r, pe, ep, EPOLL_CTL_ADD, s, e);
	uv_flush(&r, pe, ep);
	// A watcher changed before libuv saw its ADD complete: ADD again, EEXIST, MOD.
	e.events = EPOLLIN | EPOLLOUT;
	e.data.fd = c;
	uv_prep(&r, pe, ep, EPOLL_CTL_ADD, c, e);
	uv_flush(&r, pe, ep);
	uv_flush(&r, pe, ep);
	say(s, "no array");
	t_wait_inq(c, 8);
	wait_print(ep, T_WAIT_MS, true);
	hear(c);
	t_ring_close(&r);
	close(ep);
}

static void sqpoll(void)
{
	static struct epoll_event e = { .events = EPOLLIN, .data.u64 = 7 };
	struct io_uring_params p = { .flags = IORING_SETUP_SQPOLL, .sq_thread_idle = 10 };
	struct t_ring r;
	int ep = epoll_create1(EPOLL_CLOEXEC), err;

	printf("-- an SQPOLL ring\n");
	err = t_ring_open(&r, 8, &p);
	if (err < 0) {
		printf("  io_uring_setup(SQPOLL): %s\n", t_errname(-err));
		close(ep);
		return;
	}
	printf("  flags as set up: SQPOLL %s\n", p.flags & IORING_SETUP_SQPOLL ? "yes" : "no");
	t_ring_epoll_ctl(&r, 50, ep, EPOLL_CTL_ADD, s, &e);
	t_ring_publish(&r);
	// As liburing's io_uring_submit: wake the poller only if it sleeps.
	if (atomic_load(r.sq_flags) & IORING_SQ_NEED_WAKEUP)
		t_uring_enter(r.fd, 0, 0, IORING_ENTER_SQ_WAKEUP);
	T_REPORT("io_uring_enter(0, 1, GETEVENTS)", t_uring_enter(r.fd, 0, 1,
								 IORING_ENTER_GETEVENTS));
	t_ring_print(&r);
	say(c, "polled");
	wait_print(ep, T_WAIT_MS, false);
	hear(s);
	t_ring_close(&r);
	close(ep);
}

int main(void)
{
	struct t_ring r;
	int ep;

	t_start(60);
	t_pair(AF_INET, &c, &s);
	lfd = t_listen_loopback(AF_INET, 8, &laddr);
	fresh = t_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC);
	dead = fcntl(c, F_DUPFD_CLOEXEC, 900);
	if (dead < 0)
		t_fatal("F_DUPFD");
	close(dead);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		t_fatal("epoll_create1");
	r = open_plain();

	batch(&r, ep);
	ping_pong(ep);
	mod_del(&r, ep);
	listener(ep);
	links(&r, ep);
	nested(&r, ep);
	t_ring_close(&r);
	no_sqarray();
	sqpoll();
	return t_finish();
}
