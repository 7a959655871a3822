// SPDX-License-Identifier: MIT
// A fork in one thread while another makes the process's first socket: the
// child works whichever came first, and so does the parent (under shunt the
// first socket call starts the library, and a child that copied a start
// half done would wait for it forever). Each round is a fresh image, this
// program exec'd again, so that every round races a start of its own. And
// a fork whose handlers (pthread_atfork) make the process's first socket,
// before the fork and in the child.
// shunt-expect: shm_connect>=150 shm_accept>=150 kernel_connect==0
// t-timeout: 120
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ROUNDS = 150, EXIT_CHILD = 2, EXIT_SOCKET = 3 };

// A child that needs the library as its parent left it: a socket, named.
static int child_socket(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int s = socket(AF_INET, SOCK_STREAM, 0);

	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0)
		return 1;
	close(s);
	return 0;
}

static void *forker(void *arg)
{
	pid_t p = fork();
	int st;

	(void)arg;
	if (p == 0)
		_exit(child_socket());
	if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st))
		return (void *)1;
	return NULL;
}

// A connection to @l and back: one byte each way.
static bool echo_once(int l)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	int c = socket(AF_INET, SOCK_STREAM, 0), s = -1;
	char b = 'x';
	bool ok = c >= 0 && getsockname(l, (struct sockaddr *)&a, &len) == 0 &&
		  connect(c, (struct sockaddr *)&a, len) == 0 && (s = accept(l, NULL, NULL)) >= 0 &&
		  write(c, &b, 1) == 1 && read(s, &b, 1) == 1 && write(s, &b, 1) == 1 &&
		  read(c, &b, 1) == 1 && b == 'x';

	close(s);
	close(c);
	return ok;
}

// --race: the fork and the first socket (a listener) at once, then a connection.
static int race(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	pthread_t t;
	void *bad;
	int l;

	if (pthread_create(&t, NULL, forker, NULL))
		return EXIT_CHILD;
	l = socket(AF_INET, SOCK_STREAM, 0);
	pthread_join(t, &bad);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    !echo_once(l))
		return EXIT_SOCKET;
	close(l);
	return bad ? EXIT_CHILD : 0;
}

static int handler_socket = -1;

static void prepare_socket(void)
{
	if (handler_socket < 0)
		handler_socket = socket(AF_INET, SOCK_STREAM, 0);
}

static void child_socket_handler(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);

	if (s < 0)
		_exit(EXIT_SOCKET);
	close(s);
}

// --atfork: the first socket made in the fork's prepare handler, one more in the child's.
static int in_handlers(void)
{
	pid_t p;
	int st;

	if (pthread_atfork(prepare_socket, NULL, child_socket_handler))
		return EXIT_CHILD;
	p = fork();
	if (p == 0)
		_exit(child_socket());
	if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st))
		return EXIT_CHILD;
	return handler_socket >= 0 ? 0 : EXIT_SOCKET;
}

// A fresh image of this program with @mode: its exit status, or -1.
static int image(const char *self, const char *mode)
{
	pid_t p = fork();
	int st;

	if (p == 0) {
		execl(self, self, mode, (char *)NULL);
		_exit(127);
	}
	if (p < 0 || waitpid(p, &st, 0) != p)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	const char *self;
	int ended = 0, failed = 0;

	if (argc > 1 && !strcmp(argv[1], "--race"))
		return race();
	if (argc > 1 && !strcmp(argv[1], "--atfork"))
		return in_handlers();
	self = t_self_path(argv[0]);
	for (int i = 0; i < ROUNDS; i++) {
		int r = image(self, "--race");

		if (r < 0)
			return 1;
		ended++;
		failed += r != 0;
	}
	printf("rounds ended: %d of %d\n", ended, ROUNDS);
	printf("rounds failed: %d\n", failed);
	printf("sockets made in fork handlers: exit %d\n", image(self, "--atfork"));
	return failed ? 1 : 0;
}
