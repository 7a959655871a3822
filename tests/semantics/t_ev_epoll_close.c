// SPDX-License-Identifier: MIT
// Registrations and the life of descriptors: closing the last fd of a TCP
// socket removes it from every epoll set, a dup keeps the registration (under
// the old fd number, which DEL and MOD can no longer reach), the same socket
// may be registered under two fds, a reused fd number is a new registration,
// and closing a socket or the epoll fd while another thread waits.
// shunt-expect: shm_connect>=4 shm_accept>=4 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

enum {
	LATER_MS = 30,
	SHORT_MS = 150,
	MAX_EV = 8,
};

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

static int new_epoll(void)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		t_fatal("epoll_create1");
	return ep;
}

static void put(int s, int c, int unread)
{
	T_REPORT("send(tcp_s, \"x\")", send(s, "x", 1, 0));
	t_wait_inq(c, unread);
}

static void closed(void)
{
	int ep = new_epoll(), ep2 = new_epoll(), c, s, other, o_peer, num;

	printf("-- the last fd closed\n");
	t_pair(AF_INET, &c, &s);
	t_pair(AF_INET, &other, &o_peer);
	ctl("ADD tcp_c (0xc1)", ep, EPOLL_CTL_ADD, c, EPOLLIN, 0xc1);
	ctl("ADD tcp_c to a second epoll (0xc2)", ep2, EPOLL_CTL_ADD, c, EPOLLIN, 0xc2);
	put(s, c, 1);
	show("data", ep, 0);
	T_REPORT("close(tcp_c)", close(c));
	show("after close", ep, 0);
	show("second epoll after close", ep2, 0);
	ctl("DEL the closed fd", ep, EPOLL_CTL_DEL, c, 0, 0);
	num = c;
	T_REPORT("dup2(other, the old number)", dup2(other, num) == num ? 0 : -1);
	ctl("ADD the reused number (0xc3)", ep, EPOLL_CTL_ADD, num, EPOLLIN, 0xc3);
	T_REPORT("send(peer of other, \"y\")", send(o_peer, "y", 1, 0));
	t_wait_inq(other, 1);
	show("data on other", ep, 0);
	close(num);
	show("the reused number closed, other still open", ep, 0);
	T_REPORT("close(other)", close(other));
	show("other closed too", ep, 0);
	close(s);
	close(o_peer);
	close(ep);
	close(ep2);
}

static void duplicated(void)
{
	int ep = new_epoll(), c, s, d, num, fresh, f_peer;

	printf("-- a dup keeps the registration\n");
	t_pair(AF_INET, &c, &s);
	ctl("ADD tcp_c (0xd1)", ep, EPOLL_CTL_ADD, c, EPOLLIN, 0xd1);
	d = fcntl(c, F_DUPFD_CLOEXEC, 0);
	if (d < 0)
		t_fatal("dup");
	T_REPORT("close(tcp_c), a dup stays open", close(c));
	put(s, d, 1);
	show("data", ep, 0);
	ctl("MOD the closed fd", ep, EPOLL_CTL_MOD, c, EPOLLIN, 0xd9);
	ctl("DEL the closed fd", ep, EPOLL_CTL_DEL, c, 0, 0);
	ctl("MOD the dup", ep, EPOLL_CTL_MOD, d, EPOLLIN, 0xd9);
	ctl("DEL the dup", ep, EPOLL_CTL_DEL, d, 0, 0);
	ctl("ADD the dup (0xd2)", ep, EPOLL_CTL_ADD, d, EPOLLIN | EPOLLRDHUP, 0xd2);
	show("one socket, two registrations", ep, 0);

	// The old number now names another socket: a registration of its own.
	num = c;
	t_pair(AF_INET, &fresh, &f_peer);
	if (dup2(fresh, num) != num)
		t_fatal("dup2");
	close(fresh);
	ctl("ADD the old number, now another socket (0xd3)", ep, EPOLL_CTL_ADD, num, EPOLLIN, 0xd3);
	ctl("ADD it again", ep, EPOLL_CTL_ADD, num, EPOLLIN, 0xd3);
	show("the first socket's data still unread", ep, 0);
	ctl("DEL the old number (removes the new socket's)", ep, EPOLL_CTL_DEL, num, 0, 0);
	show("after DEL", ep, 0);
	ctl("DEL it again", ep, EPOLL_CTL_DEL, num, 0, 0);
	close(num);
	close(f_peer);

	T_REPORT("close(the dup)", close(d));
	show("the last fd closed", ep, 0);
	close(s);
	close(ep);
}

// A listener behaves the same.
static void listener(void)
{
	struct t_addr a;
	int ep = new_epoll(), lfd = t_listen_loopback(AF_INET, 4, &a), d, c;

	printf("-- a listener\n");
	ctl("ADD listener (0x11)", ep, EPOLL_CTL_ADD, lfd, EPOLLIN, 0x11);
	d = fcntl(lfd, F_DUPFD_CLOEXEC, 0);
	if (d < 0)
		t_fatal("dup");
	T_REPORT("close(listener), a dup stays open", close(lfd));
	c = t_connect(&a);
	t_wait_event(d, POLLIN);
	show("a connection queued", ep, 0);
	close(t_accept(d));
	close(c);
	show("accepted", ep, 0);
	T_REPORT("close(the dup)", close(d));
	show("closed", ep, 0);
	close(ep);
}

// ---- another thread closes while we wait

struct later {
	int fd, s;
	pthread_t th;
};

static void *close_later(void *arg)
{
	struct later *l = arg;

	t_sleep_ms(LATER_MS);
	close(l->fd);
	return NULL;
}

static void *close_then_send(void *arg)
{
	struct later *l = arg;

	t_sleep_ms(LATER_MS);
	close(l->fd);
	t_sleep_ms(LATER_MS);
	t_send_all(l->s, "late", 4);
	return NULL;
}

static void while_waiting(void)
{
	int ep = new_epoll(), c, s;
	struct later l;
	int64_t start;
	char buf[8];

	printf("-- closed while another thread waits\n");
	t_pair(AF_INET, &c, &s);
	ctl("ADD tcp_c (0x21)", ep, EPOLL_CTL_ADD, c, EPOLLIN | EPOLLRDHUP, 0x21);
	l = (struct later){ .fd = c, .s = s };
	if (pthread_create(&l.th, NULL, close_later, &l))
		t_fatal("pthread_create");
	start = t_now_ns();
	show("epoll_wait(150 ms), tcp_c closed by another thread", ep, SHORT_MS);
	pthread_join(l.th, NULL);
	t_expect(t_elapsed_ms(start) >= SHORT_MS - 5, "  waited for the timeout");
	close(s);

	t_pair(AF_INET, &c, &s);
	ctl("ADD tcp_c (0x22)", ep, EPOLL_CTL_ADD, c, EPOLLIN, 0x22);
	l = (struct later){ .fd = ep, .s = s };
	if (pthread_create(&l.th, NULL, close_then_send, &l))
		t_fatal("pthread_create");
	show("epoll_wait(5 s), the epoll fd closed by another thread, then data", ep,
	     T_WAIT_MS);
	pthread_join(l.th, NULL);
	T_REPORT_DATA("recv(tcp_c)", recv(c, buf, sizeof(buf), 0), buf);
	T_REPORT("epoll_wait on the closed epoll fd",
		 epoll_wait(ep, (struct epoll_event[1]){ 0 }, 1, 0));
	close(c);
	close(s);
}

int main(void)
{
	t_start(30);
	closed();
	duplicated();
	listener();
	while_waiting();
	return t_finish();
}
