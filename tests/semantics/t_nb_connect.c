// SPDX-License-Identifier: MIT
// connect() to a listener: non-blocking (EINPROGRESS, POLLOUT, SO_ERROR 0,
// connect again 0 then EISCONN), blocking (EISCONN the second time), connect
// on a listener, and connect(AF_UNSPEC), which disconnects.
// shunt-expect: shm_connect>=5 shm_accept>=5 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void report_so_error(const char *label, int fd)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len) < 0)
		printf("%s: getsockopt(SO_ERROR) = -1 %s\n", label, t_errname(errno));
	else
		printf("%s: SO_ERROR = %s\n", label, v ? t_errname(v) : "0");
}

static void exchange(int c, int s)
{
	char buf[32];

	T_REPORT("send(c, \"ping\")", send(c, "ping", 4, 0));
	t_wait_inq(s, 4);
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("send(s, \"pong\")", send(s, "pong", 4, 0));
	t_wait_inq(c, 4);
	T_REPORT_DATA("recv(c)", recv(c, buf, sizeof(buf), 0), buf);
}

static void nonblocking(int lfd, const struct t_addr *a)
{
	struct t_addr peer, local;
	int c, s;

	c = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("non-blocking connect", connect(c, (struct sockaddr *)&a->ss, a->len));
	printf("poll(POLLOUT) = %s\n", t_poll_str(t_wait_event(c, POLLOUT)));
	report_so_error("after POLLOUT", c);
	T_REPORT("connect again", connect(c, (struct sockaddr *)&a->ss, a->len));
	T_REPORT("connect a third time", connect(c, (struct sockaddr *)&a->ss, a->len));
	peer = t_peername(c);
	t_expect(t_addr_eq(&peer, a), "getpeername(c) == listener address");
	s = T_REPORT_FD("accept", accept(lfd, NULL, NULL));
	if (s < 0)
		t_fatal("accept");
	local = t_sockname(c);
	peer = t_peername(s);
	t_expect(t_addr_eq(&peer, &local), "getpeername(s) == getsockname(c)");
	printf("poll(c, POLLIN|POLLOUT) = %s\n",
	       t_poll_str(t_poll1(c, POLLIN | POLLOUT, 0)));
	exchange(c, s);
	close(c);
	close(s);

	// Data sent as soon as the connection is writable reaches the
	// accepted socket even though accept() comes later.
	c = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("non-blocking connect", connect(c, (struct sockaddr *)&a->ss, a->len));
	t_wait_event(c, POLLOUT);
	T_REPORT("send before accept", send(c, "early", 5, 0));
	s = t_accept(lfd);
	{
		char buf[16];

		t_wait_inq(s, 5);
		T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	}
	close(c);
	close(s);
}

static void blocking(int lfd, const struct t_addr *a)
{
	int c, s;

	c = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("blocking connect", connect(c, (struct sockaddr *)&a->ss, a->len));
	T_REPORT("blocking connect again", connect(c, (struct sockaddr *)&a->ss, a->len));
	s = t_accept(lfd);
	T_REPORT("connect after accept", connect(c, (struct sockaddr *)&a->ss, a->len));
	exchange(c, s);
	T_REPORT("connect on the accepted socket",
		 connect(s, (struct sockaddr *)&a->ss, a->len));
	T_REPORT("connect on the listener", connect(lfd, (struct sockaddr *)&a->ss, a->len));
	close(c);
	close(s);
}

// connect(AF_UNSPEC) dissolves the association (the peer sees a reset);
// the socket can then connect again.
static void unspec(int lfd, const struct t_addr *a)
{
	struct sockaddr_storage un;
	char buf[16];
	int c, s, s2;

	memset(&un, 0, sizeof(un));
	un.ss_family = AF_UNSPEC;
	c = t_connect(a);
	s = t_accept(lfd);
	exchange(c, s);
	T_REPORT("connect(c, AF_UNSPEC)", connect(c, (struct sockaddr *)&un, sizeof(un)));
	T_REPORT("getpeername(c)", getpeername(c, (struct sockaddr *)buf,
					       &(socklen_t){ sizeof(buf) }));
	T_REPORT("send(c)", send(c, "x", 1, MSG_NOSIGNAL));
	t_wait_event(s, POLLERR);
	T_REPORT("recv(s)", recv(s, buf, sizeof(buf), 0));
	T_REPORT("connect(c) again", connect(c, (struct sockaddr *)&a->ss, a->len));
	s2 = t_accept(lfd);
	exchange(c, s2);
	close(c);
	close(s);
	close(s2);
}

int main(void)
{
	struct t_addr a;
	int lfd;

	t_start(30);
	signal(SIGPIPE, SIG_IGN);
	lfd = t_listen_loopback(AF_INET, 8, &a);
	printf("-- non-blocking\n");
	nonblocking(lfd, &a);
	printf("-- blocking\n");
	blocking(lfd, &a);
	printf("-- AF_UNSPEC\n");
	unspec(lfd, &a);
	close(lfd);
	return t_finish();
}
