// SPDX-License-Identifier: MIT
// The peer closed: EOF after its data, a blocked recv woken by the close,
// the first send succeeding (in part, when larger than the send buffer) and
// the next ones failing with EPIPE, and SIGPIPE delivered unless MSG_NOSIGNAL
// or SIG_IGN.
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void eof_after_data(void)
{
	char buf[64];
	int c, s;

	t_pair(AF_INET, &c, &s);
	T_REPORT("send(c, \"bye\")", send(c, "bye", 3, 0));
	T_REPORT("close(c)", close(c));
	t_wait_event(s, POLLRDHUP);
	printf("poll(s) after peer close = %s\n",
	       t_poll_str(t_poll1(s, POLLIN | POLLOUT | POLLRDHUP, 0)));
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("recv(s) at EOF", recv(s, buf, sizeof(buf), 0));
	T_REPORT("read(s) at EOF again", read(s, buf, sizeof(buf)));
	T_REPORT("recv(s, MSG_DONTWAIT) at EOF", recv(s, buf, sizeof(buf), MSG_DONTWAIT));

	// Writing to a peer that closed: the first send is accepted (the
	// peer answers it with a reset), later ones fail.
	t_count_sigpipe();
	T_REPORT("send #1 after peer close", send(s, "a", 1, 0));
	printf("SIGPIPE count = %d\n", t_sigpipes());
	t_wait_event(s, POLLERR);
	printf("poll(s) after the reset = %s\n",
	       t_poll_str(t_poll1(s, POLLIN | POLLOUT | POLLRDHUP, 0)));
	T_REPORT("send #2", send(s, "b", 1, 0));
	printf("SIGPIPE count = %d\n", t_sigpipes());
	T_REPORT("send #3", send(s, "c", 1, 0));
	printf("SIGPIPE count = %d\n", t_sigpipes());
	T_REPORT("write #4", write(s, "d", 1));
	printf("SIGPIPE count = %d\n", t_sigpipes());
	T_REPORT("send #5 MSG_NOSIGNAL", send(s, "e", 1, MSG_NOSIGNAL));
	printf("SIGPIPE count = %d\n", t_sigpipes());
	T_REPORT("recv(s) after the reset", recv(s, buf, sizeof(buf), 0));
	signal(SIGPIPE, SIG_IGN);
	T_REPORT("send #6 with SIG_IGN", send(s, "f", 1, 0));
	T_REPORT("write #7 with SIG_IGN", write(s, "g", 1));
	printf("SIGPIPE count = %d\n", t_sigpipes());
	close(s);
}

struct blocked_recv {
	int fd;
	long ret;
	int err;
	char buf[16];
};

static void *recv_blocked(void *arg)
{
	struct blocked_recv *b = arg;

	errno = 0;
	b->ret = recv(b->fd, b->buf, sizeof(b->buf), 0);
	b->err = errno;
	return NULL;
}

// A recv blocked on an empty connection returns 0 when the peer closes.
static void close_wakes_recv(void)
{
	struct blocked_recv b;
	pthread_t th;
	int c, s;
	int64_t start;

	t_pair(AF_INET, &c, &s);
	b.fd = s;
	start = t_now_ns();
	if (pthread_create(&th, NULL, recv_blocked, &b))
		t_fatal("pthread_create");
	t_sleep_ms(100);
	close(c);
	pthread_join(th, NULL);
	printf("blocked recv woken by peer close = %ld%s%s\n", b.ret,
	       b.ret < 0 ? " " : "", b.ret < 0 ? t_errname(b.err) : "");
	t_expect(t_elapsed_ms(start) >= 50, "recv stayed blocked until the close");
	close(s);
}

// A send blocked on a full connection returns when the peer closes (with
// unread data, so it resets): the bytes taken so far, then errors.
struct blocked_send {
	int fd;
	long ret;
	int err;
};

enum { HUGE_SEND = 64 << 20 };

static void *send_blocked(void *arg)
{
	struct blocked_send *b = arg;
	char *huge = calloc(1, HUGE_SEND);

	if (!huge)
		t_fatal("calloc");
	errno = 0;
	b->ret = send(b->fd, huge, HUGE_SEND, 0);
	b->err = errno;
	free(huge);
	return NULL;
}

static void close_wakes_send(void)
{
	struct blocked_send b;
	pthread_t th;
	int c, s;

	t_pair(AF_INET, &c, &s);
	signal(SIGPIPE, SIG_IGN);
	b.fd = c;
	if (pthread_create(&th, NULL, send_blocked, &b))
		t_fatal("pthread_create");
	t_wait_inq(s, 1);
	t_sleep_ms(100);
	close(s);
	pthread_join(th, NULL);
	t_expect(b.ret > 0 && b.ret < HUGE_SEND,
		 "blocked send woken by peer close: partial, 0 < n < len (%s)",
		 b.ret < 0 ? t_errname(b.err) : "ok");
	t_wait_event(c, POLLERR);
	printf("poll(c) after the reset = %s\n",
	       t_poll_str(t_poll1(c, POLLIN | POLLOUT | POLLRDHUP, 0)));
	T_REPORT("send after that", send(c, "x", 1, 0));
	T_REPORT("send again", send(c, "x", 1, 0));
	T_REPORT("recv", recv(c, &b, 1, 0));
	close(c);
}

// A send larger than the send buffer to a peer that closed: the kernel
// takes what its buffer holds, so the send is partial and the error comes
// with the next one (libuv writes the rest and reports it: Node's
// test-net-error-twice).
static void big_send_to_closed_peer(int flags, const char *how)
{
	char *big = calloc(1, HUGE_SEND);
	long n;
	int c, s;

	if (!big)
		t_fatal("calloc");
	t_pair(AF_INET, &c, &s);
	signal(SIGPIPE, SIG_IGN);
	close(c);
	t_wait_event(s, POLLRDHUP);
	errno = 0;
	n = send(s, big, HUGE_SEND, flags);
	t_expect(n > 0 && n < HUGE_SEND, "%s send of 64 MiB to a closed peer: partial, 0 < n < len (%s)",
		 how, n < 0 ? t_errname(errno) : "ok");
	t_wait_event(s, POLLERR);
	T_REPORT("the rest", send(s, big + (n > 0 ? n : 0), 1, flags));
	close(s);
	free(big);
}

int main(void)
{
	t_start(30);
	eof_after_data();
	close_wakes_recv();
	close_wakes_send();
	big_send_to_closed_peer(MSG_DONTWAIT, "a non-blocking");
	big_send_to_closed_peer(0, "a blocking");
	return t_finish();
}
