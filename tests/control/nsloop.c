// SPDX-License-Identifier: MIT
/*
 * A long-lived TCP server or client for the network-facts tests
 * (test_netns_facts.py): the client stays up between connects, so shuntd's
 * view of its namespace lives on and must follow changes made meanwhile.
 *
 *   nsloop server ADDR PORT TAG   listen; for each connection read one byte
 *                                 (or EOF), answer TAG, close. Prints
 *                                 "listening" once ready.
 *   nsloop client                 reads commands on stdin, one a line:
 *       connect ADDR PORT [N] [SRC]   N (1) times: socket, connect (timed),
 *                                     send one byte, read the answer, close.
 *       quit
 *     and answers each with one line:
 *       done n=N ok=K [fail=ENAME:count,...] p50=US p99=US max=US
 *            [reply=TAG local=IP]   (the last connection that succeeded)
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

enum { MAX_ERRS = 8, MAX_N = 1000000 };

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
	return 0;
}

static void ip_of(const struct sockaddr_storage *ss, char *buf, size_t n)
{
	const void *a = ss->ss_family == AF_INET ?
		(const void *)&((const struct sockaddr_in *)ss)->sin_addr :
		(const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr;

	if (!inet_ntop(ss->ss_family, a, buf, (socklen_t)n))
		snprintf(buf, n, "?");
}

static int server(const char *addr, const char *port, const char *tag)
{
	struct sockaddr_storage ss;
	socklen_t len = parse(addr, port, &ss);
	int one = 1, fd;

	if (!len)
		return 2;
	fd = socket(ss.ss_family, SOCK_STREAM, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 128) < 0) {
		printf("error %s\n", strerrorname_np(errno));
		return 1;
	}
	printf("listening\n");
	fflush(stdout);
	for (;;) {
		int c = accept(fd, NULL, NULL);
		struct pollfd p = { c, POLLIN, 0 };
		char b;

		if (c < 0)
			continue;
		/* A client that never writes is not waited on for ever. */
		if (poll(&p, 1, 5000) == 1)
			(void)!recv(c, &b, 1, 0);
		(void)!send(c, tag, strlen(tag), MSG_NOSIGNAL);
		close(c);
	}
}

struct tally {
	unsigned n, ok;
	struct { int err; unsigned count; } errs[MAX_ERRS];
	unsigned nerrs;
	double *us;
	char reply[64], local[INET6_ADDRSTRLEN];
};

static void count_err(struct tally *t, int err)
{
	for (unsigned k = 0; k < t->nerrs; k++)
		if (t->errs[k].err == err) {
			t->errs[k].count++;
			return;
		}
	if (t->nerrs < MAX_ERRS)
		t->errs[t->nerrs++] = (typeof(t->errs[0])){ err, 1 };
}

static double now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* One connection: 0 and its reply in @t, or an errno. */
static int one(struct tally *t, const struct sockaddr_storage *dst, socklen_t len,
	       const struct sockaddr_storage *src, socklen_t slen)
{
	struct sockaddr_storage me;
	socklen_t mlen = sizeof(me);
	int fd = socket(dst->ss_family, SOCK_STREAM, 0), err = 0;
	double t0;
	ssize_t got = 0, r;
	char buf[64];

	if (fd < 0)
		return errno;
	if (slen && bind(fd, (const struct sockaddr *)src, slen) < 0) {
		err = errno;
		close(fd);
		return err;
	}
	t0 = now_us();
	if (connect(fd, (const struct sockaddr *)dst, len) < 0) {
		err = errno;
		t->us[t->n] = now_us() - t0;
		close(fd);
		return err;
	}
	t->us[t->n] = now_us() - t0;
	if (send(fd, "x", 1, MSG_NOSIGNAL) != 1) {
		err = errno;
		close(fd);
		return err;
	}
	while (got < (ssize_t)sizeof(buf) - 1 &&
	       (r = recv(fd, buf + got, sizeof(buf) - 1 - (size_t)got, 0)) > 0)
		got += r;
	buf[got] = 0;
	snprintf(t->reply, sizeof(t->reply), "%s", buf);
	if (getsockname(fd, (struct sockaddr *)&me, &mlen) == 0)
		ip_of(&me, t->local, sizeof(t->local));
	close(fd);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void connects(const char *addr, const char *port, unsigned n, const char *srcs)
{
	struct sockaddr_storage dst, src;
	socklen_t len = parse(addr, port, &dst), slen = srcs ? parse(srcs, "0", &src) : 0;
	struct tally t = { 0 };

	if (!len || (srcs && !slen) || n == 0 || n > MAX_N) {
		printf("done bad-command\n");
		return;
	}
	t.us = calloc(n, sizeof(*t.us));
	if (!t.us) {
		printf("done ENOMEM\n");
		return;
	}
	for (; t.n < n; t.n++) {
		int err = one(&t, &dst, len, &src, slen);

		if (err)
			count_err(&t, err);
		else
			t.ok++;
	}
	qsort(t.us, n, sizeof(*t.us), cmp_double);
	printf("done n=%u ok=%u", t.n, t.ok);
	for (unsigned k = 0; k < t.nerrs; k++)
		printf("%s%s:%u", k ? "," : " fail=", strerrorname_np(t.errs[k].err) ?: "?",
		       t.errs[k].count);
	printf(" p50=%.1f p99=%.1f max=%.1f", t.us[n / 2], t.us[(size_t)(n * 0.99)], t.us[n - 1]);
	if (t.ok)
		printf(" reply=%s local=%s", t.reply, t.local);
	printf("\n");
	fflush(stdout);
	free(t.us);
}

static int client(void)
{
	char line[512];

	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		char *w[6] = { 0 }, *save = NULL;
		unsigned nw = 0;

		for (char *tok = strtok_r(line, " \t\n", &save); tok && nw < 6;
		     tok = strtok_r(NULL, " \t\n", &save))
			w[nw++] = tok;
		if (nw >= 3 && !strcmp(w[0], "connect"))
			connects(w[1], w[2], nw > 3 ? (unsigned)atoi(w[3]) : 1, nw > 4 ? w[4] : NULL);
		else if (nw >= 1 && !strcmp(w[0], "quit"))
			break;
		else {
			printf("done bad-command\n");
			fflush(stdout);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "server"))
		return server(argv[2], argv[3], argv[4]);
	if (argc == 2 && !strcmp(argv[1], "client"))
		return client();
	fprintf(stderr, "usage: nsloop server ADDR PORT TAG | client\n");
	return 2;
}
