// SPDX-License-Identifier: MIT
// Socket names over IPv6: ::1 and :: listeners, a dual-stack :: listener
// reached by an IPv4 client (v4-mapped peer), IPV6_V6ONLY, and an AF_INET6
// socket connecting to a v4-mapped address.
// shunt-expect: shm_connect>=6 shm_accept>=6 kernel_accept==0
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
	const struct sockaddr_in6 *s6 = (const void *)&a->ss;

	if (a->ss.ss_family != AF_INET6) {
		printf("%s: family %s, host %s, port %s, len %u\n", who,
		       a->ss.ss_family == AF_INET ? "AF_INET" : "other", host(a),
		       t_addr_port(a) ? "nonzero" : "0", (unsigned)a->len);
		return;
	}
	printf("%s: family AF_INET6, host %s, port %s, len %u, flowinfo %u, "
	       "scope_id %u\n",
	       who, host(a), t_addr_port(a) ? "nonzero" : "0", (unsigned)a->len,
	       s6->sin6_flowinfo, s6->sin6_scope_id);
}

// The same address in both families: ::ffff:a.b.c.d equals a.b.c.d.
static bool same_endpoint(const struct t_addr *a, const struct t_addr *b)
{
	const struct sockaddr_in6 *s6;
	const struct sockaddr_in *s4;

	if (a->ss.ss_family == b->ss.ss_family)
		return t_addr_eq(a, b);
	if (a->ss.ss_family == AF_INET)
		return same_endpoint(b, a);
	s6 = (const void *)&a->ss;
	s4 = (const void *)&b->ss;
	return IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) &&
	       !memcmp(&s6->sin6_addr.s6_addr[12], &s4->sin_addr, 4) &&
	       s6->sin6_port == s4->sin_port;
}

static void check_connection(int lfd, const struct t_addr *to)
{
	struct t_addr cl, cp, sl, sp, acc = { .len = sizeof(acc.ss) };
	int c, s;

	c = t_connect(to);
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
	t_expect(same_endpoint(&sl, &cp), "server sockname ~ client peername");
	t_expect(same_endpoint(&sp, &cl), "server peername ~ client sockname");
	t_expect(t_addr_eq(&acc, &sp), "accept() address == server peername");
	{
		char buf[8];

		T_REPORT("send(c, \"v6\")", send(c, "v6", 2, 0));
		t_wait_inq(s, 2);
		T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	}
	close(c);
	close(s);
}

static int v6_listener(const char *ip, int v6only, struct t_addr *bound)
{
	struct t_addr a;
	int fd = t_socket(AF_INET6, SOCK_STREAM);

	if (v6only >= 0 &&
	    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only)) < 0)
		t_fatal("IPV6_V6ONLY");
	t_addr_make(&a, ip, 0);
	if (bind(fd, (struct sockaddr *)&a.ss, a.len) < 0 || listen(fd, 8) < 0)
		t_fatal("bind/listen [%s]", ip);
	*bound = t_sockname(fd);
	return fd;
}

int main(void)
{
	struct t_addr la, to, a;
	int lfd, fd, v;
	socklen_t len;

	t_start(30);
	fd = socket(AF_INET6, SOCK_STREAM, 0);
	if (fd < 0)
		t_skip("no IPv6 sockets: %s", t_errname(errno));
	t_addr_make(&a, "::1", 0);
	if (bind(fd, (struct sockaddr *)&a.ss, a.len) < 0)
		t_skip("cannot bind ::1: %s", t_errname(errno));
	close(fd);

	fd = t_socket(AF_INET6, SOCK_STREAM);
	a = t_sockname(fd);
	describe("fresh socket sockname", &a);
	close(fd);

	printf("-- listener on ::1\n");
	lfd = v6_listener("::1", -1, &la);
	describe("listener sockname", &la);
	check_connection(lfd, &la);
	close(lfd);

	printf("-- listener on ::, V6ONLY 0, reached via ::1\n");
	lfd = v6_listener("::", 0, &la);
	describe("listener sockname", &la);
	len = sizeof(v);
	if (getsockopt(lfd, IPPROTO_IPV6, IPV6_V6ONLY, &v, &len) < 0)
		t_fatal("getsockopt(IPV6_V6ONLY)");
	printf("IPV6_V6ONLY = %d\n", v);
	t_addr_make(&to, "::1", t_addr_port(&la));
	check_connection(lfd, &to);
	printf("-- same listener reached by an IPv4 client via 127.0.0.1\n");
	t_addr_make(&to, "127.0.0.1", t_addr_port(&la));
	check_connection(lfd, &to);
	printf("-- same listener, AF_INET6 client to ::ffff:127.0.0.1\n");
	t_addr_make(&to, "::ffff:127.0.0.1", t_addr_port(&la));
	check_connection(lfd, &to);
	close(lfd);

	printf("-- listener on ::, V6ONLY 1\n");
	lfd = v6_listener("::", 1, &la);
	t_addr_make(&to, "::1", t_addr_port(&la));
	check_connection(lfd, &to);
	t_addr_make(&to, "127.0.0.1", t_addr_port(&la));
	fd = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("IPv4 connect to a V6ONLY listener's port",
		 connect(fd, (struct sockaddr *)&to.ss, to.len));
	close(fd);
	close(lfd);

	printf("-- IPv4 listener, AF_INET6 client to ::ffff:127.0.0.1\n");
	lfd = t_listen_loopback(AF_INET, 8, &la);
	t_addr_make(&to, "::ffff:127.0.0.1", t_addr_port(&la));
	check_connection(lfd, &to);
	fd = t_socket(AF_INET6, SOCK_STREAM);
	v = 1;
	setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v, sizeof(v));
	T_REPORT("V6ONLY socket connect to ::ffff:127.0.0.1",
		 connect(fd, (struct sockaddr *)&to.ss, to.len));
	close(fd);
	close(lfd);
	return t_finish();
}
