/* SPDX-License-Identifier: MIT */
/*
 * One TCP connection on 127.0.0.1, for the hostile peer and its victim:
 * either end may be the connecting one. Each exits the program with a
 * message when a call fails; these are test programs.
 */
#ifndef T_LOOPBACK_H
#define T_LOOPBACK_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static inline void t_loopback_die(const char *what)
{
	perror(what);
	exit(2);
}

static inline int t_loopback_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		t_loopback_die("connect");
	return fd;
}

/* A listening socket on an ephemeral port, written to *@port. */
static inline int t_loopback_listen(int *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
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
