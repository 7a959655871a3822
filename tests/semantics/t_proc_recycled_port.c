// SPDX-License-Identifier: MIT
// The port of a connection that ended (the server closed first) is free
// again for this process's next socket to bind (without SO_REUSEADDR,
// which two bound sockets could share it with), as the kernel has it, even
// where shunt answers that socket() with the ended connection's kernel
// half, still bound to that port (src/preload/recycle.h): the bind gives
// the socket a fresh half, and nothing of the library's may keep the old
// one, and its port, open (spare.h: the copy kept since socket() goes with
// it).
// shunt-expect: shm_connect>=1 recycled>=1 recycled_fresh>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <unistd.h>

int main(void)
{
	struct t_addr srv, mine, at;
	int l, c, s, fd;
	char b = 'x';

	t_start(20);
	l = t_listen_loopback(AF_INET, 4, &srv);
	c = t_connect(&srv);
	s = t_accept(l);
	mine = t_sockname(c);
	if (send(c, &b, 1, 0) != 1 || recv(s, &b, 1, 0) != 1)
		t_fatal("one byte across");
	close(s);
	if (recv(c, &b, 1, 0) != 0)
		t_fatal("the end of the connection");
	close(c);
	// For shuntd to read that it ended: only then is the half handed out again.
	t_sleep_ms(50);

	fd = t_socket(AF_INET, SOCK_STREAM);
	t_addr_make(&at, "127.0.0.1", t_addr_port(&mine));
	T_REPORT("bind to the ended connection's port", bind(fd, (struct sockaddr *)&at.ss, at.len));
	T_REPORT("listen there", listen(fd, 1));
	c = t_connect(&at);
	s = t_accept(fd);
	printf("a connection to it: %s\n", s >= 0 ? "accepted" : "none");
	close(s);
	close(c);
	close(fd);
	close(l);
	return t_finish();
}
