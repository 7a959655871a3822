// SPDX-License-Identifier: MIT
// IP_BIND_ADDRESS_NO_PORT: a socket bound with it has an address but no
// port until connect() gives it one. After connect it names a port of its
// own, keeps the option set, and the accepted end names it as its peer;
// the same for a socket that set the option and was never bound, over IPv4
// and IPv6, several times over (later connects go through shunt's channel).
// shunt-expect: shm_connect>=12 kernel_connect==0
#include "t_bound.h"
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void no_port(int fd)
{
	int on = 1;

	if (setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof(on)))
		t_fatal("IP_BIND_ADDRESS_NO_PORT");
}

static void one(int family, int lfd, const struct t_addr *to, bool bound)
{
	struct t_addr here, name;
	int fd = t_socket(family, SOCK_STREAM), opt = 0;
	socklen_t len = sizeof(opt);

	no_port(fd);
	if (bound) {
		t_addr_make(&here, family == AF_INET ? "127.0.0.1" : "::1", 0);
		T_REPORT("  bind", bind(fd, (struct sockaddr *)&here.ss, here.len));
		name = t_sockname(fd);
		t_expect(t_addr_port(&name) == 0, "  no port before connect");
	}
	T_REPORT("  connect", connect(fd, (const struct sockaddr *)&to->ss, to->len));
	name = t_sockname(fd);
	t_expect(t_addr_port(&name) != 0, "  a port after connect");
	getsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &opt, &len);
	t_expect(opt == 1, "  the option still set");
	t_accepted_peer_is(lfd, &name);
	close(fd);
}

int main(void)
{
	static const int families[] = { AF_INET, AF_INET6 };

	t_start(30);
	for (unsigned f = 0; f < 2; f++) {
		struct t_addr to;
		int lfd = t_listen_loopback(families[f], 16, &to);

		for (int round = 0; round < 3; round++) {
			printf("%s, bound, round %d:\n", families[f] == AF_INET ? "IPv4" : "IPv6",
			       round);
			one(families[f], lfd, &to, true);
			printf("%s, never bound, round %d:\n",
			       families[f] == AF_INET ? "IPv4" : "IPv6", round);
			one(families[f], lfd, &to, false);
		}
		close(lfd);
	}
	return t_finish();
}
