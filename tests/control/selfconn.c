// SPDX-License-Identifier: MIT
/*
 * One process at both ends of its connections, for test_journal_order.py:
 * a thread takes them from a non-blocking listener as fast as it can,
 * without ever waiting, so that it often journals taking a connection
 * (ACCEPTED) before the connecting thread journals making it (CONNECTED);
 * both ends close at once. shuntd reads both entries from one journal,
 * the process's own.
 *
 *   selfconn COUNT
 *
 * stdout: "done N" once N connections were made and taken; then it waits
 * for a line (or EOF) on stdin, holding its listener, and exits 0. Exit 2
 * on a failure, said on stderr.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static int listener;
static long count;
static _Atomic long taken;

static _Noreturn void die(const char *what)
{
	perror(what);
	exit(2);
}

static void *take(void *arg)
{
	(void)arg;
	while (atomic_load(&taken) < count) {
		int fd = accept4(listener, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno != EAGAIN && errno != EINTR)
				die("accept4");
			continue;
		}
		close(fd);
		atomic_fetch_add(&taken, 1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	pthread_t t;
	char line[16];

	if (argc != 2 || (count = atol(argv[1])) <= 0) {
		fprintf(stderr, "usage: selfconn COUNT\n");
		return 2;
	}
	listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(listener, 128) < 0 || getsockname(listener, (struct sockaddr *)&a, &len) < 0)
		die("listener");
	if (pthread_create(&t, NULL, take, NULL))
		die("pthread_create");
	for (long i = 0; i < count; i++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect");
		close(fd);
	}
	pthread_join(t, NULL);
	printf("done %ld\n", atomic_load(&taken));
	fflush(stdout);
	/* Alive until told (a line, or EOF): the test looks at shuntd meanwhile. */
	(void)!fgets(line, sizeof(line), stdin);
	return 0;
}
