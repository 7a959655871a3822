// SPDX-License-Identifier: MIT
// Buffer sizes: a non-blocking writer gets a partial write once its buffer
// is full, sooner with a small SO_SNDBUF; raising SO_SNDBUF wakes a sender
// blocked on a full buffer; every byte arrives, in order.
// shunt-expect: shm_connect>=4 shm_accept>=4 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum {
	SEED = 0x5b,
	WRITE = 207360,		// what the program wrote at once
	BLOCKED_SEND = 100000,
	BIG_SNDBUF = 1 << 20,
	CHUNK = 65536,
};

static uint8_t data[8 << 20];

// A pair whose client end has SO_SNDBUF @sndbuf (0: untouched), set before
// connect or, if @after, once connected.
static void pair_with_sndbuf(int sndbuf, bool after, int *c, int *s)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a);

	*c = t_socket(AF_INET, SOCK_STREAM);
	if (sndbuf && !after && setsockopt(*c, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)))
		t_fatal("SO_SNDBUF");
	if (connect(*c, (struct sockaddr *)&a.ss, a.len))
		t_fatal("connect");
	*s = t_accept(lfd);
	close(lfd);
	if (sndbuf && after && setsockopt(*c, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf)))
		t_fatal("SO_SNDBUF");
}

// Read @n bytes of the stream from offset @off and check them.
static bool drain(int s, uint64_t off, uint64_t n)
{
	static uint8_t buf[CHUNK];
	int64_t bad = -1;

	while (n) {
		ssize_t r = recv(s, buf, n < sizeof(buf) ? n : sizeof(buf), 0);

		if (r <= 0)
			t_fatal("drain recv");
		if (bad < 0)
			bad = t_stream_check(SEED, off, buf, (size_t)r);
		off += (uint64_t)r;
		n -= (uint64_t)r;
	}
	return bad < 0;
}

// Send non-blocking until the socket refuses even one byte; returns the bytes sent.
static uint64_t fill(int c, uint64_t off)
{
	uint64_t sent = 0;
	ssize_t n;

	t_set_nonblock(c, true);
	while ((n = send(c, data + off + sent, CHUNK, 0)) > 0)
		sent += (uint64_t)n;
	if (errno != EAGAIN)
		t_fatal("fill");
	while ((n = send(c, data + off + sent, 1, 0)) > 0)
		sent += (uint64_t)n;
	if (errno != EAGAIN)
		t_fatal("fill");
	return sent;
}

static void one_write(const char *what, int sndbuf, bool after)
{
	int c, s;
	ssize_t n;

	pair_with_sndbuf(sndbuf, after, &c, &s);
	t_set_nonblock(c, true);
	n = send(c, data, WRITE, 0);
	if (n <= 0)
		t_fatal("send");
	printf("%s: non-blocking write of %d bytes: %s\n", what, WRITE,
	       n == WRITE ? "whole" : "partial");
	t_expect(drain(s, 0, (uint64_t)n), "%s: the bytes written arrive intact", what);
	close(c);
	close(s);
}

struct blocked {
	int fd;
	uint64_t off;
	atomic_bool done;
	atomic_int tid;
	ssize_t ret;
};

static void *send_blocking(void *arg)
{
	struct blocked *b = arg;

	atomic_store(&b->tid, (int)syscall(SYS_gettid));
	b->ret = send(b->fd, data + b->off, BLOCKED_SEND, 0);
	atomic_store(&b->done, true);
	return NULL;
}

// A sender blocked on a full buffer goes on when SO_SNDBUF grows, with
// nobody reading.
static void woken_by_sndbuf(void)
{
	struct blocked b = { 0 };
	int c, s, big = BIG_SNDBUF;
	pthread_t th;
	uint64_t sent;

	pair_with_sndbuf(4096, false, &c, &s);
	sent = fill(c, 0);
	t_set_nonblock(c, false);
	b.fd = c;
	b.off = sent;
	if (pthread_create(&th, NULL, send_blocking, &b))
		t_fatal("pthread_create");
	while (!atomic_load(&b.tid))
		t_sleep_ms(1);
	t_wait_asleep(getpid(), atomic_load(&b.tid), 200);
	t_expect(!atomic_load(&b.done), "a blocking send on the full buffer waits");
	T_REPORT("setsockopt(SO_SNDBUF, 1 MiB)",
		 setsockopt(c, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big)));
	pthread_join(th, NULL);
	printf("the blocked send returned %zd\n", b.ret);
	t_expect(drain(s, 0, sent + BLOCKED_SEND), "every byte arrived, in order");
	close(c);
	close(s);
}

int main(void)
{
	t_start(30);
	t_stream_fill(SEED, 0, data, sizeof(data));
	one_write("default SO_SNDBUF", 0, false);
	one_write("SO_SNDBUF 4096 before connect", 4096, false);
	one_write("SO_SNDBUF 4096 once connected", 4096, true);
	woken_by_sndbuf();
	return t_finish();
}
