// SPDX-License-Identifier: MIT
// SO_REUSEPORT groups: connections to the group's address spread over all
// its listeners (the kernel hashes them; only the facts are printed: each
// listener gets at least 10%, none is lost), a listener that leaves the
// group takes no more and the connections queued on it are reset (with the
// default net.ipv4.tcp_migrate_req 0) while the others stay accepted.
// shunt-expect: shm_connect>=4000 shm_accept>=4000 kernel_accept==0
// t-timeout: 120
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum {
	LISTENERS = 4,
	CONNS = 4000,
	BATCH = 50,
};

static int reuse_listener(int family, struct t_addr *a, bool first)
{
	int fd = t_socket(family, SOCK_STREAM), one = 1;

	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0)
		t_fatal("SO_REUSEPORT");
	if (first)
		t_addr_make(a, family == AF_INET ? "127.0.0.1" : "::1", 0);
	if (bind(fd, (struct sockaddr *)&a->ss, a->len) < 0)
		t_fatal("bind");
	if (listen(fd, 128) < 0)
		t_fatal("listen");
	if (first)
		*a = t_sockname(fd);
	t_set_nonblock(fd, true);
	return fd;
}

// Accept from every listener until @want connections were taken in all.
static void drain(int *lfd, int n, int *got, int *total, int want)
{
	int64_t start = t_now_ns();

	while (*total < want) {
		struct pollfd p[LISTENERS];

		for (int i = 0; i < n; i++)
			p[i] = (struct pollfd){ .fd = lfd[i], .events = POLLIN };
		if (poll(p, (nfds_t)n, T_WAIT_MS) <= 0 || t_elapsed_ms(start) > 4 * T_WAIT_MS)
			t_fatal("%d connections never reached a listener", want - *total);
		for (int i = 0; i < n; i++) {
			int s;

			while ((s = accept(lfd[i], NULL, NULL)) >= 0) {
				got[i]++;
				(*total)++;
				close(s);
			}
		}
	}
}

static void spread(int family)
{
	struct t_addr a;
	int lfd[LISTENERS], got[LISTENERS] = { 0 }, total = 0, c[BATCH];
	bool fair = true;

	for (int i = 0; i < LISTENERS; i++)
		lfd[i] = reuse_listener(family, &a, i == 0);
	for (int done = 0; done < CONNS; done += BATCH) {
		for (int j = 0; j < BATCH; j++)
			c[j] = t_connect(&a);
		drain(lfd, LISTENERS, got, &total, done + BATCH);
		for (int j = 0; j < BATCH; j++)
			close(c[j]);
	}
	for (int i = 0; i < LISTENERS; i++)
		fair &= got[i] >= CONNS / 10;
	t_expect(fair, "%s: each of the %d listeners got at least 10%% of %d connections",
		 family == AF_INET ? "IPv4" : "IPv6", LISTENERS, CONNS);
	t_expect(total == CONNS, "none lost: %d accepted", total);
	for (int i = 0; i < LISTENERS; i++)
		close(lfd[i]);
}

// One of two listeners closes with connections queued on it.
static void one_closes(int family)
{
	struct t_addr a;
	int lfd[2], c[BATCH], reset = 0, accepted = 0, other = 0, s;
	char ch;

	lfd[0] = reuse_listener(family, &a, true);
	lfd[1] = reuse_listener(family, &a, false);
	for (int j = 0; j < BATCH; j++)
		c[j] = t_connect(&a);
	t_sleep_ms(100);
	T_REPORT("close(one listener)", close(lfd[0]));
	t_set_nonblock(lfd[1], true);
	while ((s = accept(lfd[1], NULL, NULL)) >= 0) {
		if (send(s, "k", 1, MSG_NOSIGNAL) != 1)
			t_fatal("send");
		close(s);
		accepted++;
	}
	for (int j = 0; j < BATCH; j++) {
		short ev = t_wait_event(c[j], POLLIN | POLLERR | POLLHUP);
		ssize_t n = recv(c[j], &ch, 1, 0);

		if (n == 1)
			other++;
		else if (n < 0 && errno == ECONNRESET && (ev & POLLERR))
			reset++;
		close(c[j]);
	}
	t_expect(accepted == other, "every connection the other listener had is intact");
	t_expect(reset + other == BATCH, "every other one is reset: none hangs, none lost");
	// From now on the remaining listener takes every connection.
	for (int j = 0; j < BATCH; j++)
		c[j] = t_connect(&a);
	accepted = 0;
	drain(&lfd[1], 1, &accepted, &other, other + BATCH);
	t_expect(accepted == BATCH, "the remaining listener takes all %d new connections", BATCH);
	for (int j = 0; j < BATCH; j++)
		close(c[j]);
	close(lfd[1]);
}

int main(void)
{
	t_start(110);
	spread(AF_INET);
	spread(AF_INET6);
	one_closes(AF_INET);
	return t_finish();
}
