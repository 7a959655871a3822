// SPDX-License-Identifier: MIT
// A server at its descriptor limit that keeps one descriptor in reserve for
// that moment, as Twisted and libuv do: when accept says EMFILE it closes
// the reserve, accepts, serves (or closes) the connection and opens the
// reserve again. The hard limit equals the soft one (`ulimit -n N`, many
// containers), so the library's own descriptors share the program's range.
// The client is a new process, which connects once a round while the
// server is at its limit: its first connection waits in shared memory on
// a channel the server has not mapped yet, and the server's library must
// take it with the single number the program freed, where the kernel needs
// no more (fdroom.c); the later ones come through that channel. Found by
// Twisted's test_closePeerOnEMFILE, which spun at stop 32 (accept said
// EMFILE again and again). How many descriptors the program gets before EMFILE is not
// printed: the library's own take some of the range here
// (docs/differences.md).
// shunt-expect: shm_accept>=3 kernel_accept==0
#include "t_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum {
	LIMIT = 256,
	ROUNDS = 3,
};

static int opened[LIMIT];
static int nopened;

/* The client process: a connection a round, each saying which it is and waiting for the answer. */
static void client(int lfd, const struct t_addr *to, struct t_chan *start, struct t_chan *go)
{
	/* The listener is not the client's to keep. */
	close(lfd);
	t_chan_get(start);
	for (int round = 1; round <= ROUNDS; round++) {
		char msg[16], buf[16] = { 0 };
		int c = t_connect(to);

		snprintf(msg, sizeof(msg), "ping %d", round);
		t_send_all(c, msg, strlen(msg));
		t_chan_put(go, (uint32_t)round);
		if (recv(c, buf, sizeof(buf) - 1, MSG_WAITALL) != 6 || strcmp(buf, "pong 0") != 0)
			_exit(3);
		close(c);
	}
	_exit(0);
}

int main(void)
{
	struct rlimit old;
	struct t_addr bound;
	struct t_chan start, go;
	int lfd, reserve;
	pid_t pid;

	t_start(60);
	t_nofile_exactly(LIMIT, &old);

	lfd = t_listen_loopback(AF_INET, 8, &bound);
	t_chan_open(&start);
	t_chan_open(&go);
	reserve = open("/dev/null", O_RDONLY);
	if (reserve < 0)
		t_fatal("open the reserve");
	/* Forked before: the client has all the room it needs, as a peer would. */
	pid = t_fork();
	if (pid == 0)
		client(lfd, &bound, &start, &go);
	nopened = t_fill_up(opened, LIMIT);
	t_chan_put(&start, 1);
	for (int round = 1; round <= ROUNDS; round++) {
		char buf[16] = { 0 };
		int s, again;

		printf("round %d:\n", round);
		/* Its connection is queued, its first bytes sent. */
		t_chan_get(&go);
		T_REPORT("  accept at the limit", accept(lfd, NULL, NULL));
		T_REPORT("  close(reserve)", close(reserve));
		s = (int)T_REPORT_FD("  accept with the reserve's number free", accept(lfd, NULL, NULL));
		if (s < 0)
			t_fatal("accept");
		printf("  on the reserve's number: %s\n", s == reserve ? "yes" : "no");
		T_REPORT_DATA("  recv", recv(s, buf, 6, MSG_WAITALL), buf);
		T_REPORT("  send", send(s, "pong 0", 6, 0));
		T_REPORT("  close", close(s));
		again = open("/dev/null", O_RDONLY);
		printf("  the reserve again on its number: %s\n", again == reserve ? "yes" : "no");
		reserve = again;
	}
	T_REPORT("the client's exit", t_wait_child(pid));
	close(lfd);
	for (int i = 0; i < nopened; i++)
		close(opened[i]);
	close(reserve);
	/* Back as it was, where the process may (root): the exit report needs nothing more. */
	setrlimit(RLIMIT_NOFILE, &old);
	return t_finish();
}
