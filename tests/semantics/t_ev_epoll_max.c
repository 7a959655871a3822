// SPDX-License-Identifier: MIT
// epoll_wait returns as many ready events as maxevents allows, whatever
// their kind: 200 ready descriptors (100 kernel socketpairs and 100 TCP
// connections) come back in one call with maxevents 1000, level-triggered
// again in the next; edge-triggered, taken a few at a time, each comes back
// exactly once.
// shunt-expect: shm_connect>=100 shm_accept>=100 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=100
#include "t_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

enum { PAIRS = 100, TCP = 100, ALL = PAIRS + TCP, MAX = 1000, FEW = 7 };

static int rd[ALL], wr[ALL];

// Distinct descriptors among n events (data.u64 is the index), and whether any came twice.
static int distinct(const struct epoll_event *ev, int n, bool *twice)
{
	static bool seen[ALL];
	int d = 0;

	memset(seen, 0, sizeof(seen));
	*twice = false;
	for (int i = 0; i < n; i++) {
		uint64_t k = ev[i].data.u64;

		if (k >= ALL)
			continue;
		if (seen[k])
			*twice = true;
		else
			d++;
		seen[k] = true;
	}
	return d;
}

static void add_all(int ep, uint32_t events)
{
	for (int i = 0; i < ALL; i++) {
		struct epoll_event ev = { .events = events, .data.u64 = (uint64_t)i };

		if (epoll_ctl(ep, EPOLL_CTL_ADD, rd[i], &ev) < 0)
			t_fatal("epoll_ctl(ADD %d)", i);
	}
}

int main(void)
{
	struct epoll_event *ev = calloc(MAX, sizeof(*ev));
	int ep, n, d, total;
	bool twice = false;

	t_start(60);
	if (!ev)
		t_fatal("calloc");
	for (int i = 0; i < PAIRS; i++) {
		int sv[2];

		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
			t_fatal("socketpair");
		rd[i] = sv[0];
		wr[i] = sv[1];
	}
	for (int i = PAIRS; i < ALL; i++)
		t_pair(AF_INET, &wr[i], &rd[i]);
	for (int i = 0; i < ALL; i++)
		t_send_all(wr[i], "x", 1);
	for (int i = 0; i < ALL; i++)
		t_wait_inq(rd[i], 1);

	printf("-- level-triggered, maxevents %d\n", MAX);
	ep = epoll_create1(0);
	if (ep < 0)
		t_fatal("epoll_create1");
	add_all(ep, EPOLLIN);
	n = t_epoll_wait_sorted(ep, ev, MAX, 0);
	d = distinct(ev, n, &twice);
	printf("epoll_wait = %d, %d descriptors, twice %d\n", n, d, twice);
	n = t_epoll_wait_sorted(ep, ev, MAX, 0);
	d = distinct(ev, n, &twice);
	printf("epoll_wait again = %d, %d descriptors, twice %d\n", n, d, twice);
	n = t_epoll_wait_sorted(ep, ev, ALL, -1);
	printf("epoll_wait(maxevents %d) = %d\n", ALL, n);
	n = t_epoll_wait_sorted(ep, ev, ALL - 1, -1);
	printf("epoll_wait(maxevents %d) = %d\n", ALL - 1, n);
	close(ep);

	printf("-- edge-triggered, maxevents %d at a time\n", FEW);
	ep = epoll_create1(0);
	if (ep < 0)
		t_fatal("epoll_create1");
	add_all(ep, EPOLLIN | EPOLLET);
	{
		static struct epoll_event got[ALL + MAX];
		int calls = 0;

		total = 0;
		do {
			n = t_epoll_wait_sorted(ep, got + total, FEW, 0);
			if (n > FEW)
				t_expect(false, "%d events, more than maxevents", n);
			total += n;
			calls++;
		} while (n > 0 && total < ALL + MAX - FEW);
		d = distinct(got, total, &twice);
		printf("%d events, %d descriptors, twice %d\n", total, d, twice);
		t_expect(calls > ALL / FEW, "it took more than %d calls", ALL / FEW);
	}
	n = t_epoll_wait_sorted(ep, ev, MAX, 0);
	printf("epoll_wait after all edges = %d\n", n);
	close(ep);

	for (int i = 0; i < ALL; i++) {
		close(rd[i]);
		close(wr[i]);
	}
	free(ev);
	return t_finish();
}
