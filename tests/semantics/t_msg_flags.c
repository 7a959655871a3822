// SPDX-License-Identifier: MIT
// recv/send flags on a stream: MSG_PEEK, MSG_WAITALL (across delayed sends,
// cut short by EOF), MSG_DONTWAIT on a blocking socket, MSG_NOSIGNAL, MSG_TRUNC.
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

// Sends a list of pieces with a pause before each, then optionally SHUT_WR.
struct dribble {
	int fd;
	const char *const *pieces;
	unsigned pause_ms;
	bool shut_wr;
};

static void *dribble_run(void *arg)
{
	struct dribble *d = arg;
	const char *const *p;

	for (p = d->pieces; *p; p++) {
		t_sleep_ms(d->pause_ms);
		t_send_all(d->fd, *p, strlen(*p));
	}
	if (d->shut_wr)
		shutdown(d->fd, SHUT_WR);
	return NULL;
}

static void start_dribble(pthread_t *th, struct dribble *d)
{
	if (pthread_create(th, NULL, dribble_run, d))
		t_fatal("pthread_create");
}

static void peek(int c, int s)
{
	char buf[64];
	int avail = -1;

	T_REPORT("send(c, \"peekaboo\")", send(c, "peekaboo", 8, 0));
	t_wait_inq(s, 8);
	T_REPORT_DATA("recv(s, 4, MSG_PEEK)", recv(s, buf, 4, MSG_PEEK), buf);
	T_REPORT_DATA("recv(s, 64, MSG_PEEK)", recv(s, buf, 64, MSG_PEEK), buf);
	ioctl(s, FIONREAD, &avail);
	printf("FIONREAD after peeks = %d\n", avail);
	T_REPORT_DATA("recv(s, 5)", recv(s, buf, 5, 0), buf);
	T_REPORT_DATA("recv(s, 64, MSG_PEEK) after partial read",
		      recv(s, buf, 64, MSG_PEEK), buf);
	T_REPORT_DATA("recv(s, 64)", recv(s, buf, 64, 0), buf);
	T_REPORT("recv(s, MSG_PEEK|MSG_DONTWAIT) on empty",
		 recv(s, buf, 64, MSG_PEEK | MSG_DONTWAIT));
}

static void waitall(int c, int s)
{
	static const char *const pieces[] = { "aa", "bbb", "cccc", NULL };
	static const char *const late[] = { "z", NULL };
	static const char *const last[] = { "xyz", NULL };
	struct dribble d = { .fd = c, .pieces = pieces, .pause_ms = 40 };
	pthread_t th;
	char buf[64];
	int64_t start;

	start = t_now_ns();
	start_dribble(&th, &d);
	T_REPORT_DATA("recv(s, 9, MSG_WAITALL) across 3 delayed sends",
		      recv(s, buf, 9, MSG_WAITALL), buf);
	t_expect(t_elapsed_ms(start) >= 100,
		 "MSG_WAITALL waited for all three sends");
	pthread_join(th, NULL);

	// MSG_WAITALL with MSG_PEEK: waits too, and consumes nothing.
	T_REPORT("send(c, \"xy\")", send(c, "xy", 2, 0));
	t_wait_inq(s, 2);
	d.pieces = late;
	d.pause_ms = 60;
	start = t_now_ns();
	start_dribble(&th, &d);
	T_REPORT_DATA("recv(s, 3, MSG_WAITALL|MSG_PEEK)",
		      recv(s, buf, 3, MSG_WAITALL | MSG_PEEK), buf);
	printf("MSG_WAITALL|MSG_PEEK waited for the third byte: %s\n",
	       t_elapsed_ms(start) >= 30 ? "yes" : "no");
	pthread_join(th, NULL);
	t_wait_inq(s, 3);
	T_REPORT_DATA("recv(s, 64)", recv(s, buf, 64, 0), buf);

	// Cut short by EOF: returns what there is, then 0.
	d.pieces = last;
	d.pause_ms = 30;
	d.shut_wr = true;
	start_dribble(&th, &d);
	T_REPORT_DATA("recv(s, 10, MSG_WAITALL) with EOF after 3",
		      recv(s, buf, 10, MSG_WAITALL), buf);
	T_REPORT("recv(s, 10, MSG_WAITALL) at EOF", recv(s, buf, 10, MSG_WAITALL));
	pthread_join(th, NULL);
}

static void dontwait(int c, int s)
{
	static unsigned char chunk[65536];
	char buf[64];
	uint64_t total = 0, got = 0;
	ssize_t n;
	int err = 0;

	T_REPORT("recv(s, MSG_DONTWAIT) on empty blocking socket",
		 recv(s, buf, sizeof(buf), MSG_DONTWAIT));
	printf("still blocking after MSG_DONTWAIT: %s\n",
	       t_is_nonblock(s) ? "no" : "yes");
	T_REPORT("send(c, \"dw\", MSG_DONTWAIT)", send(c, "dw", 2, MSG_DONTWAIT));
	t_wait_inq(s, 2);
	T_REPORT_DATA("recv(s, MSG_DONTWAIT)", recv(s, buf, sizeof(buf), MSG_DONTWAIT),
		      buf);

	// Fill with MSG_DONTWAIT on a blocking socket: EAGAIN, not a hang.
	memset(chunk, 'f', sizeof(chunk));
	for (;;) {
		n = send(c, chunk, sizeof(chunk), MSG_DONTWAIT);
		if (n < 0) {
			err = errno;
			break;
		}
		total += (uint64_t)n;
	}
	t_expect(total > 0 && err == EAGAIN,
		 "send(MSG_DONTWAIT) fills the connection, then EAGAIN (%s)",
		 t_errname(err));
	while (got < total) {
		n = recv(s, chunk, sizeof(chunk), 0);
		if (n <= 0)
			t_fatal("drain");
		got += (uint64_t)n;
	}
	t_expect(got == total, "drained what was sent");
}

static void nosignal_and_trunc(int c, int s)
{
	char buf[64];

	t_count_sigpipe();
	T_REPORT("send(c, \"ns\", MSG_NOSIGNAL) on healthy connection",
		 send(c, "ns", 2, MSG_NOSIGNAL));
	t_wait_inq(s, 2);
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);

	// MSG_TRUNC on TCP: discard bytes without copying them.
	T_REPORT("send(c, \"discardkeep\")", send(c, "discardkeep", 11, 0));
	t_wait_inq(s, 11);
	T_REPORT("recv(s, NULL, 7, MSG_TRUNC)", recv(s, NULL, 7, MSG_TRUNC));
	T_REPORT_DATA("recv(s, 64)", recv(s, buf, sizeof(buf), 0), buf);

	// After the peer is gone, MSG_NOSIGNAL gives EPIPE and no signal.
	close(s);
	T_REPORT("send(c, MSG_NOSIGNAL) #1 after peer close",
		 send(c, "a", 1, MSG_NOSIGNAL));
	t_wait_event(c, POLLERR);
	T_REPORT("send(c, MSG_NOSIGNAL) #2 after reset",
		 send(c, "b", 1, MSG_NOSIGNAL));
	printf("SIGPIPE count = %d\n", t_sigpipes());
}

int main(void)
{
	int c, s;

	t_start(30);
	t_pair(AF_INET, &c, &s);
	peek(c, s);
	waitall(c, s);
	close(c);
	close(s);

	t_pair(AF_INET, &c, &s);
	dontwait(c, s);
	close(c);
	close(s);

	t_pair(AF_INET, &c, &s);
	nosignal_and_trunc(c, s);
	close(c);
	return t_finish();
}
