// SPDX-License-Identifier: MIT
// A program at its descriptor limit: it lowers its soft RLIMIT_NOFILE (the
// hard limit stays), opens files until EMFILE and counts them, then tries
// every kind of call that makes a descriptor (socket, accept, epoll_create1,
// eventfd, pipe, socketpair, dup, F_DUPFD, open, fopen, SCM_RIGHTS), and the
// calls that need none (connect, send), at the limit and after freeing one
// or two descriptors; the range errors of the limit (dup2 past it, F_DUPFD
// from past it, poll with more entries); and what getrlimit, prlimit,
// sysconf(_SC_OPEN_MAX) and getdtablesize say, raw forms included. The
// library's own descriptors must not change any of it, and connections
// still use shared memory when there is room.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

enum {
	LIMIT = 64,
	MAX_OPEN = LIMIT,
	PEER_MS = 100,
};

static int opened[MAX_OPEN];
static int nopened;
static char path[64];

static void limits(const char *label)
{
	struct rlimit rl, raw, pr;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || syscall(SYS_getrlimit, RLIMIT_NOFILE, &raw) < 0 ||
	    syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, &pr) < 0)
		t_fatal("getrlimit");
	printf("%s: getrlimit %llu, raw getrlimit %llu, raw prlimit %llu, sysconf %ld, "
	       "getdtablesize %d; hard limits agree: %d\n",
	       label, (unsigned long long)rl.rlim_cur, (unsigned long long)raw.rlim_cur,
	       (unsigned long long)pr.rlim_cur, sysconf(_SC_OPEN_MAX), getdtablesize(),
	       rl.rlim_max == raw.rlim_max && raw.rlim_max == pr.rlim_max);
}

static void fill(void)
{
	int fd;

	while ((fd = open("/dev/null", O_RDONLY)) >= 0) {
		if (nopened == MAX_OPEN)
			t_fatal("more than %d descriptors below a limit of %d", MAX_OPEN, LIMIT);
		opened[nopened++] = fd;
	}
	T_REPORT("open(/dev/null) at the limit", fd);
}

static void free_one(void)
{
	if (!nopened)
		t_fatal("nothing to free");
	close(opened[--nopened]);
}

