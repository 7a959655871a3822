// SPDX-License-Identifier: MIT
// Bad pointers given to the calls on TCP sockets: an unmapped or read-only
// buffer, iovec array, msghdr, address, length, pollfd array, fd_set,
// epoll_event array, sigmask or timeout gives EFAULT (or EINVAL, EMSGSIZE)
// where the kernel does, in its order of checks, and the bytes a call
// moved before the fault are what it returns (a MSG_WAITALL receive whose
// second chunk cannot be stored returns the first). Nothing crashes.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0 kernel_accept==0
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
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include <unistd.h>

enum { PAGE = 4096, QUIET_MS = 50 };

// Four pages: readable and writable, read-only, writable again, and
// unmapped (PROT_NONE) right after it: what lies at bad - n is writable.
static char *rw, *ro, *edge, *bad;
// An address the kernel refuses before anything else (access_ok).
static void *const kernel_addr = (void *)0xffff800000001000UL;
static void *volatile v_null;
static volatile int v_minus_one = -1;

// Store @len bytes at the end of the read-only page.
static void *ro_tail(const void *data, size_t len)
{
	void *at = ro + PAGE - len;

	mprotect(ro, PAGE, PROT_READ | PROT_WRITE);
	memcpy(at, data, len);
	mprotect(ro, PAGE, PROT_READ);
	return at;
}

static void pages(void)
{
	char *m = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		t_fatal("mmap");
	rw = m;
	ro = m + PAGE;
	edge = m + 2 * PAGE;
	bad = m + 3 * PAGE;
	if (mprotect(ro, PAGE, PROT_READ) < 0 || mprotect(bad, PAGE, PROT_NONE) < 0)
		t_fatal("mprotect");
}

// What a nonblocking receive sees now: the bytes, or the error.
static void drain(const char *label, int fd)
{
	char buf[64];

	T_REPORT_DATA(label, recv(fd, buf, sizeof(buf), MSG_DONTWAIT), buf);
}

static void fill(int from, int to, const char *msg)
{
	t_send_all(from, msg, strlen(msg));
	t_wait_inq(to, (int)strlen(msg));
}

