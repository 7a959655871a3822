// SPDX-License-Identifier: MIT
// The accept queue: connect() completes before accept(); with listen(fd, 2)
// three connections complete and a fourth waits until one is accepted; a
// blocking connect to the full queue times out (SO_SNDTIMEO); accept is FIFO.
// shunt-expect: shm_connect>=5 shm_accept>=5 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
// t-timeout: 60
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <sys/time.h>
#include <unistd.h>

enum {
	BACKLOG = 2,
	QUEUED = BACKLOG + 1, // Linux queues backlog + 1 connections
	CLIENTS = QUEUED + 1,
	PROMPT_MS = 300,
};

static void send_id(int fd, int id)
{
	char b = (char)('0' + id);

	t_send_all(fd, &b, 1);
}

static int accept_id(int lfd, int *s)
{
	char b = '?';

	*s = t_accept(lfd);
	t_recv_all(*s, &b, 1);
	return b - '0';
}

static void before_accept(void)
{
	struct t_addr a;
	char buf[8];
	int lfd, c, s;

	lfd = t_listen_loopback(AF_INET, BACKLOG, &a);
	c = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("blocking connect before anyone accepts",
		 connect(c, (struct sockaddr *)&a.ss, a.len));
	T_REPORT("send before accept", send(c, "hi", 2, 0));
	printf("listener poll = %s\n", t_poll_str(t_wait_event(lfd, POLLIN)));
	s = t_accept(lfd);
	t_wait_inq(s, 2);
	T_REPORT_DATA("recv on accepted", recv(s, buf, sizeof(buf), 0), buf);
	printf("listener poll after accept = %s\n", t_poll_str(t_poll1(lfd, POLLIN, 0)));
	close(c);
	close(s);
	close(lfd);
}

static void full_queue(void)
{
	struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };
	struct t_addr a;
	int lfd, c[CLIENTS], s[CLIENTS], e, i, order[CLIENTS];
	int64_t start;
	short ev;

	lfd = t_listen_loopback(AF_INET, BACKLOG, &a);
	printf("listen backlog %d, %d non-blocking connects\n", BACKLOG, CLIENTS);
	for (i = 0; i < CLIENTS; i++) {
		char label[64];

		c[i] = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
		snprintf(label, sizeof(label), "connect #%d", i);
		T_REPORT(label, connect(c[i], (struct sockaddr *)&a.ss, a.len));
		ev = t_poll1(c[i], POLLOUT, PROMPT_MS);
		printf("connect #%d writable within %d ms: %s\n", i, PROMPT_MS,
		       ev ? t_poll_str(ev) : "no");
		if (ev & POLLOUT)
			send_id(c[i], i);
	}

	// A blocking connect to the full queue gives up at SO_SNDTIMEO.
	e = t_socket(AF_INET, SOCK_STREAM);
	if (setsockopt(e, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		t_fatal("SO_SNDTIMEO");
	start = t_now_ns();
	T_REPORT("blocking connect with SO_SNDTIMEO 200ms",
		 connect(e, (struct sockaddr *)&a.ss, a.len));
	t_expect(t_elapsed_ms(start) >= 150 && t_elapsed_ms(start) <= 2000,
		 "timed out within [150ms,2000ms]");
	T_REPORT("connect again", connect(e, (struct sockaddr *)&a.ss, a.len));
	close(e);

	// Accepting one lets the fourth in (on a SYN retransmit, ~1 s).
	order[0] = accept_id(lfd, &s[0]);
	ev = t_poll1(c[QUEUED], POLLOUT, 5000);
	printf("connect #%d after one accept: %s\n", QUEUED,
	       ev & POLLOUT ? "completed" : "still pending");
	if (ev & POLLOUT)
		send_id(c[QUEUED], QUEUED);
	for (i = 1; i < CLIENTS; i++)
		order[i] = accept_id(lfd, &s[i]);
	printf("accept order:");
	for (i = 0; i < CLIENTS; i++)
		printf(" %d", order[i]);
	printf("\n");
	for (i = 0; i < CLIENTS; i++) {
		close(c[i]);
		close(s[i]);
	}
	close(lfd);
}

int main(void)
{
	t_start(30);
	before_accept();
	full_queue();
	return t_finish();
}
