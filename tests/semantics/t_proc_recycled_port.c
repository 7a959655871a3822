// SPDX-License-Identifier: MIT
// The port of a connection that ended (the server closed first) is free
// again once this process's next socket is given an address of its own,
// as the kernel has it, even where shunt answered that socket() with the
// ended connection's kernel half, still bound to that port
// (src/preload/recycle.h): the bind gives the socket a fresh half, and
// nothing of the library's may keep the old one, and its port, open
// (spare.h: the copy kept since socket() goes with it). Another socket then
// binds the port. The port is an ephemeral one, which a TIME_WAIT socket
// of an earlier connection elsewhere may still hold (the kernel's connect
// shares ports across destinations), so the kernel too says EADDRINUSE now
// and then: a round that meets it is tried again, and only a port that
// stays taken round after round is a failure.
// shunt-expect: shm_connect>=1 recycled>=1 recycled_fresh>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <unistd.h>

enum { ROUNDS = 10 };

// One round: 0 when the ended connection's port could be bound, else the errno.
static int round_once(const struct t_addr *srv, int l)
{
	struct t_addr mine, at;
	int c, s, fd, g, one = 1, err = 0;
	char b = 'x';

	c = t_connect(srv);
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

	// An address elsewhere (127.0.0.2, so that its port cannot be the one checked).
	fd = t_socket(AF_INET, SOCK_STREAM);
	t_addr_make(&at, "127.0.0.2", 0);
	if (bind(fd, (struct sockaddr *)&at.ss, at.len))
		t_fatal("bind the next socket to 127.0.0.2:0");
	g = t_socket(AF_INET, SOCK_STREAM);
	if (setsockopt(g, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)))
		t_fatal("SO_REUSEADDR");
	t_addr_make(&at, "127.0.0.1", t_addr_port(&mine));
	if (bind(g, (struct sockaddr *)&at.ss, at.len) == 0) {
		if (listen(g, 1))
			t_fatal("listen");
		c = t_connect(&at);
		s = t_accept(g);
		close(s);
		close(c);
	} else {
		err = errno;
	}
	close(g);
	close(fd);
	return err;
}

int main(void)
{
	struct t_addr srv;
	int l, err = 0;

	t_start(30);
	l = t_listen_loopback(AF_INET, 4, &srv);
	for (int i = 0; i < ROUNDS; i++) {
		err = round_once(&srv, l);
		if (err != EADDRINUSE)
			break;
	}
	printf("the ended connection's port bound again, listened on and reached: %s\n",
	       err ? t_errname(err) : "yes");
	close(l);
	return t_finish();
}
