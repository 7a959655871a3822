// SPDX-License-Identifier: MIT
// A listener closed or shut down while clients wait on it: one connection
// established but never accepted (the kernel resets it), one still connecting
// behind a full backlog (refused). What each client sees: poll, read,
// SO_ERROR, its names, and a connect to another listener afterwards.
// shunt-expect: shm_connect>=8 shm_accept>=4
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define POLL_ALL (POLLIN | POLLPRI | POLLOUT | POLLRDHUP | POLLRDNORM | POLLRDBAND | \
		  POLLWRNORM | POLLWRBAND)

static void show_poll(const char *label, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLL_ALL };
	int n = poll(&p, 1, 0);

	printf("  %s poll(all) = %d %s\n", label, n, t_poll_str(p.revents));
	p = (struct pollfd){ .fd = fd, .events = 0 };
	n = poll(&p, 1, 0);
	printf("  %s poll(0) = %d %s\n", label, n, t_poll_str(p.revents));
}

static void so_error(const char *label, int fd)
{
	int err = -1;
	socklen_t len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		t_fatal("SO_ERROR");
	printf("  %s SO_ERROR = %s\n", label, err ? t_errname(err) : "0");
}

// Whether the socket still has a local port, and whether it has a peer.
static void names(const char *label, int fd)
{
	struct t_addr a = { .len = sizeof(a.ss) };

	errno = T_ERRNO_SENTINEL;
	if (getsockname(fd, (struct sockaddr *)&a.ss, &a.len) < 0)
		t_fatal("getsockname");
	printf("  %s local port %s\n", label, t_addr_port(&a) ? "set" : "0");
	a.len = sizeof(a.ss);
	T_REPORT("  getpeername", getpeername(fd, (struct sockaddr *)&a.ss, &a.len));
}

// After it failed, the socket can connect again (the kernel's sockets can).
static void reconnect(const char *label, int fd, int family)
{
	struct t_addr a;
	int lfd = t_listen_loopback(family, 4, &a), s;
	char buf[8];

	t_set_nonblock(fd, false);
	T_REPORT("  connect again", connect(fd, (struct sockaddr *)&a.ss, a.len));
	s = t_accept(lfd);
	T_REPORT("  send", send(fd, "hi", 2, MSG_NOSIGNAL));
	t_wait_inq(s, 2);
	T_REPORT_DATA("  recv by the new server", recv(s, buf, sizeof(buf), 0), buf);
	(void)label;
	close(s);
	close(lfd);
}

static void hangup_while_connecting(int family, bool use_close)
{
	struct t_addr a;
	int lfd = t_listen_loopback(family, 0, &a), est, conn;
	struct {
		const char *name;
		int fd;
	} c[2];
	char ch;

	printf("-- %s, listener %s\n", family == AF_INET ? "IPv4" : "IPv6",
	       use_close ? "closed" : "shut down");
	est = t_socket(family, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("connect(established)", connect(est, (struct sockaddr *)&a.ss, a.len));
	t_wait_event(est, POLLOUT);
	t_wait_event(lfd, POLLIN);
	conn = t_socket(family, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("connect(connecting)", connect(conn, (struct sockaddr *)&a.ss, a.len));
	t_sleep_ms(50);
	show_poll("connecting, before", conn);
	if (use_close)
		T_REPORT("close(listener)", close(lfd));
	else
		T_REPORT("shutdown(listener, SHUT_RD)", shutdown(lfd, SHUT_RD));
	c[0].name = "established";
	c[0].fd = est;
	c[1].name = "connecting";
	c[1].fd = conn;
	for (int i = 0; i < 2; i++) {
		printf("%s:\n", c[i].name);
		t_wait_event(c[i].fd, POLLHUP | POLLERR);
		show_poll("", c[i].fd);
		T_REPORT("  read", read(c[i].fd, &ch, 1));
		show_poll("after read", c[i].fd);
		so_error("", c[i].fd);
		show_poll("after SO_ERROR", c[i].fd);
		names("", c[i].fd);
		T_REPORT("  connect again, non-blocking, to the dead port",
			 connect(c[i].fd, (struct sockaddr *)&a.ss, a.len));
		t_wait_event(c[i].fd, POLLHUP | POLLERR);
		so_error("after it", c[i].fd);
		reconnect(c[i].name, c[i].fd, family);
		close(c[i].fd);
	}
	if (!use_close)
		close(lfd);
}

// Connect, and hang the listener up at once (gVisor's TCPListenCloseDuringConnect).
static void hangup_race(int family, bool use_close)
{
	int bad = 0;

	for (int i = 0; i < 50; i++) {
		struct t_addr a;
		int lfd = t_listen_loopback(family, 0, &a);
		int c = t_socket(family, SOCK_STREAM | SOCK_NONBLOCK);
		struct pollfd p = { .fd = c };

		if (connect(c, (struct sockaddr *)&a.ss, a.len) < 0 && errno != EINPROGRESS)
			t_fatal("connect");
		if (use_close)
			close(lfd);
		else
			shutdown(lfd, SHUT_RD);
		if (poll(&p, 1, T_WAIT_MS) != 1 || p.revents != (POLLHUP | POLLERR))
			bad++;
		close(c);
		if (!use_close)
			close(lfd);
	}
	t_expect(!bad, "%s, listener %s at once: 50 clients see POLLHUP|POLLERR",
		 family == AF_INET ? "IPv4" : "IPv6", use_close ? "closed" : "shut down");
}

int main(void)
{
	t_start(120);
	hangup_while_connecting(AF_INET, true);
	hangup_while_connecting(AF_INET, false);
	hangup_while_connecting(AF_INET6, true);
	hangup_while_connecting(AF_INET6, false);
	hangup_race(AF_INET, true);
	hangup_race(AF_INET, false);
	hangup_race(AF_INET6, true);
	return t_finish();
}
