// SPDX-License-Identifier: MIT
// What poll, select and epoll report for a TCP socket in each state: fresh,
// bound, listening, connecting, connected (idle, with data, send buffer full),
// half and fully shut down, reset, refused, closed; and what a thread blocked
// in epoll_wait is woken with (connect done or refused, the peer's FIN, reset).
// shunt-expect: shm_connect>=6 shm_accept>=6 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

enum {
	QUIET_MS = 50, // "nothing changes any more" window
	LATER_MS = 30, // a helper thread acts this long after the wait began
};

#define POLL_ALL (POLLIN | POLLPRI | POLLOUT | POLLRDHUP | POLLRDNORM | POLLRDBAND | \
		  POLLWRNORM | POLLWRBAND)
#define EPOLL_ALL (EPOLLIN | EPOLLPRI | EPOLLOUT | EPOLLRDHUP | EPOLLRDNORM | \
		   EPOLLRDBAND | EPOLLWRNORM | EPOLLWRBAND)

// One epoll instance per interest, level-triggered, each holding `fd` alone.
static void epoll_report(int fd, uint32_t interest, const char *name)
{
	struct epoll_event ev = { .events = interest, .data.u64 = 0x5eed0000cafef00dULL };
	struct epoll_event out[2];
	int ep = epoll_create1(EPOLL_CLOEXEC), n;

	if (ep < 0)
		t_fatal("epoll_create1");
	if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
		printf("  epoll_ctl(ADD, %s) = -1 %s\n", name, t_errname(errno));
		close(ep);
		return;
	}
	memset(out, 0xa5, sizeof(out));
	n = epoll_wait(ep, out, 2, 0);
	if (n < 0)
		printf("  epoll(%s) = -1 %s\n", name, t_errname(errno));
	else if (n == 0)
		printf("  epoll(%s) = 0\n", name);
	else
		printf("  epoll(%s) = %d %s%s\n", name, n, t_epoll_str(out[0].events),
		       out[0].data.u64 == ev.data.u64 ? "" : " (data mangled)");
	close(ep);
}

// Every view of fd, none of them waiting.
static void report(const char *state, int fd)
{
	struct pollfd p = { .fd = fd, .events = POLL_ALL };
	int n;

	printf("%s:\n", state);
	n = poll(&p, 1, 0);
	printf("  poll(all) = %d %s\n", n, n < 0 ? t_errname(errno) : t_poll_str(p.revents));
	p = (struct pollfd){ .fd = fd, .events = 0 };
	n = poll(&p, 1, 0);
	printf("  poll(0) = %d %s\n", n, n < 0 ? t_errname(errno) : t_poll_str(p.revents));
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	n = poll(&p, 1, 0);
	printf("  poll(POLLIN) = %d %s\n", n, n < 0 ? t_errname(errno) : t_poll_str(p.revents));
	printf("  select(r,w,x) = %s\n", t_select1_str(fd, 0));
	epoll_report(fd, EPOLL_ALL, "all");
	epoll_report(fd, 0, "0");
	epoll_report(fd, EPOLLIN | EPOLLRDHUP, "EPOLLIN|EPOLLRDHUP");
}

static void so_error(int fd)
{
	int err = -1;
	socklen_t len = sizeof(err);

	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		t_fatal("getsockopt(SO_ERROR)");
	printf("SO_ERROR = %s\n", err ? t_errname(err) : "0");
}

// Wait for `events` on fd (through poll), then until nothing more happens.
static void settle(int fd, short events)
{
	t_wait_event(fd, events);
	t_sleep_ms(QUIET_MS);
}

static void unconnected(void)
{
	struct t_addr a;
	int fd = t_socket(AF_INET, SOCK_STREAM);

	report("fresh socket", fd);
	t_addr_make(&a, "127.0.0.1", 0);
	if (bind(fd, (struct sockaddr *)&a.ss, a.len) < 0)
		t_fatal("bind");
	report("bound socket", fd);
	close(fd);
}

static void listener(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a), c, s;

	report("listener, empty", lfd);
	c = t_connect(&a);
	t_wait_event(lfd, POLLIN);
	report("listener, one connection queued", lfd);
	s = t_accept(lfd);
	report("listener, after accept", lfd);
	T_REPORT("shutdown(listener, SHUT_RD)", shutdown(lfd, SHUT_RD));
	report("listener after shutdown", lfd);
	close(c);
	close(s);
	close(lfd);
}

