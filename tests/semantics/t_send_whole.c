// SPDX-License-Identifier: MIT
// Sends from several threads on one blocking socket: each send of a small
// record reaches the peer in one piece, never torn apart by another
// thread's, and each thread's records arrive in the order it sent them.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1600000
// t-timeout: 120
#include "t_harness.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum {
	THREADS = 8,
	RECORDS = 5000,		// per thread
	RECORD = 40,		// bytes
	READ_SIZE = 1000,	// the reader takes odd pieces, slower than the writers
};

struct record {
	uint32_t thread, seq;
	uint8_t fill[28];
	uint32_t check;
};
_Static_assert(sizeof(struct record) == RECORD, "40-byte records");

struct writer {
	int fd;
	uint32_t id;
	pthread_t th;
};

static uint32_t check_of(const struct record *r)
{
	return (uint32_t)t_mix64((uint64_t)r->thread << 32 | r->seq);
}

static void make(struct record *r, uint32_t thread, uint32_t seq)
{
	r->thread = thread;
	r->seq = seq;
	memset(r->fill, (int)(thread * 31 + seq), sizeof(r->fill));
	r->check = check_of(r);
}

static bool intact(const struct record *r)
{
	uint8_t f = (uint8_t)(r->thread * 31 + r->seq);

	if (r->thread >= THREADS || r->check != check_of(r))
		return false;
	for (size_t i = 0; i < sizeof(r->fill); i++)
		if (r->fill[i] != f)
			return false;
	return true;
}

static void *write_records(void *arg)
{
	struct writer *w = arg;
	struct record r;

	for (uint32_t seq = 0; seq < RECORDS; seq++) {
		make(&r, w->id, seq);
		t_send_all(w->fd, &r, sizeof(r));	// sendall(): one send() here, as it fits
	}
	return NULL;
}

int main(void)
{
	static uint8_t stream[THREADS * RECORDS * RECORD];
	uint32_t next[THREADS] = { 0 };
	struct writer w[THREADS];
	size_t got = 0, torn = 0, disorder = 0;
	int c, s;

	t_start(100);
	t_pair(AF_INET, &c, &s);
	for (uint32_t i = 0; i < THREADS; i++) {
		w[i].fd = c;
		w[i].id = i;
		if (pthread_create(&w[i].th, NULL, write_records, &w[i]))
			t_fatal("pthread_create");
	}
	while (got < sizeof(stream)) {
		size_t want = sizeof(stream) - got < READ_SIZE ? sizeof(stream) - got : READ_SIZE;
		ssize_t n = recv(s, stream + got, want, 0);

		if (n <= 0)
			t_fatal("recv");
		got += (size_t)n;
	}
	for (uint32_t i = 0; i < THREADS; i++)
		pthread_join(w[i].th, NULL);
	for (size_t off = 0; off < sizeof(stream); off += RECORD) {
		struct record r;

		memcpy(&r, stream + off, sizeof(r));
		if (!intact(&r)) {
			torn++;
			continue;
		}
		if (r.seq != next[r.thread])
			disorder++;
		next[r.thread] = r.seq + 1;
	}
	printf("received %zu bytes from %d threads\n", got, THREADS);
	t_expect(torn == 0, "every 40-byte record arrived whole (%zu torn)", torn);
	t_expect(disorder == 0, "each thread's records in its order (%zu out of order)", disorder);
	close(c);
	close(s);
	return t_finish();
}
