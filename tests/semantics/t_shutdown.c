// SPDX-License-Identifier: MIT
// shutdown(): SHUT_WR half-close in both directions, SHUT_RD (Linux keeps
// delivering data), SHUT_RDWR, and the error cases, including shutdown of a
// listener, which stops it and wakes a thread blocked in accept().
// shunt-expect: shm_connect>=4 shm_accept>=3 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void report_poll(const char *who, int fd)
{
	printf("poll(%s) = %s\n", who,
	       t_poll_str(t_poll1(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
}

static void shut_wr(void)
{
	char buf[64];
	int c, s;

	t_pair(AF_INET, &c, &s);
	T_REPORT("send(c, \"req\")", send(c, "req", 3, 0));
	T_REPORT("shutdown(c, SHUT_WR)", shutdown(c, SHUT_WR));
	t_wait_event(s, POLLRDHUP);
	report_poll("s after peer SHUT_WR", s);
	report_poll("c after own SHUT_WR", c);
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("recv(s) at EOF", recv(s, buf, sizeof(buf), 0));
	// The half-closed side can still receive.
	T_REPORT("send(s, \"reply\")", send(s, "reply", 5, 0));
	t_wait_inq(c, 5);
	T_REPORT_DATA("recv(c)", recv(c, buf, sizeof(buf), 0), buf);
	T_REPORT("send(s, \"more\")", send(s, "more", 4, 0));
	t_wait_inq(c, 4);
	T_REPORT_DATA("recv(c)", recv(c, buf, sizeof(buf), 0), buf);
	// Sending after SHUT_WR: EPIPE and SIGPIPE.
	t_count_sigpipe();
	T_REPORT("send(c) after SHUT_WR", send(c, "x", 1, 0));
	printf("SIGPIPE count = %d\n", t_sigpipes());
	T_REPORT("send(c, MSG_NOSIGNAL) after SHUT_WR", send(c, "x", 1, MSG_NOSIGNAL));
	printf("SIGPIPE count = %d\n", t_sigpipes());
	T_REPORT("shutdown(c, SHUT_WR) again", shutdown(c, SHUT_WR));
	// Now the other direction: both sides at EOF.
	T_REPORT("shutdown(s, SHUT_WR)", shutdown(s, SHUT_WR));
	t_wait_event(c, POLLRDHUP);
	report_poll("c after both SHUT_WR", c);
	report_poll("s after both SHUT_WR", s);
	T_REPORT("recv(c) at EOF", recv(c, buf, sizeof(buf), 0));
	T_REPORT("getpeername(c) after both SHUT_WR",
		 getpeername(c, (struct sockaddr *)buf, &(socklen_t){ sizeof(buf) }));
	close(c);
	close(s);
}

static void shut_rd(void)
{
	char buf[64];
	int c, s;

	t_pair(AF_INET, &c, &s);
	T_REPORT("send(s, \"before\")", send(s, "before", 6, 0));
	t_wait_inq(c, 6);
	T_REPORT("shutdown(c, SHUT_RD)", shutdown(c, SHUT_RD));
	report_poll("c after SHUT_RD", c);
	report_poll("s after peer SHUT_RD", s);
	T_REPORT_DATA("recv(c) queued before SHUT_RD", recv(c, buf, sizeof(buf), 0),
		      buf);
	T_REPORT("recv(c) with nothing queued", recv(c, buf, sizeof(buf), 0));
	// The peer is not told; new data is accepted and still readable.
	T_REPORT("send(s, \"after\")", send(s, "after", 5, 0));
	t_wait_inq(c, 5);
	T_REPORT_DATA("recv(c) sent after SHUT_RD", recv(c, buf, sizeof(buf), 0), buf);
	T_REPORT("recv(c) again", recv(c, buf, sizeof(buf), 0));
	// Sending still works.
	T_REPORT("send(c, \"still\")", send(c, "still", 5, 0));
	t_wait_inq(s, 5);
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	close(c);
	close(s);
}

static void shut_rdwr(void)
{
	char buf[64];
	int c, s;

	t_pair(AF_INET, &c, &s);
	signal(SIGPIPE, SIG_IGN);
	T_REPORT("send(s, \"queued\")", send(s, "queued", 6, 0));
	t_wait_inq(c, 6);
	T_REPORT("shutdown(c, SHUT_RDWR)", shutdown(c, SHUT_RDWR));
	t_wait_event(s, POLLRDHUP);
	report_poll("c after SHUT_RDWR", c);
	report_poll("s after peer SHUT_RDWR", s);
	T_REPORT("recv(s)", recv(s, buf, sizeof(buf), 0));
	T_REPORT_DATA("recv(c) queued before", recv(c, buf, sizeof(buf), 0), buf);
	T_REPORT("recv(c) then", recv(c, buf, sizeof(buf), 0));
	T_REPORT("send(c)", send(c, "x", 1, 0));
	// Data towards a fully shut down socket makes it reset.
	T_REPORT("send(s, \"late\")", send(s, "late", 4, 0));
	t_wait_event(s, POLLERR);
	report_poll("s after the reset", s);
	report_poll("c after sending the reset", c);
	T_REPORT("recv(c) after late data", recv(c, buf, sizeof(buf), 0));
	T_REPORT("send(s) after the reset", send(s, "y", 1, 0));
	T_REPORT("send(s) again", send(s, "y", 1, 0));
	T_REPORT("shutdown(c, SHUT_RDWR) again", shutdown(c, SHUT_RDWR));
	close(c);
	close(s);
}

struct blocked_accept {
	int lfd;
	long ret;
	int err;
};

static void *accept_blocked(void *arg)
{
	struct blocked_accept *b = arg;

	errno = 0;
	b->ret = accept(b->lfd, NULL, NULL);
	b->err = errno;
	return NULL;
}

static void errors(void)
{
	struct blocked_accept b;
	struct t_addr a;
	pthread_t th;
	int fd, lfd, p[2];

	fd = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("shutdown(unconnected, SHUT_RD)", shutdown(fd, SHUT_RD));
	T_REPORT("shutdown(unconnected, SHUT_WR)", shutdown(fd, SHUT_WR));
	T_REPORT("shutdown(unconnected, SHUT_RDWR)", shutdown(fd, SHUT_RDWR));
	T_REPORT("shutdown(unconnected, 3)", shutdown(fd, 3));
	T_REPORT("shutdown(unconnected, -1)", shutdown(fd, -1));
	close(fd);
	T_REPORT("shutdown(closed fd)", shutdown(fd, SHUT_RDWR));
	if (pipe(p))
		t_fatal("pipe");
	T_REPORT("shutdown(pipe)", shutdown(p[0], SHUT_RDWR));
	close(p[0]);
	close(p[1]);

	// A listener: SHUT_WR does nothing, SHUT_RD stops it and wakes a
	// thread blocked in accept().
	lfd = t_listen_loopback(AF_INET, 4, &a);
	T_REPORT("shutdown(listener, SHUT_WR)", shutdown(lfd, SHUT_WR));
	b.lfd = lfd;
	if (pthread_create(&th, NULL, accept_blocked, &b))
		t_fatal("pthread_create");
	t_sleep_ms(100);
	T_REPORT("shutdown(listener, SHUT_RDWR)", shutdown(lfd, SHUT_RDWR));
	pthread_join(th, NULL);
	printf("blocked accept woken by shutdown = %ld%s%s\n", b.ret,
	       b.ret < 0 ? " " : "", b.ret < 0 ? t_errname(b.err) : "");
	T_REPORT_FD("accept after shutdown", accept(lfd, NULL, NULL));
	report_poll("listener after shutdown", lfd);
	fd = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("connect to the shut down listener",
		 connect(fd, (struct sockaddr *)&a.ss, a.len));
	close(fd);
	// The kernel released the ephemeral port: listen() binds a new one.
	T_REPORT("listen again after shutdown", listen(lfd, 4));
	a = t_sockname(lfd);
	t_expect(t_addr_port(&a) != 0, "listening again: port nonzero");
	fd = t_connect(&a);
	printf("connect to its new name: ok\n");
	close(fd);
	close(lfd);
}

int main(void)
{
	t_start(30);
	shut_wr();
	shut_rd();
	shut_rdwr();
	errors();
	return t_finish();
}
