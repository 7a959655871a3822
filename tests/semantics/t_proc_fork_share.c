// SPDX-License-Identifier: MIT
// One connection shared by a parent and its forked child, as the kernel
// shares it: they write in turns (token passed through a pipe) and the peer
// reads every byte in order; they read in turns what the peer sent; bytes
// sent before the fork and not yet read are there for the child; with both
// blocked in recv, one message goes to exactly one of them.
// shunt-expect: shm_connect>=4 shm_accept>=4 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

enum {
	ROUNDS = 200,	 // turns of each process
	MAX_MSG = 64 << 10,
	CHILD_WATCHDOG_S = 50,
	STILL_MS = 100,
	SEED_W = 0x5a1,
	SEED_R = 0x5a2,
};

// Message i of a turn-taking stream: its size and its offset in the stream.
static size_t msg_size(unsigned i)
{
	return 1 + (size_t)(t_mix64(i) % MAX_MSG);
}

static uint64_t msg_off(unsigned i)
{
	uint64_t off = 0;

	for (unsigned k = 0; k < i; k++)
		off += msg_size(k);
	return off;
}

// Turn i: even turns are the parent's, odd ones the child's.
static void write_turn(int fd, unsigned i, unsigned char *buf)
{
	size_t n = msg_size(i);

	t_stream_fill(SEED_W, msg_off(i), buf, n);
	switch (i % 4) {
	case 0:
	case 1:
		t_send_all(fd, buf, n);
		break;
	case 2:
		if (write(fd, buf, n) != (ssize_t)n)
			t_fatal("write(%zu)", n);
		break;
	default: {
		struct iovec iov[2] = { { buf, n / 2 }, { buf + n / 2, n - n / 2 } };

		if (writev(fd, iov, 2) != (ssize_t)n)
			t_fatal("writev(%zu)", n);
	}
	}
}

struct drain {
	int fd;
	uint64_t want, got;
	int64_t bad; // first bad offset, or -1
	pthread_t th;
};

static void *drain_stream(void *arg)
{
	struct drain *d = arg;
	static unsigned char buf[MAX_MSG];

	d->bad = -1;
	while (d->got < d->want) {
		size_t n = d->want - d->got < sizeof(buf) ? d->want - d->got : sizeof(buf);
		ssize_t r = recv(d->fd, buf, n, 0);

		if (r <= 0)
			t_fatal("peer recv");
		if (d->bad < 0)
			d->bad = t_stream_check(SEED_W, d->got, buf, (size_t)r);
		d->got += (uint64_t)r;
	}
	return NULL;
}

static void turns_writing(void)
{
	static unsigned char buf[MAX_MSG];
	struct t_chan to_child, to_parent;
	struct drain d = { 0 };
	int c, s;
	pid_t pid;

	printf("parent and child write in turns on the shared connection:\n");
	t_pair(AF_INET, &c, &s);
	t_chan_open(&to_child);
	t_chan_open(&to_parent);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		close(s);
		for (unsigned i = 1; i < 2 * ROUNDS; i += 2) {
			t_chan_get(&to_child);
			write_turn(c, i, buf);
			t_chan_put(&to_parent, i);
		}
		close(c);
		exit(t_finish());
	}
	d.fd = s;
	d.want = msg_off(2 * ROUNDS);
	if (pthread_create(&d.th, NULL, drain_stream, &d))
		t_fatal("pthread_create");
	for (unsigned i = 0; i < 2 * ROUNDS; i += 2) {
		write_turn(c, i, buf);
		t_chan_put(&to_child, i);
		if (t_chan_get(&to_parent) != i + 1)
			t_fatal("turn out of step");
	}
	pthread_join(d.th, NULL);
	t_expect(t_wait_child(pid) == 0, "  child exit status 0");
	t_expect(d.bad < 0, "  peer read %d messages, %llu bytes, in order and intact",
		 2 * ROUNDS, (unsigned long long)d.got);
	close(c);
	printf("  peer sees after both closed: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(s);
	close(to_child.rd), close(to_child.wr), close(to_parent.rd), close(to_parent.wr);
}

struct feed {
	int fd;
	uint64_t n;
	pthread_t th;
};

static void *feed_stream(void *arg)
{
	struct feed *f = arg;
	static unsigned char buf[MAX_MSG];
	uint64_t off = 0;

	while (off < f->n) {
		size_t k = f->n - off < sizeof(buf) ? f->n - off : sizeof(buf);

		t_stream_fill(SEED_R, off, buf, k);
		t_send_all(f->fd, buf, k);
		off += k;
	}
	return NULL;
}

// Read message i exactly and check it; false if it differs.
static bool read_turn(int fd, unsigned i, unsigned char *buf)
{
	size_t n = msg_size(i);

	if (i % 2)
		t_recv_all(fd, buf, n);
	else {
		// read(2) as well as recv(2), until the message is complete.
		size_t got = 0;

		while (got < n) {
			ssize_t r = read(fd, buf + got, n - got);

			if (r <= 0)
				t_fatal("read");
			got += (size_t)r;
		}
	}
	return t_stream_check(SEED_R, msg_off(i), buf, n) < 0;
}

