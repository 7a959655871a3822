// SPDX-License-Identifier: MIT
// Nested epoll with TCP sockets inside: an epoll fd in another epoll (level-
// and edge-triggered, three deep), in poll and in select, woken through the
// nesting; an epoll fd is never writable; an inner edge consumed by the inner
// epoll_wait silences the outer; closing the inner removes it.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

enum {
	LATER_MS = 30,
	MAX_EV = 8,
};

static const uint64_t D_TCP = 0x7c9000000000000cULL, D_INNER = 0x1111111111111111ULL,
		      D_MID = 0x2222222222222222ULL, D_LISTEN = 0x4c4c4c4c4c4c4c4cULL;

static const char *name_of(uint64_t d)
{
	return d == D_TCP ? "tcp_c" : d == D_INNER ? "inner" : d == D_MID ? "middle" :
	       d == D_LISTEN ? "listener" : "?";
}

static int show(const char *label, int ep, int timeout_ms)
{
	struct epoll_event ev[MAX_EV];
	int n = t_epoll_wait_sorted(ep, ev, MAX_EV, timeout_ms);

	printf("%s: %d", label, n);
	for (int i = 0; i < n; i++)
		printf(" [%s %s]", name_of(ev[i].data.u64), t_epoll_str(ev[i].events));
	printf("\n");
	return n;
}

static void ctl(const char *label, int ep, int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	T_REPORT(label, epoll_ctl(ep, op, fd, &ev));
}

static int new_epoll(void)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		t_fatal("epoll_create1");
	return ep;
}

static void poll_report(const char *label, int fd)
{
	printf("%s: poll(POLLIN|POLLOUT) %s,", label, t_poll_str(t_poll1(fd, POLLIN | POLLOUT, 0)));
	printf(" select %s\n", t_select1_str(fd, 0));
}

// Send msg from tcp_s; wait until tcp_c has `unread` bytes queued in all.
static void put(int s, const char *msg, int c, int unread)
{
	char label[64];

	snprintf(label, sizeof(label), "send(tcp_s, \"%s\")", msg);
	T_REPORT(label, send(s, msg, strlen(msg), 0));
	t_wait_inq(c, unread);
}

static void take(int c)
{
	char buf[32];

	T_REPORT_DATA("recv(tcp_c)", recv(c, buf, sizeof(buf), 0), buf);
}

static void two_levels(int c, int s)
{
	int inner = new_epoll(), outer = new_epoll();

	printf("-- inner holds tcp_c, outer holds inner (both level-triggered)\n");
	ctl("ADD tcp_c to inner", inner, EPOLL_CTL_ADD, c, EPOLLIN, D_TCP);
	ctl("ADD inner to outer", outer, EPOLL_CTL_ADD, inner, EPOLLIN, D_INNER);
	show("outer, idle", outer, 0);
	poll_report("inner, idle", inner);
	put(s, "one", c, 3);
	show("outer", outer, 0);
	show("outer again", outer, 0);
	poll_report("inner", inner);
	show("inner", inner, 0);
	show("outer after the inner wait", outer, 0);
	take(c);
	show("outer after the read", outer, 0);
	poll_report("inner after the read", inner);

	printf("-- outer edge-triggered on inner\n");
	ctl("MOD inner in outer EPOLLIN|EPOLLET", outer, EPOLL_CTL_MOD, inner, EPOLLIN | EPOLLET,
	    D_INNER);
	show("outer, idle", outer, 0);
	put(s, "two", c, 3);
	show("outer", outer, 0);
	show("outer again", outer, 0);
	put(s, "three", c, 8);
	show("outer after more data", outer, 0);
	show("outer again", outer, 0);
	take(c);

	printf("-- inner edge-triggered on tcp_c, outer level-triggered\n");
	ctl("MOD inner in outer EPOLLIN", outer, EPOLL_CTL_MOD, inner, EPOLLIN, D_INNER);
	ctl("MOD tcp_c in inner EPOLLIN|EPOLLET", inner, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLET,
	    D_TCP);
	show("outer, idle", outer, 0);
	put(s, "four", c, 4);
	show("outer", outer, 0);
	show("outer again", outer, 0);
	show("inner (consumes the edge)", inner, 0);
	show("outer, data still unread", outer, 0);
	poll_report("inner, data still unread", inner);
	take(c);

	printf("-- EPOLLONESHOT inside\n");
	ctl("MOD tcp_c in inner EPOLLIN|EPOLLONESHOT", inner, EPOLL_CTL_MOD, c,
	    EPOLLIN | EPOLLONESHOT, D_TCP);
	put(s, "five", c, 4);
	show("outer", outer, 0);
	show("inner", inner, 0);
	show("outer, inner entry disarmed", outer, 0);
	take(c);

	printf("-- an epoll fd is never writable\n");
	ctl("MOD inner in outer EPOLLOUT", outer, EPOLL_CTL_MOD, inner, EPOLLOUT, D_INNER);
	ctl("MOD tcp_c in inner EPOLLIN|EPOLLOUT", inner, EPOLL_CTL_MOD, c, EPOLLIN | EPOLLOUT,
	    D_TCP);
	show("inner", inner, 0);
	show("outer (wants EPOLLOUT of inner)", outer, 0);
	ctl("MOD inner in outer EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLPRI", outer, EPOLL_CTL_MOD, inner,
	    EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI, D_INNER);
	show("outer (wants everything)", outer, 0);

	printf("-- closing the inner epoll fd\n");
	T_REPORT("close(inner)", close(inner));
	show("outer", outer, 0);
	ctl("DEL inner (closed) from outer", outer, EPOLL_CTL_DEL, inner, 0, 0);
	close(outer);
}