// Every call that makes descriptors, with none free: EMFILE from each.
static void at_limit(const char *label, int lfd, int unix_fd)
{
	int p[2], fd = opened[0];
	struct pollfd pf[LIMIT + 1];

	printf("%s:\n", label);
	T_REPORT("  socket", socket(AF_INET, SOCK_STREAM, 0));
	T_REPORT("  socket(AF_UNIX)", socket(AF_UNIX, SOCK_STREAM, 0));
	T_REPORT("  socket(bad family)", socket(12345, SOCK_STREAM, 0));
	T_REPORT("  accept", accept(lfd, NULL, NULL));
	T_REPORT("  syscall(accept4)", syscall(SYS_accept4, lfd, NULL, NULL, 0));
	T_REPORT("  accept4(bad flags)", accept4(lfd, NULL, NULL, 0x40000000));
	T_REPORT("  accept(not a socket)", accept(fd, NULL, NULL));
	T_REPORT("  epoll_create1", epoll_create1(0));
	T_REPORT("  epoll_create1(bad flags)", epoll_create1(1));
	T_REPORT("  eventfd", eventfd(0, 0));
	T_REPORT("  pipe", pipe(p));
	T_REPORT("  syscall(pipe2)", syscall(SYS_pipe2, p, 0));
	T_REPORT("  socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, p));
	T_REPORT("  socketpair(bad family)", socketpair(12345, SOCK_STREAM, 0, p));
	T_REPORT("  socketpair(bad flags)", socketpair(AF_UNIX, SOCK_STREAM | 0x40000000, 0, p));
	T_REPORT("  dup", dup(fd));
	T_REPORT("  syscall(dup)", syscall(SYS_dup, fd));
	T_REPORT("  dup(bad)", dup(10000));
	T_REPORT("  fcntl(F_DUPFD, 0)", fcntl(fd, F_DUPFD, 0));
	T_REPORT("  fcntl(F_DUPFD_CLOEXEC, limit - 1)", fcntl(fd, F_DUPFD_CLOEXEC, LIMIT - 1));
	T_REPORT("  fcntl(F_DUPFD, limit)", fcntl(fd, F_DUPFD, LIMIT));
	T_REPORT("  fcntl(F_DUPFD, 100000)", fcntl(fd, F_DUPFD, 100000));
	T_REPORT("  syscall(fcntl, F_DUPFD, limit)", syscall(SYS_fcntl, fd, F_DUPFD, LIMIT));
	T_REPORT("  fcntl(bad fd, F_DUPFD, limit)", fcntl(10000, F_DUPFD, LIMIT));
	T_REPORT("  dup2(fd, limit)", dup2(fd, LIMIT));
	T_REPORT("  dup2(fd, limit + 100)", dup2(fd, LIMIT + 100));
	T_REPORT("  dup3(fd, limit, O_CLOEXEC)", dup3(fd, LIMIT, O_CLOEXEC));
	T_REPORT("  dup3(fd, limit, bad flags)", dup3(fd, LIMIT, 0x40000000));
	T_REPORT("  syscall(dup2, fd, limit)", syscall(SYS_dup2, fd, LIMIT));
	T_REPORT("  open(missing)", open("missing-file", O_RDONLY));
	T_REPORT("  open(\"\")", open("", O_RDONLY));
	T_REPORT("  open(new file, O_CREAT)", open(path, O_WRONLY | O_CREAT, 0600));
	T_REPORT("  syscall(open, new file, O_CREAT)", syscall(SYS_open, path, O_WRONLY | O_CREAT, 0600));
	T_REPORT("  openat(bad flags)", openat(AT_FDCWD, "/dev/null", O_RDONLY | O_TMPFILE));
	printf("  the new file exists: %d\n", access(path, F_OK) == 0);
	errno = 0;
	printf("  fopen: %s %s\n", fopen("/dev/null", "r") ? "FILE" : "NULL", t_errname(errno));
	for (int i = 0; i <= LIMIT; i++)
		pf[i] = (struct pollfd){ -1, 0, 0 };
	T_REPORT("  poll(limit entries)", poll(pf, LIMIT, 0));
	T_REPORT("  poll(limit + 1 entries)", poll(pf, LIMIT + 1, 0));
	T_REPORT("  syscall(poll, limit + 1 entries)", syscall(SYS_poll, pf, LIMIT + 1, 0));
	T_REPORT("  close(limit)", close(LIMIT));
	T_REPORT("  close(limit + 10)", close(LIMIT + 10));
	(void)unix_fd;
}

// Send two descriptors over @tx; the receiver gets what fits.
static void pass_two(int tx, int rx, int fd)
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} u;
	char byte = 'm';
	struct iovec iov = { &byte, 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
			     .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c;
	int two[2] = { fd, fd }, got = 0;

	memset(&u, 0, sizeof(u));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(two));
	memcpy(CMSG_DATA(c), two, sizeof(two));
	if (sendmsg(tx, &mh, 0) != 1)
		t_fatal("sendmsg");
	memset(&u, 0, sizeof(u));
	mh.msg_controllen = sizeof(u.buf);
	T_REPORT("  recvmsg(two descriptors)", recvmsg(rx, &mh, 0));
	for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));

			for (int i = 0; i < n; i++) {
				int r;

				memcpy(&r, CMSG_DATA(c) + i * sizeof(int), sizeof(r));
				close(r);
			}
			got += n;
		}
	printf("  received %d, MSG_CTRUNC %d, controllen %zu\n", got,
	       !!(mh.msg_flags & MSG_CTRUNC), (size_t)mh.msg_controllen);
}

