// SPDX-License-Identifier: MIT
// Threads sharing epoll: four threads in epoll_wait on one set of TCP
// sockets registered EPOLLONESHOT handle every message exactly once and in
// order; how many of four blocked threads a new connection wakes (one epoll
// set: all for level-triggered, one for EPOLLET or EPOLLONESHOT; one set per
// thread: all, or one with EPOLLEXCLUSIVE); EPOLLEXCLUSIVE accept workers.
// shunt-expect: shm_connect>=61 shm_accept>=61 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

enum {
	THREADS = 4,
	POOL_CONNS = 16,
	MSGS = 200,	   // per connection
	QUIET_MS = 30,	   // a blocked thread has been asleep this long
	SETTLE_MS = 100,   // the threads a wakeup reaches have returned by then
	ACCEPT_CONNS = 40,
	STOP = 0xffffffffu, // data.u32 of the stop eventfd
};

static uint64_t stop_data(void)
{
	return 0x5707000000000000ULL | STOP;
}

// ---- a worker pool on one epoll set, EPOLLONESHOT

struct msg {
	uint32_t conn, seq;
};

struct pool_conn {
	int c, s;
	atomic_int busy;   // a worker is handling it
	uint32_t next;	   // next expected seq; only the busy worker touches it
	size_t partial;	   // bytes of an incomplete message in `buf`
	char buf[sizeof(struct msg)];
};

struct pool {
	int ep, stop;
	unsigned nconn;
	struct pool_conn *conns;
	atomic_uint handled, overlaps, disorder;
};

static void rearm(struct pool *p, uint32_t i)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.u64 = i };

	if (epoll_ctl(p->ep, EPOLL_CTL_MOD, p->conns[i].s, &ev) < 0)
		t_fatal("epoll_ctl(MOD)");
}

