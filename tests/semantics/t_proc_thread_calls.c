// SPDX-License-Identifier: MIT
// Threads making calls on one socket at once: four threads accepting on one
// listener (each connection served exactly once); a close, shutdown or
// second reader while a thread is blocked in recv or accept on the socket;
// poll in one thread while another reads.
// shunt-expect: shm_connect>=200 shm_accept>=200 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	ACCEPTERS = 4,
	CLIENTS = 200,
	QUIET_MS = 50, // asleep this long: blocked in the call
	STILL_MS = 100, // a blocked call that would return has done so by then
};

// ---- accept in several threads on one listener

struct accept_pool {
	int lfd;
	atomic_uint served[CLIENTS], total, bad_ids;
	atomic_int last_err[ACCEPTERS];
};

struct accepter {
	struct accept_pool *p;
	unsigned no;
	pthread_t th;
};

// Accept until accept fails; answer each client's id with its complement.
static void *accept_loop(void *arg)
{
	struct accepter *a = arg;
	struct accept_pool *p = a->p;

	for (;;) {
		uint32_t id;
		int s = accept(p->lfd, NULL, NULL);

		if (s < 0 && errno == EINTR)
			continue;
		if (s < 0) {
			atomic_store(&p->last_err[a->no], errno);
			return NULL;
		}
		t_recv_all(s, &id, sizeof(id));
		if (id < CLIENTS)
			atomic_fetch_add(&p->served[id], 1);
		else
			atomic_fetch_add(&p->bad_ids, 1);
		atomic_fetch_add(&p->total, 1);
		id = ~id;
		t_send_all(s, &id, sizeof(id));
		close(s);
	}
}

static void accept_threads(void)
{
	struct accept_pool *p = calloc(1, sizeof(*p));
	struct accepter acc[ACCEPTERS];
	struct t_addr a;
	unsigned once = 0, answered = 0;

	if (!p)
		t_fatal("calloc");
	p->lfd = t_listen_loopback(AF_INET, 64, &a);
	for (unsigned i = 0; i < ACCEPTERS; i++) {
		acc[i] = (struct accepter){ .p = p, .no = i };
		if (pthread_create(&acc[i].th, NULL, accept_loop, &acc[i]))
			t_fatal("pthread_create");
	}
	for (uint32_t id = 0; id < CLIENTS; id++) {
		uint32_t reply;
		int c = t_connect(&a);

		t_send_all(c, &id, sizeof(id));
		t_recv_all(c, &reply, sizeof(reply));
		answered += reply == ~id;
		close(c);
	}
	printf("%d threads accepting on one listener, %d clients:\n", ACCEPTERS, CLIENTS);
	t_expect(answered == CLIENTS, "  every client answered correctly");
	for (unsigned id = 0; id < CLIENTS; id++)
		once += atomic_load(&p->served[id]) == 1;
	t_expect(once == CLIENTS && atomic_load(&p->total) == CLIENTS &&
			 atomic_load(&p->bad_ids) == 0,
		 "  every connection accepted exactly once");
	// Linux: shutdown of a listener wakes every thread blocked in accept.
	T_REPORT("  shutdown(listener, SHUT_RD)", shutdown(p->lfd, SHUT_RD));
	for (unsigned i = 0; i < ACCEPTERS; i++)
		pthread_join(acc[i].th, NULL);
	for (unsigned i = 0; i < ACCEPTERS; i++)
		printf("  accepter %u: accept = -1 %s\n", i, t_errname(atomic_load(&p->last_err[i])));
	close(p->lfd);
	free(p);
}

// ---- a thread blocked in recv or accept, and another one acting on the socket

struct blocked {
	int fd;
	bool is_accept;
	pid_t tid;
	atomic_int state; // 0 starting, 1 about to block, 2 returned
	long ret;
	int err;
	char buf[64];
	pthread_t th;
};

