// SPDX-License-Identifier: MIT
// Resets: close() with unread data, and SO_LINGER {1,0} abortive close. The
// peer keeps the data already sent, then sees ECONNRESET (also via SO_ERROR),
// then EOF; sending fails.
// shunt-expect: shm_connect>=4 shm_accept>=4 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void report_poll(const char *who, int fd)
{
	printf("poll(%s) = %s\n", who,
	       t_poll_str(t_poll1(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
}

static void report_so_error(const char *label, int fd)
{
	int v = -1;
	socklen_t len = sizeof(v);
	long r = getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len);

	if (r < 0)
		printf("%s: getsockopt(SO_ERROR) = -1 %s\n", label, t_errname(errno));
	else
		printf("%s: SO_ERROR = %s\n", label, v ? t_errname(v) : "0");
}

// c closes while "xyz" from s is unread: the kernel resets the connection.
static void close_with_unread(void)
{
	char buf[64];
	int c, s;

	t_pair(AF_INET, &c, &s);
	T_REPORT("send(c, \"abc\")", send(c, "abc", 3, 0));
	T_REPORT("send(s, \"xyz\")", send(s, "xyz", 3, 0));
	t_wait_inq(c, 3);
	t_wait_inq(s, 3);
	T_REPORT("close(c) with 3 bytes unread", close(c));
	t_wait_event(s, POLLERR);
	report_poll("s after the reset", s);
	T_REPORT_DATA("recv(s) data sent before the reset",
		      recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("recv(s) next", recv(s, buf, sizeof(buf), 0));
	T_REPORT("recv(s) then", recv(s, buf, sizeof(buf), 0));
	report_poll("s after reading", s);
	T_REPORT("send(s, MSG_NOSIGNAL)", send(s, "q", 1, MSG_NOSIGNAL));
	T_REPORT("getpeername(s)",
		 getpeername(s, (struct sockaddr *)buf, &(socklen_t){ sizeof(buf) }));
	close(s);
}

// Same, but the survivor calls send() first and reads afterwards.
static void send_after_reset(void)
{
	char buf[64];
	int c, s;

	t_pair(AF_INET, &c, &s);
	T_REPORT("send(c, \"abc\")", send(c, "abc", 3, 0));
	T_REPORT("send(s, \"xyz\")", send(s, "xyz", 3, 0));
	t_wait_inq(c, 3);
	t_wait_inq(s, 3);
	T_REPORT("close(c) with 3 bytes unread", close(c));
	t_wait_event(s, POLLERR);
	T_REPORT("send(s, MSG_NOSIGNAL) #1", send(s, "q", 1, MSG_NOSIGNAL));
	T_REPORT("send(s, MSG_NOSIGNAL) #2", send(s, "q", 1, MSG_NOSIGNAL));
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("recv(s) next", recv(s, buf, sizeof(buf), 0));
	close(s);
}

static void linger_abort(bool with_data)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 0 };
	char buf[64];
	int c, s;

	t_pair(AF_INET, &c, &s);
	if (with_data) {
		T_REPORT("send(c, \"last words\")", send(c, "last words", 10, 0));
		t_wait_inq(s, 10);
	}
	T_REPORT("setsockopt(c, SO_LINGER {1,0})",
		 setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	T_REPORT("close(c)", close(c));
	t_wait_event(s, POLLERR);
	report_poll("s after abortive close", s);
	if (with_data) {
		T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
		report_so_error("s after reading the data", s);
		T_REPORT("recv(s) next", recv(s, buf, sizeof(buf), 0));
	} else {
		report_so_error("s", s);
		report_so_error("s again", s);
		T_REPORT("recv(s) after SO_ERROR", recv(s, buf, sizeof(buf), 0));
	}
	T_REPORT("recv(s) then", recv(s, buf, sizeof(buf), 0));
	T_REPORT("send(s, MSG_NOSIGNAL)", send(s, "q", 1, MSG_NOSIGNAL));
	report_so_error("s at the end", s);
	close(s);
}

int main(void)
{
	t_start(30);
	signal(SIGPIPE, SIG_IGN);
	printf("-- close with unread data\n");
	close_with_unread();
	printf("-- close with unread data, survivor sends first\n");
	send_after_reset();
	printf("-- SO_LINGER {1,0}\n");
	linger_abort(false);
	printf("-- SO_LINGER {1,0} after sending data\n");
	linger_abort(true);
	return t_finish();
}