static void serve(struct pool *p, uint32_t i)
{
	struct pool_conn *pc = &p->conns[i];
	char buf[4096];
	ssize_t n;

	if (atomic_exchange_explicit(&pc->busy, 1, memory_order_acquire))
		atomic_fetch_add(&p->overlaps, 1);
	while ((n = recv(pc->s, buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
		for (ssize_t off = 0; off < n; off++) {
			struct msg m;

			pc->buf[pc->partial++] = buf[off];
			if (pc->partial < sizeof(m))
				continue;
			memcpy(&m, pc->buf, sizeof(m));
			pc->partial = 0;
			if (m.conn != i || m.seq != pc->next)
				atomic_fetch_add(&p->disorder, 1);
			pc->next = m.seq + 1;
			atomic_fetch_add(&p->handled, 1);
		}
	}
	if (n == 0 || (n < 0 && errno != EAGAIN))
		t_fatal("recv on connection %u", i);
	atomic_store_explicit(&pc->busy, 0, memory_order_release);
	rearm(p, i);
}

static void *pool_worker(void *arg)
{
	struct pool *p = arg;
	struct epoll_event ev[4];

	for (;;) {
		int n = epoll_wait(p->ep, ev, 4, T_WAIT_MS);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			t_fatal("pool worker: epoll_wait = %d", n);
		for (int k = 0; k < n; k++) {
			if (ev[k].data.u64 == stop_data())
				return NULL;
			serve(p, (uint32_t)ev[k].data.u64);
		}
	}
}

static void *pool_client(void *arg)
{
	struct pool *p = arg;

	for (uint32_t seq = 0; seq < MSGS; seq++)
		for (uint32_t i = 0; i < p->nconn; i++) {
			struct msg m = { i, seq };

			t_send_all(p->conns[i].c, &m, sizeof(m));
		}
	return NULL;
}

static void pool(unsigned nconn)
{
	struct pool p = { .nconn = nconn };
	struct epoll_event ev;
	pthread_t th[THREADS], client;
	uint64_t one = 1;
	int64_t start;
	unsigned total = nconn * MSGS;

	p.conns = calloc(nconn, sizeof(*p.conns));
	p.ep = epoll_create1(EPOLL_CLOEXEC);
	p.stop = eventfd(0, EFD_CLOEXEC);
	if (!p.conns || p.ep < 0 || p.stop < 0)
		t_fatal("pool setup");
	for (uint32_t i = 0; i < nconn; i++) {
		t_pair(AF_INET, &p.conns[i].c, &p.conns[i].s);
		ev = (struct epoll_event){ .events = EPOLLIN | EPOLLONESHOT, .data.u64 = i };
		if (epoll_ctl(p.ep, EPOLL_CTL_ADD, p.conns[i].s, &ev) < 0)
			t_fatal("epoll_ctl(ADD)");
	}
	ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = stop_data() };
	if (epoll_ctl(p.ep, EPOLL_CTL_ADD, p.stop, &ev) < 0)
		t_fatal("epoll_ctl(ADD, stop)");
	for (int t = 0; t < THREADS; t++)
		if (pthread_create(&th[t], NULL, pool_worker, &p))
			t_fatal("pthread_create");
	if (pthread_create(&client, NULL, pool_client, &p))
		t_fatal("pthread_create");
	pthread_join(client, NULL);
	start = t_now_ns();
	while (atomic_load(&p.handled) < total && t_elapsed_ms(start) < T_WAIT_MS)
		t_sleep_ms(1);
	if (write(p.stop, &one, sizeof(one)) != sizeof(one))
		t_fatal("write(stop)");
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	printf("%u connections x %d messages, %d threads on one epoll set (EPOLLONESHOT):\n",
	       nconn, MSGS, THREADS);
	t_expect(atomic_load(&p.handled) == total, "  messages handled: %u", total);
	t_expect(atomic_load(&p.disorder) == 0, "  each exactly once and in order");
	t_expect(atomic_load(&p.overlaps) == 0, "  no connection in two threads at once");
	for (uint32_t i = 0; i < nconn; i++) {
		close(p.conns[i].c);
		close(p.conns[i].s);
	}
	close(p.ep);
	close(p.stop);
	free(p.conns);
}

// ---- how many blocked threads one new connection wakes

struct herd {
	atomic_int returned; // threads back from epoll_wait
	int release;	     // eventfd in every set: lets the others return
};

struct waiter {
	int ep;
	struct herd *h;
	pid_t tid;
	atomic_int ready; // tid published
	pthread_t th;
};

static void *wait_once(void *arg)
{
	struct waiter *w = arg;
	struct epoll_event ev[2];
	int n;

	w->tid = gettid();
	atomic_store(&w->ready, 1);
	do
		n = epoll_wait(w->ep, ev, 2, -1);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		t_fatal("epoll_wait = %d", n);
	atomic_fetch_add(&w->h->returned, 1);
	return NULL;
}

// THREADS threads wait on eps[t] (all the same set, or one each); once all
// are asleep, one connection arrives: print how many of them it woke.
static void herd(const char *label, const int *eps, const struct t_addr *a, int lfd,
		 struct herd *h)
{
	struct waiter w[THREADS];
	uint64_t v = 1;
	int woken, c;

	atomic_store(&h->returned, 0);
	for (int t = 0; t < THREADS; t++) {
		w[t] = (struct waiter){ .ep = eps[t], .h = h };
		atomic_init(&w[t].ready, 0);
		if (pthread_create(&w[t].th, NULL, wait_once, &w[t]))
			t_fatal("pthread_create");
	}
	for (int t = 0; t < THREADS; t++) {
		while (!atomic_load(&w[t].ready))
			t_sleep_ms(1);
		t_wait_asleep(getpid(), w[t].tid, QUIET_MS);
	}
	c = t_connect(a);
	t_sleep_ms(SETTLE_MS);
	woken = atomic_load(&h->returned);
	if (write(h->release, &v, sizeof(v)) != sizeof(v))
		t_fatal("write(release)");
	for (int t = 0; t < THREADS; t++)
		pthread_join(w[t].th, NULL);
	if (read(h->release, &v, sizeof(v)) != sizeof(v))
		t_fatal("read(release)");
	printf("%s: %d of %d threads woken\n", label, woken, THREADS);
	close(t_accept(lfd));
	close(c);
}

static void add_release(int ep, struct herd *h)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = stop_data() };

	if (epoll_ctl(ep, EPOLL_CTL_ADD, h->release, &ev) < 0)
		t_fatal("epoll_ctl(release)");
}

