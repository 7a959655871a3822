// SPDX-License-Identifier: MIT
// epoll on TCP sockets and listeners: level-triggered reports while ready,
// edge-triggered once per arrival (also without draining), MOD re-arms,
// EPOLLONESHOT disables until MOD (even for errors), EPOLLOUT edges after a
// full send buffer, EPOLLRDHUP; user data comes back exactly.
// shunt-expect: shm_connect>=4 shm_accept>=4 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

enum {
	QUIET_MS = 50,
	MAX_EV = 8,
};

static const uint64_t DATA_C = 0xfedcba9876543210ULL, DATA_L = 0x8000000000000001ULL;

// epoll_wait with `timeout_ms`; prints every event with its data.
static int show(const char *label, int ep, int timeout_ms)
{
	struct epoll_event ev[MAX_EV];
	int n = t_epoll_wait_sorted(ep, ev, MAX_EV, timeout_ms);

	printf("%s: %d", label, n);
	for (int i = 0; i < n; i++)
		printf(" [%#llx %s]", (unsigned long long)ev[i].data.u64,
		       t_epoll_str(ev[i].events));
	printf("\n");
	return n;
}

static void ctl(const char *label, int ep, int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	T_REPORT(label, epoll_ctl(ep, op, fd, &ev));
}

static void recv_some(int fd, size_t n)
{
	char buf[64];

	T_REPORT_DATA("recv(tcp_c)", recv(fd, buf, n, 0), buf);
}

static void level(int ep, int c, int s)
{
	printf("-- level-triggered\n");
	ctl("ADD tcp_c EPOLLIN", ep, EPOLL_CTL_ADD, c, EPOLLIN, DATA_C);
	show("idle", ep, 0);
	T_REPORT("send(tcp_s, \"ab\")", send(s, "ab", 2, 0));
	t_wait_inq(c, 2);
	show("2 bytes queued", ep, 0);
	show("again", ep, 0);
	recv_some(c, 1);
	show("1 byte left", ep, 0);
	recv_some(c, 1);
	show("drained", ep, 0);
}

static void edge(int ep, int c, int s)
{
	printf("-- edge-triggered\n");
	ctl("MOD tcp_c EPOLLIN|EPOLLET", ep, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLET, DATA_C);
	show("idle", ep, 0);
	T_REPORT("send(tcp_s, \"abc\")", send(s, "abc", 3, 0));
	t_wait_inq(c, 3);
	show("3 bytes arrived", ep, 0);
	show("again", ep, 0);
	recv_some(c, 1);
	show("after a partial read", ep, 0);
	T_REPORT("send(tcp_s, \"d\")", send(s, "d", 1, 0));
	t_wait_inq(c, 3);
	show("1 more byte arrived, 2 unread", ep, 0);
	show("again", ep, 0);
	ctl("MOD tcp_c EPOLLIN|EPOLLET (unchanged)", ep, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLET,
	    DATA_C);
	show("after MOD with data unread", ep, 0);
	show("again", ep, 0);
	recv_some(c, 16);
	show("drained", ep, 0);

	printf("-- edge-triggered, EPOLLIN|EPOLLOUT\n");
	ctl("MOD tcp_c EPOLLIN|EPOLLOUT|EPOLLET", ep, EPOLL_CTL_MOD, c,
	    EPOLLIN | EPOLLOUT | EPOLLET, DATA_C);
	show("writable", ep, 0);
	show("again", ep, 0);
	T_REPORT("send(tcp_s, \"e\")", send(s, "e", 1, 0));
	t_wait_inq(c, 1);
	show("data arrived", ep, 0);
	show("again", ep, 0);
	recv_some(c, 16);
	show("drained", ep, 0);
	T_REPORT("send(tcp_c, \"to s\")", send(c, "to s", 4, 0));
	t_wait_inq(s, 4);
	show("after tcp_c sent", ep, 0);
	{
		char buf[8];

		T_REPORT_DATA("recv(tcp_s)", recv(s, buf, sizeof(buf), 0), buf);
	}
}

