// SPDX-License-Identifier: MIT
// A connection passed with SCM_RIGHTS (under shunt it moves onto the
// kernel) while its peer, another process, shuts it down for writing: the
// FIN arrives whichever came first (a race; found by Node's
// test-cluster-send-handle-twice). And when the peer looks at its socket
// only after the connection moved and was closed both ways: EOF, twice, and
// no error, not a reset.
// shunt-needs: companions
// shunt-expect: shm_accept>=120 kernel_accept==0
// t-timeout: 120
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { RACES = 100, AFTERWARDS = 20, EOF_WAIT_MS = 3000, EXIT_NO_EOF = 3 };

// The descriptor passed to ourselves over a socketpair: the same socket.
static int passed(int fd)
{
	int sp[2], r;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) < 0)
		t_fatal("socketpair");
	t_send_fd(sp[0], fd, 'p');
	r = t_recv_fd(sp[1], NULL);
	close(sp[0]);
	close(sp[1]);
	return r;
}

// Whether @fd reads EOF within EOF_WAIT_MS.
static bool eof_within(int fd)
{
	char b;

	return (t_poll1(fd, POLLIN, EOF_WAIT_MS) & POLLIN) && read(fd, &b, 1) == 0;
}

// A pause of 0 to 2 ms, different each round, the same in every run.
static void jitter(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	usleep((*seed >> 16) % 2000);
}

static void races(const struct t_addr *at, int l)
{
	int server_eof = 0, client_eof = 0;
	unsigned seed = 1;

	for (int i = 0; i < RACES; i++) {
		unsigned mine = seed;
		pid_t pid = t_fork_tied(60);
		int s, fd;

		jitter(&seed);
		if (pid == 0) {
			int c = t_connect(at);

			jitter(&mine);
			shutdown(c, SHUT_WR);
			_exit(eof_within(c) ? 0 : EXIT_NO_EOF);
		}
		s = t_accept(l);
		jitter(&mine);
		fd = passed(s);
		close(s);
		server_eof += eof_within(fd);
		close(fd);
		client_eof += t_wait_child(pid) == 0;
	}
	printf("shutdown racing the pass: the server read EOF %d of %d times\n", server_eof, RACES);
	printf("shutdown racing the pass: the client read EOF %d of %d times\n", client_eof, RACES);
}

static void afterwards(const struct t_addr *at, int l)
{
	int clean = 0;

	for (int i = 0; i < AFTERWARDS; i++) {
		int go[2], done[2];
		pid_t pid;
		char b;

		if (pipe(go) < 0 || pipe(done) < 0)
			t_fatal("pipe");
		pid = t_fork_tied(60);
		if (pid == 0) {
			int c = t_connect(at), err = -1;
			socklen_t len = sizeof(err);
			bool ok;

			shutdown(c, SHUT_WR);
			// The server passes the connection on and closes every copy.
			if (write(go[1], "g", 1) != 1 || read(done[0], &b, 1) != 1)
				_exit(T_FAIL);
			ok = eof_within(c) && read(c, &b, 1) == 0 &&
			     getsockopt(c, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
			_exit(ok ? 0 : EXIT_NO_EOF);
		}
		int s = t_accept(l), fd;

		if (read(go[0], &b, 1) != 1)
			t_fatal("read go");
		fd = passed(s);
		close(s);
		eof_within(fd);
		close(fd);
		if (write(done[1], "d", 1) != 1)
			t_fatal("write done");
		clean += t_wait_child(pid) == 0;
		close(go[0]);
		close(go[1]);
		close(done[0]);
		close(done[1]);
	}
	printf("closed both ways after the pass: EOF, EOF and no error %d of %d times\n", clean,
	       AFTERWARDS);
}

int main(void)
{
	struct t_addr at;
	int l;

	t_start(110);
	l = t_listen_loopback(AF_INET, 64, &at);
	races(&at, l);
	afterwards(&at, l);
	close(l);
	return t_finish();
}
