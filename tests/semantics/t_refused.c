// SPDX-License-Identifier: MIT
// connect() to a port nobody listens on: ECONNREFUSED when blocking;
// EINPROGRESS, poll events and SO_ERROR when non-blocking; also a port
// whose listener was closed, and a socket that is bound but not listening.
// shunt-expect: shm_connect==0 shm_accept==0
// shunt-expect: shm_tx_bytes==0 shm_rx_bytes==0
#include "t_harness.h"

#include <netinet/in.h>
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

static void blocking(const struct t_addr *to)
{
	char buf[8];
	int fd = t_socket(to->ss.ss_family, SOCK_STREAM);

	T_REPORT("blocking connect", connect(fd, (struct sockaddr *)&to->ss, to->len));
	report_so_error("after blocking refusal", fd);
	T_REPORT("getpeername", getpeername(fd, (struct sockaddr *)buf,
					    &(socklen_t){ sizeof(buf) }));
	T_REPORT("send", send(fd, "x", 1, MSG_NOSIGNAL));
	T_REPORT("recv", recv(fd, buf, sizeof(buf), 0));
	T_REPORT("blocking connect again", connect(fd, (struct sockaddr *)&to->ss,
						   to->len));
	close(fd);
}

static void nonblocking(const struct t_addr *to)
{
	char buf[8];
	int fd = t_socket(to->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK);
	short ev;

	T_REPORT("non-blocking connect", connect(fd, (struct sockaddr *)&to->ss,
						 to->len));
	ev = t_wait_event(fd, POLLOUT);
	printf("poll(POLLOUT) = %s\n", t_poll_str(ev));
	printf("poll(POLLIN|POLLOUT|POLLRDHUP) = %s\n",
	       t_poll_str(t_poll1(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
	report_so_error("after non-blocking refusal", fd);
	report_so_error("read again", fd);
	printf("poll after SO_ERROR = %s\n",
	       t_poll_str(t_poll1(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
	T_REPORT("recv", recv(fd, buf, sizeof(buf), 0));
	T_REPORT("send", send(fd, "x", 1, MSG_NOSIGNAL));
	T_REPORT("non-blocking connect again",
		 connect(fd, (struct sockaddr *)&to->ss, to->len));
	t_wait_event(fd, POLLOUT);
	report_so_error("after second refusal", fd);
	close(fd);

	// Without reading SO_ERROR first: the error comes back from recv.
	fd = t_socket(to->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("non-blocking connect", connect(fd, (struct sockaddr *)&to->ss,
						 to->len));
	t_wait_event(fd, POLLOUT);
	T_REPORT("recv before SO_ERROR", recv(fd, buf, sizeof(buf), 0));
	report_so_error("then", fd);
	close(fd);

	// Or from connect itself.
	fd = t_socket(to->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("non-blocking connect", connect(fd, (struct sockaddr *)&to->ss,
						 to->len));
	t_wait_event(fd, POLLOUT);
	T_REPORT("connect again before SO_ERROR",
		 connect(fd, (struct sockaddr *)&to->ss, to->len));
	report_so_error("then", fd);
	close(fd);
}

int main(void)
{
	struct t_addr a;
	int holder, lfd;

	t_start(30);
	// A bound socket that does not listen keeps the port ours and refuses.
	holder = t_socket(AF_INET, SOCK_STREAM);
	t_addr_make(&a, "127.0.0.1", 0);
	if (bind(holder, (struct sockaddr *)&a.ss, a.len) < 0)
		t_fatal("bind");
	a = t_sockname(holder);
	printf("-- bound, not listening\n");
	blocking(&a);
	nonblocking(&a);

	// A listener that was closed again.
	printf("-- listener closed\n");
	lfd = t_listen_loopback(AF_INET, 4, &a);
	close(lfd);
	blocking(&a);

	// IPv6 too, when there is ::1.
	printf("-- IPv6\n");
	holder = socket(AF_INET6, SOCK_STREAM, 0);
	t_addr_make(&a, "::1", 0);
	if (holder < 0 || bind(holder, (struct sockaddr *)&a.ss, a.len) < 0) {
		// Printed the same plain and under shunt on a host without ::1.
		printf("no IPv6 loopback: %s\n", t_errname(errno));
		return t_finish();
	}
	a = t_sockname(holder);
	blocking(&a);
	nonblocking(&a);
	close(holder);
	return t_finish();
}
