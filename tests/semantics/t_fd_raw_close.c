// SPDX-License-Identifier: MIT
// Descriptors closed with the raw system call (libuv closes every descriptor
// with syscall(SYS_close, fd)), then a new descriptor on the same number: a
// file written and read back (and what reached the disk), a pipe, an
// AF_UNIX socketpair, an eventfd, an epoll instance. Whatever is written to
// the new descriptor goes there and nowhere else: the peer of the closed
// connection sees its EOF and none of the bytes. Both ends, client and
// accepted, are closed that way; dup'ed connections keep going until the
// last raw close.
// shunt-expect: shm_connect>=6 shm_accept>=6 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { PEER_MS = 100 };

// A connected pair whose listener stays open until done(): nothing below
// the client's number is free, so a number it gives back is the lowest.
static int listener = -1;

static void pair(int family, int *client, int *server)
{
	struct t_addr a;

	listener = t_listen_loopback(family, 4, &a);
	*client = t_connect(&a);
	*server = t_accept(listener);
}

static void done(void)
{
	close(listener);
}

static char path[64];

static void same_number(const char *what, int fd, int old)
{
	t_expect(fd == old, "  %s got the closed number", what);
}

// The file written through its descriptor, read back through it, and on disk.
static void file_on(int old)
{
	char buf[64] = { 0 }, disk[64] = { 0 };
	int fd, dfd;

	fd = T_REPORT_FD("  open(file)", open(path, O_RDWR | O_CREAT | O_TRUNC, 0600));
	same_number("open", fd, old);
	T_REPORT("  write(file, \"written to the file\")", write(fd, "written to the file", 19));
	T_REPORT("  lseek(file, 0)", lseek(fd, 0, SEEK_SET));
	T_REPORT_DATA("  read(file)", read(fd, buf, sizeof(buf) - 1), buf);
	T_REPORT("  pwrite(file, \"!\", 19)", pwrite(fd, "!", 1, 19));
	T_REPORT_DATA("  pread(file)", pread(fd, buf, sizeof(buf) - 1, 0), buf);
	dfd = open(path, O_RDONLY);
	if (dfd < 0)
		t_fatal("open %s again", path);
	T_REPORT_DATA("  on disk", read(dfd, disk, sizeof(disk) - 1), disk);
	close(dfd);
	T_REPORT("  close(file)", close(fd));
}

static void client_then_file(void)
{
	int c, s;

	printf("client end closed raw, then a file:\n");
	pair(AF_INET, &c, &s);
	T_REPORT("  syscall(SYS_close, client)", syscall(SYS_close, c));
	file_on(c);
	printf("  peer sees: %s\n", t_peer_sees(s, PEER_MS));
	close(s);
	done();
}

static void server_then_pipe(void)
{
	int c, s, p[2];
	char buf[32] = { 0 };

	printf("accepted end closed raw, then a pipe:\n");
	pair(AF_INET6, &c, &s);
	T_REPORT("  syscall(SYS_close, accepted)", syscall(SYS_close, s));
	T_REPORT("  pipe", pipe(p));
	same_number("pipe's read end", p[0], s);
	T_REPORT("  write(pipe, \"into the pipe\")", write(p[1], "into the pipe", 13));
	T_REPORT_DATA("  read(pipe)", read(p[0], buf, sizeof(buf) - 1), buf);
	T_REPORT("  send(client, \"lost\")", send(c, "lost", 4, MSG_NOSIGNAL));
	printf("  client sees: %s\n", t_peer_sees(c, PEER_MS));
	close(p[0]);
	close(p[1]);
	close(c);
	done();
}

static void then_socketpair(void)
{
	int c, s, u[2];
	char buf[32] = { 0 };

	printf("client end closed raw, then an AF_UNIX socketpair:\n");
	pair(AF_INET, &c, &s);
	T_REPORT("  syscall(SYS_close, client)", syscall(SYS_close, c));
	T_REPORT("  socketpair", socketpair(AF_UNIX, SOCK_STREAM, 0, u));
	same_number("socketpair's first end", u[0], c);
	T_REPORT("  send(unix, \"unix bytes\")", send(u[0], "unix bytes", 10, 0));
	T_REPORT_DATA("  recv(unix peer)", recv(u[1], buf, sizeof(buf) - 1, 0), buf);
	T_REPORT("  write(unix peer, \"back\")", write(u[1], "back", 4));
	memset(buf, 0, sizeof(buf));
	T_REPORT_DATA("  read(unix)", read(u[0], buf, sizeof(buf) - 1), buf);
	printf("  peer sees: %s\n", t_peer_sees(s, PEER_MS));
	close(u[0]);
	close(u[1]);
	close(s);
	done();
}

static void then_eventfd_and_epoll(void)
{
	int c, s, e, ep, c2, s2, l1;
	uint64_t v = 0;

	printf("closed raw, then an eventfd and an epoll instance:\n");
	pair(AF_INET, &c, &s);
	l1 = listener;
	pair(AF_INET, &c2, &s2);
	T_REPORT("  syscall(SYS_close, client)", syscall(SYS_close, c));
	e = T_REPORT_FD("  eventfd", eventfd(0, 0));
	same_number("eventfd", e, c);
	v = 5;
	T_REPORT("  write(eventfd, 5)", write(e, &v, sizeof(v)));
	v = 0;
	T_REPORT("  read(eventfd)", read(e, &v, sizeof(v)));
	printf("  counter: %llu\n", (unsigned long long)v);
	T_REPORT("  syscall(SYS_close, eventfd)", syscall(SYS_close, e));
	T_REPORT("  syscall(SYS_close, second client)", syscall(SYS_close, c2));
	ep = T_REPORT_FD("  epoll_create1", epoll_create1(0));
	same_number("epoll_create1", ep, c < c2 ? c : c2);
	printf("  peers see: %s, ", t_peer_sees(s, PEER_MS));
	printf("%s\n", t_peer_sees(s2, PEER_MS));
	close(ep);
	close(s);
	close(s2);
	close(l1);
	done();
}

static void dup_survives(void)
{
	int c, s, d;
	char buf[16] = { 0 };

	printf("a dup'ed connection, one descriptor closed raw:\n");
	pair(AF_INET, &c, &s);
	d = dup(c);
	T_REPORT("  syscall(SYS_close, client)", syscall(SYS_close, c));
	T_REPORT("  send(dup, \"still\")", send(d, "still", 5, 0));
	T_REPORT_DATA("  recv(peer)", recv(s, buf, sizeof(buf) - 1, 0), buf);
	printf("  peer sees after the first close: %s\n", t_peer_sees(s, PEER_MS));
	T_REPORT("  syscall(SYS_close, dup)", syscall(SYS_close, d));
	printf("  peer sees after the last: %s\n", t_peer_sees(s, PEER_MS));
	T_REPORT("  close(client) again", close(c));
	close(s);
	done();
}

int main(void)
{
	t_start(60);
	snprintf(path, sizeof(path), "t_fd_raw_close.%d", (int)getpid());
	client_then_file();
	server_then_pipe();
	then_socketpair();
	then_eventfd_and_epoll();
	dup_survives();
	unlink(path);
	return t_finish();
}
