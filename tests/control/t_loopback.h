/* SPDX-License-Identifier: MIT */
/*
 * TCP on 127.0.0.1 for the helper programs of tests/control. One
 * connection, for the hostile peer and its victim: either end may be the
 * connecting one; these exit the program with a message when a call fails
 * (test programs). The address and the I/O timeouts, for echod and honest,
 * which report failures their own way.
 */
#ifndef T_LOOPBACK_H
#define T_LOOPBACK_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static inline void t_loopback_die(const char *what)
{
	perror(what);
	exit(2);
}

/* 127.0.0.1:@port (0: any port, to bind to). */
static inline struct sockaddr_in t_loopback_addr(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/*
 * Make each recv() and send() on @fd give up (EAGAIN) after @seconds:
 * SO_RCVTIMEO and SO_SNDTIMEO. 0, or -1 with errno set.
 */
static inline int t_loopback_timeouts(int fd, int seconds)
{
	struct timeval tv = { seconds, 0 };

	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		return -1;
	return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static inline int t_loopback_connect(int port)
{
	struct sockaddr_in a = t_loopback_addr(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		t_loopback_die("connect");
	return fd;
}

/* A listening socket on an ephemeral port, written to *@port. */
static inline int t_loopback_listen(int *port)
{
	struct sockaddr_in a = t_loopback_addr(0);
	socklen_t len = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &len) < 0)
		t_loopback_die("listen");
	*port = ntohs(a.sin_port);
	return lfd;
}

/* The one connection @lfd gets; @lfd is closed. */
static inline int t_loopback_accept(int lfd)
{
	int fd = accept(lfd, NULL, NULL);

	if (fd < 0)
		t_loopback_die("accept");
	close(lfd);
	return fd;
}

#endif
