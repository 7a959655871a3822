// SPDX-License-Identifier: MIT
/*
 * tcp_count: do the kernel's byte counts of a TCP connection
 * (src/common/tcp_count.c) say exactly what each end wrote and read, at
 * every moment, while data is queued, unacknowledged and arriving? And can
 * a direction switch to another carrier at the count its sender reports,
 * the receiver finding the boundary by its own count alone? Run by
 * tests/integration/test_tcp_count.py.
 *
 *   tcp_count [--ops N] [--seed S] [--fork 1] [--ns-server NS --ns-client NS
 *              --addr IP]
 *
 * One connection (over loopback, or from namespace NS-CLIENT to IP in
 * NS-SERVER). Both ends write and read random amounts (1 B to 256 KiB,
 * non-blocking), and after each call compare the kernel's counts with
 * their own; with --fork 1 the ends are two processes, so that ACKs and
 * segments land while a count is being taken. Then:
 *   1. urgent data (one process only): the read count is refused while an
 *      urgent byte waits, and counts it once read past;
 *   2. the client stops writing to the socket and asks its count C; the
 *      rest of its stream goes through a socketpair (the "circuit"); the
 *      server reads the socket until its own count says C, finds nothing
 *      more queued there, then reads the socketpair; every byte of the
 *      stream is checked where it lands;
 *   3. FIN: after shutdown(SHUT_WR) both counts leave the FIN out.
 * Prints "ok CHECKS naive_wrong N" and exits 0 (N: how often a count
 * taken without the second TCP_INFO read would have been wrong), or says
 * what differed and exits 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "common/tcp_count.h"

enum { BUF = 256 * 1024 };

static uint64_t checks;

static void die(const char *what)
{
	fprintf(stderr, "tcp_count: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("FAIL: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* 1 B to 256 KiB, small sizes as likely as large ones. */
static size_t rnd_size(void)
{
	size_t top = (size_t)1 << (rnd() % 19);

	return 1 + (size_t)(rnd() % top) % BUF;
}

/* Byte @i of the stream of direction @dir (0: client to server). */
static uint8_t pattern(int dir, uint64_t i)
{
	uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)dir << 63;

	return (uint8_t)(x >> 56);
}

/* One end: its socket, and what it wrote and read of each direction. */
struct end {
	const char *name;
	int fd, dir;		/* dir: the direction it writes */
	bool connector;
	uint64_t wrote, read;	/* of the socket, not the switched stream's tail */
	bool draining;		/* after shutdown: the peer may end the connection */
};

enum { STATE_CLOSE = 7 };	/* the kernel's TCP_CLOSE */

/* Whether @fd's connection is over at both ends: the counts are refused then. */
static bool closed(int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	return getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == STATE_CLOSE;
}

/*
 * The same counts from one TCP_INFO and one ioctl, without the second
 * TCP_INFO that catches what lands between them: how often that would be
 * wrong (printed; the reason shunt_tcp_written and _read read it twice).
 */
static uint64_t naive_wrong;

static void check_naive(const struct end *e)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	int out = 0, in = 0;
	uint64_t w, r;

	if (getsockopt(e->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
	    ioctl(e->fd, SIOCOUTQ, &out) < 0)
		return;
	w = ti.tcpi_bytes_acked + (uint64_t)out - e->connector;
	if (getsockopt(e->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
	    ioctl(e->fd, SIOCINQ, &in) < 0)
		return;
	r = ti.tcpi_bytes_received - (uint64_t)in;
	naive_wrong += (w != e->wrote) + (r != e->read);
}

static void check_counts(const struct end *e)
{
	uint64_t w, r;
	int rc;

	if ((rc = shunt_tcp_written(e->fd, e->connector, &w)) == -ENOTCONN && e->draining &&
	    closed(e->fd))
		return;
	if (rc < 0)
		fail("%s: written count: %s", e->name, strerror(-rc));
	if (w != e->wrote)
		fail("%s: the kernel counts %" PRIu64 " bytes written, it wrote %" PRIu64, e->name,
		     w, e->wrote);
	if ((rc = shunt_tcp_read(e->fd, &r)) == -ENOTCONN && e->draining && closed(e->fd))
		return;
	if (rc < 0)
		fail("%s: read count: %s", e->name, strerror(-rc));
	if (r != e->read)
		fail("%s: the kernel counts %" PRIu64 " bytes read, it read %" PRIu64, e->name, r,
		     e->read);
	checks++;
}

static void write_some(struct end *e, uint8_t *buf)
{
	size_t n = rnd_size();

	for (size_t i = 0; i < n; i++)
		buf[i] = pattern(e->dir, e->wrote + i);
	ssize_t k = send(e->fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (k < 0 && errno != EAGAIN)
		die("send");
	if (k > 0)
		e->wrote += (uint64_t)k;
}

static void verify(const char *who, int dir, uint64_t at, const uint8_t *buf, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (buf[i] != pattern(dir, at + i))
			fail("%s: byte %" PRIu64 " of direction %d is wrong", who, at + i, dir);
}

/* Returns what it read, 0 at EOF, -1 when nothing was there. */
static ssize_t read_some(struct end *e, uint8_t *buf, size_t max)
{
	size_t n = rnd_size();
	ssize_t k = recv(e->fd, buf, n < max ? n : max, MSG_DONTWAIT);

	if (k < 0 && errno != EAGAIN)
		die("recv");
	if (k <= 0)
		return k;
	verify(e->name, !e->dir, e->read, buf, (size_t)k);
	e->read += (uint64_t)k;
	return k;
}

/* Random writes and reads of one end, its counts checked after each. */
static void churn(struct end *e, uint64_t ops, uint8_t *buf)
{
	for (uint64_t i = 0; i < ops; i++) {
		if (rnd() % 2)
			write_some(e, buf);
		else
			read_some(e, buf, BUF);
		check_counts(e);
		check_naive(e);
	}
}

static int in_ns(const char *ns)
{
	char path[256];
	int fd, self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);

	if (!ns)
		return self;
	snprintf(path, sizeof(path), "/run/netns/%s", ns);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWNET) < 0)
		die(path);
	close(fd);
	return self;
}

