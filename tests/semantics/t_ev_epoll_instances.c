// SPDX-License-Identifier: MIT
// One epoll instance per thread, as wrk and many servers have: eight
// threads, each asleep in its own instance on its own connection, and a
// peer in another process that talks to them one at a time, waiting for
// each answer before the next. Thread 0 sleeps first, answers one message,
// then stays away (blocked on a pipe) while the peer talks to the other
// seven in a shuffled order. Under shunt one instance at a time holds the
// notice hub, and one that stays away must have handed it on: a wake-up
// lost there hangs this test. No thread sees a message not meant for it.
// shunt-expect: shm_connect>=8 shm_accept>=8 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

enum { THREADS = 8, ROUNDS = 2000 };

struct worker {
	int fd;
	int index;
	int away;		/* thread 0: the pipe it waits on once it has answered */
	pid_t tid;
	unsigned got, wrong;
};

static void *serve(void *arg)
{
	struct worker *w = arg;
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = 1 };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	w->tid = gettid();
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, w->fd, &ev))
		t_fatal("epoll");
	for (;;) {
		unsigned char b;

		if (epoll_wait(ep, &ev, 1, -1) != 1)
			continue;
		if (read(w->fd, &b, 1) != 1)
			break;		/* the peer is done */
		if (b != w->index)
			w->wrong++;
		w->got++;
		t_send_all(w->fd, &b, 1);
		if (w->away >= 0 && read(w->away, &b, 1) != 1)
			t_fatal("read pipe");	/* away until the end */
	}
	close(ep);
	return NULL;
}

static void talk(int fd, int i)
{
	unsigned char b = (unsigned char)i;

	t_send_all(fd, &b, 1);
	t_recv_all(fd, &b, 1);
}

// The peer: connects THREADS times (told when all threads sleep), one
// message to thread 0, then ROUNDS to the others, shuffled.
static void peer(const struct t_addr *to, struct t_chan *go)
{
	int fds[THREADS];
	uint64_t seed = 12345;

	for (int i = 0; i < THREADS; i++) {
		unsigned char b = (unsigned char)i;

		fds[i] = t_connect(to);
		t_send_all(fds[i], &b, 1);	/* says which it is */
	}
	t_chan_get(go);
	talk(fds[0], 0);
	for (int r = 0; r < ROUNDS; r++) {
		int i = 1 + (int)(t_rand(&seed) % (THREADS - 1));

		talk(fds[i], i);
	}
	for (int i = 0; i < THREADS; i++)
		close(fds[i]);
	exit(0);
}

int main(void)
{
	struct worker w[THREADS];
	pthread_t th[THREADS];
	struct t_chan go;
	struct t_addr a;
	unsigned got = 0, wrong = 0;
	int lfd, away[2];
	pid_t pid;

	t_start(60);
	t_chan_open(&go);
	if (pipe(away))
		t_fatal("pipe");
	lfd = t_listen_loopback(AF_INET, THREADS, &a);
	pid = t_fork();
	if (!pid)
		peer(&a, &go);
	for (int i = 0; i < THREADS; i++) {
		int fd = t_accept(lfd);
		unsigned char b;

		t_recv_all(fd, &b, 1);
		if (b >= THREADS)
			t_fatal("bad index %u", b);
		w[b] = (struct worker){ .fd = fd, .index = b, .away = b ? -1 : away[0] };
	}
	/* Thread 0 asleep first, then the others. */
	for (int i = 0; i < THREADS; i++) {
		if (pthread_create(&th[i], NULL, serve, &w[i]))
			t_fatal("pthread_create");
		while (!__atomic_load_n(&w[i].tid, __ATOMIC_ACQUIRE))
			t_sleep_ms(1);
		t_wait_asleep(getpid(), w[i].tid, 20);
	}
	t_chan_put(&go, 1);
	for (int i = 1; i < THREADS; i++)
		pthread_join(th[i], NULL);
	printf("peer: exit %d\n", t_wait_child(pid));
	if (write(away[1], "x", 1) != 1)
		t_fatal("write pipe");
	pthread_join(th[0], NULL);
	for (int i = 0; i < THREADS; i++) {
		got += w[i].got;
		wrong += w[i].wrong;
		close(w[i].fd);
	}
	printf("%u messages over %d instances, %u to the wrong thread\n", got, THREADS, wrong);
	close(lfd);
	return t_finish();
}
