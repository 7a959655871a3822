// SPDX-License-Identifier: MIT
// Socket calls made with syscall() instead of the C library's wrappers, as
// test suites and runtimes do: accept4 on a listener a client has just
// connected to, connect, the names, read/write, sendto/recvfrom,
// sendmsg/recvmsg, fcntl(O_NONBLOCK), ioctl(FIONREAD), getsockopt and
// setsockopt, dup, shutdown, close_range; and the readiness calls whose raw
// form differs from the C library's: ppoll and pselect6 write the time left
// back and check the signal set's size, epoll_pwait checks it too.
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

enum {
	KSET = 8,	// the kernel's sigset_t
	PEER_MS = 100,
	WAIT_NS = 400 * 1000 * 1000,
	SHORT_NS = 20 * 1000 * 1000,
};

static void show_addr(const char *label, const struct sockaddr_storage *ss, socklen_t len,
		      const struct t_addr *want)
{
	struct t_addr a = { .len = len };

	memcpy(&a.ss, ss, sizeof(*ss));
	t_expect(t_addr_eq(&a, want), "%s is the expected address", label);
}

// What was written back into a timeout: "unchanged", "0", or "less" (some left).
static const char *left(const struct timespec *ts, long sec, long nsec)
{
	if (ts->tv_sec == sec && ts->tv_nsec == nsec)
		return "unchanged";
	if (!ts->tv_sec && !ts->tv_nsec)
		return "0";
	if (ts->tv_sec < sec || (ts->tv_sec == sec && ts->tv_nsec < nsec))
		return "less";
	return "more?";
}

