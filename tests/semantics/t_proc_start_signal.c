// SPDX-License-Identifier: MIT
// A signal handler that writes to a pipe (as an event loop's does), run
// over and over while the process makes its first socket: the handler's
// writes and the socket both work (under shunt the first socket call
// starts the library, and a handler that waited for that start, which it
// interrupted, would wait forever). Each round is a fresh image, this
// program exec'd again.
// shunt-expect: shm_connect>=40 shm_accept>=40 kernel_connect==0
// t-timeout: 120
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ROUNDS = 40, EXIT_SOCKET = 3, EXIT_NO_SIGNAL = 4 };

static int pipe_w = -1;
static volatile sig_atomic_t caught;

static void on_alarm(int sig)
{
	char b = 's';

	(void)sig;
	caught++;
	(void)!write(pipe_w, &b, 1);
}

// --signals: a timer every 20 us while the first sockets are made and connected.
static int under_signals(void)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
	struct itimerval every = { { 0, 20 }, { 0, 20 } }, off = { { 0, 0 }, { 0, 0 } };
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int p[2], l, c, s;
	char b = 'x';
	bool ok;

	if (pipe2(p, O_NONBLOCK) < 0)
		return EXIT_SOCKET;
	pipe_w = p[1];
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &every, NULL);
	l = socket(AF_INET, SOCK_STREAM, 0);
	ok = l >= 0 && bind(l, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(l, 1) == 0 &&
	     getsockname(l, (struct sockaddr *)&a, &len) == 0 &&
	     (c = socket(AF_INET, SOCK_STREAM, 0)) >= 0 &&
	     connect(c, (struct sockaddr *)&a, len) == 0 && (s = accept(l, NULL, NULL)) >= 0 &&
	     write(c, &b, 1) == 1 && read(s, &b, 1) == 1;
	// A signal or more, whatever the start cost: a last wait for one.
	while (ok && !caught)
		pause();
	setitimer(ITIMER_REAL, &off, NULL);
	return ok ? 0 : EXIT_SOCKET;
}

int main(int argc, char **argv)
{
	const char *self;
	int failed = 0;

	if (argc > 1 && !strcmp(argv[1], "--signals"))
		return under_signals();
	self = t_self_path(argv[0]);
	for (int i = 0; i < ROUNDS; i++) {
		pid_t p = fork();
		int st;

		if (p == 0) {
			execl(self, self, "--signals", (char *)NULL);
			_exit(127);
		}
		if (p < 0 || waitpid(p, &st, 0) != p)
			return 1;
		failed += !WIFEXITED(st) || WEXITSTATUS(st);
	}
	printf("rounds: %d, failed: %d\n", ROUNDS, failed);
	return failed ? 1 : 0;
}
