// SPDX-License-Identifier: MIT
// Data integrity, bulk: one connection carries T_BULK_BYTES (default 2 GiB)
// in each direction at once, a writer and a reader thread per end, write and
// read sizes varying 1..64 KiB; every byte is checked against its stream.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=${T_BULK_BYTES:-2G} shm_rx_bytes>=${T_BULK_BYTES:-2G}
// t-timeout: 300
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum {
	CHUNK_MAX = 64 << 10,
	SEED_UP = 0x5eed0001,
	SEED_DOWN = 0x5eed0002,
};

struct side {
	int fd;
	uint64_t seed;   // stream this side writes or expects
	uint64_t rnd;    // size sequence
	uint64_t bytes;  // to move
	uint64_t done;   // moved
	int64_t bad;     // first mismatching offset, -1 if none
};

static void *writer(void *arg)
{
	struct side *w = arg;
	unsigned char *buf = malloc(CHUNK_MAX);

	if (!buf)
		t_fatal("malloc");
	while (w->done < w->bytes) {
		size_t n = 1 + t_rand(&w->rnd) % CHUNK_MAX;

		if (n > w->bytes - w->done)
			n = w->bytes - w->done;
		t_stream_fill(w->seed, w->done, buf, n);
		t_send_all(w->fd, buf, n);
		w->done += n;
	}
	free(buf);
	return NULL;
}

static void *reader(void *arg)
{
	struct side *r = arg;
	unsigned char *buf = malloc(CHUNK_MAX);

	if (!buf)
		t_fatal("malloc");
	r->bad = -1;
	while (r->done < r->bytes) {
		size_t n = 1 + t_rand(&r->rnd) % CHUNK_MAX;
		ssize_t got;

		if (n > r->bytes - r->done)
			n = r->bytes - r->done;
		got = recv(r->fd, buf, n, 0);
		if (got <= 0)
			t_fatal("recv at %llu of %llu", (unsigned long long)r->done,
				(unsigned long long)r->bytes);
		if (r->bad < 0)
			r->bad = t_stream_check(r->seed, r->done, buf, (size_t)got);
		r->done += (uint64_t)got;
	}
	free(buf);
	return NULL;
}

int main(void)
{
	uint64_t bytes = t_env_u64("T_BULK_BYTES", 2ULL << 30);
	struct side cw, cr, sw, sr;
	pthread_t th[4];
	int c, s, i;
	char eof;

	t_start(280);
	t_pair(AF_INET, &c, &s);
	cw = (struct side){ .fd = c, .seed = SEED_UP, .rnd = 1, .bytes = bytes };
	sr = (struct side){ .fd = s, .seed = SEED_UP, .rnd = 2, .bytes = bytes };
	sw = (struct side){ .fd = s, .seed = SEED_DOWN, .rnd = 3, .bytes = bytes };
	cr = (struct side){ .fd = c, .seed = SEED_DOWN, .rnd = 4, .bytes = bytes };
	if (pthread_create(&th[0], NULL, writer, &cw) ||
	    pthread_create(&th[1], NULL, reader, &sr) ||
	    pthread_create(&th[2], NULL, writer, &sw) ||
	    pthread_create(&th[3], NULL, reader, &cr))
		t_fatal("pthread_create");
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	shutdown(c, SHUT_WR);
	shutdown(s, SHUT_WR);
	printf("bytes per direction = %llu\n", (unsigned long long)bytes);
	t_expect(cw.done == bytes && sw.done == bytes, "both writers done");
	t_expect(sr.done == bytes && sr.bad < 0,
		 "client -> server: all bytes arrived intact (first bad %lld)",
		 (long long)sr.bad);
	t_expect(cr.done == bytes && cr.bad < 0,
		 "server -> client: all bytes arrived intact (first bad %lld)",
		 (long long)cr.bad);
	T_REPORT("recv(s) at EOF", recv(s, &eof, 1, 0));
	T_REPORT("recv(c) at EOF", recv(c, &eof, 1, 0));
	close(c);
	close(s);
	return t_finish();
}