// With listen(fd, 0) the kernel queues one connection and drops the SYN of
// the next, which stays in progress (until its retransmission, 1 s later).
static void in_progress(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 0, &a), c1, c2;

	c1 = t_connect(&a);
	settle(lfd, POLLIN);
	c2 = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("non-blocking connect to a full listener",
		 connect(c2, (struct sockaddr *)&a.ss, a.len));
	t_sleep_ms(QUIET_MS);
	report("connect in progress", c2);
	close(c2);
	close(c1);
	close(lfd);
}

static void connected(void)
{
	char buf[16];
	int c, s;

	t_pair(AF_INET, &c, &s);
	report("connected, idle", c);
	T_REPORT("send(s, \"abc\")", send(s, "abc", 3, 0));
	t_wait_inq(c, 3);
	report("connected, 3 bytes to read", c);
	T_REPORT_DATA("recv(c)", recv(c, buf, sizeof(buf), 0), buf);
	report("connected, drained", c);

	T_REPORT("shutdown(s, SHUT_WR)", shutdown(s, SHUT_WR));
	settle(c, POLLRDHUP);
	report("peer shut down writing", c);
	T_REPORT("recv(c) at EOF", recv(c, buf, sizeof(buf), 0));
	report("peer shut down writing, EOF read", c);
	report("the peer itself, after its SHUT_WR", s);
	T_REPORT("shutdown(c, SHUT_WR)", shutdown(c, SHUT_WR));
	settle(s, POLLRDHUP);
	report("both directions shut down, c", c);
	report("both directions shut down, s", s);
	close(c);
	close(s);

	t_pair(AF_INET, &c, &s);
	T_REPORT("shutdown(c, SHUT_WR)", shutdown(c, SHUT_WR));
	settle(s, POLLRDHUP);
	report("own SHUT_WR, peer still open", c);
	close(c);
	close(s);

	t_pair(AF_INET, &c, &s);
	T_REPORT("shutdown(c, SHUT_RD)", shutdown(c, SHUT_RD));
	report("own SHUT_RD", c);
	T_REPORT("shutdown(c, SHUT_WR)", shutdown(c, SHUT_WR));
	settle(s, POLLRDHUP);
	report("own SHUT_RD then SHUT_WR", c);
	close(c);
	close(s);

	// Closed by the peer without shutdown first.
	t_pair(AF_INET, &c, &s);
	T_REPORT("close(s)", close(s));
	settle(c, POLLRDHUP);
	report("peer closed", c);
	T_REPORT("send(c) to the closed peer", send(c, "x", 1, MSG_NOSIGNAL));
	settle(c, POLLERR);
	report("peer closed, after a send drew a reset", c);
	T_REPORT("recv(c) after the reset", recv(c, buf, sizeof(buf), 0));
	report("peer closed, after recv", c);
	so_error(c);
	report("peer closed, after SO_ERROR", c);
	T_REPORT("send(c) again", send(c, "x", 1, MSG_NOSIGNAL));
	close(c);
}

static void reset(void)
{
	char buf[16];
	int c, s;

	// close() with unread data sends a reset.
	t_pair(AF_INET, &c, &s);
	T_REPORT("send(c, \"abc\")", send(c, "abc", 3, 0));
	T_REPORT("send(s, \"xyz\")", send(s, "xyz", 3, 0));
	t_wait_inq(s, 3);
	t_wait_inq(c, 3);
	T_REPORT("close(c) with data unread", close(c));
	settle(s, POLLERR);
	report("reset by the peer, data unread", s);
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	report("reset by the peer, data read", s);
	T_REPORT("recv(s) again", recv(s, buf, sizeof(buf), 0));
	report("reset by the peer, error read", s);
	close(s);

	// SO_ERROR clears the pending error like a failing call does.
	t_pair(AF_INET, &c, &s);
	setsockopt(c, SOL_SOCKET, SO_LINGER, &(struct linger){ 1, 0 }, sizeof(struct linger));
	T_REPORT("close(c) with SO_LINGER {1, 0}", close(c));
	settle(s, POLLERR);
	report("aborted by the peer", s);
	so_error(s);
	report("aborted by the peer, SO_ERROR read", s);
	close(s);
}

// A full send buffer: not writable until the peer reads.
static void full(void)
{
	static char chunk[65536], sink[65536];
	long total = 0, drained = 0;
	int c, s;
	ssize_t n;

	t_pair(AF_INET, &c, &s);
	t_set_nonblock(c, true);
	// The kernel may still move queued data to the peer after EAGAIN:
	// fill again until a poll for POLLOUT stays quiet.
	do {
		while ((n = send(c, chunk, sizeof(chunk), 0)) > 0)
			total += n;
		if (errno != EAGAIN)
			t_fatal("send");
	} while (t_poll1(c, POLLOUT, QUIET_MS));
	report("send buffer full", c);
	report("its peer, a full receive buffer", s);
	t_set_nonblock(s, true);
	while (drained < total) {
		n = recv(s, sink, sizeof(sink), 0);
		if (n > 0)
			drained += n;
		else if (n < 0 && errno == EAGAIN)
			t_wait_event(s, POLLIN);
		else
			t_fatal("drain");
	}
	settle(c, POLLOUT);
	t_expect(drained == total, "drained every byte sent");
	report("send buffer drained", c);
	close(c);
	close(s);
}