static void *block_in_call(void *arg)
{
	struct blocked *b = arg;

	b->tid = gettid();
	atomic_store(&b->state, 1);
	if (b->is_accept)
		b->ret = accept(b->fd, NULL, NULL);
	else
		b->ret = recv(b->fd, b->buf, sizeof(b->buf), 0);
	b->err = errno;
	atomic_store(&b->state, 2);
	return NULL;
}

static void block_start(struct blocked *b, int fd, bool is_accept)
{
	memset(b, 0, sizeof(*b));
	b->fd = fd;
	b->is_accept = is_accept;
	if (pthread_create(&b->th, NULL, block_in_call, b))
		t_fatal("pthread_create");
	while (atomic_load(&b->state) == 0)
		t_sleep_ms(1);
	t_wait_asleep(getpid(), b->tid, QUIET_MS);
}

static void block_still(struct blocked *b, const char *what)
{
	t_sleep_ms(STILL_MS);
	printf("  %s: %s\n", what,
	       atomic_load(&b->state) == 2 ? "the blocked call returned" : "still blocked");
}

static void block_join(struct blocked *b, const char *label)
{
	pthread_join(b->th, NULL);
	if (b->is_accept)
		t_report_fd(label, b->ret, b->ret < 0 ? b->err : T_ERRNO_SENTINEL);
	else
		t_report_data(label, b->ret, b->ret < 0 ? b->err : T_ERRNO_SENTINEL, b->buf);
	if (b->is_accept && b->ret >= 0)
		close((int)b->ret);
}

static void close_under_recv(void)
{
	struct blocked b;
	int c, s;

	printf("close(s) while another thread is blocked in recv(s):\n");
	t_pair(AF_INET, &c, &s);
	block_start(&b, s, false);
	T_REPORT("  close(s)", close(s));
	block_still(&b, "recv");
	printf("  peer sees: %s\n", t_peer_sees(c, STILL_MS));
	T_REPORT("  peer send(\"wake\")", send(c, "wake", 4, MSG_NOSIGNAL));
	block_join(&b, "  recv");
	// The socket goes with the last reference, the one recv held.
	printf("  then the peer sees: %s\n", t_peer_sees(c, T_WAIT_MS));
	close(c);
}

static void shutdown_under_recv(int how, const char *name)
{
	struct blocked b;
	int c, s;

	printf("shutdown(s, %s) while another thread is blocked in recv(s):\n", name);
	t_pair(AF_INET, &c, &s);
	block_start(&b, s, false);
	T_REPORT("  shutdown(s)", shutdown(s, how));
	block_join(&b, "  recv");
	printf("  peer sees: %s\n", t_peer_sees(c, how == SHUT_RD ? STILL_MS : T_WAIT_MS));
	T_REPORT("  peer send(\"late\")", send(c, "late", 4, MSG_NOSIGNAL));
	if (how == SHUT_RD) {
		t_wait_inq(s, 4);
		T_REPORT_DATA("  recv(s) after SHUT_RD, data sent later", recv(s, b.buf, 64, 0),
			      b.buf);
	}
	close(s);
	close(c);
}

static void close_under_accept(void)
{
	struct blocked b;
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a), c;

	printf("close(listener) while another thread is blocked in accept:\n");
	block_start(&b, lfd, true);
	T_REPORT("  close(listener)", close(lfd));
	block_still(&b, "accept");
	c = t_connect(&a);
	block_join(&b, "  accept after a client connects");
	close(c);
}

static void two_readers(void)
{
	struct blocked r1, r2;
	int c, s, first;

	printf("two threads blocked in recv(s), one message:\n");
	t_pair(AF_INET, &c, &s);
	block_start(&r1, s, false);
	block_start(&r2, s, false);
	T_REPORT("  peer send(\"one\")", send(c, "one", 3, 0));
	while (atomic_load(&r1.state) != 2 && atomic_load(&r2.state) != 2)
		t_sleep_ms(1);
	t_sleep_ms(STILL_MS);
	first = atomic_load(&r1.state) == 2 ? 1 : 2;
	t_expect(atomic_load(&r1.state) + atomic_load(&r2.state) == 3,
		 "  exactly one of them returned");
	T_REPORT("  peer send(\"two\")", send(c, "two", 3, 0));
	block_join(first == 1 ? &r1 : &r2, "  recv, the thread that returned");
	block_join(first == 1 ? &r2 : &r1, "  recv, the other one");
	close(c);
	close(s);
}