static void accept_and_talk(void)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct t_addr bound, cname;
	struct timeval tv = { 5, 0 };
	int l, c, s, d, v = 0;
	socklen_t vlen = sizeof(v);
	char buf[64] = { 0 };
	struct iovec iov = { buf, sizeof(buf) - 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	printf("a connection made and used with raw system calls:\n");
	l = t_listen_loopback(AF_INET, 8, &bound);
	c = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("  syscall(connect)", syscall(SYS_connect, c, &bound.ss, bound.len));
	T_REPORT("  syscall(setsockopt, SO_RCVTIMEO)",
		 syscall(SYS_setsockopt, l, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	s = (int)T_REPORT_FD("  syscall(accept4, SOCK_CLOEXEC)",
			     syscall(SYS_accept4, l, &ss, &len, SOCK_CLOEXEC));
	if (s < 0)
		t_fatal("raw accept4");
	cname = t_sockname(c);
	show_addr("  accept4's address", &ss, len, &cname);
	len = sizeof(ss);
	T_REPORT("  syscall(getpeername, client)", syscall(SYS_getpeername, c, &ss, &len));
	show_addr("  the client's peer", &ss, len, &bound);
	len = sizeof(ss);
	T_REPORT("  syscall(getsockname, accepted)", syscall(SYS_getsockname, s, &ss, &len));
	show_addr("  the accepted socket's name", &ss, len, &bound);

	T_REPORT("  syscall(write, client, \"hello\")", syscall(SYS_write, c, "hello", 5));
	t_wait_inq(s, 5);
	T_REPORT("  syscall(ioctl, FIONREAD)", syscall(SYS_ioctl, s, FIONREAD, &v));
	printf("  FIONREAD: %d\n", v);
	T_REPORT_DATA("  syscall(read, accepted)", syscall(SYS_read, s, buf, sizeof(buf) - 1), buf);
	T_REPORT("  syscall(sendto, accepted, \"world\")",
		 syscall(SYS_sendto, s, "world", 5, 0, NULL, 0));
	memset(buf, 0, sizeof(buf));
	T_REPORT_DATA("  syscall(recvfrom, client)",
		      syscall(SYS_recvfrom, c, buf, sizeof(buf) - 1, 0, NULL, NULL), buf);

	T_REPORT("  syscall(fcntl, F_SETFL, O_NONBLOCK)",
		 syscall(SYS_fcntl, s, F_SETFL, O_RDWR | O_NONBLOCK));
	T_REPORT("  syscall(fcntl, F_GETFL) & O_NONBLOCK",
		 syscall(SYS_fcntl, s, F_GETFL) & O_NONBLOCK);
	T_REPORT("  syscall(read), nothing there", syscall(SYS_read, s, buf, sizeof(buf)));

	v = 1;
	T_REPORT("  syscall(setsockopt, TCP_NODELAY)",
		 syscall(SYS_setsockopt, c, IPPROTO_TCP, TCP_NODELAY, &v, sizeof(v)));
	v = 0;
	T_REPORT("  syscall(getsockopt, TCP_NODELAY)",
		 syscall(SYS_getsockopt, c, IPPROTO_TCP, TCP_NODELAY, &v, &vlen));
	printf("  TCP_NODELAY: %d\n", v);
	vlen = sizeof(v);
	T_REPORT("  syscall(getsockopt, SO_ERROR)",
		 syscall(SYS_getsockopt, c, SOL_SOCKET, SO_ERROR, &v, &vlen));
	printf("  SO_ERROR: %d\n", v);

	d = (int)T_REPORT_FD("  syscall(dup, client)", syscall(SYS_dup, c));
	memcpy(buf, "via the dup", 11);
	iov.iov_len = 11;
	T_REPORT("  syscall(sendmsg, dup)", syscall(SYS_sendmsg, d, &mh, 0));
	t_wait_inq(s, 11);
	memset(buf, 0, sizeof(buf));
	iov.iov_len = sizeof(buf) - 1;
	T_REPORT_DATA("  syscall(recvmsg, accepted)", syscall(SYS_recvmsg, s, &mh, 0), buf);
	T_REPORT("  syscall(close, dup)", syscall(SYS_close, d));

	T_REPORT("  syscall(shutdown, client, SHUT_WR)", syscall(SYS_shutdown, c, SHUT_WR));
	printf("  accepted sees: %s\n", t_peer_sees(s, PEER_MS));
	T_REPORT("  syscall(sendto, client) after SHUT_WR",
		 syscall(SYS_sendto, c, "x", 1, MSG_NOSIGNAL, NULL, 0));
	T_REPORT("  syscall(close, accepted)", syscall(SYS_close, s));
	printf("  client sees: %s\n", t_peer_sees(c, PEER_MS));
	T_REPORT("  syscall(close, client)", syscall(SYS_close, c));
	T_REPORT("  syscall(close, listener)", syscall(SYS_close, l));
}

// A listener with a client already queued: raw accept finds it at once.
static void accept_nonblocking(void)
{
	struct t_addr bound;
	int l, c, s;

	printf("raw accept4 on a non-blocking listener with one client queued:\n");
	l = t_listen_loopback(AF_INET6, 8, &bound);
	t_set_nonblock(l, true);
	printf("  poll(listener): %s\n", t_poll_str(t_poll1(l, POLLIN, T_WAIT_MS)));
	c = t_connect(&bound);
	printf("  poll(listener) after connect: %s\n", t_poll_str(t_poll1(l, POLLIN, T_WAIT_MS)));
	s = (int)T_REPORT_FD("  syscall(accept4)", syscall(SYS_accept4, l, NULL, NULL, 0));
	T_REPORT("  syscall(accept4) again", syscall(SYS_accept4, l, NULL, NULL, 0));
	T_REPORT("  syscall(accept) again", syscall(SYS_accept, l, NULL, NULL));
	if (s >= 0) {
		T_REPORT("  syscall(write, accepted, \"hi\")", syscall(SYS_write, s, "hi", 2));
		printf("  client sees: %s\n", t_peer_sees(c, PEER_MS));
		close(s);
	}
	close(c);
	close(l);
}

static void readiness(void)
{
	struct timespec ts;
	struct pollfd p[2];
	uint64_t mask = 0;
	sigset_t full;
	fd_set rd;
	struct {
		const void *set;
		size_t size;
	} pack = { &mask, KSET };
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 42 }, got;
	int c, s, ep;

	printf("raw readiness calls on a connection:\n");
	t_pair(AF_INET, &c, &s);
	p[0] = (struct pollfd){ s, POLLIN, 0 };
	p[1] = (struct pollfd){ c, POLLOUT, 0 };

	ts = (struct timespec){ 0, SHORT_NS };
	T_REPORT("  syscall(ppoll), nothing to read", syscall(SYS_ppoll, p, 1, &ts, NULL, 0));
	printf("  timeout written back: %s\n", left(&ts, 0, SHORT_NS));
	ts = (struct timespec){ 0, WAIT_NS };
	T_REPORT("  syscall(ppoll), writable", syscall(SYS_ppoll, p, 2, &ts, NULL, 0));
	printf("  revents: %s, %s; timeout written back: %s\n", t_poll_str(p[0].revents),
	       t_poll_str(p[1].revents), left(&ts, 0, WAIT_NS));
	ts = (struct timespec){ 0, 0 };
	T_REPORT("  syscall(ppoll), zero timeout", syscall(SYS_ppoll, p, 2, &ts, NULL, 0));
	printf("  zero timeout: %s\n", left(&ts, 0, 0));
	ts = (struct timespec){ 0, WAIT_NS };
	T_REPORT("  syscall(ppoll), set size 128", syscall(SYS_ppoll, p, 2, &ts, &mask, 128));
	T_REPORT("  syscall(ppoll), set size 8", syscall(SYS_ppoll, p, 2, &ts, &mask, KSET));
	ts = (struct timespec){ 0, WAIT_NS };
	T_REPORT("  ppoll() of the C library", ppoll(p, 2, &ts, NULL));
	printf("  its timeout: %s\n", left(&ts, 0, WAIT_NS));
	ts = (struct timespec){ -1, 0 };
	T_REPORT("  syscall(ppoll), negative timeout", syscall(SYS_ppoll, p, 2, &ts, NULL, 0));

	T_REPORT("  send(client, \"x\")", send(c, "x", 1, 0));
	t_wait_inq(s, 1);
	FD_ZERO(&rd);
	FD_SET(s, &rd);
	ts = (struct timespec){ 0, WAIT_NS };
	T_REPORT("  syscall(pselect6), readable", syscall(SYS_pselect6, s + 1, &rd, NULL, NULL, &ts, &pack));
	printf("  in the set: %d; timeout written back: %s\n", FD_ISSET(s, &rd),
	       left(&ts, 0, WAIT_NS));
	pack.size = 128;
	FD_SET(s, &rd);
	T_REPORT("  syscall(pselect6), set size 128",
		 syscall(SYS_pselect6, s + 1, &rd, NULL, NULL, &ts, &pack));
	pack.set = NULL;
	FD_SET(s, &rd);
	T_REPORT("  syscall(pselect6), no set, size 128",
		 syscall(SYS_pselect6, s + 1, &rd, NULL, NULL, &ts, &pack));
	FD_SET(s, &rd);
	T_REPORT("  syscall(pselect6), no pack", syscall(SYS_pselect6, s + 1, &rd, NULL, NULL, NULL, NULL));
	FD_ZERO(&rd);
	FD_SET(c, &rd);
	ts = (struct timespec){ 0, SHORT_NS };
	T_REPORT("  syscall(pselect6), nothing", syscall(SYS_pselect6, c + 1, &rd, NULL, NULL, &ts, NULL));
	printf("  timeout written back: %s\n", left(&ts, 0, SHORT_NS));

	ep = epoll_create1(0);
	T_REPORT("  syscall(epoll_ctl, ADD)", syscall(SYS_epoll_ctl, ep, EPOLL_CTL_ADD, s, &ev));
	sigfillset(&full);
	T_REPORT("  syscall(epoll_pwait), set size 128",
		 syscall(SYS_epoll_pwait, ep, &got, 1, 0, &full, 128));
	T_REPORT("  syscall(epoll_pwait), set size 8",
		 syscall(SYS_epoll_pwait, ep, &got, 1, T_WAIT_MS, &mask, KSET));
	printf("  event: %llu %s\n", (unsigned long long)got.data.u64, t_epoll_str(got.events));
	T_REPORT("  syscall(epoll_wait)", syscall(SYS_epoll_wait, ep, &got, 1, T_WAIT_MS));
	ts = (struct timespec){ 0, SHORT_NS };
	T_REPORT("  syscall(epoll_pwait2)", syscall(SYS_epoll_pwait2, ep, &got, 1, &ts, NULL, 0));
	printf("  its timeout: %s\n", left(&ts, 0, SHORT_NS));
	T_REPORT("  syscall(epoll_pwait2), set size 128",
		 syscall(SYS_epoll_pwait2, ep, &got, 1, &ts, &mask, 128));
	T_REPORT("  syscall(epoll_ctl, DEL)", syscall(SYS_epoll_ctl, ep, EPOLL_CTL_DEL, s, NULL));
	T_REPORT("  syscall(epoll_wait) after DEL", syscall(SYS_epoll_wait, ep, &got, 1, 0));
	close(ep);
	close(c);
	close(s);
}

static void close_range_raw(void)
{
	int c, s, fd;

	printf("raw close_range over a connection:\n");
	t_pair(AF_INET, &c, &s);
	fd = fcntl(c, F_DUPFD, 200);
	close(c);
	T_REPORT("  syscall(close_range, 200, 210)", syscall(SYS_close_range, 200, 210, 0));
	printf("  peer sees: %s\n", t_peer_sees(s, PEER_MS));
	T_REPORT("  close(closed)", close(fd));
	close(s);
}

int main(void)
{
	t_start(60);
	accept_and_talk();
	accept_nonblocking();
	readiness();
	close_range_raw();
	return t_finish();
}
