// SPDX-License-Identifier: MIT
// The address connect() leaves a socket bound to, for the programs that
// check it (t_connect_bind, t_proc_fork_bind): connect and say what it is,
// then check that the accepted end names it as its peer.
#ifndef T_BOUND_H
#define T_BOUND_H

#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "t_harness.h"

// Connect `fd` to `to`, reported as "  connect", and print the address `fd`
// is bound to then ("  bound to HOST"; the port is not printed). Returns
// that address, port included.
static inline struct t_addr t_connect_bound(int fd, const struct t_addr *to)
{
	struct t_addr name;
	char host[64];

	T_REPORT("  connect", connect(fd, (const struct sockaddr *)&to->ss, to->len));
	name = t_sockname(fd);
	printf("  bound to %s\n", t_addr_host(&name, host, sizeof(host)));
	return name;
}

// Accept the connection waiting on `lfd` and expect its peer to be `name`;
// the accepted socket is closed.
static inline void t_accepted_peer_is(int lfd, const struct t_addr *name)
{
	int s = t_accept(lfd);
	struct t_addr peer = t_peername(s);

	t_expect(t_addr_eq(&peer, name), "  the accepted end's peer is that address");
	close(s);
}

#endif
