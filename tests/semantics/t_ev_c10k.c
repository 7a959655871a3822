// SPDX-License-Identifier: MIT
// C10K: T_C10K_CONNS (10000) TCP connections between two processes, one
// epoll set in the server. Each round the client sends a message on a seeded
// random 1% of the connections and checks the echo; the server checks every
// message and a per-connection checksum of everything it received against
// the same schedule, then sees every connection close.
// shunt-expect: shm_connect>=${T_C10K_CONNS:-10000} shm_accept>=${T_C10K_CONNS:-10000}
// shunt-expect: kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=${T_C10K_CONNS:-10000} shm_rx_bytes>=${T_C10K_CONNS:-10000}
// t-timeout: 300
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

enum {
	ROUNDS = 50,
	PAYLOAD_MAX = 1024,
	FD_MARGIN = 64,	  // descriptors besides the connections
	MAX_EVENTS = 256,
	BACKLOG = 4096,
	WATCHDOG_S = 280,
};

static const uint64_t SEED = 0xc10c10c10c10c10cULL;
static const uint64_t LISTENER = ~0ULL;

struct hdr {
	uint32_t id, round, len;
};

static uint64_t msg_seed(uint32_t id, uint32_t round)
{
	return t_mix64(SEED ^ ((uint64_t)id << 24) ^ round);
}

static uint32_t msg_len(uint32_t id, uint32_t round)
{
	return 1 + (uint32_t)(t_mix64(msg_seed(id, round) ^ 0x1e9) % PAYLOAD_MAX);
}

// Who talks in each round: a partial Fisher-Yates shuffle of `perm` with one
// generator for the whole run, so client and server derive the same schedule.
struct schedule {
	uint32_t *perm;
	uint32_t n, per_round;
	uint64_t rng;
};

static void schedule_init(struct schedule *s, uint32_t n)
{
	s->n = n;
	s->per_round = n / 100 ? n / 100 : 1;
	s->rng = SEED;
	s->perm = malloc(n * sizeof(*s->perm));
	if (!s->perm)
		t_fatal("malloc");
	for (uint32_t i = 0; i < n; i++)
		s->perm[i] = i;
}

// The connections of the next round, in s->perm[0 .. per_round).
static void schedule_next(struct schedule *s)
{
	for (uint32_t i = 0; i < s->per_round; i++) {
		uint32_t j = i + (uint32_t)(t_rand(&s->rng) % (s->n - i)), t = s->perm[i];

		s->perm[i] = s->perm[j];
		s->perm[j] = t;
	}
}

// ---- the client (a child forked before any socket exists)

struct client_report {
	uint32_t connected, messages, bad_echoes;
	uint64_t bytes;
};

static void client(uint32_t n, struct t_chan *in, struct t_chan *out)
{
	static unsigned char msg[sizeof(struct hdr) + PAYLOAD_MAX], back[sizeof(msg)];
	struct client_report rep = { 0 };
	struct schedule s;
	struct t_addr a;
	int *fd = malloc(n * sizeof(*fd));

	if (!fd)
		t_fatal("malloc");
	t_addr_make(&a, "127.0.0.1", (uint16_t)t_chan_get(in));
	for (uint32_t i = 0; i < n; i++) {
		fd[i] = t_connect(&a);
		t_send_all(fd[i], &i, sizeof(i));
		rep.connected++;
	}
	schedule_init(&s, n);
	for (uint32_t r = 0; r < ROUNDS; r++) {
		schedule_next(&s);
		for (uint32_t k = 0; k < s.per_round; k++) {
			uint32_t id = s.perm[k];
			struct hdr h = { id, r, msg_len(id, r) };

			memcpy(msg, &h, sizeof(h));
			t_stream_fill(msg_seed(id, r), 0, msg + sizeof(h), h.len);
			t_send_all(fd[id], msg, sizeof(h) + h.len);
			rep.messages++;
			rep.bytes += h.len;
		}
		for (uint32_t k = 0; k < s.per_round; k++) {
			uint32_t id = s.perm[k], len = msg_len(id, r);
			struct hdr h;

			t_recv_all(fd[id], back, sizeof(h) + len);
			memcpy(&h, back, sizeof(h));
			if (h.id != id || h.round != r || h.len != len ||
			    t_stream_check(msg_seed(id, r), 0, back + sizeof(h), len) >= 0)
				rep.bad_echoes++;
		}
	}
	for (uint32_t i = 0; i < n; i++)
		close(fd[i]);
	if (write(out->wr, &rep, sizeof(rep)) != sizeof(rep))
		t_fatal("write(report)");
	free(fd);
	free(s.perm);
	exit(t_finish()); // exit: the library reports its counters at exit
}

// ---- the server