static void three_levels(int c, int s)
{
	int inner = new_epoll(), middle = new_epoll(), outer = new_epoll();

	printf("-- three levels: outer > middle > inner > tcp_c\n");
	ctl("ADD tcp_c to inner", inner, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLRDHUP, D_TCP);
	ctl("ADD inner to middle", middle, EPOLL_CTL_ADD, inner, EPOLLIN, D_INNER);
	ctl("ADD middle to outer", outer, EPOLL_CTL_ADD, middle, EPOLLIN, D_MID);
	show("outer, idle", outer, 0);
	put(s, "deep", c, 4);
	show("outer", outer, 0);
	show("middle", middle, 0);
	show("inner", inner, 0);
	take(c);
	show("outer after the read", outer, 0);
	close(outer);
	close(middle);
	close(inner);
}

// ---- blocking waits woken through the nesting

struct later {
	int s;
	const struct t_addr *la;
	int queued;
	pthread_t th;
};

static void *send_later(void *arg)
{
	struct later *l = arg;

	t_sleep_ms(LATER_MS);
	t_send_all(l->s, "wake", 4);
	return NULL;
}

static void *connect_later(void *arg)
{
	struct later *l = arg;

	t_sleep_ms(LATER_MS);
	l->queued = t_connect(l->la);
	return NULL;
}

static void start(struct later *l, void *(*fn)(void *))
{
	if (pthread_create(&l->th, NULL, fn, l))
		t_fatal("pthread_create");
}

static void wakeups(int c, int s)
{
	struct t_addr la;
	int lfd = t_listen_loopback(AF_INET, 4, &la);
	int inner = new_epoll(), outer = new_epoll();
	struct later l = { .s = s, .la = &la };
	struct pollfd p[1];
	fd_set rd;

	printf("-- blocking waits woken through the nesting\n");
	ctl("ADD tcp_c to inner", inner, EPOLL_CTL_ADD, c, EPOLLIN, D_TCP);
	ctl("ADD listener to inner", inner, EPOLL_CTL_ADD, lfd, EPOLLIN, D_LISTEN);
	ctl("ADD inner to outer", outer, EPOLL_CTL_ADD, inner, EPOLLIN, D_INNER);

	start(&l, send_later);
	show("outer epoll_wait(no timeout), tcp data later", outer, -1);
	pthread_join(l.th, NULL);
	show("inner", inner, 0);
	take(c);

	start(&l, connect_later);
	show("outer epoll_wait(no timeout), a connection later", outer, -1);
	pthread_join(l.th, NULL);
	show("inner", inner, 0);
	close(t_accept(lfd));
	close(l.queued);

	// One epoll fd per poll: which of two wakes first is a race.
	p[0] = (struct pollfd){ .fd = outer, .events = POLLIN };
	start(&l, send_later);
	T_REPORT("poll(outer; no timeout), tcp data later", poll(p, 1, -1));
	pthread_join(l.th, NULL);
	printf("  outer %s\n", t_poll_str(p[0].revents));
	show("inner after poll (poll consumes nothing)", inner, 0);
	take(c);
	p[0] = (struct pollfd){ .fd = inner, .events = POLLIN | POLLOUT | POLLPRI };
	start(&l, send_later);
	T_REPORT("poll(inner; no timeout), tcp data later", poll(p, 1, -1));
	pthread_join(l.th, NULL);
	printf("  inner %s\n", t_poll_str(p[0].revents));
	take(c);

	FD_ZERO(&rd);
	FD_SET(outer, &rd);
	start(&l, send_later);
	T_REPORT("select(outer; no timeout), tcp data later",
		 select(outer + 1, &rd, NULL, NULL, NULL));
	pthread_join(l.th, NULL);
	printf("  outer readable: %d\n", FD_ISSET(outer, &rd));
	take(c);
	close(outer);
	close(inner);
	close(lfd);
}

int main(void)
{
	int c, s;

	t_start(30);
	t_pair(AF_INET, &c, &s);
	two_levels(c, s);
	three_levels(c, s);
	wakeups(c, s);
	close(c);
	close(s);
	return t_finish();
}
