// SPDX-License-Identifier: MIT
/*
 * A scriptable TCP peer for the integration tests: listens or connects, sends
 * a number of bytes, says so on stdout, then waits for EOF in recv() or poll()
 * (an idle connection) and reports what it saw.
 *
 *   peer server PORTFILE SEND_BYTES [poll|epoll|close]   listen on 127.0.0.1:0, write the port
 *   peer client PORT SEND_BYTES [poll|epoll|close]       connect to 127.0.0.1:PORT
 *
 * With "poll" or "epoll" it waits in that call before each recv; with
 * "close", it closes the connection and exits right after sending.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>

static int fail(const char *what)
{
	printf("error %s: %s\n", what, strerror(errno));
	return 1;
}

static int send_all(int fd, size_t n)
{
	char buf[4096];

	memset(buf, 'x', sizeof(buf));
	while (n) {
		ssize_t r = send(fd, buf, n < sizeof(buf) ? n : sizeof(buf), 0);

		if (r <= 0)
			return -1;
		n -= (size_t)r;
	}
	return 0;
}

enum wait_mode { WAIT_RECV, WAIT_POLL, WAIT_EPOLL };

/* Wait for the peer's EOF (or an error), idle in recv, poll or epoll_wait. */
static int wait_eof(int fd, enum wait_mode mode)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };
	char buf[4096];
	long total = 0;
	int ep = -1;

	if (mode == WAIT_EPOLL && ((ep = epoll_create1(0)) < 0 ||
				   epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0))
		return fail("epoll");
	for (;;) {
		if (mode == WAIT_POLL) {
			struct pollfd p = { fd, POLLIN, 0 };

			if (poll(&p, 1, -1) < 0)
				return fail("poll");
		}
		if (mode == WAIT_EPOLL && epoll_wait(ep, &ev, 1, -1) < 0)
			return fail("epoll_wait");
		ssize_t r = recv(fd, buf, sizeof(buf), 0);

		if (r < 0) {
			printf("recv error %s after %ld bytes\n", strerror(errno), total);
			return 0;
		}
		if (r == 0)
			break;
		total += r;
	}
	printf("eof after %ld bytes\n", total);
	return 0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	const char *how = argc > 4 ? argv[4] : "recv";
	enum wait_mode mode = !strcmp(how, "poll") ? WAIT_POLL :
			      !strcmp(how, "epoll") ? WAIT_EPOLL : WAIT_RECV;
	int close_now = !strcmp(how, "close");
	size_t n;
	int fd;

	if (argc < 4)
		return fprintf(stderr, "usage: peer server PORTFILE N [how] | client PORT N [how]\n"), 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	n = strtoul(argv[3], NULL, 10);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return fail("socket");
	if (!strcmp(argv[1], "server")) {
		socklen_t len = sizeof(a);
		FILE *f;
		int c;

		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4) < 0 ||
		    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
			return fail("listen");
		f = fopen(argv[2], "w");
		if (!f)
			return fail("portfile");
		fprintf(f, "%d\n", ntohs(a.sin_port));
		fclose(f);
		c = accept(fd, NULL, NULL);
		if (c < 0)
			return fail("accept");
		if (send_all(c, n) < 0)
			return fail("send");
		printf("sent %zu\n", n);
		return close_now ? close(c) : wait_eof(c, mode);
	}
	a.sin_port = htons((uint16_t)atoi(argv[2]));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return fail("connect");
	if (send_all(fd, n) < 0)
		return fail("send");
	printf("sent %zu\n", n);
	return close_now ? close(fd) : wait_eof(fd, mode);
}
