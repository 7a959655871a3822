// SPDX-License-Identifier: MIT
/*
 * share: what sharing one connection between threads and processes costs.
 * `percall` times single calls on an idle connection held by one process,
 * alone, next to an idle second thread, or next to an idle forked child;
 * `server`/`client` measure the message rate of T sending threads on one
 * connection into R receiving threads of another process. Plain blocking
 * POSIX calls only, so that it runs unmodified under `shunt run`.
 */
#include "bench_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
	SH_MAGIC = 0x53485253, /* "SRHS" */
	SH_VERSION = 1,
	SH_MAX_THREADS = 64,
	/* percall: calls per timed batch. A send batch must fit in any
	 * socket buffer or ring (64 x 8 B), an EAGAIN batch is long enough
	 * that one clock read per batch is noise. */
	SH_SEND_BATCH = 64,
	SH_EAGAIN_BATCH = 1000,
	SH_MSG = 8,
	/* percall: the shortest a timed batch can be, to size the samples. */
	SH_MIN_BATCH_NS = 256,
	/* Every message starts with (sender thread << 48 | its sequence). */
	SH_SEQ_BITS = 48,
	/* How long a data call may wait for what must already be there. */
	SH_STALL_MS = 5000,
};

/* Client to server, once, before any data. Same host, same build: host order. */
struct sh_hello {
	uint32_t magic;
	uint32_t version;
	uint32_t send_threads;
	uint32_t reserved;
	uint64_t size;
	uint64_t warmup_ns; /* receiver-side warm-up */
};

/* Server to client after EOF: what the receiver counted. */
struct sh_result {
	uint64_t bytes_total;
	uint64_t bytes_measured;
	uint64_t ns_measured;
	uint64_t verified; /* messages whose sender and sequence were checked */
	uint32_t recv_threads;
	uint32_t reserved;
};

_Static_assert(sizeof(struct sh_hello) == 32, "sh_hello layout");
_Static_assert(sizeof(struct sh_result) == 40, "sh_result layout");

enum sh_role { SH_PERCALL, SH_SERVER, SH_CLIENT };
enum sh_share { SH_SINGLE, SH_THREAD, SH_FORK };
static const char *const share_names[] = { "single", "thread", "fork" };

struct sh_args {
	struct shunt_bench_opts o;
	enum sh_role role;
	enum sh_share share;	/* percall */
	const char *host;
	uint16_t port;
	const char *ready_file;
	unsigned threads;	/* server: receivers; client: senders */
	int verify;		/* server: check every message's sender and sequence */
};

/* --- sockets ------------------------------------------------------------- */

static void set_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		shunt_bench_die(errno, "setsockopt TCP_NODELAY on fd %d", fd);
}

static void set_nonblock(int fd, int on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK) < 0)
		shunt_bench_die(errno, "fcntl O_NONBLOCK on fd %d", fd);
}

static void make_addr(const char *host, uint16_t port, struct sockaddr_in *sin)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	if (inet_pton(AF_INET, host, &sin->sin_addr) != 1)
		shunt_bench_die(0, "--host: '%s' is not an IPv4 address", host);
}

static int listen_on(const char *host, uint16_t port)
{
	struct sockaddr_in sin;
	int one = 1, fd;

	make_addr(host, port, &sin);
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		shunt_bench_die(errno, "socket");
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		shunt_bench_die(errno, "setsockopt SO_REUSEADDR");
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) < 0)
		shunt_bench_die(errno, "bind to %s:%u", host, port);
	if (listen(fd, 4) < 0)
		shunt_bench_die(errno, "listen");
	return fd;
}

static int accept_one(int lfd)
{
	int fd;

	do
		fd = accept(lfd, NULL, NULL);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		shunt_bench_die(errno, "accept");
	set_nodelay(fd);
	return fd;
}

