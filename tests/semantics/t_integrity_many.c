// SPDX-License-Identifier: MIT
// Data integrity, many connections: T_MANY_CONNS (200) connections carry
// T_MANY_MSGS (1000) messages of 1..2048 bytes each way at once, 8 threads per
// end; each message is checked against content derived from (conn, dir, index).
// shunt-expect: shm_connect>=${T_MANY_CONNS:-200} shm_accept>=${T_MANY_CONNS:-200}
// shunt-expect: kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=${T_MANY_CONNS:-200} shm_rx_bytes>=${T_MANY_CONNS:-200}
// t-timeout: 300
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	THREADS = 8, // per end
	MSG_MAX = 2048,
	UP = 1,
	DOWN = 2,
};

struct conn {
	int cfd, sfd;
};

struct worker {
	struct conn *conns;
	unsigned first, count, msgs;
	bool client;
	uint64_t sent, received, bad;
};

static uint64_t msg_seed(unsigned conn, int dir, unsigned i)
{
	return t_mix64(((uint64_t)conn << 40) ^ ((uint64_t)dir << 32) ^ i);
}

static size_t msg_len(uint64_t seed)
{
	return 1 + t_mix64(seed ^ 0x1e9) % MSG_MAX;
}

// For each message index: send it on every connection of this worker, then
// read the peer's message of the same index on every connection. At most two
// messages per direction are ever in flight, so small buffers cannot block.
static void *work(void *arg)
{
	struct worker *w = arg;
	unsigned char buf[MSG_MAX];
	int out = w->client ? UP : DOWN, in = w->client ? DOWN : UP;
	unsigned i, k;

	for (i = 0; i < w->msgs; i++) {
		for (k = w->first; k < w->first + w->count; k++) {
			uint64_t seed = msg_seed(k, out, i);
			size_t n = msg_len(seed);

			t_stream_fill(seed, 0, buf, n);
			t_send_all(w->client ? w->conns[k].cfd : w->conns[k].sfd, buf, n);
			w->sent += n;
		}
		for (k = w->first; k < w->first + w->count; k++) {
			uint64_t seed = msg_seed(k, in, i);
			size_t n = msg_len(seed);

			t_recv_all(w->client ? w->conns[k].cfd : w->conns[k].sfd, buf, n);
			if (t_stream_check(seed, 0, buf, n) >= 0)
				w->bad++;
			w->received += n;
		}
	}
	return NULL;
}

int main(void)
{
	unsigned nconn = (unsigned)t_env_u64("T_MANY_CONNS", 200);
	unsigned msgs = (unsigned)t_env_u64("T_MANY_MSGS", 1000);
	struct worker w[2 * THREADS];
	pthread_t th[2 * THREADS];
	struct conn *conns;
	struct t_addr a;
	uint64_t up_sent = 0, up_recv = 0, down_sent = 0, down_recv = 0, bad = 0;
	uint64_t expect_up = 0, expect_down = 0;
	unsigned i, k, per, nthreads;
	int lfd;

	t_start(280);
	conns = calloc(nconn, sizeof(*conns));
	if (!conns)
		t_fatal("calloc");
	lfd = t_listen_loopback(AF_INET, 16, &a);
	// One at a time, so connection k is accepted as connection k, and the
	// peer confirms it with its index.
	for (k = 0; k < nconn; k++) {
		uint32_t id;

		conns[k].cfd = t_connect(&a);
		conns[k].sfd = t_accept(lfd);
		t_send_all(conns[k].cfd, &k, sizeof(k));
		t_recv_all(conns[k].sfd, &id, sizeof(id));
		if (id != k)
			t_fatal("connection %u arrived as %u", k, id);
	}
	close(lfd);

	nthreads = nconn < THREADS ? nconn : THREADS;
	per = (nconn + nthreads - 1) / nthreads;
	for (i = 0; i < 2 * nthreads; i++) {
		unsigned first = (i % nthreads) * per;

		w[i] = (struct worker){
			.conns = conns,
			.first = first,
			.count = first >= nconn ? 0 : (nconn - first < per ? nconn - first : per),
			.msgs = msgs,
			.client = i < nthreads,
		};
		if (pthread_create(&th[i], NULL, work, &w[i]))
			t_fatal("pthread_create");
	}
	for (i = 0; i < 2 * nthreads; i++) {
		pthread_join(th[i], NULL);
		if (w[i].client) {
			up_sent += w[i].sent;
			down_recv += w[i].received;
		} else {
			down_sent += w[i].sent;
			up_recv += w[i].received;
		}
		bad += w[i].bad;
	}
	for (k = 0; k < nconn; k++)
		for (i = 0; i < msgs; i++) {
			expect_up += msg_len(msg_seed(k, UP, i));
			expect_down += msg_len(msg_seed(k, DOWN, i));
		}
	printf("%u connections x %u messages each way\n", nconn, msgs);
	t_expect(up_sent == expect_up && up_recv == expect_up,
		 "client -> server bytes = %llu",
		 (unsigned long long)expect_up);
	t_expect(down_sent == expect_down && down_recv == expect_down,
		 "server -> client bytes = %llu",
		 (unsigned long long)expect_down);
	t_expect(bad == 0, "corrupted messages = %llu", (unsigned long long)bad);
	for (k = 0; k < nconn; k++) {
		char b;

		shutdown(conns[k].cfd, SHUT_WR);
		if (recv(conns[k].sfd, &b, 1, 0) != 0)
			t_expect(false, "connection %u: EOF after the last message", k);
		close(conns[k].cfd);
		close(conns[k].sfd);
	}
	printf("all connections closed cleanly\n");
	free(conns);
	return t_finish();
}
