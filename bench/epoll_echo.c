// SPDX-License-Identifier: MIT
/*
 * epoll_echo: an echo benchmark in the shape of real event-driven servers. The
 * server is a single-threaded, level-triggered epoll loop over non-blocking
 * sockets; the client opens N connections from its own epoll loop, keeps a
 * window of messages in flight on A of them (the others stay registered and
 * idle) and reports messages/s and round-trip percentiles. Plain POSIX/Linux
 * calls only, so that it runs unmodified under `shunt run`.
 */
#include "bench_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
	/* Every message starts with its 8-byte sequence number on the connection. */
	EE_MIN_SIZE = 8,
	EE_MAX_SIZE = 1u << 20,
	EE_MAX_WINDOW = 64,
	/* The server reads and the client receives at most this much per call. */
	EE_BUF = 64u << 10,
	/* Descriptors besides the connections: stdio, epoll, listener, slack. */
	EE_FD_SLACK = 16,
	/* Longest epoll_wait, so deadlines and stalls are noticed. */
	EE_TICK_MS = 100,
};

struct ee_args {
	struct shunt_bench_opts o;
	int server;
	const char *host;
	uint16_t port;
	const char *ready_file;
	uint32_t conns;		/* connections (server: exit once all closed) */
	uint32_t active;	/* client: connections that carry traffic */
	uint32_t window;	/* client: messages in flight per active connection */
	uint32_t inflight;	/* client: connects + first echoes outstanding at once */
	int blocking_connect;	/* client: blocking connect(), then O_NONBLOCK */
	uint32_t max_events;	/* epoll_wait batch */
	uint64_t stall_ns;	/* client: give up after this long without progress */
};

static void set_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		shunt_bench_die(errno, "setsockopt TCP_NODELAY on fd %d", fd);
}

static void make_addr(const struct ee_args *a, struct sockaddr_in *sin)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(a->port);
	if (inet_pton(AF_INET, a->host, &sin->sin_addr) != 1)
		shunt_bench_die(0, "--host: '%s' is not an IPv4 address", a->host);
}

/* Raise RLIMIT_NOFILE and make sure conns connections fit under it. */
static long need_fds(uint32_t conns)
{
	long lim = shunt_bench_raise_nofile();

	if (lim < 0)
		shunt_bench_die((int)-lim, "raising RLIMIT_NOFILE");
	if ((uint64_t)lim < (uint64_t)conns + EE_FD_SLACK)
		shunt_bench_die(0, "%u connections need %u descriptors but RLIMIT_NOFILE "
				"allows %ld (raise the hard limit: ulimit -Hn)",
				conns, conns + EE_FD_SLACK, lim);
	return lim;
}

static void ep_ctl(int ep, int op, int fd, uint32_t events, uint64_t data)
{
	struct epoll_event ev = { .events = events, .data.u64 = data };

	if (epoll_ctl(ep, op, fd, &ev) < 0)
		shunt_bench_die(errno, "epoll_ctl(%s) on fd %d",
				op == EPOLL_CTL_ADD ? "ADD" : op == EPOLL_CTL_MOD ? "MOD" : "DEL",
				fd);
}

/* --- server: the classic loop ------------------------------------------- */

/* Bytes read but not yet echoed because the socket was full. */
struct sconn {
	char *pend;
	size_t len, off;
};

struct server {
	const struct ee_args *a;
	int ep, lfd;
	struct sconn *c;	/* indexed by fd, lim entries */
	long lim;
	char *buf;
	uint64_t accepted, open, max_open, closed_by_error;
	uint64_t bytes, reads, epoll_waits, events;
};

static void server_close(struct server *s, int fd)
{
	free(s->c[fd].pend);
	memset(&s->c[fd], 0, sizeof(s->c[fd]));
	/* close() alone leaves the epoll set, as in most real servers. */
	close(fd);
	s->open--;
}