/* Wait until fd is ready for events; dies after SH_STALL_MS. */
static void wait_ready(int fd, short events, const char *what)
{
	struct pollfd p = { .fd = fd, .events = events };
	int r;

	do
		r = poll(&p, 1, SH_STALL_MS);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		shunt_bench_die(errno, "poll for %s", what);
	if (r == 0)
		shunt_bench_die(0, "%s: nothing after %d ms", what, SH_STALL_MS);
}

/* Send all n bytes; returns how many send() calls it took (1 unless a
 * call was partial). Dies on error. */
static unsigned send_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	unsigned calls = 0;
	ssize_t r;

	while (n) {
		r = send(fd, p, n, MSG_NOSIGNAL);
		calls++;
		if (r < 0) {
			if (errno == EINTR)
				continue;
			shunt_bench_die(errno, "send of %zu bytes", n);
		}
		p += r;
		n -= (size_t)r;
	}
	return calls;
}

/* Receive exactly n bytes. Returns n, or 0 on EOF before the first byte. */
static size_t recv_all(int fd, void *buf, size_t n)
{
	char *p = buf;
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		r = recv(fd, p + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			shunt_bench_die(errno, "recv of %zu bytes", n - got);
		}
		if (r == 0) {
			if (got == 0)
				return 0;
			shunt_bench_die(0, "peer closed after %zu of %zu bytes", got, n);
		}
		got += (size_t)r;
	}
	return n;
}

/* --- percall: single calls on an idle connection ------------------------- */

/*
 * Both ends of one loopback connection in this process: a non-blocking
 * connect, then accept, then wait for the connect to complete (a blocking
 * connect could wait for an accept that this very thread has to make).
 */