static void receives(int c, int s)
{
	struct iovec iov[2];
	struct msghdr m;
	struct mmsghdr mm[2];
	struct timespec ts;
	struct sockaddr_storage from;
	socklen_t flen;
	char buf[16];

	printf("-- receives\n");
	fill(c, s, "hello");
	T_REPORT("recv(unmapped)", recv(s, bad, 5, 0));
	T_REPORT("recv(NULL)", recv(s, v_null, 5, 0));
	T_REPORT("recv(read-only)", recv(s, ro, 5, 0));
	T_REPORT("read(unmapped)", read(s, bad, 5));
	T_REPORT("recv(unmapped, MSG_PEEK)", recv(s, bad, 5, MSG_PEEK));
	T_REPORT("recv(unmapped, MSG_TRUNC)", recv(s, bad, 0, MSG_TRUNC | MSG_DONTWAIT));
	T_REPORT("readv(NULL iov, 1)", readv(s, v_null, 1));
	T_REPORT("readv(unmapped iov, 1)", readv(s, (struct iovec *)bad, 1));
	iov[0] = (struct iovec){ buf, 2 };
	iov[1] = (struct iovec){ bad, 3 };
	T_REPORT("readv(2 bytes, then unmapped)", readv(s, iov, 2));
	iov[1] = (struct iovec){ bad, (size_t)-1 };
	T_REPORT("readv(negative length)", readv(s, iov, 2));
	iov[1] = (struct iovec){ kernel_addr, 3 };
	T_REPORT("readv(kernel address)", readv(s, iov, 2));
	T_REPORT("readv(cnt -1)", readv(s, iov, v_minus_one));
	T_REPORT("recvmsg(unmapped msghdr)", recvmsg(s, (struct msghdr *)bad, 0));
	memset(&m, 0, sizeof(m));
	m.msg_iovlen = 1;
	T_REPORT("recvmsg(msg_iov NULL, iovlen 1)", recvmsg(s, &m, 0));
	m.msg_iov = iov;
	m.msg_iovlen = 1025;
	T_REPORT("recvmsg(iovlen 1025)", recvmsg(s, &m, 0));
	m.msg_iovlen = 1;
	m.msg_name = &from;
	m.msg_namelen = (socklen_t)-1;
	T_REPORT("recvmsg(msg_namelen -1)", recvmsg(s, &m, 0));
	iov[0] = (struct iovec){ bad, 5 };
	m.msg_namelen = sizeof(from);
	T_REPORT("recvmsg(unmapped buffer)", recvmsg(s, &m, 0));
	T_REPORT("recvfrom(unmapped)", recvfrom(s, bad, 5, 0, NULL, NULL));
	drain("data still there", s);

	fill(c, s, "abc");
	flen = sizeof(from);
	T_REPORT("recvfrom(address, NULL length)", recvfrom(s, buf, 1, 0, (struct sockaddr *)&from,
							    v_null));
	T_REPORT("recvfrom(address, unmapped length)",
		 recvfrom(s, buf, 1, 0, (struct sockaddr *)&from, (socklen_t *)bad));
	flen = (socklen_t)-1;
	T_REPORT("recvfrom(address, length -1)",
		 recvfrom(s, buf, 1, 0, (struct sockaddr *)&from, &flen));
	drain("nothing left: each took its byte", s);
	T_REPORT("recv(kernel address), nothing to read",
		 recv(s, kernel_addr, 5, MSG_DONTWAIT));

	// A msghdr it can read but not write: the bytes are taken, then EFAULT.
	fill(c, s, "xyz");
	iov[0] = (struct iovec){ buf, sizeof(buf) };
	memset(rw, 0, PAGE);
	((struct msghdr *)rw)->msg_iov = iov;
	((struct msghdr *)rw)->msg_iovlen = 1;
	mprotect(rw, PAGE, PROT_READ);
	T_REPORT("recvmsg(read-only msghdr)", recvmsg(s, (struct msghdr *)rw, 0));
	mprotect(rw, PAGE, PROT_READ | PROT_WRITE);
	drain("taken all the same", s);

	// No name asked for: msg_namelen stays as it was.
	fill(c, s, "n");
	memset(&m, 0, sizeof(m));
	iov[0] = (struct iovec){ buf, sizeof(buf) };
	m.msg_iov = iov;
	m.msg_iovlen = 1;
	m.msg_namelen = 77;
	T_REPORT("recvmsg(no name, namelen 77)", recvmsg(s, &m, 0));
	printf("  msg_namelen %u msg_controllen %zu\n", (unsigned)m.msg_namelen, m.msg_controllen);

	fill(c, s, "mm");
	T_REPORT("recvmmsg(unmapped vector)", recvmmsg(s, (struct mmsghdr *)bad, 2, 0, NULL));
	memset(mm, 0, sizeof(mm));
	iov[0] = (struct iovec){ buf, sizeof(buf) };
	mm[0].msg_hdr.msg_iov = iov;
	mm[0].msg_hdr.msg_iovlen = 1;
	T_REPORT("recvmmsg(unmapped timeout)", recvmmsg(s, mm, 1, 0, (struct timespec *)bad));
	ts = (struct timespec){ 0, 2000000000 };
	T_REPORT("recvmmsg(timeout of 2e9 ns)", recvmmsg(s, mm, 1, 0, &ts));
	T_REPORT("recvmmsg(read-only vector)",
		 recvmmsg(s, ro_tail(&(struct mmsghdr){ 0 }, sizeof(struct mmsghdr)), 1, 0, NULL));
	T_REPORT_DATA("recvmmsg", recvmmsg(s, mm, 1, 0, NULL), buf);
	printf("  msg_len %u\n", mm[0].msg_len);

	// The second message header cannot be read: one message, and EFAULT left pending.
	{
		struct mmsghdr *mv = (struct mmsghdr *)(bad - sizeof(*mv));
		int err = -1;
		socklen_t elen = sizeof(err);

		fill(c, s, "pq");
		memset(mv, 0, sizeof(*mv));
		iov[0] = (struct iovec){ buf, sizeof(buf) };
		mv->msg_hdr.msg_iov = iov;
		mv->msg_hdr.msg_iovlen = 1;
		T_REPORT("recvmmsg(second header unmapped)", recvmmsg(s, mv, 2, MSG_DONTWAIT, NULL));
		printf("  msg_len %u\n", mv->msg_len);
		printf("  poll: %s\n", t_poll_str(t_poll1(s, POLLIN | POLLOUT, 0)));
		fill(c, s, "r");
		T_REPORT("recvmmsg(the error first)", recvmmsg(s, mv, 1, MSG_DONTWAIT, NULL));
		T_REPORT("getsockopt(SO_ERROR)", getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen));
		printf("  SO_ERROR %s\n", t_errname(err));
		fill(c, s, "st");
		T_REPORT("recvmmsg(second header unmapped) again",
			 recvmmsg(s, mv, 2, MSG_DONTWAIT, NULL));
		T_REPORT("recv(the error after the data)", recv(s, buf, sizeof(buf), MSG_DONTWAIT));
		drain("then the data", s);
	}
}

