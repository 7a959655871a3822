// SPDX-License-Identifier: MIT
// shutdown() in the states a connection passes through: still connecting
// behind a full backlog (the kernel disconnects it: ECONNRESET pending, and
// it can connect again), FIN_WAIT (again succeeds), closed both ways (the
// kernel's TIME_WAIT socket is TCP_CLOSE: ENOTCONN), after a reset.
// shunt-expect: shm_connect>=8 shm_accept>=8
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define POLL_ALL (POLLIN | POLLPRI | POLLOUT | POLLRDHUP | POLLRDNORM | POLLRDBAND | \
		  POLLWRNORM | POLLWRBAND)

enum { QUIET_MS = 50 };

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

static const char *how_name(int how)
{
	return how == SHUT_RD ? "SHUT_RD" : how == SHUT_WR ? "SHUT_WR" : "SHUT_RDWR";
}

// gVisor's ShutdownConnectingSocket, and what the socket does afterwards.
static void connecting(int family, int how)
{
	struct t_addr a;
	int lfd = t_listen_loopback(family, 0, &a), est, c, s;
	struct t_addr peer = { .len = sizeof(peer.ss) };
	char buf[8];

	printf("-- connecting, %s, %s\n", family == AF_INET ? "IPv4" : "IPv6", how_name(how));
	est = t_connect(&a);
	t_wait_event(lfd, POLLIN);
	t_sleep_ms(QUIET_MS);
	c = t_socket(family, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("connect", connect(c, (struct sockaddr *)&a.ss, a.len));
	T_REPORT("shutdown", shutdown(c, how));
	show_poll("after shutdown", c);
	T_REPORT("  getpeername", getpeername(c, (struct sockaddr *)&peer.ss, &peer.len));
	T_REPORT("  read", read(c, buf, 1));
	T_REPORT("  send", send(c, "x", 1, MSG_NOSIGNAL));
	so_error("", c);
	show_poll("after SO_ERROR", c);
	// The server never sees it: only the first connection is queued.
	s = t_accept(lfd);
	t_set_nonblock(lfd, true);
	T_REPORT("  accept of a second", accept(lfd, NULL, NULL));
	t_set_nonblock(lfd, false);
	// There is room now: it connects again.
	t_set_nonblock(c, false);
	T_REPORT("  connect again", connect(c, (struct sockaddr *)&a.ss, a.len));
	close(s);
	s = t_accept(lfd);
	T_REPORT("  send", send(c, "ok", 2, MSG_NOSIGNAL));
	t_wait_inq(s, 2);
	T_REPORT_DATA("  recv by the server", recv(s, buf, sizeof(buf), 0), buf);
	close(s);
	close(c);
	close(est);
	close(lfd);
}

static void established(int family)
{
	char buf[8];
	int c, s;

	printf("-- established, %s\n", family == AF_INET ? "IPv4" : "IPv6");
	// gVisor's ShutdownWriteInFinWait1: again and again.
	t_pair(family, &c, &s);
	T_REPORT("shutdown(s, SHUT_WR)", shutdown(s, SHUT_WR));
	T_REPORT("shutdown(s, SHUT_WR) again", shutdown(s, SHUT_WR));
	t_wait_event(c, POLLRDHUP);
	t_sleep_ms(QUIET_MS);
	T_REPORT("shutdown(s, SHUT_WR) in FIN_WAIT2", shutdown(s, SHUT_WR));
	T_REPORT("shutdown(s, SHUT_RD) in FIN_WAIT2", shutdown(s, SHUT_RD));
	T_REPORT("shutdown(c, SHUT_RD) in CLOSE_WAIT", shutdown(c, SHUT_RD));
	// ShutdownWriteInTimeWait.
	T_REPORT("shutdown(c, SHUT_RDWR)", shutdown(c, SHUT_RDWR));
	t_wait_event(s, POLLHUP);
	t_sleep_ms(QUIET_MS);
	show_poll("s, closed both ways", s);
	T_REPORT("shutdown(s, SHUT_WR) in TIME_WAIT", shutdown(s, SHUT_WR));
	T_REPORT("shutdown(s, SHUT_RD) in TIME_WAIT", shutdown(s, SHUT_RD));
	T_REPORT("shutdown(c, SHUT_WR) after LAST_ACK", shutdown(c, SHUT_WR));
	show_poll("s, after", s);
	show_poll("c, after", c);
	close(c);
	close(s);

	// After a reset.
	t_pair(family, &c, &s);
	struct linger lg = { 1, 0 };

	if (setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		t_fatal("SO_LINGER");
	close(s);
	t_wait_event(c, POLLERR);
	T_REPORT("shutdown(c, SHUT_WR) after a reset", shutdown(c, SHUT_WR));
	T_REPORT("recv(c)", recv(c, buf, sizeof(buf), 0));
	T_REPORT("shutdown(c, SHUT_RD) after a reset", shutdown(c, SHUT_RD));
	close(c);
}

int main(void)
{
	t_start(60);
	connecting(AF_INET, SHUT_RD);
	connecting(AF_INET, SHUT_WR);
	connecting(AF_INET, SHUT_RDWR);
	connecting(AF_INET6, SHUT_RDWR);
	established(AF_INET);
	established(AF_INET6);
	return t_finish();
}
