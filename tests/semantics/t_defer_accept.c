// SPDX-License-Identifier: MIT
// TCP_DEFER_ACCEPT: a connection without data is not acceptable (the
// listener does not poll readable, accept says EAGAIN) until its first
// byte arrives, or its FIN, or the timeout runs out, when Linux accepts it
// anyway. The option set before and after listen().
// shunt-expect: shm_connect>=6 shm_accept>=6 kernel_accept==0
// t-timeout: 90
#include "t_harness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <unistd.h>

enum { QUIET_MS = 100 };

static void defer(int fd, int secs)
{
	if (setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof(secs)) < 0)
		t_fatal("TCP_DEFER_ACCEPT");
}

static int listener(int family, int secs, bool after_listen, struct t_addr *a)
{
	int lfd = t_socket(family, SOCK_STREAM), v = -1;
	socklen_t len = sizeof(v);

	t_addr_make(a, family == AF_INET ? "127.0.0.1" : "::1", 0);
	if (!after_listen)
		defer(lfd, secs);
	if (bind(lfd, (struct sockaddr *)&a->ss, a->len) < 0 || listen(lfd, 8) < 0)
		t_fatal("bind/listen");
	if (after_listen)
		defer(lfd, secs);
	*a = t_sockname(lfd);
	T_REPORT("getsockopt(TCP_DEFER_ACCEPT)",
		 getsockopt(lfd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &v, &len));
	printf("  value %d\n", v);
	t_set_nonblock(lfd, true);
	return lfd;
}

static void not_yet(const char *what, int lfd)
{
	t_sleep_ms(QUIET_MS);
	t_expect(t_poll1(lfd, POLLIN, 0) == 0, "%s: the listener is not readable", what);
	T_REPORT("  accept", accept(lfd, NULL, NULL));
}

static void with_data(int family, bool after_listen)
{
	struct t_addr a;
	int lfd = listener(family, 30, after_listen, &a), c, s;
	char buf[8];

	printf("-- data, %s, set %s listen\n", family == AF_INET ? "IPv4" : "IPv6",
	       after_listen ? "after" : "before");
	c = t_connect(&a);
	not_yet("connected, no data", lfd);
	T_REPORT("send(c, \"abc\")", send(c, "abc", 3, 0));
	printf("  listener poll: %s\n", t_poll_str(t_wait_event(lfd, POLLIN)));
	s = T_REPORT_FD("accept", accept(lfd, NULL, NULL));
	if (s < 0)
		t_fatal("accept");
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	close(s);
	close(c);

	// A client that closes without sending: its FIN completes the connection.
	c = t_connect(&a);
	not_yet("connected again, no data", lfd);
	T_REPORT("shutdown(c, SHUT_WR)", shutdown(c, SHUT_WR));
	printf("  listener poll: %s\n", t_poll_str(t_wait_event(lfd, POLLIN)));
	s = T_REPORT_FD("accept", accept(lfd, NULL, NULL));
	if (s < 0)
		t_fatal("accept");
	t_wait_event(s, POLLIN);
	T_REPORT("recv(s) at EOF", recv(s, buf, sizeof(buf), 0));
	close(s);
	close(c);
	close(lfd);
}

// No data at all: accepted once the deferral (1 s) is over.
static void timeout(int family)
{
	struct t_addr a;
	int lfd = listener(family, 1, false, &a), c, s;
	struct pollfd p = { .fd = lfd, .events = POLLIN };
	char buf[8];

	printf("-- timeout, %s\n", family == AF_INET ? "IPv4" : "IPv6");
	c = t_connect(&a);
	not_yet("connected, no data", lfd);
	t_expect(poll(&p, 1, 10000) == 1, "the listener becomes readable within 10 s");
	s = T_REPORT_FD("accept", accept(lfd, NULL, NULL));
	if (s < 0)
		t_fatal("accept");
	T_REPORT("recv(s, MSG_DONTWAIT)", recv(s, buf, sizeof(buf), MSG_DONTWAIT));
	T_REPORT("send(c, \"late\")", send(c, "late", 4, 0));
	t_wait_inq(s, 4);
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	close(s);
	close(c);
	close(lfd);
}

int main(void)
{
	t_start(80);
	with_data(AF_INET, false);
	with_data(AF_INET, true);
	with_data(AF_INET6, false);
	timeout(AF_INET);
	return t_finish();
}