struct waitall {
	int fd;
	pid_t tid;
	long r;
	int err;
};

static void *waitall_recv(void *arg)
{
	struct waitall *w = arg;

	w->tid = gettid();
	errno = T_ERRNO_SENTINEL;
	// 100 bytes fit before the unmapped page, the next 100 do not.
	w->r = recv(w->fd, bad - 100, 200, MSG_WAITALL);
	w->err = errno;
	return NULL;
}

// The kernel returns the bytes stored before a fault, once it stored some.
static void partial_receive(int c, int s)
{
	struct waitall w = { .fd = s };
	char msg[100];
	pthread_t t;

	printf("-- a receive that stores some bytes, then faults\n");
	memset(msg, 'p', sizeof(msg));
	t_send_all(c, msg, sizeof(msg));
	t_wait_inq(s, sizeof(msg));
	if (pthread_create(&t, NULL, waitall_recv, &w))
		t_fatal("pthread_create");
	while (!__atomic_load_n(&w.tid, __ATOMIC_SEQ_CST))
		t_sleep_ms(1);
	t_wait_asleep(getpid(), w.tid, QUIET_MS);
	memset(msg, 'q', sizeof(msg));
	t_send_all(c, msg, sizeof(msg));
	pthread_join(t, NULL);
	t_report("recv(200 bytes, MSG_WAITALL, unmapped after 100)", w.r, w.err);
	t_expect(!memcmp(bad - 100, "pppp", 4), "the first 100 bytes are the first message");
	t_wait_inq(s, sizeof(msg));
	T_REPORT("recv(the second message)", recv(s, msg, sizeof(msg), 0));
	t_expect(msg[0] == 'q' && msg[99] == 'q', "the second message is whole");
}