// ---- poll in one thread while another reads

struct poller {
	int fd;
	short events, revents;
	int ret;
	pid_t tid;
	atomic_int started;
	pthread_t th;
};

static void *poll_thread(void *arg)
{
	struct poller *p = arg;
	struct pollfd pfd = { .fd = p->fd, .events = p->events };

	p->tid = gettid();
	atomic_store(&p->started, 1);
	do
		p->ret = poll(&pfd, 1, -1);
	while (p->ret < 0 && errno == EINTR);
	p->revents = pfd.revents;
	return NULL;
}

static void poll_start(struct poller *p, int fd, short events)
{
	memset(p, 0, sizeof(*p));
	p->fd = fd;
	p->events = events;
	if (pthread_create(&p->th, NULL, poll_thread, p))
		t_fatal("pthread_create");
	while (!atomic_load(&p->started))
		t_sleep_ms(1);
	t_wait_asleep(getpid(), p->tid, QUIET_MS);
}

static void *read_to_eof(void *arg)
{
	struct blocked *b = arg;
	char buf[256];
	ssize_t r;

	b->ret = 0;
	while ((r = recv(b->fd, buf, sizeof(buf), 0)) > 0)
		b->ret += r;
	b->err = r < 0 ? errno : 0;
	return NULL;
}

static void poll_and_read(void)
{
	struct poller p;
	struct blocked r;
	char buf[16];
	int c, s;

	// The reader may take the first bytes before poll looks: poll then
	// sleeps on, and the second message wakes it. Either way, POLLIN.
	printf("poll(s, POLLIN) in one thread, recv(s) in another:\n");
	t_pair(AF_INET, &c, &s);
	poll_start(&p, s, POLLIN);
	block_start(&r, s, false);
	T_REPORT("  peer send(\"abc\")", send(c, "abc", 3, 0));
	block_join(&r, "  recv");
	T_REPORT("  peer send(\"d\")", send(c, "d", 1, 0));
	pthread_join(p.th, NULL);
	printf("  poll = %d %s\n", p.ret, t_poll_str(p.revents));
	T_REPORT_DATA("  recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	close(c);
	close(s);

	// Data does not satisfy a poll for POLLRDHUP alone; the peer's FIN does.
	printf("poll(s, POLLRDHUP) in one thread, a reader to EOF in another:\n");
	t_pair(AF_INET, &c, &s);
	poll_start(&p, s, POLLRDHUP);
	memset(&r, 0, sizeof(r));
	r.fd = s;
	if (pthread_create(&r.th, NULL, read_to_eof, &r))
		t_fatal("pthread_create");
	for (int i = 0; i < 3; i++) {
		t_send_all(c, "0123456789", 10);
		t_sleep_ms(10);
	}
	T_REPORT("  peer shutdown(SHUT_WR)", shutdown(c, SHUT_WR));
	pthread_join(p.th, NULL);
	printf("  poll = %d %s\n", p.ret, t_poll_str(p.revents));
	pthread_join(r.th, NULL);
	printf("  reader: %ld bytes, then %s\n", r.ret, r.err ? t_errname(r.err) : "EOF");
	close(c);
	close(s);
}

int main(void)
{
	t_start(60);
	accept_threads();
	close_under_recv();
	shutdown_under_recv(SHUT_RD, "SHUT_RD");
	shutdown_under_recv(SHUT_RDWR, "SHUT_RDWR");
	close_under_accept();
	two_readers();
	poll_and_read();
	return t_finish();
}