struct conn {
	int fd;
	int64_t id;	 // -1 until the hello arrived
	uint32_t have;	 // bytes in buf
	int32_t last_round;
	uint64_t fnv;	 // of every payload byte, in order
	unsigned char buf[sizeof(struct hdr) + PAYLOAD_MAX];
};

struct server {
	uint32_t n, accepted, eofs, messages, bad;
	uint64_t bytes;
	int ep, lfd;
	struct conn *conns;   // by accept order
	int64_t *slot_of;     // by id
	uint32_t dup_ids;
};

static void echo(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);

		if (w < 0 && errno == EAGAIN) {
			t_wait_event(fd, POLLOUT);
			continue;
		}
		if (w <= 0)
			t_fatal("echo");
		p += w;
		len -= (size_t)w;
	}
}

// Consume complete messages (or the hello) from c->buf.
static void parse(struct server *sv, struct conn *c, uint32_t slot)
{
	for (;;) {
		struct hdr h;

		if (c->id < 0) {
			uint32_t id;

			if (c->have < sizeof(id))
				return;
			memcpy(&id, c->buf, sizeof(id));
			if (id >= sv->n || sv->slot_of[id] >= 0)
				sv->dup_ids++;
			else
				sv->slot_of[id] = slot;
			c->id = id;
			memmove(c->buf, c->buf + sizeof(id), c->have - sizeof(id));
			c->have -= sizeof(id);
			continue;
		}
		if (c->have < sizeof(h))
			return;
		memcpy(&h, c->buf, sizeof(h));
		if (h.len == 0 || h.len > PAYLOAD_MAX) {
			errno = 0;
			t_fatal("connection %lld: bad length %u", (long long)c->id, h.len);
		}
		if (c->have < sizeof(h) + h.len)
			return;
		if (h.id != c->id || (int32_t)h.round <= c->last_round ||
		    h.len != msg_len(h.id, h.round) ||
		    t_stream_check(msg_seed(h.id, h.round), 0, c->buf + sizeof(h), h.len) >= 0)
			sv->bad++;
		c->last_round = (int32_t)h.round;
		c->fnv = t_fnv1a(c->fnv, c->buf + sizeof(h), h.len);
		sv->messages++;
		sv->bytes += h.len;
		echo(c->fd, c->buf, sizeof(h) + h.len);
		c->have -= (uint32_t)sizeof(h) + h.len;
		memmove(c->buf, c->buf + sizeof(h) + h.len, c->have);
	}
}

static void on_readable(struct server *sv, uint32_t slot)
{
	struct conn *c = &sv->conns[slot];

	for (;;) {
		ssize_t r = recv(c->fd, c->buf + c->have, sizeof(c->buf) - c->have, 0);

		if (r > 0) {
			c->have += (uint32_t)r;
			parse(sv, c, slot);
			continue;
		}
		if (r < 0 && errno == EAGAIN)
			return;
		if (r < 0)
			t_fatal("recv");
		// EOF: the client is done with this connection.
		if (epoll_ctl(sv->ep, EPOLL_CTL_DEL, c->fd, NULL) < 0)
			t_fatal("epoll_ctl(DEL)");
		close(c->fd);
		c->fd = -1;
		sv->eofs++;
		return;
	}
}

