// SPDX-License-Identifier: MIT
/*
 * A TCP server or client for the container tests (test_containers.py): it
 * prints what the kernel (or shunt) says about each connection, so a plain
 * run and a run under shunt can be compared line by line.
 *
 *   nsprobe server ADDR PORT TAG [COUNT]  listen, then for each of COUNT (1)
 *                                         connections print its addresses and
 *                                         the request, answer "TAG:<request>"
 *   nsprobe client ADDR PORT [SRC]        connect (from SRC if given), print
 *                                         the addresses or the errno's name,
 *                                         send a request, print the answer
 *   nsprobe move ADDR PORT NETNS          a client's exchange, a socket made,
 *                                         setns into the namespace file NETNS,
 *                                         an exchange on a new socket, then one
 *                                         on the socket made before the move
 *                                         (the kernel keeps it in its own
 *                                         namespace)
 *
 * Lines: "listening", "accepted local IP PORT peer IP PORT", "request TEXT",
 * "connected local IP PORT peer IP PORT", "connect ENAME", "reply TEXT".
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static int fail(const char *what)
{
	printf("error %s %s\n", what, strerrorname_np(errno));
	return 1;
}

/* ADDR and PORT as a sockaddr of their family. */
static socklen_t parse(const char *addr, const char *port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons((uint16_t)atoi(port));
		return sizeof(*in);
	}
	if (inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)atoi(port));
		return sizeof(*in6);
	}
	fprintf(stderr, "nsprobe: %s: not an address\n", addr);
	exit(2);
}

static void name(const struct sockaddr_storage *ss, char *buf, size_t n)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;

	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;

		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		port = ntohs(in->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;

		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		port = ntohs(in6->sin6_port);
	}
	snprintf(buf, n, "%s %u", ip, port);
}

static void print_names(const char *what, int fd)
{
	struct sockaddr_storage a, b;
	socklen_t la = sizeof(a), lb = sizeof(b);
	char sa[80], sb[80];

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	if (getsockname(fd, (struct sockaddr *)&a, &la) < 0)
		snprintf(sa, sizeof(sa), "%s -", strerrorname_np(errno));
	else
		name(&a, sa, sizeof(sa));
	if (getpeername(fd, (struct sockaddr *)&b, &lb) < 0)
		snprintf(sb, sizeof(sb), "%s -", strerrorname_np(errno));
	else
		name(&b, sb, sizeof(sb));
	printf("%s local %s peer %s\n", what, sa, sb);
	fflush(stdout);
}

/* Read until EOF (or 5 s of silence) into @buf, NUL-terminated. */
static ssize_t read_all(int fd, char *buf, size_t n)
{
	size_t got = 0;

	while (got < n - 1) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t r;

		if (poll(&p, 1, 5000) != 1)
			return -1;
		r = recv(fd, buf + got, n - 1 - got, 0);
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	buf[got] = 0;
	return (ssize_t)got;
}

static int server(const char *addr, const char *port, const char *tag, int count)
{
	struct sockaddr_storage ss;
	socklen_t len = parse(addr, port, &ss);
	int one = 1, fd = socket(ss.ss_family, SOCK_STREAM, 0);

	if (fd < 0)
		return fail("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0)
		return fail("bind");
	if (listen(fd, 8) < 0)
		return fail("listen");
	printf("listening\n");
	fflush(stdout);
	for (int i = 0; i < count; i++) {
		struct pollfd p = { fd, POLLIN, 0 };
		char req[256], reply[300];
		int c;

		if (poll(&p, 1, 15000) != 1) {
			printf("timeout waiting for a connection\n");
			return 1;
		}
		c = accept(fd, NULL, NULL);
		if (c < 0)
			return fail("accept");
		print_names("accepted", c);
		if (read_all(c, req, sizeof(req)) < 0)
			return fail("recv");
		printf("request %s\n", req);
		fflush(stdout);
		snprintf(reply, sizeof(reply), "%s:%s", tag, req);
		if (send(c, reply, strlen(reply), 0) < 0)
			return fail("send");
		close(c);
	}
	close(fd);
	return 0;
}

/* Connect @fd (from SRC if given) to ADDR PORT, send a request, print what happens. */
static int exchange(int fd, const char *addr, const char *port, const char *src)
{
	struct sockaddr_storage ss;
	socklen_t len = parse(addr, port, &ss);
	char reply[300];

	if (fd < 0)
		return fail("socket");
	if (src) {
		struct sockaddr_storage from;
		socklen_t flen = parse(src, "0", &from);

		if (bind(fd, (struct sockaddr *)&from, flen) < 0)
			return fail("bind");
	}
	if (connect(fd, (struct sockaddr *)&ss, len) < 0) {
		printf("connect %s\n", strerrorname_np(errno));
		return 0;
	}
	print_names("connected", fd);
	if (send(fd, "hello", 5, 0) != 5)
		return fail("send");
	shutdown(fd, SHUT_WR);
	if (read_all(fd, reply, sizeof(reply)) < 0)
		return fail("recv");
	printf("reply %s\n", reply);
	close(fd);
	return 0;
}

static int family_of(const char *addr)
{
	return strchr(addr, ':') ? AF_INET6 : AF_INET;
}

static int client(const char *addr, const char *port, const char *src)
{
	return exchange(socket(family_of(addr), SOCK_STREAM, 0), addr, port, src);
}

static int move(const char *addr, const char *port, const char *netns)
{
	int before, ns;

	if (client(addr, port, NULL))
		return 1;
	before = socket(family_of(addr), SOCK_STREAM, 0);
	ns = open(netns, O_RDONLY | O_CLOEXEC);
	if (ns < 0 || setns(ns, CLONE_NEWNET) < 0)
		return fail("setns");
	close(ns);
	printf("moved\n");
	if (client(addr, port, NULL))
		return 1;
	printf("the socket made before the move:\n");
	return exchange(before, addr, port, NULL);
}

int main(int argc, char **argv)
{
	if (argc >= 5 && !strcmp(argv[1], "server"))
		return server(argv[2], argv[3], argv[4], argc > 5 ? atoi(argv[5]) : 1);
	if (argc >= 4 && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3], argc > 4 ? argv[4] : NULL);
	if (argc >= 5 && !strcmp(argv[1], "move"))
		return move(argv[2], argv[3], argv[4]);
	fprintf(stderr, "usage: nsprobe server ADDR PORT TAG [COUNT] | client ADDR PORT [SRC] | "
		"move ADDR PORT NETNS\n");
	return 2;
}