// Fill tcp_c's buffers until a poll for POLLOUT stays quiet.
static long fill(int c)
{
	static char chunk[65536];
	long total = 0;
	ssize_t n;

	t_set_nonblock(c, true);
	do {
		while ((n = send(c, chunk, sizeof(chunk), 0)) > 0)
			total += n;
		if (errno != EAGAIN)
			t_fatal("send");
	} while (t_poll1(c, POLLOUT, QUIET_MS));
	t_set_nonblock(c, false);
	return total;
}

static void drain(int s, long total)
{
	static char sink[65536];
	long got = 0;
	ssize_t n;

	while (got < total) {
		n = recv(s, sink, sizeof(sink), 0);
		if (n <= 0)
			t_fatal("drain");
		got += n;
	}
}

// Empty the ready list: several acks may each have queued an edge.
static void settle(int ep)
{
	struct epoll_event ev[MAX_EV];

	t_sleep_ms(QUIET_MS);
	while (epoll_wait(ep, ev, MAX_EV, 0) > 0)
		;
}

static void edge_out(int ep, int c, int s)
{
	struct epoll_event ev[MAX_EV];
	long total;
	int n;

	printf("-- edge-triggered EPOLLOUT and a full send buffer\n");
	ctl("MOD tcp_c EPOLLOUT|EPOLLET", ep, EPOLL_CTL_MOD, c, EPOLLOUT | EPOLLET, DATA_C);
	show("writable", ep, 0);
	total = fill(c);
	settle(ep);
	show("send buffer full", ep, 0);
	drain(s, total);
	n = t_epoll_wait_sorted(ep, ev, MAX_EV, T_WAIT_MS);
	t_expect(n == 1 && ev[0].data.u64 == DATA_C && (ev[0].events & EPOLLOUT),
		 "after the peer drained it: an EPOLLOUT edge");
	settle(ep);
	show("settled", ep, 0);
}

static void oneshot(int ep, int c, int s)
{
	printf("-- EPOLLONESHOT\n");
	ctl("MOD tcp_c EPOLLIN|EPOLLONESHOT", ep, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLONESHOT, DATA_C);
	show("idle", ep, 0);
	T_REPORT("send(tcp_s, \"f\")", send(s, "f", 1, 0));
	t_wait_inq(c, 1);
	show("1 byte arrived", ep, 0);
	show("again (disarmed)", ep, 0);
	T_REPORT("send(tcp_s, \"g\")", send(s, "g", 1, 0));
	t_wait_inq(c, 2);
	show("more data (disarmed)", ep, 0);
	ctl("ADD tcp_c again", ep, EPOLL_CTL_ADD, c, EPOLLIN, DATA_C);
	ctl("MOD tcp_c EPOLLIN|EPOLLONESHOT (re-arm)", ep, EPOLL_CTL_MOD, c,
	    EPOLLIN | EPOLLONESHOT, DATA_C + 1);
	show("re-armed with data unread", ep, 0);
	show("again", ep, 0);
	recv_some(c, 16);
	ctl("MOD tcp_c EPOLLIN|EPOLLONESHOT|EPOLLET", ep, EPOLL_CTL_MOD, c,
	    EPOLLIN | EPOLLONESHOT | EPOLLET, DATA_C + 2);
	show("idle", ep, 0);
	T_REPORT("send(tcp_s, \"h\")", send(s, "h", 1, 0));
	t_wait_inq(c, 1);
	show("1 byte arrived", ep, 0);
	T_REPORT("send(tcp_s, \"i\")", send(s, "i", 1, 0));
	t_wait_inq(c, 2);
	show("another byte (disarmed)", ep, 0);
	recv_some(c, 16);
}

// A disarmed EPOLLONESHOT entry does not even report a reset.
static void oneshot_reset(int ep)
{
	int c, s;

	printf("-- EPOLLONESHOT, then the peer resets\n");
	t_pair(AF_INET, &c, &s);
	ctl("ADD tcp_c EPOLLIN|EPOLLONESHOT", ep, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLONESHOT,
	    DATA_C + 3);
	T_REPORT("send(tcp_s, \"j\")", send(s, "j", 1, 0));
	t_wait_inq(c, 1);
	show("1 byte arrived", ep, 0);
	T_REPORT("send(tcp_c, \"k\")", send(c, "k", 1, 0));
	t_wait_inq(s, 1);
	T_REPORT("close(tcp_s) with data unread", close(s));
	t_wait_event(c, POLLERR);
	show("reset (disarmed)", ep, 0);
	ctl("MOD tcp_c 0|EPOLLONESHOT (re-arm, no events)", ep, EPOLL_CTL_MOD, c, EPOLLONESHOT,
	    DATA_C + 4);
	show("re-armed", ep, 0);
	show("again", ep, 0);
	ctl("DEL tcp_c", ep, EPOLL_CTL_DEL, c, 0, 0);
	close(c);
}

