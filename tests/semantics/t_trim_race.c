// SPDX-License-Identifier: MIT
// Bytes stay intact while ring pages are given back (the idle trimmer): 4
// connections carry bursts both ways with pauses around the trim delay, so
// trims race with new sends, and readers that lag behind a quiet or blocked
// sender give back pages while it writes again; every byte is checked.
// shunt-expect: shm_connect>=4 shm_accept>=4 kernel_connect==0
// shunt-expect: trim_idle>=1 trim_read>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	PAIRS = 4,
	FLOWS = 2 * PAIRS,	// one per direction of each connection
	ROUNDS = 8,
	BIG = 400 << 10,	// more than a ring holds: the sender blocks
	BUF = BIG,
};

struct flow {
	int wfd, rfd;
	unsigned id;
	uint64_t sent, received;
	int64_t bad;		// first bad stream offset, or -1
};

/*
 * Round @r of flow @f: the burst's size and the sender's pause after it,
 * and how long the reader waits once the burst starts arriving.
 *   kind 0: a small burst, no pause;
 *   kind 1: a pause of about the trim delay (500 ms), so the next send
 *           races the trim;
 *   kind 2: a pause past the trim (quiet, the reader caught up);
 *   kind 3: a burst larger than the ring, read only 1.2 s later: the
 *           sender, blocked, is trimmed with bytes unread, and the reader
 *           gives pages back as it reads while the sender fills them again.
 */
static unsigned kind_of(unsigned f, unsigned r)
{
	return (f + r) % 4;
}

static size_t burst_of(unsigned f, unsigned r)
{
	uint64_t x = t_mix64((uint64_t)f << 32 | r);

	switch (kind_of(f, r)) {
	case 0:
		return 1 + x % (64 << 10);
	case 3:
		return BIG;
	default:
		return 1 + x % (200 << 10);
	}
}

static unsigned pause_ms(unsigned f, unsigned r)
{
	static const unsigned ms[4] = { 0, 550, 1100, 300 };

	return ms[kind_of(f, r)];
}

static uint64_t seed_of(unsigned f)
{
	return 0x7217ace0 + f;
}

static void *writer(void *arg)
{
	struct flow *fl = arg;
	unsigned char *buf = malloc(BUF);

	if (!buf)
		t_fatal("malloc");
	for (unsigned r = 0; r < ROUNDS; r++) {
		size_t n = burst_of(fl->id, r);

		t_stream_fill(seed_of(fl->id), fl->sent, buf, n);
		t_send_all(fl->wfd, buf, n);
		fl->sent += n;
		t_sleep_ms(pause_ms(fl->id, r));
	}
	free(buf);
	return NULL;
}

static void *reader(void *arg)
{
	struct flow *fl = arg;
	unsigned char *buf = malloc(BUF);

	if (!buf)
		t_fatal("malloc");
	for (unsigned r = 0; r < ROUNDS; r++) {
		size_t n = burst_of(fl->id, r);

		if (kind_of(fl->id, r) == 3) {
			struct pollfd p = { fl->rfd, POLLIN, 0 };

			if (poll(&p, 1, -1) != 1)
				t_fatal("poll");
			t_sleep_ms(1200);
		}
		t_recv_all(fl->rfd, buf, n);
		if (fl->bad < 0) {
			int64_t at = t_stream_check(seed_of(fl->id), fl->received, buf, n);

			fl->bad = at < 0 ? -1 : (int64_t)fl->received + at;
		}
		fl->received += n;
	}
	free(buf);
	return NULL;
}

int main(void)
{
	int cfd[PAIRS], sfd[PAIRS];
	struct flow fl[FLOWS];
	pthread_t th[2 * FLOWS];
	unsigned i;

	t_start(60);
	for (i = 0; i < PAIRS; i++)
		t_pair(AF_INET, &cfd[i], &sfd[i]);
	for (i = 0; i < FLOWS; i++) {
		unsigned p = i / 2;
		bool up = i % 2 == 0;

		fl[i] = (struct flow){ .wfd = up ? cfd[p] : sfd[p], .rfd = up ? sfd[p] : cfd[p],
				       .id = i, .bad = -1 };
		if (pthread_create(&th[2 * i], NULL, writer, &fl[i]) ||
		    pthread_create(&th[2 * i + 1], NULL, reader, &fl[i]))
			t_fatal("pthread_create");
	}
	for (i = 0; i < 2 * FLOWS; i++)
		pthread_join(th[i], NULL);
	for (i = 0; i < FLOWS; i++) {
		uint64_t want = 0;

		for (unsigned r = 0; r < ROUNDS; r++)
			want += burst_of(i, r);
		t_expect(fl[i].sent == want && fl[i].received == want,
			 "flow %u (%s): %llu bytes", i, i % 2 ? "down" : "up",
			 (unsigned long long)want);
		t_expect(fl[i].bad < 0, "flow %u: intact", i);
	}
	for (i = 0; i < PAIRS; i++) {
		close(cfd[i]);
		close(sfd[i]);
	}
	return t_finish();
}
