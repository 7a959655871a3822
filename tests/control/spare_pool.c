// SPDX-License-Identifier: MIT
/*
 * How many kernel halves of closed connections the next accepts reuse, for
 * test_spare_pool.py. Usage: spare_pool N SOFT HARD [restart]. It sets its
 * descriptor limits to SOFT and HARD, makes a listener and N connections
 * to it (each accepted), closes all of them, listens again (a request to
 * shuntd, which reads the journal first: every spare is then ready), makes
 * and accepts N more, and prints "reused K": how many of the new accepted
 * sockets have the inode of one accepted before (src/preload/spare.c).
 * With the kernel alone, 0: a new socket always has a new inode.
 *
 * With a fifth argument, "restart", it prints "closed" once the first N
 * are closed and waits for a line on stdin (the test restarts shuntd
 * meanwhile), then waits for the library's next session, and makes,
 * accepts and closes N more before the last N: "reused K" then counts the
 * halves of that middle round, which the spares of the first, kept under
 * the dead shuntd's journal, must not keep out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

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

static unsigned long accepted_inode(int *fd)
{
	struct stat st;

	*fd = accept(listener, NULL, NULL);
	if (*fd < 0 || fstat(*fd, &st))
		t_loopback_die("accept");
	return (unsigned long)st.st_ino;
}

int main(int argc, char **argv)
{
	int n = argc > 3 ? atoi(argv[1]) : 0, *clients, *servers, reused = 0;
	struct rlimit lim = { argc > 3 ? strtoul(argv[2], NULL, 10) : 0,
			      argc > 3 ? strtoul(argv[3], NULL, 10) : 0 };
	struct sockaddr_in a = t_loopback_addr(0);
	socklen_t len = sizeof(a);
	unsigned long *first;

	clients = calloc((size_t)n, sizeof(int));
	servers = calloc((size_t)n, sizeof(int));
	first = calloc((size_t)n, sizeof(*first));
	if (n <= 0 || !clients || !servers || !first) {
		fprintf(stderr, "usage: spare_pool N SOFT HARD (N > 0)\n");
		return 2;
	}
	if (setrlimit(RLIMIT_NOFILE, &lim))
		t_loopback_die("setrlimit");
	listener = socket(AF_INET, SOCK_STREAM, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(listener, (struct sockaddr *)&a, &len) || listen(listener, 4096))
		t_loopback_die("listener");
	port = ntohs(a.sin_port);
	for (int i = 0; i < n; i++) {
		clients[i] = connected();
		first[i] = accepted_inode(&servers[i]);
	}
	for (int i = 0; i < n; i++) {
		close(servers[i]);
		close(clients[i]);
	}
	if (listen(listener, 4096))
		t_loopback_die("listen");
	if (argc > 4 && !strcmp(argv[4], "restart")) {
		char line[16];

		printf("closed\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 2;
		/*
		 * One connection through which the library learns that shuntd
		 * went, and one after the second it waits before it tries a
		 * new session.
		 */
		for (int k = 0; k < 2; k++) {
			int c = connected(), s;

			accepted_inode(&s);
			close(s);
			close(c);
			sleep(2);
		}
		for (int i = 0; i < n; i++) {
			clients[i] = connected();
			first[i] = accepted_inode(&servers[i]);
		}
		for (int i = 0; i < n; i++) {
			close(servers[i]);
			close(clients[i]);
		}
		if (listen(listener, 4096))
			t_loopback_die("listen");
	}
	for (int i = 0; i < n; i++) {
		unsigned long ino;

		clients[i] = connected();
		ino = accepted_inode(&servers[i]);
		for (int j = 0; j < n; j++)
			reused += ino == first[j];
	}
	printf("reused %d\n", reused);
	return 0;
}