static void rdhup(int ep)
{
	char buf[8];
	int c, s;

	printf("-- EPOLLRDHUP, edge-triggered\n");
	t_pair(AF_INET, &c, &s);
	ctl("ADD tcp_c EPOLLIN|EPOLLRDHUP|EPOLLET", ep, EPOLL_CTL_ADD, c,
	    EPOLLIN | EPOLLRDHUP | EPOLLET, DATA_C + 5);
	show("idle", ep, 0);
	T_REPORT("send(tcp_s, \"l\")", send(s, "l", 1, 0));
	T_REPORT("shutdown(tcp_s, SHUT_WR)", shutdown(s, SHUT_WR));
	t_wait_event(c, POLLRDHUP);
	show("data and FIN arrived", ep, 0);
	show("again", ep, 0);
	T_REPORT_DATA("recv(tcp_c)", recv(c, buf, sizeof(buf), 0), buf);
	T_REPORT("recv(tcp_c) at EOF", recv(c, buf, sizeof(buf), 0));
	show("read to EOF", ep, 0);
	T_REPORT("shutdown(tcp_c, SHUT_WR)", shutdown(c, SHUT_WR));
	t_wait_event(s, POLLRDHUP);
	t_sleep_ms(QUIET_MS);
	show("own SHUT_WR too", ep, 0);
	show("again", ep, 0);
	ctl("DEL tcp_c", ep, EPOLL_CTL_DEL, c, 0, 0);
	close(c);
	close(s);
}

static void listener(int ep)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 8, &a), c[3], s;

	printf("-- listener, level-triggered\n");
	ctl("ADD listener EPOLLIN", ep, EPOLL_CTL_ADD, lfd, EPOLLIN, DATA_L);
	show("empty", ep, 0);
	c[0] = t_connect(&a);
	c[1] = t_connect(&a);
	t_wait_event(lfd, POLLIN);
	t_sleep_ms(QUIET_MS);
	show("2 connections queued", ep, 0);
	s = t_accept(lfd);
	close(s);
	show("1 accepted", ep, 0);
	s = t_accept(lfd);
	close(s);
	show("both accepted", ep, 0);

	printf("-- listener, edge-triggered\n");
	ctl("MOD listener EPOLLIN|EPOLLET", ep, EPOLL_CTL_MOD, lfd, EPOLLIN | EPOLLET, DATA_L);
	show("empty", ep, 0);
	close(c[0]);
	close(c[1]);
	c[0] = t_connect(&a);
	c[1] = t_connect(&a);
	t_wait_event(lfd, POLLIN);
	t_sleep_ms(QUIET_MS);
	show("2 connections queued", ep, 0);
	show("again", ep, 0);
	close(t_accept(lfd));
	show("1 accepted", ep, 0);
	c[2] = t_connect(&a);
	t_sleep_ms(QUIET_MS);
	show("a third connection queued", ep, 0);
	close(t_accept(lfd));
	close(t_accept(lfd));
	show("all accepted", ep, 0);
	ctl("DEL listener", ep, EPOLL_CTL_DEL, lfd, 0, 0);
	for (int i = 0; i < 3; i++)
		close(c[i]);
	close(lfd);
}

int main(void)
{
	int ep, c, s;

	t_start(30);
	signal(SIGPIPE, SIG_IGN);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		t_fatal("epoll_create1");
	t_pair(AF_INET, &c, &s);
	level(ep, c, s);
	edge(ep, c, s);
	edge_out(ep, c, s);
	oneshot(ep, c, s);
	ctl("DEL tcp_c", ep, EPOLL_CTL_DEL, c, 0, 0);
	close(c);
	close(s);
	oneshot_reset(ep);
	rdhup(ep);
	listener(ep);
	close(ep);
	return t_finish();
}