static void server_accept(struct server *s)
{
	int fd;

	for (;;) {
		fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			shunt_bench_die(errno, "accept4 after %" PRIu64 " connections",
					s->accepted);
		}
		if (fd >= s->lim)
			shunt_bench_die(0, "accept4 returned fd %d beyond RLIMIT_NOFILE %ld",
					fd, s->lim);
		set_nodelay(fd);
		ep_ctl(s->ep, EPOLL_CTL_ADD, fd, EPOLLIN, (uint64_t)fd);
		s->accepted++;
		if (++s->open > s->max_open)
			s->max_open = s->open;
	}
}

/* Write what is pending on fd. Returns 1 when everything went out, 0 if the
 * socket is full, -1 if the connection is gone (closed here). */
static int server_flush(struct server *s, int fd)
{
	struct sconn *c = &s->c[fd];
	ssize_t w;

	while (c->off < c->len) {
		w = send(fd, c->pend + c->off, c->len - c->off, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			s->closed_by_error++;
			server_close(s, fd);
			return -1;
		}
		c->off += (size_t)w;
	}
	free(c->pend);
	c->pend = NULL;
	c->len = c->off = 0;
	return 1;
}

static void server_read(struct server *s, int fd)
{
	struct sconn *c = &s->c[fd];
	ssize_t r, w;

	/* One read per readiness: level-triggered epoll reports the rest. */
	r = recv(fd, s->buf, EE_BUF, 0);
	if (r < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return;
		s->closed_by_error++;
		server_close(s, fd);
		return;
	}
	if (r == 0) {
		server_close(s, fd);
		return;
	}
	s->reads++;
	s->bytes += (uint64_t)r;
	do
		w = send(fd, s->buf, (size_t)r, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
		s->closed_by_error++;
		server_close(s, fd);
		return;
	}
	if (w < 0)
		w = 0;
	if (w == r)
		return;
	/* The peer is not reading: keep the rest and stop reading until it
	 * went out, so that a slow client cannot make us buffer without bound. */
	c->len = (size_t)(r - w);
	c->off = 0;
	c->pend = malloc(c->len);
	if (!c->pend)
		shunt_bench_die(ENOMEM, "buffering %zu bytes for fd %d", c->len, fd);
	memcpy(c->pend, s->buf + w, c->len);
	ep_ctl(s->ep, EPOLL_CTL_MOD, fd, EPOLLOUT, (uint64_t)fd);
}