int main(void)
{
	struct rlimit rl;
	struct t_addr bound;
	int lfd, c1, c2, s, u[2], r;
	char buf[16] = { 0 };
	rlim_t old;

	t_start(60);
	snprintf(path, sizeof(path), "t_fd_emfile.%d", (int)getpid());
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		t_fatal("getrlimit");
	if (rl.rlim_max < LIMIT + 32)
		t_skip("the hard descriptor limit (%llu) is too low for this test",
		       (unsigned long long)rl.rlim_max);
	old = rl.rlim_cur;
	rl.rlim_cur = LIMIT;
	T_REPORT("setrlimit(RLIMIT_NOFILE, 64)", setrlimit(RLIMIT_NOFILE, &rl));
	limits("lowered");

	lfd = t_listen_loopback(AF_INET, 8, &bound);
	c1 = t_socket(AF_INET, SOCK_STREAM);
	c2 = t_socket(AF_INET, SOCK_STREAM);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, u) < 0)
		t_fatal("socketpair");
	fill();
	printf("descriptors opened before EMFILE: %d\n", nopened);

	at_limit("none free", lfd, u[0]);
	T_REPORT("connect at the limit", connect(c1, (struct sockaddr *)&bound.ss, bound.len));
	T_REPORT("send at the limit", send(c1, "first", 5, 0));
	printf("at the limit:\n");
	pass_two(u[0], u[1], opened[0]);

	free_one();
	printf("one free:\n");
	pass_two(u[0], u[1], opened[0]);
	s = (int)T_REPORT_FD("  accept", accept(lfd, NULL, NULL));
	if (s < 0)
		t_fatal("accept with one free");
	T_REPORT_DATA("  recv", recv(s, buf, sizeof(buf) - 1, 0), buf);
	T_REPORT("  send", send(s, "back", 4, 0));
	memset(buf, 0, sizeof(buf));
	T_REPORT_DATA("  recv(client)", recv(c1, buf, sizeof(buf) - 1, 0), buf);
	at_limit("  with the accepted one, none free", lfd, u[0]);
	T_REPORT("  close(accepted)", close(s));
	r = (int)T_REPORT_FD("  epoll_create1", epoll_create1(0));
	close(r);
	r = (int)T_REPORT_FD("  eventfd", eventfd(0, 0));
	close(r);
	r = (int)T_REPORT_FD("  socket", socket(AF_INET, SOCK_STREAM, 0));
	close(r);
	r = (int)T_REPORT_FD("  dup", dup(opened[0]));
	close(r);
	T_REPORT("  socketpair, one free", socketpair(AF_UNIX, SOCK_STREAM, 0, u));
	T_REPORT("  pipe, one free", pipe(u));

	free_one();
	printf("two free:\n");
	if (pipe(u) < 0)
		t_fatal("pipe with two free");
	T_REPORT("  pipe, none free", pipe(u + 0));
	close(u[0]);
	close(u[1]);
	T_REPORT("  connect", connect(c2, (struct sockaddr *)&bound.ss, bound.len));
	s = (int)T_REPORT_FD("  accept", accept(lfd, NULL, NULL));
	T_REPORT("  send", send(c2, "second", 6, 0));
	memset(buf, 0, sizeof(buf));
	T_REPORT_DATA("  recv", recv(s, buf, sizeof(buf) - 1, 0), buf);
	close(s);

	rl.rlim_cur = old;
	T_REPORT("setrlimit back", setrlimit(RLIMIT_NOFILE, &rl));
	limits("raised");
	rl.rlim_cur = rl.rlim_max + 1;
	T_REPORT("setrlimit(cur > max)", setrlimit(RLIMIT_NOFILE, &rl));
	rl.rlim_cur = rl.rlim_max = 1 << 30;
	T_REPORT("setrlimit(past fs.nr_open)", setrlimit(RLIMIT_NOFILE, &rl));
	limits("unchanged");
	unlink(path);
	return t_finish();
}
