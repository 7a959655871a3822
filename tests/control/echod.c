// SPDX-License-Identifier: MIT
/*
 * The victim listener of tests/control/test_hostile.py's channel attacks,
 * run under `shunt run`: it accepts every connection and echoes what an
 * honest client (t_honest.h) sends, while a hostile client spoils the
 * channel it has to this listener.
 *
 *   echod block|nonblock|level
 *
 * block: accept() on a blocking listener; nonblock: poll() for POLLIN,
 * then accept4() until EAGAIN on an O_NONBLOCK one; level: poll() without
 * a timeout, then one accept4() per readiness (nginx's way with
 * multi_accept off). Each connection is
 * served by a thread of its own, with 2 s timeouts (an honest one may
 * then stay idle up to a minute), and judged by what came on it:
 * "honest" (headers and their exact payloads, echoed), "ink"
 * (only bytes the hostile puts in rings), "empty" (nothing, EOF or an
 * error) or "bad" (anything else: an honest connection with bytes that
 * are not its own, or bytes from nowhere). A line on stdin prints the
 * counters so far.
 *
 * stdout: JSON lines, one per connection that was not honest ({"event":
 * "conn", ...}) and per accept() that failed otherwise than EAGAIN; honest
 * ones are counted (and an honest connection seen twice); exit 2 on a
 * setup failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "t_event.h"
#include "t_honest.h"
#include "t_ink.h"
#include "t_loopback.h"

enum {
	IO_TIMEOUT_S = 2,
	BACKLOG = 128,
};

static _Atomic long accepted, eagain, failed;
static _Atomic long max_accept_us;	/* the longest accept() call */
static _Atomic long kinds[4], served, twice;
/* Honest connections seen, by client and number (honest.c counts from 0). */
static _Atomic uint8_t seen[4][1 << 17];
static const char *const kind_name[4] = { "honest", "ink", "empty", "bad" };

static _Noreturn void die(const char *what)
{
	t_event("{\"event\": \"error\", \"what\": \"%s\", \"errno\": %d}", what, errno);
	exit(2);
}

/* Up to @len bytes into @buf: fewer only at EOF, an error or a timeout. */
static size_t read_full(int fd, uint8_t *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = recv(fd, buf + got, len - got, 0);

		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			break;
		}
		got += (size_t)r;
	}
	return got;
}

static bool send_full(int fd, const uint8_t *buf, size_t len)
{
	size_t off = 0;

	while (off < len) {
		ssize_t r = send(fd, buf + off, len - off, MSG_NOSIGNAL);

		if (r <= 0) {
			if (r < 0 && errno == EINTR)
				continue;
			return false;
		}
		off += (size_t)r;
	}
	return true;
}

static bool all_ink(const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!t_is_ink(b[i]))
			return false;
	return true;
}

struct conn {
	int fd;
	struct sockaddr_storage peer, local;
	socklen_t peer_len, local_len;
};

/* Judge and (if honest) echo one connection. */
static void *serve(void *arg)
{
	struct conn *c = arg;
	static _Thread_local uint8_t buf[T_HONEST_HDR + T_HONEST_MAX + 1];
	struct t_honest_hdr h;
	const struct sockaddr_in *sin = (const struct sockaddr_in *)&c->peer;
	char peer[INET6_ADDRSTRLEN + 8] = "?";
	size_t got, more = 0;
	int kind, err = 0;
	bool echoed = false;

	if (c->peer.ss_family == AF_INET)
		snprintf(peer, sizeof(peer), "%s:%u", inet_ntoa(sin->sin_addr), ntohs(sin->sin_port));
	t_loopback_timeouts(c->fd, IO_TIMEOUT_S);
	got = read_full(c->fd, buf, T_HONEST_HDR);
	err = got < T_HONEST_HDR ? errno : 0;
	memcpy(&h, buf, sizeof(h));
	if (got == T_HONEST_HDR && t_honest_hdr_ok(&h)) {
		/* Exchange after exchange, until the client closes. */
		for (kind = 0; kind == 0;) {
			bool same;

			more = read_full(c->fd, buf + T_HONEST_HDR, h.len);
			same = more == h.len;
			for (uint32_t i = 0; same && i < h.len; i++)
				same = buf[T_HONEST_HDR + i] == t_honest_byte(h.client, h.seq, i);
			echoed = same && send_full(c->fd, buf, T_HONEST_HDR + h.len);
			kind = same ? 0 : 3;
			if (!echoed)
				break;
			/*
			 * Nothing but another exchange may come before the end;
			 * an honest client may keep its connection idle a while.
			 */
			for (int idle = 0; idle < 30; idle++) {
				errno = 0;
				got = read_full(c->fd, buf, T_HONEST_HDR);
				if (got || errno != EAGAIN)
					break;
			}
			memcpy(&h, buf, sizeof(h));
			if (got == 0)
				break;
			if (got < T_HONEST_HDR || !t_honest_hdr_ok(&h))
				kind = 3;
		}
	} else if (got == 0) {
		kind = 2;
	} else {
		/* Read on to the end: every byte the hostile sends is ink. */
		bool ink = all_ink(buf, got);

		while (ink && (more = read_full(c->fd, buf, 4096)) > 0)
			ink = all_ink(buf, more);
		kind = ink ? 1 : 3;
	}
	kinds[kind]++;
	if (kind == 0 && h.client < 4 && h.seq < (8u << 17)) {
		uint8_t bit = (uint8_t)(1u << (h.seq & 7));

		twice += !!(atomic_fetch_or(&seen[h.client][h.seq >> 3], bit) & bit);
	}
	if (kind != 0 || c->peer.ss_family != AF_INET || c->peer_len != sizeof(struct sockaddr_in) ||
	    c->local.ss_family != AF_INET || c->local_len != sizeof(struct sockaddr_in))
		t_event("{\"event\": \"conn\", \"kind\": \"%s\", \"bytes\": %zu, \"err\": %d, "
		        "\"echoed\": %s, \"client\": %d, \"seq\": %d, \"family\": %d, "
		        "\"addrlen\": %u, \"local_family\": %d, \"local_len\": %u, "
		        "\"peer\": \"%s\"}",
		        kind_name[kind], got + more, err, echoed ? "true" : "false",
		        kind == 0 ? (int)h.client : -1, kind == 0 ? (int)h.seq : -1,
		        (int)c->peer.ss_family, (unsigned)c->peer_len, (int)c->local.ss_family,
		        (unsigned)c->local_len, peer);
	close(c->fd);
	free(c);
	served++;
	return NULL;
}

