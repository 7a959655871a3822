// SPDX-License-Identifier: MIT
// Bytes held back by TCP_CORK when processes come and go: a process that
// exits or is killed with bytes held back sends them before its FIN; after
// fork, held bytes still go out when the forking process lets go of the
// socket, or when nobody does anything at all.
// shunt-expect: shm_connect>=4 shm_accept>=4 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void cork(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)))
		t_fatal("TCP_CORK");
}

// Read until EOF and print what came.
static void read_to_eof(const char *what, int s)
{
	char buf[64];
	size_t got = 0;
	ssize_t r;

	while ((r = recv(s, buf + got, sizeof(buf) - 1 - got, 0)) > 0)
		got += (size_t)r;
	buf[got] = 0;
	printf("%s: read \"%s\", then %s\n", what, buf, r == 0 ? "EOF" : t_errname(errno));
}

// The corking process is forked before any socket exists and holds the
// only descriptor of its end: its exit, or its death, closes it.
static void exits_corked(bool killed)
{
	const char *what = killed ? "killed with bytes held back" : "exited with bytes held back";
	struct t_chan port, sent;
	struct t_addr a;
	pid_t pid;
	int c;

	t_chan_open(&port);
	t_chan_open(&sent);
	pid = t_fork_tied(30);
	if (!pid) {
		int lfd = t_listen_loopback(AF_INET, 1, &a), s;

		t_chan_put(&port, t_addr_port(&a));
		s = t_accept(lfd);
		cork(s);
		t_send_all(s, "held", 4);
		t_chan_put(&sent, 1);
		if (killed)
			for (;;)
				pause();
		exit(0);	// no close: the exit closes it
	}
	t_addr_make(&a, "127.0.0.1", (uint16_t)t_chan_get(&port));
	c = t_connect(&a);
	t_chan_get(&sent);
	if (killed)
		t_kill_child(pid);
	else
		t_wait_child(pid);
	read_to_eof(what, c);
	close(c);
}

// After fork, the child holds the corked socket too.
static void forked_corked(bool parent_closes)
{
	const char *what = parent_closes ? "forked, the parent closes, the child waits"
					 : "forked, nobody does anything";
	struct t_chan go;
	pid_t pid;
	int c, s;

	t_pair(AF_INET, &c, &s);
	cork(c);
	t_send_all(c, "abc", 3);
	t_chan_open(&go);
	pid = t_fork_tied(30);
	if (!pid) {
		close(s);
		t_chan_get(&go);
		exit(0);
	}
	if (parent_closes)
		close(c);
	t_wait_inq(s, 3);
	printf("%s: the held bytes arrive\n", what);
	t_chan_put(&go, 1);
	t_wait_child(pid);
	if (!parent_closes)
		close(c);
	read_to_eof(what, s);
	close(s);
	close(go.rd);
	close(go.wr);
}

int main(void)
{
	t_start(30);
	exits_corked(false);
	exits_corked(true);
	forked_corked(true);
	forked_corked(false);
	return t_finish();
}
