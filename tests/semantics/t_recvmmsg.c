// SPDX-License-Identifier: MIT
// recvmmsg on a stream socket: invalid timeouts fail with EINVAL, what is
// left of a timeout is written back, every entry gets 0 at EOF, a pending
// error comes first, and MSG_WAITFORONE stops waiting after one message.
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { N = 4, SIZE = 8 };

static struct mmsghdr vec[N];
static struct iovec iov[N];
static char bufs[N][SIZE];

static void reset_vec(void)
{
	memset(vec, 0, sizeof(vec));
	memset(bufs, 0, sizeof(bufs));
	for (int i = 0; i < N; i++) {
		iov[i].iov_base = bufs[i];
		iov[i].iov_len = SIZE;
		vec[i].msg_hdr.msg_iov = &iov[i];
		vec[i].msg_hdr.msg_iovlen = 1;
		vec[i].msg_len = 77;
	}
}

static void show(const char *what, long r)
{
	printf("  %s:", what);
	for (long i = 0; i < r; i++)
		printf(" [%u \"%.*s\"]", vec[i].msg_len, (int)vec[i].msg_len, bufs[i]);
	printf("\n");
}

static void timeouts(int c, int s)
{
	struct timespec bad[] = { { 0, 1000000000 }, { 0, -1 }, { -1, 0 }, { -1, 999 } };
	struct timespec ts;
	long r;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		reset_vec();
		ts = bad[i];
		printf("timeout {%ld, %ld}: ", (long)ts.tv_sec, ts.tv_nsec);
		T_REPORT("recvmmsg", recvmmsg(s, vec, N, MSG_DONTWAIT, &ts));
	}
	t_send_all(c, "abcdefghij", 10);
	t_wait_inq(s, 10);
	reset_vec();
	ts = (struct timespec){ 5, 0 };
	r = T_REPORT("recvmmsg, 5 s timeout", recvmmsg(s, vec, N, MSG_DONTWAIT, &ts));
	show("got", r);
	t_expect(ts.tv_sec < 5 && (ts.tv_sec > 0 || ts.tv_nsec > 0),
		 "what is left of the timeout was written back");
	t_send_all(c, "0123456789", 10);
	t_wait_inq(s, 10);
	reset_vec();
	ts = (struct timespec){ 0, 0 };
	r = T_REPORT("recvmmsg, {0, 0} timeout", recvmmsg(s, vec, N, MSG_DONTWAIT, &ts));
	show("got", r);
	printf("  timeout after: {%ld, %ld}\n", (long)ts.tv_sec, ts.tv_nsec);
	reset_vec();
	r = T_REPORT("recvmmsg, the rest", recvmmsg(s, vec, N, MSG_DONTWAIT, NULL));
	show("got", r);
	reset_vec();
	T_REPORT("recvmmsg on empty", recvmmsg(s, vec, N, MSG_DONTWAIT, NULL));
}

static void waitforone(int c, int s)
{
	long r;

	t_send_all(c, "xyz", 3);
	t_wait_inq(s, 3);
	reset_vec();
	r = T_REPORT("recvmmsg MSG_WAITFORONE", recvmmsg(s, vec, N, MSG_WAITFORONE, NULL));
	show("got", r);
}

static void eof(int c, int s)
{
	struct timespec ts = { 5, 0 };
	long r;

	t_send_all(c, "last", 4);
	shutdown(c, SHUT_WR);
	t_wait_event(s, POLLRDHUP);
	reset_vec();
	r = T_REPORT("recvmmsg at EOF", recvmmsg(s, vec, N, 0, NULL));
	show("got", r);
	reset_vec();
	r = T_REPORT("recvmmsg at EOF again, with a timeout", recvmmsg(s, vec, N, 0, &ts));
	show("got", r);
}

// A reset with data left unread: the pending error comes before the data.
static void pending_error(void)
{
	struct linger lg = { 1, 0 };
	int c, s;
	long r;

	t_pair(AF_INET, &c, &s);
	t_send_all(c, "unread", 6);
	t_wait_inq(s, 6);
	if (setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)))
		t_fatal("SO_LINGER");
	close(c);
	t_wait_event(s, POLLERR);
	reset_vec();
	T_REPORT("recvmmsg after a reset", recvmmsg(s, vec, N, MSG_DONTWAIT, NULL));
	reset_vec();
	r = T_REPORT("recvmmsg again", recvmmsg(s, vec, N, MSG_DONTWAIT, NULL));
	show("got", r);
	close(s);
}

// An error after some messages waits for the next call: the reader blocks
// for a third message, and the peer resets meanwhile.
struct resetter {
	int fd;
	pid_t reader;
};

static void *reset_later(void *arg)
{
	struct resetter *r = arg;
	struct linger lg = { 1, 0 };

	t_wait_asleep(getpid(), r->reader, 200);
	if (setsockopt(r->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)))
		t_fatal("SO_LINGER");
	close(r->fd);
	return NULL;
}

static void error_after_data(void)
{
	struct resetter rs;
	pthread_t th;
	char buf[8];
	int c, s;
	long r;

	t_pair(AF_INET, &c, &s);
	t_send_all(c, "ab", 2);
	t_wait_inq(s, 2);
	rs.fd = c;
	rs.reader = (pid_t)syscall(SYS_gettid);
	if (pthread_create(&th, NULL, reset_later, &rs))
		t_fatal("pthread_create");
	reset_vec();
	for (int i = 0; i < N; i++)
		iov[i].iov_len = 1;
	r = T_REPORT("blocking recvmmsg of 1-byte messages, reset while waiting for the third",
		     recvmmsg(s, vec, N, 0, NULL));
	show("got", r);
	pthread_join(th, NULL);
	T_REPORT("recv then", recv(s, buf, sizeof(buf), MSG_DONTWAIT));
	T_REPORT("recv again", recv(s, buf, sizeof(buf), MSG_DONTWAIT));
	close(s);
}

int main(void)
{
	int c, s;

	t_start(30);
	t_pair(AF_INET, &c, &s);
	timeouts(c, s);
	waitforone(c, s);
	eof(c, s);
	close(c);
	close(s);
	pending_error();
	error_after_data();
	return t_finish();
}