static void refused(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 1, &a), c;

	close(lfd); // nobody listens on a any more
	c = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("non-blocking connect to a closed port",
		 connect(c, (struct sockaddr *)&a.ss, a.len));
	settle(c, POLLOUT);
	report("connect refused", c);
	so_error(c);
	report("connect refused, SO_ERROR read", c);
	close(c);
}

// ---- the same transitions seen by a thread blocked in epoll_wait

struct later {
	int fd;
	pthread_t th;
};

static void *close_later(void *arg)
{
	struct later *l = arg;

	t_sleep_ms(LATER_MS);
	close(l->fd);
	return NULL;
}

// Wait (no timeout) on fd alone, registered edge-triggered for everything.
// With drain_first, the edges present at registration are consumed first;
// close_fd >= 0 is then closed by a helper thread while we wait.
static void blocked_wait(const char *what, int fd, bool drain_first, int close_fd)
{
	struct epoll_event ev = { .events = EPOLL_ALL | EPOLLET, .data.u64 = 0x0b10c4ed };
	int ep = epoll_create1(EPOLL_CLOEXEC), n;
	struct later l = { .fd = close_fd };

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		t_fatal("epoll setup");
	if (drain_first)
		while (epoll_wait(ep, &ev, 1, 0) > 0)
			;
	if (close_fd >= 0 && pthread_create(&l.th, NULL, close_later, &l))
		t_fatal("pthread_create");
	n = t_epoll_wait_sorted(ep, &ev, 1, -1);
	printf("epoll_wait(no timeout) %s: %d %s\n", what, n, t_epoll_str(ev.events));
	if (close_fd >= 0)
		pthread_join(l.th, NULL);
	close(ep);
}

static void blocked(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a), c, s;

	c = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("non-blocking connect", connect(c, (struct sockaddr *)&a.ss, a.len));
	blocked_wait("on the connecting socket, registered after EINPROGRESS", c, false, -1);
	s = t_accept(lfd);
	blocked_wait("until the peer closes", c, true, s);
	close(c);

	t_pair(AF_INET, &c, &s);
	T_REPORT("send(c, \"unread\")", send(c, "unread", 6, 0));
	t_wait_inq(s, 6);
	blocked_wait("until the peer closes with data unread (reset)", c, true, s);
	close(c);

	close(lfd); // nobody listens on a any more
	c = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	T_REPORT("non-blocking connect to a closed port",
		 connect(c, (struct sockaddr *)&a.ss, a.len));
	blocked_wait("on the refused socket, registered after EINPROGRESS", c, false, -1);
	close(c);

	// Registered before connect: the fresh socket's EPOLLHUP first.
	lfd = t_listen_loopback(AF_INET, 4, &a);
	c = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	{
		struct epoll_event ev = { .events = EPOLL_ALL | EPOLLET, .data.u64 = 0x0b10c4ed };
		int ep = epoll_create1(EPOLL_CLOEXEC), n;

		if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) < 0)
			t_fatal("epoll setup");
		n = t_epoll_wait_sorted(ep, &ev, 1, 0);
		printf("registered before connect: %d %s\n", n, n ? t_epoll_str(ev.events) : "");
		T_REPORT("non-blocking connect", connect(c, (struct sockaddr *)&a.ss, a.len));
		n = t_epoll_wait_sorted(ep, &ev, 1, -1);
		printf("epoll_wait(no timeout) after connect: %d %s\n", n, t_epoll_str(ev.events));
		close(ep);
	}
	close(t_accept(lfd));
	close(c);
	close(lfd);
}

static void closed_fd(void)
{
	int sock = t_socket(AF_INET, SOCK_STREAM);
	// High, so that the epoll fds report() creates cannot take its number.
	int fd = fcntl(sock, F_DUPFD_CLOEXEC, 900);

	if (fd < 0)
		t_fatal("F_DUPFD");
	close(sock);
	close(fd);
	report("closed fd", fd);
}

int main(void)
{
	t_start(30);
	signal(SIGPIPE, SIG_IGN);
	unconnected();
	listener();
	in_progress();
	connected();
	reset();
	full();
	refused();
	closed_fd();
	printf("-- seen by a blocked epoll_wait\n");
	blocked();
	return t_finish();
}
