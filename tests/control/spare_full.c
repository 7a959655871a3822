// SPDX-License-Identifier: MIT
/*
 * An accepted connection closed while the journal is full, for
 * test_spare_full.py. Driven by lines on stdin, it answers on stdout:
 *
 *   start          a listener, then N connections to it, each accepted;
 *                  answers "ready"
 *   (shuntd is stopped by the test)
 *   fill           one more connection, accepted (the victim, whose
 *                  socket's inode it names); then both ends of the N
 *                  closed (the accepted ones through a duplicate, which
 *                  keeps their halves from the spares), which fills the
 *                  journal shuntd is not reading; then the victim closed:
 *                  its CLOSED goes to shuntd by message; answers
 *                  "closed INODE"
 *   (shuntd goes on)
 *   next           listen() again (a request: shuntd reads the journal
 *                  first), one more connection accepted; answers
 *                  "next INODE" and closes it (its half, kept, is the next
 *                  "next"'s)
 *
 * Each connection's client end is made and connected before its accept,
 * in this one process, so every accept finds it queued.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "t_loopback.h"

static int listener, port;

static int connected(void)
{
	struct sockaddr_in a = t_loopback_addr(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)))
		t_loopback_die("connect");
	return fd;
}

static int accepted(void)
{
	int fd = accept(listener, NULL, NULL);

	if (fd < 0)
		t_loopback_die("accept");
	return fd;
}

static unsigned long inode(int fd)
{
	struct stat st;

	if (fstat(fd, &st))
		t_loopback_die("fstat");
	return (unsigned long)st.st_ino;
}

static void relisten(void)
{
	if (listen(listener, 4096))
		t_loopback_die("listen");
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 0, *clients, *servers;
	struct sockaddr_in a = t_loopback_addr(0);
	socklen_t len = sizeof(a);
	char line[64];

	clients = calloc((size_t)n, sizeof(int));
	servers = calloc((size_t)n, sizeof(int));
	if (n <= 0 || !clients || !servers) {
		fprintf(stderr, "usage: spare_full N (N > 0)\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		if (!strcmp(line, "start\n")) {
			listener = socket(AF_INET, SOCK_STREAM, 0);
			if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof(a)) ||
			    getsockname(listener, (struct sockaddr *)&a, &len))
				t_loopback_die("listener");
			port = ntohs(a.sin_port);
			relisten();
			for (int i = 0; i < n; i++) {
				clients[i] = connected();
				servers[i] = accepted();
			}
			printf("ready\n");
		} else if (!strcmp(line, "fill\n")) {
			int c = connected(), s = accepted();
			unsigned long ino = inode(s);

			for (int i = 0; i < n; i++) {
				int d = dup(servers[i]);

				close(clients[i]);
				close(servers[i]);
				close(d);
			}
			close(s);
			close(c);
			printf("closed %lu\n", ino);
		} else if (!strcmp(line, "next\n")) {
			int c, s;

			relisten();
			c = connected();
			s = accepted();
			printf("next %lu\n", inode(s));
			close(s);
			close(c);
		} else {
			fprintf(stderr, "unknown command %s", line);
			return 2;
		}
	}
	return 0;
}