static void herds(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 8, &a);
	int one[THREADS], each[THREADS];
	struct epoll_event ev = { .data.u64 = 0x1f };
	struct herd h = { .release = eventfd(0, EFD_CLOEXEC) };
	static const struct {
		uint32_t events;
		const char *name;
	} modes[] = {
		{ EPOLLIN, "level-triggered" },
		{ EPOLLIN | EPOLLET, "EPOLLET" },
		{ EPOLLIN | EPOLLONESHOT, "EPOLLONESHOT" },
	};
	char label[128];

	if (h.release < 0)
		t_fatal("eventfd");
	printf("-- %d threads blocked on one epoll set holding the listener\n", THREADS);
	one[0] = epoll_create1(EPOLL_CLOEXEC);
	if (one[0] < 0)
		t_fatal("epoll_create1");
	add_release(one[0], &h);
	for (int t = 1; t < THREADS; t++)
		one[t] = one[0];
	for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
		ev.events = modes[m].events;
		if (epoll_ctl(one[0], m ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, lfd, &ev) < 0)
			t_fatal("epoll_ctl");
		snprintf(label, sizeof(label), "one connection, %s", modes[m].name);
		herd(label, one, &a, lfd, &h);
	}
	close(one[0]);

	printf("-- %d threads, each blocked on its own epoll set holding the listener\n", THREADS);
	for (int x = 0; x < 2; x++) {
		ev.events = EPOLLIN | (x ? EPOLLEXCLUSIVE : 0);
		for (int t = 0; t < THREADS; t++) {
			each[t] = epoll_create1(EPOLL_CLOEXEC);
			if (each[t] < 0 || epoll_ctl(each[t], EPOLL_CTL_ADD, lfd, &ev) < 0)
				t_fatal("epoll setup");
			add_release(each[t], &h);
		}
		herd(x ? "one connection, EPOLLEXCLUSIVE" : "one connection, level-triggered",
		     each, &a, lfd, &h);
		for (int t = 0; t < THREADS; t++)
			close(each[t]);
	}
	close(h.release);
	close(lfd);
}

// ---- accept workers, each with its own epoll set, EPOLLEXCLUSIVE

struct acceptor {
	int ep, lfd;
	unsigned accepted;
	uint32_t *seen; // per connection id, how often it was accepted
	pthread_t th;
};

static void *accept_worker(void *arg)
{
	struct acceptor *w = arg;
	struct epoll_event ev[2];

	for (;;) {
		int n = epoll_wait(w->ep, ev, 2, T_WAIT_MS);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			t_fatal("acceptor: epoll_wait = %d", n);
		for (int k = 0; k < n; k++) {
			int s;
			uint32_t id;

			if (ev[k].data.u64 == stop_data())
				return NULL;
			while ((s = accept4(w->lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
				t_recv_all(s, &id, sizeof(id));
				if (id < ACCEPT_CONNS)
					__atomic_fetch_add(&w->seen[id], 1, __ATOMIC_RELAXED);
				w->accepted++;
				t_send_all(s, &id, sizeof(id));
				close(s);
			}
			if (errno != EAGAIN)
				t_fatal("accept4");
		}
	}
}

static void acceptors(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 64, &a), stop = eventfd(0, EFD_CLOEXEC);
	struct acceptor w[THREADS];
	uint32_t seen[ACCEPT_CONNS] = { 0 };
	unsigned total = 0, once = 0;
	uint64_t one = 1;

	if (stop < 0)
		t_fatal("eventfd");
	t_set_nonblock(lfd, true);
	for (int t = 0; t < THREADS; t++) {
		struct epoll_event ev = { .events = EPOLLIN | EPOLLEXCLUSIVE, .data.u64 = 1 };

		w[t] = (struct acceptor){ .lfd = lfd, .seen = seen };
		w[t].ep = epoll_create1(EPOLL_CLOEXEC);
		if (w[t].ep < 0 || epoll_ctl(w[t].ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
			t_fatal("epoll setup");
		ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = stop_data() };
		if (epoll_ctl(w[t].ep, EPOLL_CTL_ADD, stop, &ev) < 0)
			t_fatal("epoll_ctl(stop)");
		if (pthread_create(&w[t].th, NULL, accept_worker, &w[t]))
			t_fatal("pthread_create");
	}
	for (uint32_t id = 0; id < ACCEPT_CONNS; id++) {
		int c = t_connect(&a);
		uint32_t back;

		t_send_all(c, &id, sizeof(id));
		t_recv_all(c, &back, sizeof(back));
		if (back != id)
			t_fatal("connection %u answered %u", id, back);
		close(c);
	}
	if (write(stop, &one, sizeof(one)) != sizeof(one))
		t_fatal("write(stop)");
	for (int t = 0; t < THREADS; t++) {
		pthread_join(w[t].th, NULL);
		total += w[t].accepted;
		close(w[t].ep);
	}
	for (int i = 0; i < ACCEPT_CONNS; i++)
		once += seen[i] == 1;
	printf("-- %d accept workers, EPOLLEXCLUSIVE on one listener\n", THREADS);
	t_expect(total == ACCEPT_CONNS && once == ACCEPT_CONNS,
		 "%d connections, each accepted exactly once", ACCEPT_CONNS);
	close(stop);
	close(lfd);
}

int main(void)
{
	t_start(60);
	pool(POOL_CONNS);
	herds();
	acceptors();
	return t_finish();
}