static void start(int fd, const struct sockaddr_storage *peer, socklen_t len)
{
	struct conn *c = malloc(sizeof(*c));
	pthread_attr_t attr;
	pthread_t th;

	if (!c)
		die("malloc");
	c->fd = fd;
	c->peer = *peer;
	c->peer_len = len;
	memset(&c->local, 0, sizeof(c->local));
	c->local_len = sizeof(c->local);
	if (getsockname(fd, (struct sockaddr *)&c->local, &c->local_len) < 0)
		c->local_len = 0;
	accepted++;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 << 10);
	if (pthread_create(&th, &attr, serve, c))
		die("pthread_create");
	pthread_attr_destroy(&attr);
}

/* One accept4(); false once it says EAGAIN. */
static bool accept_one(int lfd)
{
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);
	int fd;

	struct timespec t0, t1;
	long us;

	memset(&peer, 0, sizeof(peer));
	clock_gettime(CLOCK_MONOTONIC, &t0);
	fd = accept4(lfd, (struct sockaddr *)&peer, &len, SOCK_CLOEXEC);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	us = (t1.tv_sec - t0.tv_sec) * 1000000 + (t1.tv_nsec - t0.tv_nsec) / 1000;
	if (us > max_accept_us)
		max_accept_us = us;
	if (fd >= 0) {
		start(fd, &peer, len);
		return true;
	}
	if (errno == EAGAIN || errno == EWOULDBLOCK) {
		eagain++;
		return false;
	}
	failed++;
	t_event("{\"event\": \"accept_error\", \"errno\": %d}", errno);
	/* What a server does on EMFILE and its like: go on after a breath. */
	usleep(1000);
	return errno != EINTR && errno != ECONNABORTED ? false : true;
}

static void *stats(void *arg)
{
	char line[64];

	(void)arg;
	while (fgets(line, sizeof(line), stdin))
		t_event("{\"event\": \"stats\", \"accepted\": %ld, \"served\": %ld, "
		        "\"eagain\": %ld, \"failed\": %ld, \"honest\": %ld, \"ink\": %ld, "
		        "\"empty\": %ld, \"bad\": %ld, \"twice\": %ld, \"max_accept_ms\": %.1f}",
		        accepted, served, eagain, failed, kinds[0], kinds[1], kinds[2], kinds[3],
		        twice, max_accept_us / 1e3);
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in a = t_loopback_addr(0);
	socklen_t len = sizeof(a);
	pthread_t th;
	bool nonblock, level;
	int lfd;

	if (argc != 2 || (strcmp(argv[1], "block") && strcmp(argv[1], "nonblock") &&
			  strcmp(argv[1], "level"))) {
		fprintf(stderr, "usage: %s block|nonblock|level\n", argv[0]);
		return 2;
	}
	level = !strcmp(argv[1], "level");
	nonblock = level || !strcmp(argv[1], "nonblock");
	lfd = socket(AF_INET, SOCK_STREAM | (nonblock ? SOCK_NONBLOCK : 0), 0);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, BACKLOG) < 0 ||
	    getsockname(lfd, (struct sockaddr *)&a, &len) < 0)
		die("listen");
	if (pthread_create(&th, NULL, stats, NULL))
		die("pthread_create");
	t_event("{\"event\": \"listening\", \"port\": %d, \"pid\": %d}", ntohs(a.sin_port),
	        (int)getpid());
	for (;;) {
		if (level) {
			struct pollfd p = { lfd, POLLIN, 0 };

			/* One accept per readiness, as nginx with multi_accept off. */
			if (poll(&p, 1, -1) < 0 && errno != EINTR)
				die("poll");
			if (p.revents & POLLIN)
				accept_one(lfd);
		} else if (nonblock) {
			struct pollfd p = { lfd, POLLIN, 0 };

			if (poll(&p, 1, 1000) < 0 && errno != EINTR)
				die("poll");
			while (accept_one(lfd))
				;
		} else {
			accept_one(lfd);
		}
	}
}