static int run_server(const struct ee_args *a)
{
	struct shunt_bench_id id = { .tool = "epoll_echo", .transport = "tcp",
				     .role = "server" };
	struct server s = { .a = a };
	struct sockaddr_in sin;
	struct epoll_event *evs;
	char extra[512];
	int one = 1, n, i;

	s.lim = need_fds(a->conns);
	s.c = calloc((size_t)s.lim, sizeof(*s.c));
	evs = calloc(a->max_events, sizeof(*evs));
	s.buf = shunt_bench_alloc(EE_BUF);
	if (!s.c || !evs)
		shunt_bench_die(ENOMEM, "allocating the connection table");

	make_addr(a, &sin);
	s.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s.lfd < 0)
		shunt_bench_die(errno, "socket");
	if (setsockopt(s.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		shunt_bench_die(errno, "setsockopt SO_REUSEADDR");
	if (bind(s.lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		shunt_bench_die(errno, "bind to %s:%u", a->host, a->port);
	if (listen(s.lfd, SOMAXCONN) < 0)
		shunt_bench_die(errno, "listen");
	s.ep = epoll_create1(EPOLL_CLOEXEC);
	if (s.ep < 0)
		shunt_bench_die(errno, "epoll_create1");
	ep_ctl(s.ep, EPOLL_CTL_ADD, s.lfd, EPOLLIN, (uint64_t)s.lfd);
	shunt_bench_ready_file(a->ready_file);

	/* Serve until the expected connections came and all went. */
	while (s.accepted < a->conns || s.open) {
		n = epoll_wait(s.ep, evs, (int)a->max_events, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			shunt_bench_die(errno, "epoll_wait");
		}
		s.epoll_waits++;
		s.events += (uint64_t)n;
		for (i = 0; i < n; i++) {
			int fd = (int)evs[i].data.u64;

			if (fd == s.lfd)
				server_accept(&s);
			else if (s.c[fd].pend) {
				/* All echoed: read again. */
				if (server_flush(&s, fd) > 0)
					ep_ctl(s.ep, EPOLL_CTL_MOD, fd, EPOLLIN, (uint64_t)fd);
			} else
				server_read(&s, fd);
		}
	}
	close(s.lfd);
	close(s.ep);

	snprintf(extra, sizeof(extra),
		 "\"conns\":%u,\"accepted\":%" PRIu64 ",\"max_open\":%" PRIu64 ","
		 "\"closed_by_error\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"reads\":%" PRIu64 ","
		 "\"epoll_waits\":%" PRIu64 ",\"events\":%" PRIu64 ",\"nofile\":%ld",
		 a->conns, s.accepted, s.max_open, s.closed_by_error, s.bytes, s.reads,
		 s.epoll_waits, s.events, s.lim);
	id.extra = extra;
	shunt_bench_print_echo(&id, &a->o, s.bytes / a->o.size);
	free(s.buf);
	free(evs);
	free(s.c);
	return 0;
}

/* --- client --------------------------------------------------------------- */

/* cconn.want_out when the interest set is neither EPOLLIN nor EPOLLIN|EPOLLOUT. */
enum { WANT_UNKNOWN = 0xff };

enum cconn_state {
	CC_IDLE = 0,		/* no socket yet */
	CC_CONNECTING,		/* non-blocking connect in progress */
	CC_HELLO,		/* connected; the first echo has not come back */
	CC_READY,
};

struct cconn {
	int fd;
	uint8_t state;		/* enum cconn_state */
	uint8_t active;
	uint8_t want_out;	/* EPOLLOUT is in the interest set; WANT_UNKNOWN */
	uint32_t rx_off;	/* bytes of the incoming message received */
	uint32_t tx_off;	/* bytes of the head outgoing message written */
	uint32_t tx_queued;	/* messages not yet fully written, head included */
	uint64_t tx_seq;	/* sequence number of the head outgoing message */
	uint64_t tx_next;	/* sequence number the next queued message gets */
	uint64_t rx_seq;	/* sequence number the next echo must carry */
	uint8_t rx_hdr[8];
};

struct client {
	const struct ee_args *a;
	struct sockaddr_in sin;
	int ep;
	struct cconn *c;
	uint64_t *sent_ns;	/* [conn * window + seq % window]: when queued */
	char *txbuf, *rxbuf;
	uint32_t *samples;
	size_t cap, n;		/* samples recorded, capacity */
	uint32_t started, pending, ready;
	int sending;		/* measured phase: answer every echo with a message */
	uint64_t t_start, t_end, progress_ns;
	uint64_t measured, completed, epoll_waits, events;
};

static void client_want_out(struct client *cl, struct cconn *c, int on)
{
	if (c->want_out == on)
		return;
	c->want_out = (uint8_t)on;
	ep_ctl(cl->ep, EPOLL_CTL_MOD, c->fd, on ? EPOLLIN | EPOLLOUT : EPOLLIN,
	       (uint64_t)(c - cl->c));
}

static void client_queue(struct client *cl, struct cconn *c, uint64_t now)
{
	cl->sent_ns[(size_t)(c - cl->c) * cl->a->window + c->tx_next % cl->a->window] = now;
	c->tx_next++;
	c->tx_queued++;
}

/* Write queued messages, one send() per message as a request/response
 * client would; on a full socket wait for EPOLLOUT. */
static void client_flush(struct client *cl, struct cconn *c)
{
	size_t size = cl->a->o.size;
	ssize_t w;

	while (c->tx_queued) {
		memcpy(cl->txbuf, &c->tx_seq, sizeof(c->tx_seq));
		w = send(c->fd, cl->txbuf + c->tx_off, size - c->tx_off, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			shunt_bench_die(errno, "send on connection %zu", (size_t)(c - cl->c));
		}
		c->tx_off += (uint32_t)w;
		if (c->tx_off == size) {
			c->tx_off = 0;
			c->tx_seq++;
			c->tx_queued--;
		}
	}
	client_want_out(cl, c, c->tx_queued != 0);
}

static void client_echoed(struct client *cl, struct cconn *c, uint64_t now)
{
	uint64_t seq, rtt;

	memcpy(&seq, c->rx_hdr, sizeof(seq));
	if (seq != c->rx_seq)
		shunt_bench_die(0, "connection %zu: echo carries sequence number %" PRIu64
				" instead of %" PRIu64, (size_t)(c - cl->c), seq, c->rx_seq);
	c->rx_seq++;
	cl->progress_ns = now;
	if (c->state == CC_HELLO) {
		c->state = CC_READY;
		cl->pending--;
		cl->ready++;
		return;
	}
	cl->completed++;
	if (now >= cl->t_start && now < cl->t_end &&
	    !(cl->a->o.count && cl->measured >= cl->a->o.count)) {
		rtt = now - cl->sent_ns[(size_t)(c - cl->c) * cl->a->window +
					seq % cl->a->window];
		if (cl->n < cl->cap)
			cl->samples[cl->n++] = rtt > UINT32_MAX ? UINT32_MAX : (uint32_t)rtt;
		cl->measured++;
		if (cl->a->o.count && cl->measured >= cl->a->o.count)
			cl->t_end = now + 1; /* the last measured echo closes the window */
	}
	if (cl->sending && now < cl->t_end)
		client_queue(cl, c, now);
}

static void client_read(struct client *cl, struct cconn *c)
{
	size_t size = cl->a->o.size, p = 0, take, need;
	uint64_t now;
	ssize_t r;

	r = recv(c->fd, cl->rxbuf, EE_BUF, 0);
	if (r < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return;
		shunt_bench_die(errno, "recv on connection %zu", (size_t)(c - cl->c));
	}
	if (r == 0)
		shunt_bench_die(0, "the server closed connection %zu", (size_t)(c - cl->c));
	now = shunt_bench_now_ns();
	while (p < (size_t)r) {
		need = size - c->rx_off;
		take = need < (size_t)r - p ? need : (size_t)r - p;
		if (c->rx_off < sizeof(c->rx_hdr)) {
			size_t h = sizeof(c->rx_hdr) - c->rx_off;

			memcpy(c->rx_hdr + c->rx_off, cl->rxbuf + p, h < take ? h : take);
		}
		c->rx_off += (uint32_t)take;
		p += take;
		if (c->rx_off == size) {
			c->rx_off = 0;
			if (c->rx_seq == c->tx_next)
				shunt_bench_die(0, "connection %zu: more bytes came back than "
						"were sent", (size_t)(c - cl->c));
			client_echoed(cl, c, now);
		}
	}
	if (c->tx_queued)
		client_flush(cl, c);
}

/* A non-blocking connect finished: check how, then send the first message. */
static void client_connected(struct client *cl, struct cconn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		shunt_bench_die(errno, "getsockopt SO_ERROR on connection %zu",
				(size_t)(c - cl->c));
	if (err)
		shunt_bench_die(err, "connect #%zu to %s:%u", (size_t)(c - cl->c),
				cl->a->host, cl->a->port);
	c->state = CC_HELLO;
	c->want_out = WANT_UNKNOWN; /* still EPOLLOUT alone, from connecting */
	client_queue(cl, c, shunt_bench_now_ns());
	client_flush(cl, c);
}

static void client_start_one(struct client *cl, struct cconn *c)
{
	int type = SOCK_STREAM | SOCK_CLOEXEC | (cl->a->blocking_connect ? 0 : SOCK_NONBLOCK);
	size_t i = (size_t)(c - cl->c);
	int r;

	c->fd = socket(AF_INET, type, 0);
	if (c->fd < 0)
		shunt_bench_die(errno, "socket for connection %zu", i);
	set_nodelay(c->fd);
	do
		r = connect(c->fd, (struct sockaddr *)&cl->sin, sizeof(cl->sin));
	while (r < 0 && errno == EINTR && cl->a->blocking_connect);
	if (r < 0 && errno != EINPROGRESS)
		shunt_bench_die(errno, "connect #%zu to %s:%u", i, cl->a->host, cl->a->port);
	if (cl->a->blocking_connect) {
		int fl = fcntl(c->fd, F_GETFL);

		if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0)
			shunt_bench_die(errno, "fcntl O_NONBLOCK on connection %zu", i);
	}
	cl->started++;
	cl->pending++;
	if (r == 0) {
		/* Connected at once: register for echoes and say hello. */
		ep_ctl(cl->ep, EPOLL_CTL_ADD, c->fd, EPOLLIN, i);
		c->state = CC_HELLO;
		client_queue(cl, c, shunt_bench_now_ns());
		client_flush(cl, c);
	} else {
		ep_ctl(cl->ep, EPOLL_CTL_ADD, c->fd, EPOLLOUT, i);
		c->state = CC_CONNECTING;
	}
}

/* One epoll_wait and the handling of what it returned. */
static void client_pump(struct client *cl, struct epoll_event *evs, int timeout_ms)
{
	int n, i;

	n = epoll_wait(cl->ep, evs, (int)cl->a->max_events, timeout_ms);
	if (n < 0) {
		if (errno == EINTR)
			return;
		shunt_bench_die(errno, "epoll_wait");
	}
	cl->epoll_waits++;
	cl->events += (uint64_t)n;
	for (i = 0; i < n; i++) {
		struct cconn *c = &cl->c[evs[i].data.u64];
		uint32_t e = evs[i].events;

		if (c->state == CC_CONNECTING) {
			client_connected(cl, c);
			continue;
		}
		if (e & (EPOLLIN | EPOLLERR | EPOLLHUP))
			client_read(cl, c);
		if ((e & EPOLLOUT) && c->tx_queued)
			client_flush(cl, c);
	}
}

static void client_stalled(const struct client *cl, const char *phase)
{
	shunt_bench_die(0, "nothing happened for %.1f s during %s: %u of %u connections "
			"started, %u waiting for connect or their first echo, %u ready; "
			"%" PRIu64 " echoes after the set-up",
			(double)cl->a->stall_ns / 1e9, phase, cl->started, cl->a->conns,
			cl->pending, cl->ready, cl->completed);
}

/* Open every connection, at most a->inflight at once, each proven by one
 * echoed message, so that the server has accepted and registered it. */
static void client_setup(struct client *cl, struct epoll_event *evs)
{
	const struct ee_args *a = cl->a;
	uint64_t now;

	cl->progress_ns = shunt_bench_now_ns();
	while (cl->ready < a->conns) {
		while (cl->started < a->conns && cl->pending < a->inflight)
			client_start_one(cl, &cl->c[cl->started]);
		client_pump(cl, evs, EE_TICK_MS);
		now = shunt_bench_now_ns();
		if (now - cl->progress_ns > a->stall_ns)
			client_stalled(cl, "the connection set-up");
	}
}

static void client_measure(struct client *cl, struct epoll_event *evs)
{
	const struct ee_args *a = cl->a;
	uint64_t now = shunt_bench_now_ns(), left;
	uint32_t i, k;

	cl->t_start = now + a->o.warmup_ns;
	cl->t_end = a->o.count ? UINT64_MAX : cl->t_start + a->o.duration_ns;
	cl->progress_ns = now;
	cl->sending = 1;
	for (i = 0; i < a->conns; i++) {
		struct cconn *c = &cl->c[i];

		if (!c->active)
			continue;
		for (k = 0; k < a->window; k++)
			client_queue(cl, c, now);
		client_flush(cl, c);
	}
	for (;;) {
		now = shunt_bench_now_ns();
		if (now >= cl->t_end)
			break;
		if (now - cl->progress_ns > a->stall_ns)
			client_stalled(cl, "the measured phase");
		left = (cl->t_end - now) / 1000000 + 1;
		client_pump(cl, evs, left < EE_TICK_MS ? (int)left : EE_TICK_MS);
	}
	cl->sending = 0;
	if (cl->t_end > now)
		cl->t_end = now;
}

/* Which connections carry traffic: spread evenly over the N, so that with
 * one active connection it is the middle one, neither the first nor the last
 * registered. */
static void client_pick_active(struct client *cl)
{
	uint32_t n = cl->a->conns, k = cl->a->active, j;

	for (j = 0; j < k; j++)
		cl->c[(uint64_t)(2 * j + 1) * n / (2 * k)].active = 1;
}

static int run_client(const struct ee_args *a)
{
	struct shunt_bench_id id = { .tool = "epoll_echo", .transport = "tcp",
				     .role = "client" };
	struct shunt_bench_opts o = a->o;
	struct client cl = { .a = a };
	struct epoll_event *evs;
	struct shunt_bench_rtt r;
	uint64_t t0, setup_ns;
	double secs;
	char extra[768];
	long lim;
	uint32_t i;

	lim = need_fds(a->conns);
	make_addr(a, &cl.sin);
	cl.c = calloc(a->conns, sizeof(*cl.c));
	cl.sent_ns = calloc((size_t)a->conns * a->window, sizeof(*cl.sent_ns));
	evs = calloc(a->max_events, sizeof(*evs));
	if (!cl.c || !cl.sent_ns || !evs)
		shunt_bench_die(ENOMEM, "allocating %u connections", a->conns);
	cl.txbuf = shunt_bench_alloc(a->o.size);
	memset(cl.txbuf, 0x5a, a->o.size);
	cl.rxbuf = shunt_bench_alloc(EE_BUF);
	/* At most one sample per echo; the sample buffer is sized for the
	 * fastest plausible rate over the duration (see bench_util.h). */
	cl.cap = shunt_bench_sample_capacity(&a->o);
	cl.samples = shunt_bench_alloc(cl.cap * sizeof(*cl.samples));
	client_pick_active(&cl);
	cl.ep = epoll_create1(EPOLL_CLOEXEC);
	if (cl.ep < 0)
		shunt_bench_die(errno, "epoll_create1");

	t0 = shunt_bench_now_ns();
	client_setup(&cl, evs);
	setup_ns = shunt_bench_now_ns() - t0;
	client_measure(&cl, evs);

	secs = cl.t_end > cl.t_start ? (double)(cl.t_end - cl.t_start) / 1e9 : 0;
	shunt_bench_rtt_summary(cl.samples, cl.n, secs, &r);
	snprintf(extra, sizeof(extra),
		 "\"conns\":%u,\"active\":%u,\"window\":%u,\"connect_inflight\":%u,"
		 "\"blocking_connect\":%s,\"setup_s\":%.6f,\"messages\":%" PRIu64 ","
		 "\"msgs_per_s\":%.1f,\"samples_dropped\":%" PRIu64 ","
		 "\"epoll_waits\":%" PRIu64 ",\"events\":%" PRIu64 ",\"nofile\":%ld",
		 a->conns, a->active, a->window, a->inflight,
		 a->blocking_connect ? "true" : "false", (double)setup_ns / 1e9,
		 cl.measured, secs > 0 ? (double)cl.measured / secs : 0.0,
		 cl.measured - cl.n, cl.epoll_waits, cl.events, lim);
	id.extra = extra;
	o.mode = SHUNT_BENCH_RTT;
	shunt_bench_print_rtt(&id, &o, &r);

	/* Closing ends the server: it exits once every connection is gone. */
	for (i = 0; i < a->conns; i++)
		close(cl.c[i].fd);
	close(cl.ep);
	free(cl.samples);
	free(cl.rxbuf);
	free(cl.txbuf);
	free(evs);
	free(cl.sent_ns);
	free(cl.c);
	return cl.measured ? 0 : 1;
}

/* --- options -------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: epoll_echo server|client [options]\n"
"  --host ADDR              IPv4 address (default 127.0.0.1)\n"
"  --port N                 tcp port (default 7777)\n"
"  --conns N                connections (default 1); the server exits once N\n"
"                           were accepted and all of them closed\n"
"  --size N[k|M]            message size, 8 B .. 1 MiB (default 8)\n"
"  --cpu N                  pin to this CPU (default: not pinned)\n"
"  --max-events N           epoll_wait batch (default 256)\n"
"server:\n"
"  --ready-file PATH        create PATH once listen() has returned\n"
"client:\n"
"  --active A               connections that carry traffic (default: all);\n"
"                           the others stay registered and idle\n"
"  --window W               messages in flight per active connection (default 1)\n"
"  --duration SEC           measured phase (default 1)\n"
"  --count N                measured echoes instead of a duration\n"
"  --warmup SEC             unmeasured phase before it (default 0.2)\n"
"  --connect-inflight K     connects + first echoes outstanding at once (default 128)\n"
"  --blocking-connect       blocking connect(), then O_NONBLOCK\n"
"  --stall-timeout SEC      give up after SEC without progress (default 5)\n"
"Prints one JSON object on stdout.\n");
}

static uint32_t parse_u32(const char *opt, const char *val, uint32_t min, uint32_t max)
{
	uint64_t v;

	if (shunt_bench_parse_size(val, &v) < 0 || v < min || v > max)
		shunt_bench_die(0, "%s: '%s' is not a number in [%u, %u]", opt, val, min, max);
	return (uint32_t)v;
}

static void parse_args(struct ee_args *a, int argc, char **argv)
{
	int i;

	memset(a, 0, sizeof(*a));
	shunt_bench_opts_init(&a->o);
	a->host = "127.0.0.1";
	a->port = 7777;
	a->conns = 1;
	a->window = 1;
	a->inflight = 128;
	a->max_events = 256;
	a->stall_ns = 5 * SHUNT_BENCH_NSEC;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		exit(argc < 2);
	}
	if (!strcmp(argv[1], "server"))
		a->server = 1;
	else if (strcmp(argv[1], "client"))
		shunt_bench_die(0, "first argument must be server or client, not '%s'",
				argv[1]);

	for (i = 2; i < argc; i++) {
		const char *opt = argv[i];

		if (shunt_bench_parse_common(&a->o, argc, argv, &i))
			continue;
		if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (!strcmp(opt, "--blocking-connect")) {
			a->blocking_connect = 1;
			continue;
		}
		if (i + 1 >= argc)
			shunt_bench_die(0, "unknown option or missing value: %s", opt);
		if (!strcmp(opt, "--host"))
			a->host = argv[++i];
		else if (!strcmp(opt, "--port"))
			a->port = (uint16_t)parse_u32(opt, argv[++i], 1, 65535);
		else if (!strcmp(opt, "--conns"))
			a->conns = parse_u32(opt, argv[++i], 1, 1u << 20);
		else if (!strcmp(opt, "--active"))
			a->active = parse_u32(opt, argv[++i], 1, 1u << 20);
		else if (!strcmp(opt, "--window"))
			a->window = parse_u32(opt, argv[++i], 1, EE_MAX_WINDOW);
		else if (!strcmp(opt, "--connect-inflight"))
			a->inflight = parse_u32(opt, argv[++i], 1, 1u << 20);
		else if (!strcmp(opt, "--max-events"))
			a->max_events = parse_u32(opt, argv[++i], 1, 1u << 16);
		else if (!strcmp(opt, "--stall-timeout"))
			a->stall_ns = (uint64_t)parse_u32(opt, argv[++i], 1, 3600) *
				      SHUNT_BENCH_NSEC;
		else if (!strcmp(opt, "--ready-file"))
			a->ready_file = argv[++i];
		else
			shunt_bench_die(0, "unknown option %s (try --help)", opt);
	}
	if (a->o.size < EE_MIN_SIZE || a->o.size > EE_MAX_SIZE)
		shunt_bench_die(0, "--size must be in [%u, %u]: every message carries an "
				"8-byte sequence number", EE_MIN_SIZE, EE_MAX_SIZE);
	if (!a->active)
		a->active = a->conns;
	if (a->active > a->conns)
		shunt_bench_die(0, "--active %u is more than --conns %u", a->active, a->conns);
}

int main(int argc, char **argv)
{
	struct ee_args a;

	parse_args(&a, argc, argv);
	/* send() uses MSG_NOSIGNAL; this also covers anything it misses. */
	signal(SIGPIPE, SIG_IGN);
	shunt_bench_pin(a.o.cpu);
	return a.server ? run_server(&a) : run_client(&a);
}
