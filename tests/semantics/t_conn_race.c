// SPDX-License-Identifier: MIT
// Connections made at the same moment by many threads of one process to a
// listener nobody in it has connected to yet, half of them naming it by
// 127.0.0.1 and half by 0.0.0.0: every one is accepted once, carries its
// own bytes, and no thread waits forever. ROUNDS fresh listeners.
// shunt-expect: shm_connect>=512 shm_accept>=512 kernel_connect==0 kernel_accept==0
// t-timeout: 120
#include "t_harness.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum {
	ROUNDS = 32,
	THREADS = 16,
};

struct round {
	struct t_addr to[2];	// 127.0.0.1:P, 0.0.0.0:P
	pthread_barrier_t go;
	unsigned echoed;	// under lock
	pthread_mutex_t lock;
};

struct client {
	struct round *r;
	unsigned idx;
};

static void *client(void *arg)
{
	struct client *c = arg;
	unsigned char tag = (unsigned char)(c->idx + 1), back = 0;
	int fd = t_socket(AF_INET, SOCK_STREAM);

	pthread_barrier_wait(&c->r->go);
	if (connect(fd, (struct sockaddr *)&c->r->to[c->idx % 2].ss, c->r->to[c->idx % 2].len) < 0) {
		t_expect(false, "connect: %s", t_errname(errno));
		close(fd);
		return NULL;
	}
	t_send_all(fd, &tag, 1);
	t_recv_all(fd, &back, 1);
	if (back == tag) {
		pthread_mutex_lock(&c->r->lock);
		c->r->echoed++;
		pthread_mutex_unlock(&c->r->lock);
	}
	close(fd);
	return NULL;
}

int main(void)
{
	unsigned round, i, ok_rounds = 0;

	t_start(100);
	for (round = 0; round < ROUNDS; round++) {
		struct round r = { .echoed = 0 };
		struct client cl[THREADS];
		pthread_t th[THREADS];
		bool seen[THREADS] = { false };
		unsigned distinct = 0;
		int lfd;

		lfd = t_listen_loopback(AF_INET, THREADS, &r.to[0]);
		t_addr_make(&r.to[1], "0.0.0.0", t_addr_port(&r.to[0]));
		pthread_mutex_init(&r.lock, NULL);
		pthread_barrier_init(&r.go, NULL, THREADS);
		for (i = 0; i < THREADS; i++) {
			cl[i] = (struct client){ &r, i };
			pthread_create(&th[i], NULL, client, &cl[i]);
		}
		// Each accepted connection echoes its one byte: a tag only its thread sent.
		for (i = 0; i < THREADS; i++) {
			unsigned char tag;
			int sfd = t_accept(lfd);

			if (sfd < 0)
				break;
			t_recv_all(sfd, &tag, 1);
			if (tag >= 1 && tag <= THREADS && !seen[tag - 1]) {
				seen[tag - 1] = true;
				distinct++;
			}
			t_send_all(sfd, &tag, 1);
			close(sfd);
		}
		for (i = 0; i < THREADS; i++)
			pthread_join(th[i], NULL);
		close(lfd);
		pthread_barrier_destroy(&r.go);
		pthread_mutex_destroy(&r.lock);
		if (distinct == THREADS && r.echoed == THREADS)
			ok_rounds++;
		else
			printf("round %u: %u distinct accepted, %u echoed\n", round, distinct, r.echoed);
	}
	printf("rounds with every connection accepted once and echoed: %u of %u\n", ok_rounds,
	       ROUNDS);
	return t_finish();
}
