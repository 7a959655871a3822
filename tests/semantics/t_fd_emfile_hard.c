// SPDX-License-Identifier: MIT
// A program whose hard descriptor limit equals its soft one (`ulimit -n N`),
// at that limit: with every descriptor taken, connect still works (it needs
// no new descriptor), and so does everything after freeing some: accept,
// more connections, the conversation on each. There is no room above the
// limit for the library's own descriptors here, so the library must neither
// lose its session with shuntd nor leave a socket it cannot connect: the
// first connection goes through the kernel, later ones through shared
// memory again. How many descriptors the program gets before EMFILE is
// not printed: with no room above the limit the library's own take some
// (docs/differences.md).
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect>=1 kernel_accept>=1
#include "t_harness.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum {
	LIMIT = 128,
	FREE_LATER = 8,
};

static int opened[LIMIT];
static int nopened;

static void free_some(int n)
{
	while (n-- && nopened)
		close(opened[--nopened]);
}

static void talk(const char *label, int c, int s)
{
	char buf[16] = { 0 };

	printf("%s:\n", label);
	T_REPORT("  send(client)", send(c, "ping", 4, 0));
	T_REPORT_DATA("  recv(server)", recv(s, buf, sizeof(buf) - 1, 0), buf);
	T_REPORT("  send(server)", send(s, "pong", 4, 0));
	memset(buf, 0, sizeof(buf));
	T_REPORT_DATA("  recv(client)", recv(c, buf, sizeof(buf) - 1, 0), buf);
}

int main(void)
{
	struct rlimit old;
	struct t_addr bound;
	int lfd, c1, c2, s;

	t_start(60);
	t_nofile_exactly(LIMIT, &old);

	lfd = t_listen_loopback(AF_INET, 8, &bound);
	c1 = t_socket(AF_INET, SOCK_STREAM);
	c2 = t_socket(AF_INET, SOCK_STREAM);
	nopened = t_fill_up(opened, LIMIT);
	T_REPORT("connect at the limit", connect(c1, (struct sockaddr *)&bound.ss, bound.len));
	T_REPORT("connect again", connect(c1, (struct sockaddr *)&bound.ss, bound.len));
	T_REPORT("send at the limit", send(c1, "hi", 2, 0));

	free_some(1);
	s = (int)T_REPORT_FD("accept with one free", accept(lfd, NULL, NULL));
	if (s < 0)
		t_fatal("accept");
	{
		char buf[4] = { 0 };

		T_REPORT_DATA("recv", recv(s, buf, 2, 0), buf);
	}
	talk("the first connection", c1, s);
	close(s);
	close(c1);

	free_some(FREE_LATER);
	T_REPORT("connect with room", connect(c2, (struct sockaddr *)&bound.ss, bound.len));
	s = (int)T_REPORT_FD("accept", accept(lfd, NULL, NULL));
	if (s < 0)
		t_fatal("accept");
	talk("the second connection", c2, s);
	close(s);
	close(c2);
	close(lfd);
	free_some(LIMIT);
	/* Back as it was, where the process may (root): the exit report needs nothing more. */
	setrlimit(RLIMIT_NOFILE, &old);
	return t_finish();
}