static void turns_reading(void)
{
	static unsigned char buf[MAX_MSG];
	struct t_chan to_child, to_parent;
	struct feed f = { 0 };
	unsigned bad = 0;
	int c, s, st;
	pid_t pid;

	printf("parent and child read in turns what the peer sends:\n");
	t_pair(AF_INET, &c, &s);
	t_chan_open(&to_child);
	t_chan_open(&to_parent);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		close(s);
		for (unsigned i = 1; i < 2 * ROUNDS; i += 2) {
			t_chan_get(&to_child);
			bad += !read_turn(c, i, buf);
			t_chan_put(&to_parent, i);
		}
		close(c);
		_exit(bad ? 2 : 0);
	}
	f.fd = s;
	f.n = msg_off(2 * ROUNDS);
	if (pthread_create(&f.th, NULL, feed_stream, &f))
		t_fatal("pthread_create");
	for (unsigned i = 0; i < 2 * ROUNDS; i += 2) {
		bad += !read_turn(c, i, buf);
		t_chan_put(&to_child, i);
		if (t_chan_get(&to_parent) != i + 1)
			t_fatal("turn out of step");
	}
	pthread_join(f.th, NULL);
	st = t_wait_child(pid);
	t_expect(bad == 0 && st == 0, "  each read its %d messages intact (child status %d)",
		 ROUNDS, st);
	T_REPORT("  nothing left: recv(MSG_DONTWAIT)", recv(c, buf, 1, MSG_DONTWAIT));
	close(c);
	close(s);
	close(to_child.rd), close(to_child.wr), close(to_parent.rd), close(to_parent.wr);
}

// The peer sends before the fork; nobody reads until the child does.
static void unread_before_fork(void)
{
	static unsigned char big[256 << 10];
	struct t_chan done;
	char buf[64];
	int c, s, st;
	pid_t pid;

	printf("bytes sent before the fork, unread, read by the child:\n");
	t_pair(AF_INET, &c, &s);
	t_chan_open(&done);
	T_REPORT("  peer send(\"early\")", send(s, "early", 5, 0));
	t_wait_inq(c, 5);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		close(s);
		T_REPORT_DATA("  child recv", recv(c, buf, sizeof(buf), 0), buf);
		t_chan_put(&done, 1);
		// Then a stream larger than any buffer, while the parent waits.
		t_recv_all(c, big, sizeof(big));
		st = t_stream_check(SEED_R, 0, big, sizeof(big)) < 0 ? 0 : 2;
		T_REPORT("  child send(\"read it all\")", send(c, "read it all", 11, 0));
		_exit(st);
	}
	t_chan_get(&done);
	{
		struct feed f = { .fd = s, .n = sizeof(big) };

		feed_stream(&f);
	}
	st = t_wait_child(pid);
	t_expect(st == 0, "  child read %zu more bytes intact (status %d)", sizeof(big), st);
	t_wait_inq(s, 11);
	T_REPORT_DATA("  peer recv", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("  parent: recv(MSG_DONTWAIT)", recv(c, buf, sizeof(buf), MSG_DONTWAIT));
	close(c);
	close(s);
	close(done.rd), close(done.wr);
}

struct waiter {
	int fd;
	atomic_int done;
	long ret;
	char buf[16];
	pthread_t th;
};

static void *recv_once(void *arg)
{
	struct waiter *w = arg;

	w->ret = recv(w->fd, w->buf, sizeof(w->buf), 0);
	atomic_store(&w->done, 1);
	return NULL;
}

// Parent (a thread) and child both blocked in recv: one message, one reader.
static void both_blocked(void)
{
	struct t_chan ready, got;
	struct waiter w = { 0 };
	struct pollfd pc;
	char child_buf[16];
	uint32_t child_n;
	int c, s, st, returned;
	bool child_first;
	pid_t pid;

	printf("parent and child both blocked in recv, one message at a time:\n");
	t_pair(AF_INET, &c, &s);
	t_chan_open(&ready);
	t_chan_open(&got);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		long r;

		close(s);
		t_chan_put(&ready, (uint32_t)gettid());
		r = recv(c, child_buf, sizeof(child_buf), 0);
		if (r < 0 || r > 3)
			_exit(2);
		memcpy(&child_n, child_buf, 3);
		t_chan_put(&got, (uint32_t)r);
		t_chan_put(&got, child_n);
		_exit(0);
	}
	{
		pid_t tid = (pid_t)t_chan_get(&ready);

		t_wait_asleep(pid, tid, 50);
	}
	w.fd = c;
	if (pthread_create(&w.th, NULL, recv_once, &w))
		t_fatal("pthread_create");
	t_sleep_ms(50);
	T_REPORT("  peer send(\"one\")", send(s, "one", 3, 0));
	pc = (struct pollfd){ .fd = got.rd, .events = POLLIN };
	while (!atomic_load(&w.done) && poll(&pc, 1, 1) == 0)
		;
	t_sleep_ms(STILL_MS);
	child_first = poll(&pc, 1, 0) == 1;
	returned = child_first + atomic_load(&w.done);
	t_expect(returned == 1, "  exactly one of them returned");
	T_REPORT("  peer send(\"two\")", send(s, "two", 3, 0));
	pthread_join(w.th, NULL);
	child_n = t_chan_get(&got);
	{
		uint32_t v = t_chan_get(&got);

		memcpy(child_buf, &v, 3);
	}
	st = t_wait_child(pid);
	t_expect(st == 0 && w.ret == 3 && child_n == 3 &&
			 !memcmp(child_first ? child_buf : w.buf, "one", 3) &&
			 !memcmp(child_first ? w.buf : child_buf, "two", 3),
		 "  the first to return got \"one\", the other \"two\"");
	close(c);
	close(s);
	close(ready.rd), close(ready.wr), close(got.rd), close(got.wr);
}

int main(void)
{
	t_start(60);
	turns_writing();
	turns_reading();
	unread_before_fork();
	both_blocked();
	return t_finish();
}