static void on_listener(struct server *sv)
{
	for (;;) {
		int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct epoll_event ev;

		if (fd < 0 && errno == EAGAIN)
			return;
		if (fd < 0)
			t_fatal("accept4");
		if (sv->accepted == sv->n) {
			errno = 0;
			t_fatal("more connections than expected");
		}
		sv->conns[sv->accepted] = (struct conn){ .fd = fd, .id = -1, .last_round = -1,
							 .fnv = T_FNV_OFFSET };
		ev = (struct epoll_event){ .events = EPOLLIN | EPOLLRDHUP,
					   .data.u64 = sv->accepted };
		if (epoll_ctl(sv->ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			t_fatal("epoll_ctl(ADD) of connection %u", sv->accepted);
		sv->accepted++;
	}
}

static void serve(struct server *sv)
{
	struct epoll_event ev[MAX_EVENTS];

	while (sv->eofs < sv->n) {
		int k = epoll_wait(sv->ep, ev, MAX_EVENTS, T_WAIT_MS * 4);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			t_fatal("server: epoll_wait = %d after %u accepted, %u messages, %u closed",
				k, sv->accepted, sv->messages, sv->eofs);
		for (int i = 0; i < k; i++) {
			if (ev[i].data.u64 == LISTENER)
				on_listener(sv);
			else
				on_readable(sv, (uint32_t)ev[i].data.u64);
		}
	}
}

// Per connection, the checksum of what the schedule says it sent.
static uint32_t checksum_mismatches(const struct server *sv)
{
	static unsigned char payload[PAYLOAD_MAX];
	uint64_t *want = malloc(sv->n * sizeof(*want));
	struct schedule s;
	uint32_t bad = 0;

	if (!want)
		t_fatal("malloc");
	for (uint32_t i = 0; i < sv->n; i++)
		want[i] = T_FNV_OFFSET;
	schedule_init(&s, sv->n);
	for (uint32_t r = 0; r < ROUNDS; r++) {
		schedule_next(&s);
		for (uint32_t k = 0; k < s.per_round; k++) {
			uint32_t id = s.perm[k], len = msg_len(id, r);

			t_stream_fill(msg_seed(id, r), 0, payload, len);
			want[id] = t_fnv1a(want[id], payload, len);
		}
	}
	for (uint32_t i = 0; i < sv->n; i++) {
		int64_t slot = sv->slot_of[i];

		if (slot < 0 || sv->conns[slot].fnv != want[i])
			bad++;
	}
	free(want);
	free(s.perm);
	return bad;
}

static uint64_t expected_bytes(uint32_t n)
{
	struct schedule s;
	uint64_t total = 0;

	schedule_init(&s, n);
	for (uint32_t r = 0; r < ROUNDS; r++) {
		schedule_next(&s);
		for (uint32_t k = 0; k < s.per_round; k++)
			total += msg_len(s.perm[k], r);
	}
	free(s.perm);
	return total;
}

int main(void)
{
	uint32_t n = (uint32_t)t_env_u64("T_C10K_CONNS", 10000);
	struct server sv = { .n = n };
	struct client_report rep = { 0 };
	struct t_chan to_client, from_client;
	struct epoll_event ev;
	struct rlimit rl;
	struct t_addr a;
	pid_t pid;
	int st;

	t_start(WATCHDOG_S);
	if (n == 0) {
		errno = EINVAL;
		t_fatal("T_C10K_CONNS=0");
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		t_fatal("getrlimit");
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < (rlim_t)n + FD_MARGIN)
		t_skip("RLIMIT_NOFILE hard limit %llu < %u connections + %d: raise it (ulimit -Hn) "
		       "or set T_C10K_CONNS", (unsigned long long)rl.rlim_max, n, FD_MARGIN);
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		t_fatal("setrlimit(RLIMIT_NOFILE)");

	// The client first, before any socket exists.
	t_chan_open(&to_client);
	t_chan_open(&from_client);
	pid = t_fork();
	if (pid == 0) {
		close(to_client.wr);
		close(from_client.rd);
		t_watchdog(WATCHDOG_S);
		client(n, &to_client, &from_client);
	}
	close(to_client.rd);
	close(from_client.wr);

	sv.conns = calloc(n, sizeof(*sv.conns));
	sv.slot_of = malloc(n * sizeof(*sv.slot_of));
	if (!sv.conns || !sv.slot_of)
		t_fatal("calloc");
	for (uint32_t i = 0; i < n; i++)
		sv.slot_of[i] = -1;
	sv.lfd = t_listen_loopback(AF_INET, BACKLOG, &a);
	t_set_nonblock(sv.lfd, true);
	sv.ep = epoll_create1(EPOLL_CLOEXEC);
	if (sv.ep < 0)
		t_fatal("epoll_create1");
	ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = LISTENER };
	if (epoll_ctl(sv.ep, EPOLL_CTL_ADD, sv.lfd, &ev) < 0)
		t_fatal("epoll_ctl(ADD, listener)");
	t_chan_put(&to_client, t_addr_port(&a));

	serve(&sv);
	if (read(from_client.rd, &rep, sizeof(rep)) != sizeof(rep))
		t_fatal("read(client report)");
	st = t_wait_child(pid);

	printf("%u connections, %d rounds, %u per round\n", n, ROUNDS, n / 100 ? n / 100 : 1);
	t_expect(rep.connected == n && sv.accepted == n, "client connected %u, server accepted %u",
		 rep.connected, sv.accepted);
	t_expect(sv.dup_ids == 0 && checksum_mismatches(&sv) == 0,
		 "every connection identified once, its bytes received exactly once and in order");
	t_expect(rep.messages == sv.messages && sv.bad == 0,
		 "messages: %u sent, %u received, %u damaged", rep.messages, sv.messages, sv.bad);
	t_expect(rep.bytes == expected_bytes(n) && sv.bytes == rep.bytes,
		 "payload bytes each way: %llu", (unsigned long long)expected_bytes(n));
	t_expect(rep.bad_echoes == 0, "every echo intact");
	t_expect(sv.eofs == n, "EOF seen on all %u connections", n);
	t_expect(st == 0, "client exit status %d", st);
	close(sv.ep);
	close(sv.lfd);
	free(sv.conns);
	free(sv.slot_of);
	return t_finish();
}
