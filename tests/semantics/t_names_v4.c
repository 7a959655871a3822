// SPDX-License-Identifier: MIT
// getsockname/getpeername/accept addresses over IPv4, compared across the
// two ends: 127.0.0.1 and INADDR_ANY listeners, other 127/8 addresses,
// explicit client binds, short and long address buffers.
// shunt-expect: shm_connect>=6 shm_accept>=6 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *host(const struct t_addr *a)
{
	static char buf[4][64];
	static int i;

	i = (i + 1) % 4;
	return t_addr_host(a, buf[i], sizeof(buf[i]));
}

static void describe(const char *who, const struct t_addr *a)
{
	const struct sockaddr_in *s4 = (const void *)&a->ss;
	static const char zero[8];

	printf("%s: family %s, host %s, port %s, len %u, sin_zero %s\n", who,
	       a->ss.ss_family == AF_INET ? "AF_INET" : "other", host(a),
	       t_addr_port(a) ? "nonzero" : "0", (unsigned)a->len,
	       memcmp(s4->sin_zero, zero, 8) ? "dirty" : "zero");
}

// Connect to `to` from a client optionally bound to `from`, accept on lfd,
// and compare the names seen at both ends.
static void check_connection(int lfd, const struct t_addr *listen_name,
			     const struct t_addr *to, const char *from)
{
	struct t_addr cl, cp, sl, sp, acc = { .len = sizeof(acc.ss) };
	int c, s;

	c = t_socket(AF_INET, SOCK_STREAM);
	if (from) {
		struct t_addr b;

		t_addr_make(&b, from, 0);
		if (bind(c, (struct sockaddr *)&b.ss, b.len) < 0)
			t_fatal("bind(%s)", from);
		cl = t_sockname(c);
		describe("client after bind", &cl);
	}
	if (connect(c, (struct sockaddr *)&to->ss, to->len) < 0)
		t_fatal("connect");
	s = accept(lfd, (struct sockaddr *)&acc.ss, &acc.len);
	if (s < 0)
		t_fatal("accept");
	cl = t_sockname(c);
	cp = t_peername(c);
	sl = t_sockname(s);
	sp = t_peername(s);
	describe("client sockname", &cl);
	describe("client peername", &cp);
	describe("server sockname", &sl);
	describe("server peername", &sp);
	describe("accept() address", &acc);
	t_expect(t_addr_eq(&cp, to), "client peername == address connected to");
	t_expect(t_addr_eq(&sl, &cp), "server sockname == client peername");
	t_expect(t_addr_eq(&sp, &cl), "server peername == client sockname");
	t_expect(t_addr_eq(&acc, &cl), "accept() address == client sockname");
	t_expect(t_addr_port(&cl) != t_addr_port(listen_name),
		 "client port != listener port");
	t_expect(t_addr_port(&sl) == t_addr_port(listen_name),
		 "server port == listener port");
	{
		char buf[8];

		T_REPORT("send(c, \"v4\")", send(c, "v4", 2, 0));
		t_wait_inq(s, 2);
		T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	}
	close(c);
	close(s);
}

static void buffers(int lfd, const struct t_addr *to)
{
	struct sockaddr_storage big;
	struct sockaddr_in small;
	socklen_t len;
	int c, s;

	c = t_connect(to);
	// A 4-byte buffer: truncated, and the full length is reported.
	memset(&small, 0xa5, sizeof(small));
	len = 4;
	s = accept(lfd, (struct sockaddr *)&small, &len);
	if (s < 0)
		t_fatal("accept");
	printf("accept(addrlen 4): addrlen = %u, family %s, bytes past 4 %s\n",
	       (unsigned)len, small.sin_family == AF_INET ? "AF_INET" : "other",
	       small.sin_addr.s_addr == 0xa5a5a5a5 ? "untouched" : "written");
	len = 2;
	memset(&small, 0xa5, sizeof(small));
	T_REPORT("getsockname(addrlen 2)", getsockname(c, (struct sockaddr *)&small, &len));
	printf("getsockname(addrlen 2): addrlen = %u, port bytes %s\n", (unsigned)len,
	       small.sin_port == 0xa5a5 ? "untouched" : "written");
	len = sizeof(big);
	T_REPORT("getpeername(addrlen 128)", getpeername(s, (struct sockaddr *)&big, &len));
	printf("getpeername(addrlen 128): addrlen = %u\n", (unsigned)len);
	len = 0;
	T_REPORT("getpeername(addrlen 0)", getpeername(s, (struct sockaddr *)&big, &len));
	printf("getpeername(addrlen 0): addrlen = %u\n", (unsigned)len);
	T_REPORT("getsockname(NULL addrlen)", getsockname(s, (struct sockaddr *)&big, NULL));
	len = (socklen_t)-1;
	T_REPORT("getsockname(addrlen -1)", getsockname(s, (struct sockaddr *)&big, &len));
	close(c);
	close(s);
}

int main(void)
{
	struct t_addr la, to, un;
	int lfd, fd;
	char buf[64];

	t_start(30);
	// Before connect and on the listener.
	fd = t_socket(AF_INET, SOCK_STREAM);
	un = t_sockname(fd);
	describe("fresh socket sockname", &un);
	T_REPORT("getpeername(fresh socket)",
		 getpeername(fd, (struct sockaddr *)buf, &(socklen_t){ sizeof(buf) }));
	close(fd);

	printf("-- listener on 127.0.0.1\n");
	lfd = t_listen_loopback(AF_INET, 8, &la);
	describe("listener sockname", &la);
	T_REPORT("getpeername(listener)",
		 getpeername(lfd, (struct sockaddr *)buf, &(socklen_t){ sizeof(buf) }));
	check_connection(lfd, &la, &la, NULL);
	printf("-- client bound to 127.0.0.1:0 first\n");
	check_connection(lfd, &la, &la, "127.0.0.1");
	printf("-- address buffers\n");
	buffers(lfd, &la);
	close(lfd);

	printf("-- listener on 0.0.0.0, reached via 127.0.0.1\n");
	lfd = t_listen_on(AF_INET, "0.0.0.0", 8, &la);
	describe("listener sockname", &la);
	t_addr_make(&to, "127.0.0.1", t_addr_port(&la));
	check_connection(lfd, &la, &to, NULL);
	printf("-- same listener reached via 127.0.0.2 from 127.0.0.3\n");
	t_addr_make(&to, "127.0.0.2", t_addr_port(&la));
	check_connection(lfd, &la, &to, "127.0.0.3");
	printf("-- same listener reached via 127.0.0.2, no client bind\n");
	check_connection(lfd, &la, &to, NULL);
	close(lfd);
	return t_finish();
}