static void back_to(int self)
{
	if (setns(self, CLONE_NEWNET) < 0)
		die("setns back");
	close(self);
}

static void pair(const char *ns_srv, const char *ns_cli, const char *ip, int *cfd, int *sfd)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int self = in_ns(ns_srv), lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (inet_pton(AF_INET, ip, &a.sin_addr) != 1)
		fail("bad address %s", ip);
	if (lfd < 0 || bind(lfd, (void *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
	    getsockname(lfd, (void *)&a, &len) < 0)
		die("listen");
	back_to(self);
	self = in_ns(ns_cli);
	*cfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (*cfd < 0 || connect(*cfd, (void *)&a, sizeof(a)) < 0)
		die("connect");
	back_to(self);
	*sfd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	if (*sfd < 0)
		die("accept");
	close(lfd);
}

static uint64_t inq(int fd)
{
	int v = 0;

	if (ioctl(fd, SIOCINQ, &v) < 0)
		die("SIOCINQ");
	return (uint64_t)v;
}

/*
 * Phase 2, the client's side: from its own count on, its stream goes
 * through @circuit; the count goes first, then TAIL more bytes.
 */
enum { TAIL = 60000 };

static void switch_sender(struct end *c, int circuit, uint8_t *buf)
{
	uint64_t at;
	int rc = shunt_tcp_written(c->fd, c->connector, &at);

	if (rc < 0)
		fail("client: written count at the switch: %s", strerror(-rc));
	if (at != c->wrote)
		fail("client: the switch count %" PRIu64 " is not what it wrote (%" PRIu64 ")", at,
		     c->wrote);
	if (write(circuit, &at, sizeof(at)) != sizeof(at))
		die("circuit write");
	for (uint64_t sent = 0; sent < TAIL;) {
		size_t n = TAIL - sent < 4096 ? (size_t)(TAIL - sent) : 4096;

		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(c->dir, at + sent + i);
		ssize_t k = write(circuit, buf, n);

		if (k <= 0)
			die("circuit write");
		sent += (uint64_t)k;
	}
}

/* The server's side: the socket up to the sender's count, by its own count, then the circuit. */
static void switch_receiver(struct end *s, int circuit, uint8_t *buf)
{
	uint64_t at, mine;
	int rc;

	if (read(circuit, &at, sizeof(at)) != sizeof(at))
		die("circuit read");
	for (;;) {
		if ((rc = shunt_tcp_read(s->fd, &mine)) < 0)
			fail("server: read count at the switch: %s", strerror(-rc));
		if (mine != s->read)
			fail("server: read count %" PRIu64 ", it read %" PRIu64, mine, s->read);
		if (mine > at)
			fail("server: read %" PRIu64 " bytes, past the switch at %" PRIu64, mine, at);
		if (mine == at)
			break;
		struct pollfd p = { s->fd, POLLIN, 0 };

		if (poll(&p, 1, 5000) != 1)
			fail("server: the bytes before the switch never came");
		size_t want = at - mine < BUF ? (size_t)(at - mine) : BUF;

		read_some(s, buf, want);
	}
	if (inq(s->fd))
		fail("server: %" PRIu64 " bytes on the socket after the switch", inq(s->fd));
	for (uint64_t got = 0; got < TAIL;) {
		ssize_t k = read(circuit, buf, TAIL - got < BUF ? (size_t)(TAIL - got) : BUF);

		if (k <= 0)
			fail("server: the circuit ended early");
		verify("server (circuit)", !s->dir, at + got, buf, (size_t)k);
		got += (uint64_t)k;
	}
}

/* Phase 1: one urgent byte from @c, read by @s. */
static void urgent(struct end *c, struct end *s, uint8_t *buf)
{
	uint64_t r;
	char x = 'U';
	struct pollfd p = { s->fd, POLLPRI, 0 };

	/* Room in the server's window first: an urgent byte waits behind what it has not read. */
	while (s->read < c->wrote) {
		struct pollfd in = { s->fd, POLLIN, 0 };

		if (poll(&in, 1, 5000) != 1)
			fail("server: the client's bytes never came");
		read_some(s, buf, BUF);
		check_counts(s);
	}
	if (send(c->fd, &x, 1, MSG_OOB) != 1)
		die("send MSG_OOB");
	c->wrote++;
	check_counts(c);
	if (poll(&p, 1, 5000) != 1)
		fail("server: the urgent byte never came");
	if (shunt_tcp_read(s->fd, &r) != -EINVAL)
		fail("server: a read count while an urgent byte waits");
	if (recv(s->fd, &x, 1, MSG_OOB) != 1 || x != 'U')
		die("recv MSG_OOB");
	/* Everything before the mark, then past it: the urgent byte is counted. */
	while (inq(s->fd)) {
		ssize_t k = recv(s->fd, buf, BUF, MSG_DONTWAIT);

		if (k <= 0)
			die("recv before the mark");
		verify("server (before the mark)", !s->dir, s->read, buf, (size_t)k);
		s->read += (uint64_t)k;
	}
	s->read++;
	check_counts(s);
	checks++;
}

/* Phase 3: an end shuts its writing down... */
static void shut(struct end *e)
{
	if (shutdown(e->fd, SHUT_WR) < 0)
		die("shutdown");
	e->draining = true;
	check_counts(e);
}

/* ...and reads to the end. */
static void drain(struct end *e, uint8_t *buf)
{
	for (;;) {
		struct pollfd p = { e->fd, POLLIN, 0 };

		if (poll(&p, 1, 5000) != 1)
			fail("%s: no EOF", e->name);
		if (read_some(e, buf, BUF) == 0)
			break;
		check_counts(e);
	}
	check_counts(e);
}

int main(int argc, char **argv)
{
	const char *ns_srv = NULL, *ns_cli = NULL, *ip = "127.0.0.1";
	uint64_t ops = 20000, seed = 1;
	bool forked = false;
	int cfd, sfd, circuit[2];
	static uint8_t buf[BUF];	/* what each end sends and receives, in turn */

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ops"))
			ops = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--seed"))
			seed = strtoull(argv[i + 1], NULL, 10);
		else if (!strcmp(argv[i], "--fork"))
			forked = atoi(argv[i + 1]) != 0;
		else if (!strcmp(argv[i], "--ns-server"))
			ns_srv = argv[i + 1];
		else if (!strcmp(argv[i], "--ns-client"))
			ns_cli = argv[i + 1];
		else if (!strcmp(argv[i], "--addr"))
			ip = argv[i + 1];
		else
			fail("unknown option %s", argv[i]);
	}
	rng_state = seed * 0x2545f4914f6cdd1dull + 1;
	pair(ns_srv, ns_cli, ip, &cfd, &sfd);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, circuit) < 0)
		die("socketpair");

	struct end c = { "client", cfd, 0, true, 0, 0, false };
	struct end s = { "server", sfd, 1, false, 0, 0, false };

	check_counts(&c);
	check_counts(&s);
	if (!forked) {
		/* Both ends in turn: the counts checked while the other end's data sits queued. */
		for (uint64_t i = 0; i < ops; i++) {
			struct end *e = rnd() % 2 ? &c : &s;

			churn(e, 1, buf);
		}
		urgent(&c, &s, buf);
		switch_sender(&c, circuit[0], buf);
		switch_receiver(&s, circuit[1], buf);
		shut(&c);
		shut(&s);
		drain(&c, buf);
		drain(&s, buf);
		printf("ok %" PRIu64 " naive_wrong %" PRIu64 "\n", checks, naive_wrong);
		return 0;
	}
	/* Two processes: each churns its own end while the other's traffic lands. */
	int report[2];

	if (pipe(report) < 0)
		die("pipe");
	pid_t pid = fork();

	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(sfd);
		close(circuit[1]);
		close(report[0]);
		rng_state ^= 0x5555;
		churn(&c, ops, buf);
		switch_sender(&c, circuit[0], buf);
		shut(&c);
		drain(&c, buf);
		uint64_t r[4] = { c.wrote, c.read, checks, naive_wrong };

		if (write(report[1], r, sizeof(r)) != sizeof(r))
			die("report");
		_exit(0);
	}
	close(cfd);
	close(circuit[0]);
	close(report[1]);
	churn(&s, ops, buf);
	switch_receiver(&s, circuit[1], buf);
	shut(&s);
	drain(&s, buf);

	uint64_t r[4];
	int st;

	if (read(report[0], r, sizeof(r)) != sizeof(r) || waitpid(pid, &st, 0) != pid ||
	    !WIFEXITED(st) || WEXITSTATUS(st))
		fail("the client process failed");
	if (r[0] != s.read || r[1] != s.wrote)
		fail("the ends disagree: client wrote %" PRIu64 " and read %" PRIu64
		     ", server read %" PRIu64 " and wrote %" PRIu64, r[0], r[1], s.read, s.wrote);
	printf("ok %" PRIu64 " naive_wrong %" PRIu64 "\n", checks + r[2], naive_wrong + r[3]);
	return 0;
}