static void sends(int c, int s)
{
	struct iovec iov[2];
	struct msghdr m;
	struct mmsghdr mm[2];
	struct sockaddr_in to = { .sin_family = AF_INET };

	printf("-- sends\n");
	T_REPORT("send(unmapped)", send(c, bad, 5, 0));
	T_REPORT("send(NULL, 5)", send(c, v_null, 5, 0));
	T_REPORT("send(NULL, 0)", send(c, v_null, 0, 0));
	T_REPORT("send(kernel address)", send(c, kernel_addr, 5, 0));
	T_REPORT("write(unmapped)", write(c, bad, 5));
	T_REPORT("writev(NULL iov, 1)", writev(c, v_null, 1));
	iov[0] = (struct iovec){ "ab", 2 };
	iov[1] = (struct iovec){ bad, 3 };
	T_REPORT("writev(2 bytes, then unmapped)", writev(c, iov, 2));
	T_REPORT("sendmsg(unmapped msghdr)", sendmsg(c, (struct msghdr *)bad, 0));
	memset(&m, 0, sizeof(m));
	m.msg_iovlen = 1;
	T_REPORT("sendmsg(msg_iov NULL, iovlen 1)", sendmsg(c, &m, 0));
	iov[0] = (struct iovec){ "cd", 2 };
	m.msg_iov = iov;
	m.msg_iovlen = 1025;
	T_REPORT("sendmsg(iovlen 1025)", sendmsg(c, &m, 0));
	m.msg_iovlen = 1;
	m.msg_name = bad;
	m.msg_namelen = sizeof(to);
	T_REPORT("sendmsg(unmapped name)", sendmsg(c, &m, 0));
	m.msg_namelen = (socklen_t)-1;
	T_REPORT("sendmsg(namelen -1)", sendmsg(c, &m, 0));
	m.msg_name = NULL;
	m.msg_namelen = 0;
	m.msg_control = bad;
	m.msg_controllen = 16;
	T_REPORT("sendmsg(unmapped control)", sendmsg(c, &m, 0));
	T_REPORT("sendto(unmapped address)", sendto(c, "e", 1, 0, (struct sockaddr *)bad, sizeof(to)));
	T_REPORT("sendto(address length 200)", sendto(c, "e", 1, 0, (struct sockaddr *)&to, 200));
	T_REPORT("sendmmsg(unmapped vector)", sendmmsg(c, (struct mmsghdr *)bad, 2, 0));
	drain("nothing was sent", s);

	// The second message cannot be read: the first is sent and counted.
	{
		struct mmsghdr *mv = (struct mmsghdr *)(bad - sizeof(*mv));

		memset(mv, 0, sizeof(*mv));
		iov[0] = (struct iovec){ "ok", 2 };
		mv->msg_hdr.msg_iov = iov;
		mv->msg_hdr.msg_iovlen = 1;
		T_REPORT("sendmmsg(second message unmapped)", sendmmsg(c, mv, 2, 0));
		printf("  msg_len %u\n", mv->msg_len);
	}
	t_wait_inq(s, 2);
	drain("sent", s);
	(void)mm;
}

static void names(int c, int l, const struct t_addr *la)
{
	struct sockaddr_storage a;
	socklen_t len;
	int client;

	printf("-- names\n");
	len = sizeof(a);
	T_REPORT("getsockname(unmapped address)", getsockname(c, (struct sockaddr *)bad, &len));
	T_REPORT("getsockname(NULL length)", getsockname(c, (struct sockaddr *)&a, v_null));
	T_REPORT("getsockname(unmapped length)", getsockname(c, (struct sockaddr *)&a,
							     (socklen_t *)bad));
	len = sizeof(a);
	T_REPORT("getsockname(read-only length)",
		 getsockname(c, (struct sockaddr *)&a, ro_tail(&len, sizeof(len))));
	len = (socklen_t)-1;
	T_REPORT("getsockname(length -1)", getsockname(c, (struct sockaddr *)&a, &len));
	len = 0;
	T_REPORT("getsockname(NULL address, length 0)", getsockname(c, v_null, &len));
	printf("  length %u\n", (unsigned)len);
	len = sizeof(a);
	T_REPORT("getpeername(unmapped address)", getpeername(c, (struct sockaddr *)bad, &len));
	T_REPORT("getpeername(NULL length)", getpeername(c, (struct sockaddr *)&a, v_null));

	client = t_connect(la);
	t_send_all(client, "u", 1);
	t_wait_event(l, POLLIN);
	len = sizeof(a);
	T_REPORT("accept(unmapped address)", accept(l, (struct sockaddr *)bad, &len));
	printf("  its client sees %s\n", t_peer_sees(client, T_WAIT_MS));
	close(client);
	client = t_connect(la);
	t_wait_event(l, POLLIN);
	T_REPORT("accept(address, NULL length)", accept(l, (struct sockaddr *)&a, v_null));
	printf("  its client sees %s\n", t_peer_sees(client, T_WAIT_MS));
	close(client);
}