static void connect_pair(const char *host, int *a_out, int *b_out)
{
	struct sockaddr_in sin;
	socklen_t len = sizeof(sin);
	int lfd = listen_on(host, 0), a, b, err = 0;

	if (getsockname(lfd, (struct sockaddr *)&sin, &len) < 0)
		shunt_bench_die(errno, "getsockname of the listener");
	a = socket(AF_INET, SOCK_STREAM, 0);
	if (a < 0)
		shunt_bench_die(errno, "socket");
	set_nonblock(a, 1);
	if (connect(a, (struct sockaddr *)&sin, sizeof(sin)) < 0 && errno != EINPROGRESS)
		shunt_bench_die(errno, "connect to %s:%u", host, ntohs(sin.sin_port));
	b = accept_one(lfd);
	wait_ready(a, POLLOUT, "connect");
	len = sizeof(err);
	if (getsockopt(a, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err)
		shunt_bench_die(err ? err : errno, "connect to %s:%u", host, ntohs(sin.sin_port));
	set_nonblock(a, 0);
	set_nodelay(a);
	close(lfd);
	*a_out = a;
	*b_out = b;
}

/* The process's other sharer: an idle thread or an idle child, both
 * blocked in read() on a pipe until released. */
struct sharer {
	enum sh_share kind;
	int release[2];	/* closing release[1] lets it go */
	pthread_t thread;
	pid_t child;
};

static void *idle_thread(void *arg)
{
	struct sharer *sh = arg;
	char c;

	while (read(sh->release[0], &c, 1) < 0 && errno == EINTR)
		;
	return NULL;
}

static void sharer_start(struct sharer *sh)
{
	int ready[2], err;
	char c;

	if (sh->kind == SH_SINGLE)
		return;
	if (pipe2(sh->release, O_CLOEXEC) < 0)
		shunt_bench_die(errno, "pipe");
	if (sh->kind == SH_THREAD) {
		err = pthread_create(&sh->thread, NULL, idle_thread, sh);
		if (err)
			shunt_bench_die(err, "pthread_create");
		return;
	}
	if (pipe2(ready, O_CLOEXEC) < 0)
		shunt_bench_die(errno, "pipe");
	sh->child = fork();
	if (sh->child < 0)
		shunt_bench_die(errno, "fork");
	if (sh->child == 0) {
		/* The child holds both sockets and never touches them. It
		 * says it is up (its fork handlers have run), then waits for
		 * the release or for the parent's death. */
		close(sh->release[1]);
		close(ready[0]);
		if (write(ready[1], "r", 1) != 1)
			_exit(3);
		close(ready[1]);
		while (read(sh->release[0], &c, 1) < 0 && errno == EINTR)
			;
		_exit(0);
	}
	close(sh->release[0]);
	close(ready[1]);
	if (read(ready[0], &c, 1) != 1)
		shunt_bench_die(0, "the forked child did not come up (it died at once)");
	close(ready[0]);
}

static void sharer_stop(struct sharer *sh)
{
	int status;

	if (sh->kind == SH_SINGLE)
		return;
	close(sh->release[1]);
	if (sh->kind == SH_THREAD) {
		pthread_join(sh->thread, NULL);
		close(sh->release[0]);
		return;
	}
	if (waitpid(sh->child, &status, 0) < 0)
		shunt_bench_die(errno, "waitpid for the child");
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		shunt_bench_die(0, "the idle child %s %d", WIFEXITED(status) ? "exited" :
				"was killed by signal", WIFEXITED(status) ? WEXITSTATUS(status) :
				WTERMSIG(status));
}

/* Timed batches of one operation; per-call numbers are batch / calls. */
struct op {
	const char *name;
	unsigned per_batch;
	uint32_t *samples;
	size_t n, cap;
};

static void op_init(struct op *op, const char *name, unsigned per_batch, uint64_t duration_ns)
{
	op->name = name;
	op->per_batch = per_batch;
	op->cap = duration_ns / SH_MIN_BATCH_NS + 16;
	if (op->cap > SHUNT_BENCH_MAX_SAMPLES)
		op->cap = SHUNT_BENCH_MAX_SAMPLES;
	op->samples = shunt_bench_alloc(op->cap * sizeof(*op->samples));
	op->n = 0;
}

static void op_add(struct op *op, uint64_t ns, int measuring)
{
	if (measuring && op->n < op->cap)
		op->samples[op->n++] = ns > UINT32_MAX ? UINT32_MAX : (uint32_t)ns;
}

static void op_print(struct op *op, double seconds, int comma)
{
	struct shunt_bench_rtt r;
	double k;

	shunt_bench_rtt_summary(op->samples, op->n, seconds, &r);
	k = 1.0 / op->per_batch;
	printf("%s\"%s\":{\"batches\":%zu,\"per_batch\":%u,\"calls\":%" PRIu64 ","
	       "\"seconds\":%.6f,\"ns_per_call\":{\"mean\":%.2f,\"min\":%.2f,\"p50\":%.2f,"
	       "\"p90\":%.2f,\"p99\":%.2f,\"max\":%.2f}}",
	       comma ? "," : "", op->name, op->n, op->per_batch,
	       (uint64_t)op->n * op->per_batch, seconds, r.mean * k, r.min * k,
	       r.p50 * k, r.p90 * k, r.p99 * k, r.max * k);
	free(op->samples);
}

/* Non-blocking recv() on the empty end, every call must say EAGAIN. */
static double run_eagain(int b, struct op *op, const struct shunt_bench_opts *o)
{
	uint64_t t0 = shunt_bench_now_ns(), start = t0 + o->warmup_ns, stop = start + o->duration_ns;
	uint64_t t, prev = t0;
	char buf[64];
	unsigned i;

	for (;;) {
		for (i = 0; i < SH_EAGAIN_BATCH; i++) {
			if (recv(b, buf, sizeof(buf), 0) >= 0 || errno != EAGAIN)
				shunt_bench_die(errno, "non-blocking recv on an empty socket "
						"did not say EAGAIN");
		}
		t = shunt_bench_now_ns();
		op_add(op, t - prev, prev >= start);
		prev = t;
		if (t >= stop || op->n == op->cap)
			break;
	}
	return (double)(prev - start) / 1e9;
}

/*
 * A batch of 8-byte sends on a, then the same 8-byte messages received one
 * call each from b (already there: loopback TCP and the ring both deliver
 * before send returns; a call that has to wait is counted and its batch
 * dropped). Messages carry a sequence number that must come back in order.
 */
static double run_sendrecv(int a, int b, struct op *snd, struct op *rcv,
			   const struct shunt_bench_opts *o, uint64_t *slow)
{
	uint64_t t0 = shunt_bench_now_ns(), start = t0 + o->warmup_ns, stop = start + o->duration_ns;
	uint64_t seq = 0, expect = 0, got[SH_SEND_BATCH], t1, t2, t3;
	int waited;
	unsigned i;
	ssize_t r;

	for (t1 = t0;;) {
		for (i = 0; i < SH_SEND_BATCH; i++, seq++) {
			r = send(a, &seq, SH_MSG, MSG_NOSIGNAL);
			if (r != SH_MSG)
				shunt_bench_die(r < 0 ? errno : 0, "send of %d bytes returned %zd",
						SH_MSG, r);
		}
		t2 = shunt_bench_now_ns();
		waited = 0;
		for (i = 0; i < SH_SEND_BATCH;) {
			r = recv(b, &got[i], SH_MSG, 0);
			if (r < 0 && errno == EAGAIN) {
				waited = 1;
				wait_ready(b, POLLIN, "message sent in this batch");
				continue;
			}
			if (r != SH_MSG)
				shunt_bench_die(r < 0 ? errno : 0, "recv of %d bytes returned %zd",
						SH_MSG, r);
			i++;
		}
		t3 = shunt_bench_now_ns();
		for (i = 0; i < SH_SEND_BATCH; i++, expect++) {
			if (got[i] != expect)
				shunt_bench_die(0, "message %" PRIu64 " came back as %" PRIu64,
						expect, got[i]);
		}
		op_add(snd, t2 - t1, t1 >= start);
		if (waited)
			*slow += t1 >= start;
		else
			op_add(rcv, t3 - t2, t1 >= start);
		if (t3 >= stop || snd->n == snd->cap)
			break;
		/* The check above is not timed: the next batch starts here. */
		t1 = shunt_bench_now_ns();
	}
	return (double)(t3 - start) / 1e9;
}

static uint64_t clock_cost_ns(void)
{
	uint64_t t0 = shunt_bench_now_ns(), t1 = t0;
	int i;

	for (i = 0; i < 1000; i++)
		t1 = shunt_bench_now_ns();
	return (t1 - t0 + 500) / 1000;
}

static int run_percall(const struct sh_args *a)
{
	struct sharer sh = { .kind = a->share, .child = -1 };
	struct op eagain, snd, rcv;
	double s_eagain, s_sr;
	uint64_t slow = 0;
	int fa, fb;

	connect_pair(a->host, &fa, &fb);
	set_nonblock(fb, 1);
	sharer_start(&sh);
	op_init(&eagain, "recv_eagain", SH_EAGAIN_BATCH, a->o.duration_ns);
	op_init(&snd, "send8", SH_SEND_BATCH, a->o.duration_ns);
	op_init(&rcv, "recv8", SH_SEND_BATCH, a->o.duration_ns);
	s_eagain = run_eagain(fb, &eagain, &a->o);
	s_sr = run_sendrecv(fa, fb, &snd, &rcv, &a->o, &slow);

	printf("{\"tool\":\"share\",\"test\":\"percall\",\"share\":\"%s\",\"cpu\":%d,"
	       "\"pid\":%d,\"child_pid\":%d,\"clock_ns\":%" PRIu64 ",\"recv8_waited\":%" PRIu64
	       ",\"ops\":{", share_names[a->share], a->o.cpu, (int)getpid(), (int)sh.child,
	       clock_cost_ns(), slow);
	op_print(&eagain, s_eagain, 0);
	op_print(&snd, s_sr, 1);
	op_print(&rcv, s_sr, 1);
	printf("}}\n");
	fflush(stdout);
	close(fa);
	close(fb);
	sharer_stop(&sh);
	return 0;
}

/* --- rate: T senders, one connection, R receivers in another process ----- */

/* A receiver's or a sender's counters, one cache line each. */
struct worker {
	_Alignas(64) pthread_t thread;
	unsigned index;
	int fd;
	_Atomic uint64_t msgs;	/* sender: messages sent (relaxed; read by main) */
	uint64_t bytes;		/* sender: bytes sent; receiver: bytes received */
	uint64_t measured;	/* receiver: bytes received in the window */
	uint64_t partial;	/* sender: send() calls that sent part of a message */
	uint64_t t_end;		/* receiver: when it saw EOF */
};

/* Shared by the receivers of one server. */
struct rx_shared {
	uint64_t size, warmup_ns;
	unsigned senders;
	int verify;
	_Atomic uint64_t t_first;	/* first byte seen by any receiver */
	_Atomic uint64_t t_start;	/* the measured window opened */
	uint64_t verified;
	uint64_t *expect;		/* verify: next sequence per sender */
};

static struct rx_shared rxs;

/* Check complete messages in buf[0..n); returns the bytes of an incomplete
 * last message, which the caller keeps for the next call. */
static size_t verify_msgs(const char *buf, size_t n)
{
	size_t off;
	uint64_t h, who, seq;

	for (off = 0; off + rxs.size <= n; off += rxs.size) {
		memcpy(&h, buf + off, sizeof(h));
		who = h >> SH_SEQ_BITS;
		seq = h & ((1ull << SH_SEQ_BITS) - 1);
		if (who >= rxs.senders || seq != rxs.expect[who])
			shunt_bench_die(0, "message %" PRIu64 " is torn or out of order: sender %"
					PRIu64 " seq %" PRIu64 ", expected seq %" PRIu64,
					rxs.verified, who, seq,
					who < rxs.senders ? rxs.expect[who] : 0);
		rxs.expect[who]++;
		rxs.verified++;
	}
	return n - off;
}

/*
 * Count bytes until EOF. The window opens warmup_ns after the first byte
 * any receiver saw and closes when the last receiver saw EOF, which the
 * client sends after its last message: every byte counted arrived inside.
 */
static void *receiver(void *arg)
{
	struct worker *w = arg;
	size_t cap = rxs.size > SHUNT_BENCH_RECV_CHUNK ? rxs.size : SHUNT_BENCH_RECV_CHUNK;
	char *buf = shunt_bench_alloc(cap + rxs.size);
	uint64_t now, first, zero;
	size_t carry = 0;
	int measuring = 0;
	ssize_t r;

	for (;;) {
		r = recv(w->fd, buf + carry, cap, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			shunt_bench_die(errno, "recv (receiver %u)", w->index);
		}
		if (r == 0)
			break;
		w->bytes += (uint64_t)r;
		if (rxs.verify) {
			size_t left = verify_msgs(buf, carry + (size_t)r);

			memmove(buf, buf + carry + (size_t)r - left, left);
			carry = left;
		}
		if (measuring) {
			w->measured += (uint64_t)r;
			continue;
		}
		if (atomic_load(&rxs.t_start)) {
			measuring = 1;	/* another receiver opened the window */
			continue;
		}
		now = shunt_bench_now_ns();
		zero = 0;
		atomic_compare_exchange_strong(&rxs.t_first, &zero, now);
		first = atomic_load(&rxs.t_first);
		if (now - first >= rxs.warmup_ns) {
			zero = 0;
			atomic_compare_exchange_strong(&rxs.t_start, &zero, now);
			measuring = 1;
		}
	}
	w->t_end = shunt_bench_now_ns();
	if (carry)
		shunt_bench_die(0, "EOF inside a message (%zu bytes of %" PRIu64 ")",
				carry, rxs.size);
	free(buf);
	return NULL;
}

static void start_workers(struct worker *w, unsigned n, int fd, void *(*fn)(void *))
{
	unsigned i;
	int err;

	for (i = 0; i < n; i++) {
		w[i].index = i;
		w[i].fd = fd;
		err = pthread_create(&w[i].thread, NULL, fn, &w[i]);
		if (err)
			shunt_bench_die(err, "pthread_create (thread %u of %u)", i + 1, n);
	}
}

static void join_workers(struct worker *w, unsigned n)
{
	unsigned i;

	for (i = 0; i < n; i++)
		pthread_join(w[i].thread, NULL);
}

static struct shunt_bench_id rate_id(const char *role, char *extra, size_t len,
				     unsigned senders, unsigned receivers, uint64_t verified,
				     uint64_t partial)
{
	struct shunt_bench_id id = { .tool = "share", .transport = "tcp", .role = role,
				     .extra = extra };

	snprintf(extra, len, "\"test\":\"rate\",\"send_threads\":%u,\"recv_threads\":%u,"
		 "\"verified\":%" PRIu64 ",\"partial_sends\":%" PRIu64 ",\"pid\":%d",
		 senders, receivers, verified, partial, (int)getpid());
	return id;
}

static int run_server(struct sh_args *a)
{
	struct worker *w = shunt_bench_alloc(a->threads * sizeof(*w));
	struct shunt_bench_stream s = { 0 };
	struct sh_result res = { 0 };
	struct shunt_bench_id id;
	struct sh_hello h;
	uint64_t t_end = 0;
	char extra[256];
	int lfd, fd;
	unsigned i;

	lfd = listen_on(a->host, a->port);
	shunt_bench_ready_file(a->ready_file);
	fd = accept_one(lfd);
	close(lfd);
	if (!recv_all(fd, &h, sizeof(h)))
		shunt_bench_die(0, "client closed before the setup message");
	if (h.magic != SH_MAGIC || h.version != SH_VERSION || h.size < sizeof(uint64_t) ||
	    h.size > SHUNT_BENCH_MAX_SIZE || !h.send_threads || h.send_threads > SH_MAX_THREADS)
		shunt_bench_die(0, "bad setup message (magic %#x version %u size %" PRIu64
				" threads %u)", h.magic, h.version, h.size, h.send_threads);
	a->o.mode = SHUNT_BENCH_STREAM;
	a->o.size = h.size;
	rxs.size = h.size;
	rxs.warmup_ns = h.warmup_ns;
	rxs.senders = h.send_threads;
	rxs.verify = a->verify;
	if (a->verify)
		rxs.expect = calloc(h.send_threads, sizeof(*rxs.expect));
	start_workers(w, a->threads, fd, receiver);
	join_workers(w, a->threads);
	for (i = 0; i < a->threads; i++) {
		s.bytes_total += w[i].bytes;
		s.bytes_measured += w[i].measured;
		if (w[i].t_end > t_end)
			t_end = w[i].t_end;
	}
	if (atomic_load(&rxs.t_start))
		s.ns_measured = t_end - atomic_load(&rxs.t_start);
	res.bytes_total = s.bytes_total;
	res.bytes_measured = s.bytes_measured;
	res.ns_measured = s.ns_measured;
	res.verified = rxs.verified;
	res.recv_threads = a->threads;
	send_all(fd, &res, sizeof(res));
	s.sender_bytes = s.bytes_total; /* unknown here; the client checks */
	id = rate_id("server", extra, sizeof(extra), h.send_threads, a->threads,
		     rxs.verified, 0);
	shunt_bench_print_stream(&id, &a->o, &s);
	close(fd);
	free(rxs.expect);
	free(w);
	return 0;
}

static _Atomic int senders_stop;
static pthread_barrier_t senders_go;
static uint64_t msg_size;

static void *sender(void *arg)
{
	struct worker *w = arg;
	char *buf = shunt_bench_alloc(msg_size);
	uint64_t h, n = 0;
	unsigned calls;

	memset(buf, 0x5a, msg_size);
	pthread_barrier_wait(&senders_go);
	while (!atomic_load_explicit(&senders_stop, memory_order_relaxed)) {
		h = (uint64_t)w->index << SH_SEQ_BITS | n;
		memcpy(buf, &h, sizeof(h));
		calls = send_all(w->fd, buf, msg_size);
		w->partial += calls - 1;
		/* Read by the main thread for the sender-side rate only. */
		atomic_store_explicit(&w->msgs, ++n, memory_order_relaxed);
	}
	w->bytes = n * msg_size;
	free(buf);
	return NULL;
}

static uint64_t sent_msgs(struct worker *w, unsigned n)
{
	uint64_t sum = 0;
	unsigned i;

	for (i = 0; i < n; i++)
		sum += atomic_load_explicit(&w[i].msgs, memory_order_relaxed);
	return sum;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = { (time_t)(t / SHUNT_BENCH_NSEC), (long)(t % SHUNT_BENCH_NSEC) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static int connect_retry(const struct sh_args *a)
{
	struct sockaddr_in sin;
	uint64_t deadline = shunt_bench_now_ns() + 10 * SHUNT_BENCH_NSEC;
	struct timespec pause = { 0, 5 * 1000 * 1000 };
	int fd;

	make_addr(a->host, a->port, &sin);
	for (;;) {
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			shunt_bench_die(errno, "socket");
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0)
			break;
		if ((errno != ECONNREFUSED && errno != EINTR) || shunt_bench_now_ns() > deadline)
			shunt_bench_die(errno, "connect to %s:%u", a->host, a->port);
		close(fd);
		nanosleep(&pause, NULL);
	}
	set_nodelay(fd);
	return fd;
}

/*
 * The sending threads run while this one sleeps: warm-up, then the measured
 * phase (the sender-side rate), then they stop; a half-close and the
 * server's counts close the receiver's window.
 */
static int run_client(struct sh_args *a)
{
	struct worker *w = shunt_bench_alloc(a->threads * sizeof(*w));
	struct sh_hello h = {
		.magic = SH_MAGIC, .version = SH_VERSION, .send_threads = a->threads,
		.size = a->o.size, .warmup_ns = a->o.warmup_ns,
	};
	struct shunt_bench_stream s = { 0 };
	uint64_t t0, t1, m0, m1, partial = 0;
	struct shunt_bench_id id;
	struct sh_result res;
	char extra[256];
	unsigned i;
	int fd, err;

	fd = connect_retry(a);
	send_all(fd, &h, sizeof(h));
	msg_size = a->o.size;
	err = pthread_barrier_init(&senders_go, NULL, a->threads + 1);
	if (err)
		shunt_bench_die(err, "pthread_barrier_init");
	start_workers(w, a->threads, fd, sender);
	pthread_barrier_wait(&senders_go);
	sleep_until(shunt_bench_now_ns() + a->o.warmup_ns);
	m0 = sent_msgs(w, a->threads);
	t0 = shunt_bench_now_ns();
	sleep_until(t0 + a->o.duration_ns);
	m1 = sent_msgs(w, a->threads);
	t1 = shunt_bench_now_ns();
	atomic_store(&senders_stop, 1);
	join_workers(w, a->threads);
	if (shutdown(fd, SHUT_WR) < 0)
		shunt_bench_die(errno, "shutdown(SHUT_WR)");
	if (!recv_all(fd, &res, sizeof(res)))
		shunt_bench_die(0, "server closed without sending its result");

	s.bytes_total = res.bytes_total;
	s.bytes_measured = res.bytes_measured;
	s.ns_measured = res.ns_measured;
	for (i = 0; i < a->threads; i++) {
		s.sender_bytes += w[i].bytes;
		partial += w[i].partial;
	}
	s.sender_msgs = m1 - m0;
	s.sender_ns = t1 - t0;
	id = rate_id("client", extra, sizeof(extra), a->threads, res.recv_threads,
		     res.verified, partial);
	shunt_bench_print_stream(&id, &a->o, &s);
	if (s.sender_bytes != s.bytes_total)
		shunt_bench_die(0, "sent %" PRIu64 " bytes but the server received %" PRIu64,
				s.sender_bytes, s.bytes_total);
	close(fd);
	free(w);
	return 0;
}

/* --- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: share percall|server|client [options]\n"
"  percall: one process, both ends of a loopback connection; times non-blocking\n"
"           recv() on the empty end (EAGAIN), 8-byte send()s and 8-byte recv()s\n"
"    --share single|thread|fork  alone, next to an idle thread, or next to an\n"
"                          idle forked child that holds the sockets (default single)\n"
"  server: accept one connection, --threads receivers count bytes until EOF\n"
"    --port N --ready-file PATH --verify (check every message; 1 receiver only)\n"
"  client: connect, --threads senders send --size byte messages\n"
"    --port N --size N[k] (>= 8)\n"
"  common: --host ADDR (127.0.0.1) --threads N (1) --duration SEC (1)\n"
"          --warmup SEC (0.2) --cpu N (every thread on this CPU; default not pinned)\n"
"Prints one JSON object on stdout.\n");
}

static void parse_args(struct sh_args *a, int argc, char **argv)
{
	unsigned long v;
	char *end;
	int i;

	memset(a, 0, sizeof(*a));
	shunt_bench_opts_init(&a->o);
	a->o.mode = SHUNT_BENCH_STREAM;
	a->host = "127.0.0.1";
	a->port = 7777;
	a->threads = 1;
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		exit(argc < 2);
	}
	if (!strcmp(argv[1], "percall"))
		a->role = SH_PERCALL;
	else if (!strcmp(argv[1], "server"))
		a->role = SH_SERVER;
	else if (!strcmp(argv[1], "client"))
		a->role = SH_CLIENT;
	else
		shunt_bench_die(0, "first argument must be percall, server or client, not '%s'",
				argv[1]);
	for (i = 2; i < argc; i++) {
		const char *opt = argv[i];

		if (strcmp(opt, "--mode") && shunt_bench_parse_common(&a->o, argc, argv, &i))
			continue;
		if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (!strcmp(opt, "--verify")) {
			a->verify = 1;
			continue;
		}
		if (i + 1 >= argc)
			shunt_bench_die(0, "unknown option or missing value: %s", opt);
		if (!strcmp(opt, "--host")) {
			a->host = argv[++i];
		} else if (!strcmp(opt, "--ready-file")) {
			a->ready_file = argv[++i];
		} else if (!strcmp(opt, "--port") || !strcmp(opt, "--threads")) {
			errno = 0;
			v = strtoul(argv[++i], &end, 10);
			if (!strcmp(opt, "--port")) {
				if (errno || *end || v == 0 || v > 65535)
					shunt_bench_die(0, "--port: '%s' is not a port", argv[i]);
				a->port = (uint16_t)v;
			} else {
				if (errno || *end || v == 0 || v > SH_MAX_THREADS)
					shunt_bench_die(0, "--threads: '%s' is not in [1, %d]",
							argv[i], SH_MAX_THREADS);
				a->threads = (unsigned)v;
			}
		} else if (!strcmp(opt, "--share")) {
			const char *s = argv[++i];

			if (!strcmp(s, "single"))
				a->share = SH_SINGLE;
			else if (!strcmp(s, "thread"))
				a->share = SH_THREAD;
			else if (!strcmp(s, "fork"))
				a->share = SH_FORK;
			else
				shunt_bench_die(0, "--share: '%s' is not single, thread or fork", s);
		} else {
			shunt_bench_die(0, "unknown option %s (try --help)", opt);
		}
	}
	if (a->o.size < sizeof(uint64_t))
		shunt_bench_die(0, "--size must be at least 8 (messages carry a sequence number)");
	if (a->verify && a->threads != 1)
		shunt_bench_die(0, "--verify needs one receiver thread (--threads 1)");
}

int main(int argc, char **argv)
{
	struct sh_args a;

	parse_args(&a, argc, argv);
	signal(SIGPIPE, SIG_IGN);
	/* Threads created later inherit the affinity: all of them share the CPU. */
	shunt_bench_pin(a.o.cpu);
	if (a.role == SH_PERCALL)
		return run_percall(&a);
	return a.role == SH_SERVER ? run_server(&a) : run_client(&a);
}
