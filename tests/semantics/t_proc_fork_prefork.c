// SPDX-License-Identifier: MIT
// A pre-fork server: four worker processes accept on one listener they
// inherited, blocked in accept, then (as nginx does) each in epoll_wait
// with EPOLLEXCLUSIVE and a non-blocking accept. Clients in this process
// make many connections at once; each is answered exactly once, by whichever
// worker, with the same echo.
// shunt-expect: shm_connect>=808 shm_accept>=808 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
// t-timeout: 90
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

enum {
	WORKERS = 4,
	CLIENT_THREADS = 4,
	CONNS = 400,	     // per round
	MAX_PAYLOAD = 4096,
	STOP = 0xffffffffu,  // a request id: the worker answers and exits
	WORKER_WATCHDOG_S = 80,
};

struct request {
	uint32_t id, len;
};

struct shared {
	atomic_uint served[CONNS];
	atomic_uint per_worker[WORKERS];
	atomic_uint bad_requests;
};

static size_t payload_len(uint32_t id)
{
	return 1 + (size_t)(t_mix64(id) % MAX_PAYLOAD);
}

// One connection: read the request, echo the payload, close. Returns false
// on STOP.
static bool serve(int s, struct shared *sh, unsigned worker)
{
	static unsigned char buf[MAX_PAYLOAD];
	struct request rq;

	t_recv_all(s, &rq, sizeof(rq));
	if (rq.id == STOP) {
		t_send_all(s, "bye", 3);
		close(s);
		return false;
	}
	if (rq.id >= CONNS || rq.len != payload_len(rq.id)) {
		atomic_fetch_add(&sh->bad_requests, 1);
		close(s);
		return true;
	}
	t_recv_all(s, buf, rq.len);
	t_send_all(s, buf, rq.len);
	atomic_fetch_add(&sh->served[rq.id], 1);
	atomic_fetch_add(&sh->per_worker[worker], 1);
	close(s);
	return true;
}

static void worker_blocking(int lfd, struct shared *sh, unsigned no)
{
	for (;;) {
		int s = accept(lfd, NULL, NULL);

		if (s < 0 && errno == EINTR)
			continue;
		if (s < 0)
			t_fatal("worker accept");
		if (!serve(s, sh, no))
			return;
	}
}

static void worker_epoll(int lfd, struct shared *sh, unsigned no)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		t_fatal("worker epoll");
	t_set_nonblock(lfd, true); // the open file is shared: all see it
	for (;;) {
		int n = epoll_wait(ep, &ev, 1, -1), s;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			t_fatal("worker epoll_wait");
		// Another worker may have taken it: EAGAIN, wait again.
		while ((s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
			t_set_nonblock(s, false);
			if (!serve(s, sh, no)) {
				close(ep);
				return;
			}
		}
		if (errno != EAGAIN && errno != EINTR)
			t_fatal("worker accept4");
	}
}

struct clients {
	struct t_addr a;
	atomic_uint next, answered, wrong;
};

static void *client_loop(void *arg)
{
	struct clients *cl = arg;
	unsigned char out[MAX_PAYLOAD], in[MAX_PAYLOAD];
	uint32_t id;

	while ((id = atomic_fetch_add(&cl->next, 1)) < CONNS) {
		struct request rq = { .id = id, .len = (uint32_t)payload_len(id) };
		int c = t_connect(&cl->a);

		t_stream_fill(id, 0, out, rq.len);
		t_send_all(c, &rq, sizeof(rq));
		t_send_all(c, out, rq.len);
		t_recv_all(c, in, rq.len);
		if (memcmp(in, out, rq.len))
			atomic_fetch_add(&cl->wrong, 1);
		else
			atomic_fetch_add(&cl->answered, 1);
		// The worker closed after its answer: nothing more comes.
		if (recv(c, in, 1, 0) != 0)
			atomic_fetch_add(&cl->wrong, 1);
		close(c);
	}
	return NULL;
}

static void round_of(bool use_epoll)
{
	struct shared *sh = t_shared_alloc(sizeof(*sh));
	struct clients cl = { 0 };
	pthread_t th[CLIENT_THREADS];
	pid_t pid[WORKERS];
	unsigned once = 0, sum = 0, ok = 0;
	int lfd;

	printf("%d workers %s, %d connections from %d client threads:\n", WORKERS,
	       use_epoll ? "in epoll_wait (EPOLLEXCLUSIVE) + non-blocking accept"
			 : "blocked in accept",
	       CONNS, CLIENT_THREADS);
	lfd = t_listen_loopback(AF_INET, 128, &cl.a);
	for (unsigned w = 0; w < WORKERS; w++) {
		pid[w] = t_fork_tied(WORKER_WATCHDOG_S);
		if (pid[w] == 0) {
			if (use_epoll)
				worker_epoll(lfd, sh, w);
			else
				worker_blocking(lfd, sh, w);
			close(lfd);
			exit(0);
		}
	}
	for (unsigned t = 0; t < CLIENT_THREADS; t++)
		if (pthread_create(&th[t], NULL, client_loop, &cl))
			t_fatal("pthread_create");
	for (unsigned t = 0; t < CLIENT_THREADS; t++)
		pthread_join(th[t], NULL);
	// A worker takes no connection after its STOP, so each of the four
	// STOPs reaches a different worker.
	for (unsigned w = 0; w < WORKERS; w++) {
		struct request rq = { .id = STOP };
		char bye[3];
		int c = t_connect(&cl.a);

		t_send_all(c, &rq, sizeof(rq));
		t_recv_all(c, bye, sizeof(bye));
		close(c);
	}
	for (unsigned w = 0; w < WORKERS; w++)
		ok += t_wait_child(pid[w]) == 0;
	for (unsigned i = 0; i < CONNS; i++)
		once += atomic_load(&sh->served[i]) == 1;
	for (unsigned w = 0; w < WORKERS; w++)
		sum += atomic_load(&sh->per_worker[w]);
	t_expect(atomic_load(&cl.answered) == CONNS && atomic_load(&cl.wrong) == 0,
		 "  every client got its echo, then EOF");
	t_expect(once == CONNS && atomic_load(&sh->bad_requests) == 0,
		 "  every connection served exactly once");
	t_expect(sum == CONNS, "  connections the workers served: %u", sum);
	t_expect(ok == WORKERS, "  every worker stopped on its STOP and exited 0");
	t_set_nonblock(lfd, true);
	T_REPORT("  parent accept, non-blocking, nothing queued", accept(lfd, NULL, NULL));
	close(lfd);
}

int main(void)
{
	t_start(85);
	round_of(false);
	round_of(true);
	return t_finish();
}