static void options(int c)
{
	socklen_t len = sizeof(int);
	int fd;

	printf("-- options\n");
	T_REPORT("getsockopt(SO_ERROR, unmapped value)", getsockopt(c, SOL_SOCKET, SO_ERROR, bad,
								   &len));
	T_REPORT("getsockopt(SO_ERROR, unmapped length)",
		 getsockopt(c, SOL_SOCKET, SO_ERROR, rw, (socklen_t *)bad));
	T_REPORT("ioctl(FIONREAD, unmapped)", ioctl(c, FIONREAD, bad));
	T_REPORT("ioctl(TIOCOUTQ, read-only)", ioctl(c, TIOCOUTQ, ro));
	T_REPORT("ioctl(FIONREAD, NULL)", ioctl(c, FIONREAD, v_null));
	fd = memfd_create("t_efault_io", 0);
	if (fd < 0 || write(fd, "file", 4) != 4)
		t_fatal("memfd");
	T_REPORT("sendfile(unmapped offset)", sendfile(c, fd, (off_t *)bad, 4));
	close(fd);
}

static void polls(int c, int s, int kfd)
{
	struct pollfd *p = (struct pollfd *)(bad - sizeof(struct pollfd)), one;
	struct rlimit rl;
	sigset_t *mask = (sigset_t *)bad;
	struct timespec zero = { 0, 0 };
	fd_set *set;

	printf("-- poll and select\n");
	fill(c, s, "r");
	T_REPORT("poll(unmapped, 1)", poll((struct pollfd *)bad, 1, 0));
	// The circuit first, the second entry on the unmapped page.
	p[0] = (struct pollfd){ .fd = s, .events = POLLIN };
	T_REPORT("poll(tcp_s, then unmapped)", poll(p, 2, 0));
	T_REPORT("poll(tcp_s)", poll(p, 1, 0));
	T_REPORT("ppoll(tcp_s, unmapped sigmask)", ppoll(p, 1, &zero, mask));
	T_REPORT("ppoll(tcp_s, NULL sigmask)", ppoll(p, 1, &zero, NULL));
	one = (struct pollfd){ .fd = s, .events = POLLIN };
	T_REPORT("poll(tcp_s, read-only)", poll(ro_tail(&one, sizeof(one)), 1, 0));

	// More entries than the descriptor limit: EINVAL before the array is read.
	p[0] = (struct pollfd){ .fd = kfd, .events = POLLIN };
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		t_fatal("getrlimit");
	T_REPORT("poll(one pipe, nfds past RLIMIT_NOFILE)", poll(p, rl.rlim_cur + 1, 0));
	T_REPORT("ppoll(one pipe, nfds past RLIMIT_NOFILE)", ppoll(p, rl.rlim_cur + 1, &zero, NULL));

	T_REPORT("select(unmapped read set)", select(s + 1, (fd_set *)bad, NULL, NULL,
						      &(struct timeval){ 0, 0 }));
	set = (fd_set *)rw;
	FD_ZERO(set);
	FD_SET(s, set);
	T_REPORT("select(tcp_s in a read-only set)",
		 select(s + 1, ro_tail(set, sizeof(*set)), NULL, NULL, &(struct timeval){ 0, 0 }));
	FD_ZERO(set);
	FD_SET(s, set);
	T_REPORT("pselect(tcp_s, unmapped sigmask)", pselect(s + 1, set, NULL, NULL, &zero, mask));
	FD_ZERO(set);
	FD_SET(s, set);
	T_REPORT("pselect(tcp_s)", pselect(s + 1, set, NULL, NULL, &zero, NULL));
	drain("recv(tcp_s)", s);
}

