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

static int listener, port, n;
static int *clients, *servers;

static unsigned long accepted_inode(int *fd)
{
	struct stat st;

	*fd = accept(listener, NULL, NULL);
	if (*fd < 0 || fstat(*fd, &st))
		t_loopback_die("accept");
	return (unsigned long)st.st_ino;
}

/* N connections, each accepted (the accepted sockets' inodes into @inodes). */
static void open_round(unsigned long *inodes)
{
	for (int i = 0; i < n; i++) {
		clients[i] = t_loopback_connect(port);
		inodes[i] = accepted_inode(&servers[i]);
	}
}

/* ...all closed, then listen() again: a request, before which shuntd reads the journal. */
static void close_round(void)
{
	for (int i = 0; i < n; i++) {
		close(servers[i]);
		close(clients[i]);
	}
	if (listen(listener, 4096))
		t_loopback_die("listen");
}

/* Until shuntd is back: see the usage above. */
static void wait_restart(void)
{
	char line[16];

	printf("closed\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		exit(2);
	/*
	 * One connection through which the library learns that shuntd went,
	 * and one after the second it waits before it tries a new session.
	 */
	for (int k = 0; k < 2; k++) {
		int c = t_loopback_connect(port), s;

		accepted_inode(&s);
		close(s);
		close(c);
		sleep(2);
	}
}

int main(int argc, char **argv)
{
	struct rlimit lim = { argc > 3 ? strtoul(argv[2], NULL, 10) : 0,
			      argc > 3 ? strtoul(argv[3], NULL, 10) : 0 };
	struct sockaddr_in a = t_loopback_addr(0);
	socklen_t len = sizeof(a);
	unsigned long *before, *now;
	int reused = 0;

	n = argc > 3 ? atoi(argv[1]) : 0;
	clients = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
	servers = calloc((size_t)(n > 0 ? n : 1), sizeof(int));
	before = calloc((size_t)(n > 0 ? n : 1), sizeof(*before));
	now = calloc((size_t)(n > 0 ? n : 1), sizeof(*now));
	if (n <= 0 || !clients || !servers || !before || !now) {
		fprintf(stderr, "usage: spare_pool N SOFT HARD [restart] (N > 0)\n");
		return 2;
	}
	if (setrlimit(RLIMIT_NOFILE, &lim))
		t_loopback_die("setrlimit");
	listener = socket(AF_INET, SOCK_STREAM, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockname(listener, (struct sockaddr *)&a, &len) || listen(listener, 4096))
		t_loopback_die("listener");
	port = ntohs(a.sin_port);
	open_round(before);
	close_round();
	if (argc > 4 && !strcmp(argv[4], "restart")) {
		wait_restart();
		open_round(before);
		close_round();
	}
	open_round(now);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++)
			reused += now[i] == before[j];
	printf("reused %d\n", reused);
	return 0;
}
