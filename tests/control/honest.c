// SPDX-License-Identifier: MIT
/*
 * Honest clients of tests/control/echod.c, run under `shunt run` while a
 * hostile client spoils its own channel to the same listener:
 *
 *   honest PORT ID MS THREADS   connections one after another for MS ms,
 *                               from THREADS threads
 *   honest PORT ID hold         one connection, echoed again on each line
 *                               of stdin, until stdin ends
 *
 * Each connection sends a header and a payload (t_honest.h) and checks
 * that exactly those bytes come back, within HANG_S (a connection not
 * accepted and echoed by then is a hang, not a slow machine).
 *
 * stdout: JSON lines, one per connection that failed (and, in hold, per
 * echo) ({"event": "conn", "ok": ..., "ms": ..., "why": ...}), then
 * {"event": "done"} with how many there were, how many went right and the
 * longest time one took.
 */
#include <errno.h>
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
#include "t_loopback.h"

enum {
	HANG_S = 3,
};

static int port;
static uint32_t client_id;
static double budget_ms;
static _Atomic uint32_t next_seq, good;
static _Atomic uint64_t max_us;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int connect_to(void)
{
	struct sockaddr_in a = t_loopback_addr(port);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (t_loopback_timeouts(fd, HANG_S) < 0 ||
	    connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/*
 * One exchange on @fd: a header and @len bytes of payload out, the same
 * back. NULL if it went right, else what went wrong.
 */
static const char *exchange(int fd, uint32_t seq, uint32_t len)
{
	static _Thread_local uint8_t out[T_HONEST_HDR + T_HONEST_MAX], in[sizeof(out)];
	struct t_honest_hdr h = { .client = client_id, .seq = seq, .len = len };
	size_t n = T_HONEST_HDR + len, off = 0;

	memcpy(h.magic, T_HONEST_MAGIC, 4);
	memcpy(out, &h, sizeof(h));
	for (uint32_t i = 0; i < len; i++)
		out[T_HONEST_HDR + i] = t_honest_byte(client_id, seq, i);
	while (off < n) {
		ssize_t r = send(fd, out + off, n - off, MSG_NOSIGNAL);

		if (r <= 0)
			return r < 0 && errno == EAGAIN ? "send timed out" : "send failed";
		off += (size_t)r;
	}
	for (off = 0; off < n;) {
		ssize_t r = recv(fd, in + off, n - off, 0);

		if (r == 0)
			return "EOF before the echo";
		if (r < 0)
			return errno == EAGAIN ? "no echo: timed out" : "recv failed";
		off += (size_t)r;
	}
	return memcmp(in, out, n) ? "the echo differs" : NULL;
}

static void *loop(void *arg)
{
	double start = now_ms();

	(void)arg;
	while (now_ms() - start < budget_ms) {
		uint32_t seq = next_seq++;
		uint32_t len = 1 + (seq * 2654435761u) % T_HONEST_MAX;
		double t0 = now_ms();
		const char *why = NULL;
		int fd = connect_to(), err = 0;

		if (fd < 0)
			why = "connect failed";
		else
			why = exchange(fd, seq, len);
		double ms = now_ms() - t0;
		uint64_t us = (uint64_t)(ms * 1000), m = atomic_load(&max_us);

		err = why ? errno : 0;
		if (fd >= 0)
			close(fd);
		while (us > m && !atomic_compare_exchange_weak(&max_us, &m, us))
			;
		if (!why)
			good++;
		else
			t_event("{\"event\": \"conn\", \"seq\": %u, \"ok\": false, \"ms\": %.1f, "
			        "\"why\": \"%s\", \"errno\": %d}", seq, ms, why, err);
	}
	return NULL;
}

static int hold(void)
{
	char line[64];
	int fd = connect_to();

	if (fd < 0) {
		t_event("{\"event\": \"error\", \"what\": \"connect\", \"errno\": %d}", errno);
		return 2;
	}
	t_event("{\"event\": \"connected\"}");
	while (fgets(line, sizeof(line), stdin)) {
		uint32_t seq = next_seq++;
		double t0 = now_ms();
		const char *why = exchange(fd, seq, 1 + seq % 4000);

		t_event("{\"event\": \"conn\", \"seq\": %u, \"ok\": %s, \"ms\": %.1f, "
		        "\"why\": \"%s\", \"errno\": %d}", seq, why ? "false" : "true",
		        now_ms() - t0, why ? why : "", why ? errno : 0);
	}
	close(fd);
	t_event("{\"event\": \"done\"}");
	return 0;
}

int main(int argc, char **argv)
{
	pthread_t th[16];
	int threads;

	if (argc != 5 && !(argc == 4 && !strcmp(argv[3], "hold"))) {
		fprintf(stderr, "usage: %s PORT ID MS THREADS | PORT ID hold\n", argv[0]);
		return 2;
	}
	port = atoi(argv[1]);
	client_id = (uint32_t)atoi(argv[2]);
	if (argc == 4)
		return hold();
	budget_ms = atof(argv[3]);
	threads = atoi(argv[4]);
	if (threads < 1 || threads > 16)
		threads = 1;
	for (int i = 0; i < threads; i++)
		if (pthread_create(&th[i], NULL, loop, NULL))
			return 2;
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	t_event("{\"event\": \"done\", \"connections\": %u, \"ok\": %u, \"max_ms\": %.1f}",
	        next_seq, good, atomic_load(&max_us) / 1e3);
	return 0;
}
