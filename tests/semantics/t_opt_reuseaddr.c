// SPDX-License-Identifier: MIT
// getsockopt(SO_REUSEADDR) reads back what the program set, on every kind of
// socket: fresh, listening, connected (client and accepted, which inherits
// the listener's), in progress, and after a connection ended.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_accept==0
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <unistd.h>

enum { QUIET_MS = 50 };

static void show(const char *label, int fd)
{
	int v = -1;
	socklen_t len = sizeof(v);

	T_REPORT(label, getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &v, &len));
	printf("  value %d len %u\n", v, (unsigned)len);
}

static void set(int fd, int v)
{
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &v, sizeof(v)) < 0)
		t_fatal("setsockopt(SO_REUSEADDR)");
}

static void run(int family, bool listener_reuse, bool client_reuse)
{
	struct t_addr a;
	int lfd = t_socket(family, SOCK_STREAM), c, s;

	printf("-- %s, listener %d, client %d\n", family == AF_INET ? "IPv4" : "IPv6",
	       listener_reuse, client_reuse);
	show("fresh socket", lfd);
	if (listener_reuse)
		set(lfd, 1);
	t_addr_make(&a, family == AF_INET ? "127.0.0.1" : "::1", 0);
	if (bind(lfd, (struct sockaddr *)&a.ss, a.len) < 0 || listen(lfd, 4) < 0)
		t_fatal("bind/listen");
	a = t_sockname(lfd);
	show("listener", lfd);
	c = t_socket(family, SOCK_STREAM);
	if (client_reuse)
		set(c, 1);
	show("client before connect", c);
	if (connect(c, (struct sockaddr *)&a.ss, a.len) < 0)
		t_fatal("connect");
	s = t_accept(lfd);
	show("client, connected", c);
	show("accepted", s);
	set(c, !client_reuse);
	show("client, flipped", c);
	set(s, !listener_reuse);
	show("accepted, flipped", s);
	T_REPORT("shutdown(c, SHUT_RDWR)", shutdown(c, SHUT_RDWR));
	t_wait_event(s, POLLRDHUP);
	T_REPORT("shutdown(s, SHUT_RDWR)", shutdown(s, SHUT_RDWR));
	t_sleep_ms(QUIET_MS);
	show("client, closed", c);
	show("accepted, closed", s);
	close(c);
	close(s);
	close(lfd);
}

// A connect waiting for room in the backlog.
static void in_progress(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 0, &a), c1, c2;

	c1 = t_connect(&a);
	t_wait_event(lfd, POLLIN);
	t_sleep_ms(QUIET_MS);
	c2 = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("non-blocking connect to a full listener",
		 connect(c2, (struct sockaddr *)&a.ss, a.len));
	show("in progress", c2);
	close(c2);
	close(c1);
	close(lfd);
}

int main(void)
{
	t_start(60);
	run(AF_INET, false, false);
	run(AF_INET, true, false);
	run(AF_INET6, false, true);
	run(AF_INET6, true, true);
	in_progress();
	return t_finish();
}
