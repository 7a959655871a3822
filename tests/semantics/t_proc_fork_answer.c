// SPDX-License-Identifier: MIT
// A server that forks a process per connection (as PostgreSQL does), whose
// child answers a client that waits for the answer in poll(), in another
// process, one connection after another: every answer wakes the client.
// Under shunt each child needs a link with the client to wake it, asked of
// shuntd when it first answers (the client's blocking reads, as in
// socketserver's tests, need none). The race PostgreSQL met there, a link
// refused while shuntd had not yet read the client's journal, is in
// tests/apps/test_postgres.py; this keeps the path itself covered.
// shunt-expect: shm_connect>=30 shm_accept>=30 kernel_connect==0 kernel_accept==0
// t-timeout: 90
#include "t_harness.h"

#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum {
	ROUNDS = 30,
	ANSWER_MS = 5000,	// far beyond any answer's time: a wait this long is a lost one
	WATCHDOG_S = 80,
};

static void client(struct t_chan *port)
{
	struct t_addr a;
	unsigned answered = 0, late = 0, wrong = 0;

	t_addr_make(&a, "127.0.0.1", (uint16_t)t_chan_get(port));
	for (uint32_t i = 0; i < ROUNDS; i++) {
		int s = t_connect(&a);
		struct pollfd p = { s, POLLIN, 0 };
		uint32_t back = 0;

		t_send_all(s, &i, sizeof(i));
		if (poll(&p, 1, ANSWER_MS) != 1) {
			late++;
		} else {
			t_recv_all(s, &back, sizeof(back));
			if (back == i + 1)
				answered++;
			else
				wrong++;
		}
		close(s);
	}
	printf("answered %u of %u, late %u, wrong %u\n", answered, ROUNDS, late, wrong);
	fflush(stdout);
}

static void serve(int lfd)
{
	for (unsigned i = 0; i < ROUNDS; i++) {
		int s = t_accept(lfd);
		pid_t pid = fork();

		if (pid < 0)
			t_fatal("fork");
		if (pid == 0) {
			uint32_t n;

			close(lfd);
			t_recv_all(s, &n, sizeof(n));
			n++;
			t_send_all(s, &n, sizeof(n));
			close(s);
			_exit(0);
		}
		close(s);
		if (t_wait_child(pid) != 0)
			t_fatal("a child failed");
	}
}

int main(void)
{
	struct t_chan port;
	struct t_addr bound;
	pid_t pid;
	int lfd;

	t_start(WATCHDOG_S);
	t_chan_open(&port);
	pid = t_fork_tied(WATCHDOG_S);
	if (pid == 0) {
		client(&port);
		exit(0);	/* with its stats line */
	}
	lfd = t_listen_loopback(AF_INET, 16, &bound);
	t_chan_put(&port, t_addr_port(&bound));
	serve(lfd);
	close(lfd);
	T_REPORT("client exit", t_wait_child(pid));
	return t_finish();
}