static void epolls(int c, int s, int c2, int s2)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u64 = 1 }, out[4];
	struct epoll_event *room1 = (struct epoll_event *)(bad - sizeof(struct epoll_event));
	sigset_t *mask = (sigset_t *)bad;
	int ep = epoll_create1(0);

	printf("-- epoll\n");
	if (ep < 0)
		t_fatal("epoll_create1");
	T_REPORT("epoll_ctl(ADD, unmapped event)", epoll_ctl(ep, EPOLL_CTL_ADD, s, (void *)bad));
	T_REPORT("epoll_ctl(MOD, unmapped event)", epoll_ctl(ep, EPOLL_CTL_MOD, s, (void *)bad));
	T_REPORT("epoll_ctl(DEL, unmapped event)", epoll_ctl(ep, EPOLL_CTL_DEL, s, (void *)bad));
	T_REPORT("epoll_ctl(99, unmapped event)", epoll_ctl(ep, 99, s, (void *)bad));
	T_REPORT("epoll_ctl(ADD tcp_s EPOLLET)", epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	T_REPORT("epoll_wait(unmapped, nothing ready)", epoll_wait(ep, (void *)bad, 4, 0));
	T_REPORT("epoll_wait(kernel address)", epoll_wait(ep, kernel_addr, 4, 0));
	fill(c, s, "e");
	T_REPORT("epoll_wait(unmapped, an edge pending)", epoll_wait(ep, (void *)bad, 4, 0));
	T_REPORT("epoll_wait(read-only, an edge pending)", epoll_wait(ep, (void *)ro, 4, 0));
	T_REPORT("epoll_pwait(unmapped sigmask)", epoll_pwait(ep, out, 4, 0, mask));
	T_REPORT("epoll_pwait2(unmapped timeout)", epoll_pwait2(ep, out, 4, (void *)bad, NULL));
	T_REPORT("epoll_pwait2(unmapped sigmask)", epoll_pwait2(ep, out, 4, NULL, mask));
	T_REPORT("epoll_wait(the edge is still there)", epoll_wait(ep, out, 4, 0));
	T_REPORT("epoll_wait(and gone)", epoll_wait(ep, out, 4, 0));
	drain("recv(tcp_s)", s);

	// Two ready, room for one before the unmapped page: one now, the other next.
	ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = 2 };
	T_REPORT("epoll_ctl(ADD tcp_s2)", epoll_ctl(ep, EPOLL_CTL_ADD, s2, &ev));
	ev = (struct epoll_event){ .events = EPOLLIN | EPOLLET, .data.u64 = 1 };
	T_REPORT("epoll_ctl(MOD tcp_s)", epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	fill(c, s, "1");
	fill(c2, s2, "2");
	T_REPORT("epoll_wait(room for one)", epoll_wait(ep, room1, 4, 0));
	T_REPORT("epoll_wait(room for one), again", epoll_wait(ep, room1, 4, 0));
	T_REPORT("epoll_wait(the level one still)", epoll_wait(ep, out, 4, 0));
	drain("recv(tcp_s)", s);
	drain("recv(tcp_s2)", s2);
	close(ep);
}

int main(void)
{
	struct t_addr la;
	int c, s, c2, s2, l, kp[2];

	t_start(60);
	signal(SIGPIPE, SIG_IGN);
	pages();
	l = t_listen_loopback(AF_INET, 16, &la);
	c = t_connect(&la);
	s = t_accept(l);
	c2 = t_connect(&la);
	s2 = t_accept(l);
	if (pipe(kp) < 0)
		t_fatal("pipe");
	receives(c, s);
	partial_receive(c, s);
	sends(c, s);
	names(c, l, &la);
	options(c);
	polls(c, s, kp[0]);
	epolls(c, s, c2, s2);
	close(c);
	close(s);
	close(c2);
	close(s2);
	close(l);
	return t_finish();
}
