// SPDX-License-Identifier: MIT
/*
 * shmring: the "what the hardware can do" reference. Two forked processes
 * exchange messages over a minimal single-producer single-consumer byte ring
 * per direction in a memfd MAP_SHARED region, spin-waiting on C11 atomics.
 * Same rtt/stream modes and JSON output as pp; independent of src/.
 */
#include "bench_util.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* A waiter that sees no progress for this long assumes its peer died. */
#define STALL_NS (10 * SHUNT_BENCH_NSEC)

enum {
	CACHE_LINE = 64,
	SHM_VERSION = 1,
	/* Spins between two looks at the clock while waiting. */
	SPIN_CHECK_MASK = (1u << 20) - 1,
	/* --copy nt streams copies of at least this many bytes into the ring. */
	NT_MIN = 4096,
};

/*
 * One direction. The producer owns the line with head and closed, the
 * consumer owns the line with tail, so each side writes only its own line and
 * reads the other's; indices run freely and are masked on use.
 */
struct ring_ctl {
	_Alignas(CACHE_LINE) _Atomic uint64_t head; /* bytes published */
	_Atomic uint32_t closed;                    /* no data after head */
	_Alignas(CACHE_LINE) _Atomic uint64_t tail; /* bytes consumed */
};

enum ring_dir { C2S = 0, S2C = 1 };

/* The shared control area; the two rings' data follow at data_off. */
struct shm_region {
	uint32_t version;
	uint32_t reserved;
	uint64_t ring_bytes;
	uint64_t data_off;
	_Alignas(CACHE_LINE) _Atomic uint32_t server_ready;
	_Atomic uint32_t result_ready;
	/* Written by the server before its release store of result_ready. */
	uint64_t res_bytes_total, res_bytes_measured, res_ns_measured;
	struct ring_ctl ring[2];
};

_Static_assert(offsetof(struct shm_region, server_ready) % CACHE_LINE == 0,
	       "server_ready on its own cache line");
_Static_assert(offsetof(struct shm_region, ring) % CACHE_LINE == 0,
	       "rings start on a cache line");
_Static_assert(offsetof(struct ring_ctl, tail) - offsetof(struct ring_ctl, head)
	       >= CACHE_LINE, "head and tail on separate cache lines");
_Static_assert(sizeof(struct ring_ctl) % CACHE_LINE == 0,
	       "ring_ctl is whole cache lines");

/* Process-private view of one end of a ring. */
struct ring_end {
	struct ring_ctl *ctl;
	char *data;
	uint64_t cap, mask;
	uint64_t chunk; /* publish/consume at most this much at a time */
	int nt;         /* producer: non-temporal stores for large copies */
	uint64_t pos;   /* our own index (head for tx, tail for rx) */
	uint64_t other; /* last seen value of the peer's index */
};

/* State of one wait: failed polls so far and when the clock was first read. */
struct spin {
	uint64_t n;
	uint64_t t0;
	pid_t peer; /* child to watch (client side), 0 if none */
};

/* Start a new wait; the stall timeout counts from here. */
static inline void spin_reset(struct spin *s)
{
	s->n = 0;
	s->t0 = 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield" ::: "memory");
#endif
}

/* Called on every failed poll; looks at the clock only once in a while. */
static void spin_wait(struct spin *s, const char *what)
{
	uint64_t now;
	int status;

	cpu_relax();
	if (++s->n & SPIN_CHECK_MASK)
		return;
	now = shunt_bench_now_ns();
	if (!s->t0)
		s->t0 = now;
	if (s->peer && waitpid(s->peer, &status, WNOHANG) == s->peer)
		shunt_bench_die(0, "server process exited while waiting for %s", what);
	if (now - s->t0 > STALL_NS)
		shunt_bench_die(0, "no progress for %llu s waiting for %s",
				(unsigned long long)(STALL_NS / SHUNT_BENCH_NSEC), what);
}

#if defined(__x86_64__)
/*
 * Copy with non-temporal stores: the ring's lines go to memory instead of
 * being pulled into the producer's cache, which spares one cross-core
 * invalidation per line when the consumer still holds them. Only SSE2, the
 * x86-64 baseline. Weakly ordered: the caller fences before publishing.
 */
static void copy_nt(char *dst, const char *src, size_t n)
{
	size_t lead = (size_t)(-(uintptr_t)dst & 15);
	__m128i a, b, c, d;

	if (lead > n)
		lead = n;
	memcpy(dst, src, lead);
	dst += lead;
	src += lead;
	n -= lead;
	for (; n >= 64; n -= 64, dst += 64, src += 64) {
		a = _mm_loadu_si128((const __m128i *)src);
		b = _mm_loadu_si128((const __m128i *)(src + 16));
		c = _mm_loadu_si128((const __m128i *)(src + 32));
		d = _mm_loadu_si128((const __m128i *)(src + 48));
		_mm_stream_si128((__m128i *)dst, a);
		_mm_stream_si128((__m128i *)(dst + 16), b);
		_mm_stream_si128((__m128i *)(dst + 32), c);
		_mm_stream_si128((__m128i *)(dst + 48), d);
	}
	memcpy(dst, src, n);
}
#endif

static void copy_in(const struct ring_end *tx, uint64_t off, const char *src,
		    uint64_t n)
{
	uint64_t first = n < tx->cap - off ? n : tx->cap - off;

#if defined(__x86_64__)
	if (tx->nt && n >= NT_MIN) {
		copy_nt(tx->data + off, src, first);
		copy_nt(tx->data, src + first, n - first);
		/* Orders the streamed stores before R1 in ring_push. */
		_mm_sfence();
		return;
	}
#endif
	memcpy(tx->data + off, src, first);
	memcpy(tx->data, src + first, n - first);
}

static void ring_push(struct ring_end *tx, const char *buf, size_t len,
		      struct spin *sp)
{
	uint64_t head = tx->pos, space, n;

	spin_reset(sp);
	while (len) {
		space = tx->cap - (head - tx->other);
		if (!space) {
			/* A2: pairs with R2 in ring_pop; the consumer has
			 * finished reading the bytes it releases. */
			tx->other = atomic_load_explicit(&tx->ctl->tail,
							 memory_order_acquire);
			if (tx->other == head - tx->cap)
				spin_wait(sp, "ring space");
			continue;
		}
		n = len < space ? len : space;
		if (n > tx->chunk)
			n = tx->chunk;
		copy_in(tx, head & tx->mask, buf, n);
		head += n;
		/* R1: pairs with A1 in ring_pop; publishes the bytes above. */
		atomic_store_explicit(&tx->ctl->head, head, memory_order_release);
		buf += n;
		len -= n;
	}
	tx->pos = head;
}

static void ring_close(struct ring_end *tx)
{
	/* R3: pairs with A3 in ring_pop; ordered after the last R1. */
	atomic_store_explicit(&tx->ctl->closed, 1, memory_order_release);
}

/* Copy between 1 and max bytes out of the ring, waiting for at least one.
 * Returns the count, or 0 once the producer closed and the ring is empty. */
static size_t ring_pop(struct ring_end *rx, char *buf, size_t max,
		       struct spin *sp)
{
	uint64_t tail = rx->pos, avail, n, off, first;

	spin_reset(sp);
	while (rx->other == tail) {
		/* A1: pairs with R1 in ring_push. */
		rx->other = atomic_load_explicit(&rx->ctl->head,
						 memory_order_acquire);
		if (rx->other != tail)
			break;
		/* A3: pairs with R3 in ring_close; head is final after it. */
		if (atomic_load_explicit(&rx->ctl->closed, memory_order_acquire)) {
			rx->other = atomic_load_explicit(&rx->ctl->head,
							 memory_order_acquire);
			if (rx->other == tail)
				return 0;
			break;
		}
		spin_wait(sp, "data");
	}
	avail = rx->other - tail;
	n = avail < max ? avail : max;
	if (n > rx->chunk)
		n = rx->chunk;
	off = tail & rx->mask;
	first = n < rx->cap - off ? n : rx->cap - off;
	memcpy(buf, rx->data + off, first);
	memcpy(buf + first, rx->data, n - first);
	tail += n;
	/* R2: pairs with A2 in ring_push; hands the space back. */
	atomic_store_explicit(&rx->ctl->tail, tail, memory_order_release);
	rx->pos = tail;
	return n;
}

/* Pop exactly len bytes; returns len, or 0 on close before the first byte. */
static size_t ring_pop_all(struct ring_end *rx, char *buf, size_t len,
			   struct spin *sp)
{
	size_t got = 0, n;

	while (got < len) {
		n = ring_pop(rx, buf + got, len - got, sp);
		if (!n) {
			if (!got)
				return 0;
			shunt_bench_die(0, "ring closed after %zu of %zu bytes",
					got, len);
		}
		got += n;
	}
	return len;
}

struct shm_args {
	struct shunt_bench_opts o;
	int server_cpu;
	uint64_t ring_bytes;
	uint64_t chunk;
	int nt;
	char extra[128]; /* ring parameters for the JSON report */
};

static struct ring_end ring_end(struct shm_region *r, enum ring_dir d,
				const struct shm_args *a)
{
	struct ring_end e = {
		.ctl = &r->ring[d],
		.data = (char *)r + r->data_off + (uint64_t)d * r->ring_bytes,
		.cap = r->ring_bytes,
		.mask = r->ring_bytes - 1,
		.chunk = a->chunk,
		.nt = a->nt,
	};
	return e;
}

static void server_rtt(struct ring_end *rx, struct ring_end *tx, size_t size)
{
	char *buf = shunt_bench_alloc(size);
	struct spin sp = { 0 };

	while (ring_pop_all(rx, buf, size, &sp))
		ring_push(tx, buf, size, &sp);
	ring_close(tx);
	free(buf);
}

/* Same window rule as pp's server_stream: opens warmup_ns after the first
 * byte, closes when the producer's close is seen after the last byte. */
static void server_stream(struct shm_region *r, struct ring_end *rx,
			  const struct shunt_bench_opts *o)
{
	size_t cap = o->size > SHUNT_BENCH_RECV_CHUNK ? o->size
						      : SHUNT_BENCH_RECV_CHUNK;
	char *buf = shunt_bench_alloc(cap);
	uint64_t total = 0, measured = 0, t_first = 0, t_start = 0, t_end, now;
	struct spin sp = { 0 };
	size_t n;

	while ((n = ring_pop(rx, buf, cap, &sp))) {
		total += n;
		if (t_start) {
			measured += n;
			continue;
		}
		now = shunt_bench_now_ns();
		if (!t_first)
			t_first = now;
		if (now - t_first >= o->warmup_ns)
			t_start = now;
	}
	t_end = shunt_bench_now_ns();
	r->res_bytes_total = total;
	r->res_bytes_measured = measured;
	r->res_ns_measured = t_start ? t_end - t_start : 0;
	/* R4: pairs with A4 in client_stream; publishes the res_ fields. */
	atomic_store_explicit(&r->result_ready, 1, memory_order_release);
	free(buf);
}

static int run_server(struct shm_region *r, const struct shm_args *a)
{
	struct ring_end rx = ring_end(r, C2S, a), tx = ring_end(r, S2C, a);

	shunt_bench_pin(a->server_cpu);
	/* R5: pairs with A5 in run_client: pinned and about to poll. */
	atomic_store_explicit(&r->server_ready, 1, memory_order_release);
	if (a->o.mode == SHUNT_BENCH_RTT)
		server_rtt(&rx, &tx, a->o.size);
	else
		server_stream(r, &rx, &a->o);
	return 0;
}

static void one_rtt(struct ring_end *tx, struct ring_end *rx, char *out,
		    char *in, size_t size, uint64_t seq, struct spin *sp)
{
	size_t tag = size < sizeof(seq) ? size : sizeof(seq);

	memcpy(out, &seq, tag);
	ring_push(tx, out, size, sp);
	if (!ring_pop_all(rx, in, size, sp))
		shunt_bench_die(0, "server closed during round trip %" PRIu64, seq);
	if (memcmp(out, in, tag))
		shunt_bench_die(0, "round trip %" PRIu64 " came back corrupted", seq);
}

static struct shunt_bench_id result_id(const struct shm_args *a)
{
	struct shunt_bench_id id = {
		.tool = "shmring",
		.transport = "shm",
		.role = "client",
		.extra = a->extra,
	};
	return id;
}

static void client_rtt(const struct shm_args *a, struct ring_end *tx,
		       struct ring_end *rx, struct spin *sp)
{
	const struct shunt_bench_opts *o = &a->o;
	struct shunt_bench_id id = result_id(a);
	size_t cap = shunt_bench_sample_capacity(o);
	uint32_t *samples = shunt_bench_alloc(cap * sizeof(*samples));
	char *out = shunt_bench_alloc(o->size);
	char *in = shunt_bench_alloc(o->size);
	struct shunt_bench_rtt r;
	uint64_t seq = 0, t_start, prev, now, d;
	size_t n = 0;

	memset(out, 0x5a, o->size);
	now = shunt_bench_now_ns();
	for (t_start = now + o->warmup_ns; now < t_start; now = shunt_bench_now_ns())
		one_rtt(tx, rx, out, in, o->size, seq++, sp);

	t_start = prev = shunt_bench_now_ns();
	while (n < cap) {
		one_rtt(tx, rx, out, in, o->size, seq++, sp);
		now = shunt_bench_now_ns();
		d = now - prev;
		samples[n++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		prev = now;
		if (o->count ? n >= o->count : now - t_start >= o->duration_ns)
			break;
	}
	ring_close(tx);
	shunt_bench_rtt_summary(samples, n, (double)(prev - t_start) / 1e9, &r);
	shunt_bench_print_rtt(&id, o, &r);
	free(in);
	free(out);
	free(samples);
}

static void client_stream(const struct shm_args *a, struct shm_region *r,
			  struct ring_end *tx, struct spin *sp)
{
	const struct shunt_bench_opts *o = &a->o;
	struct shunt_bench_id id = result_id(a);
	char *buf = shunt_bench_alloc(o->size);
	uint64_t mask = o->size >= 4096 ? 0 : 63; /* as in pp */
	uint64_t msgs = 0, sent = 0, now, t_start, t_stop;
	struct shunt_bench_stream s = { 0 };

	memset(buf, 0x5a, o->size);
	now = shunt_bench_now_ns();
	for (t_start = now + o->warmup_ns; now < t_start; now = shunt_bench_now_ns()) {
		ring_push(tx, buf, o->size, sp);
		sent++;
	}
	t_start = now;
	t_stop = t_start + o->duration_ns;
	for (;;) {
		ring_push(tx, buf, o->size, sp);
		msgs++;
		if (o->count) {
			if (msgs >= o->count)
				break;
		} else if (!(msgs & mask) && shunt_bench_now_ns() >= t_stop) {
			break;
		}
	}
	now = shunt_bench_now_ns();
	ring_close(tx);
	/* A4: pairs with R4 in server_stream. */
	spin_reset(sp);
	while (!atomic_load_explicit(&r->result_ready, memory_order_acquire))
		spin_wait(sp, "the server's result");

	s.bytes_total = r->res_bytes_total;
	s.bytes_measured = r->res_bytes_measured;
	s.ns_measured = r->res_ns_measured;
	s.sender_bytes = (sent + msgs) * o->size;
	s.sender_msgs = msgs;
	s.sender_ns = now - t_start;
	shunt_bench_print_stream(&id, o, &s);
	if (s.sender_bytes != s.bytes_total)
		shunt_bench_die(0, "sent %" PRIu64 " bytes but the server received %" PRIu64,
				s.sender_bytes, s.bytes_total);
	free(buf);
}

static int run_client(struct shm_region *r, const struct shm_args *a,
		      pid_t server)
{
	struct ring_end tx = ring_end(r, C2S, a), rx = ring_end(r, S2C, a);
	struct spin sp = { .peer = server };
	int status;

	shunt_bench_pin(a->o.cpu);
	/* A5: pairs with R5 in run_server. */
	while (!atomic_load_explicit(&r->server_ready, memory_order_acquire))
		spin_wait(&sp, "the server to start");
	if (a->o.mode == SHUNT_BENCH_RTT)
		client_rtt(a, &tx, &rx, &sp);
	else
		client_stream(a, r, &tx, &sp);

	if (waitpid(server, &status, 0) < 0)
		shunt_bench_die(errno, "waitpid for the server process");
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		shunt_bench_die(0, "server process failed (status %#x)", status);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: shmring [options]\n"
"  --mode rtt|stream      default rtt\n"
"  --size N[k|M]          message size in bytes (default 8)\n"
"  --duration SEC         measured phase (default 1)\n"
"  --count N              measured iterations/messages instead of duration\n"
"  --warmup SEC           unmeasured phase before it (default 0.2)\n"
"  --cpu N                pin the client (parent) to this CPU\n"
"  --server-cpu N         pin the server (child) to this CPU\n"
"  --ring-bytes N[k|M]    bytes per direction, a power of two (default 1M)\n"
"  --chunk N[k|M]         most bytes copied per publish (default 64k)\n"
"  --copy memcpy|nt       producer copy; nt: non-temporal stores for copies\n"
"                         of 4 KiB or more (x86-64; default memcpy)\n"
"Forks a server; the client prints one JSON object on stdout.\n");
}

static void parse_args(struct shm_args *a, int argc, char **argv)
{
	int i;
	char *end;
	long cpu;

	memset(a, 0, sizeof(*a));
	shunt_bench_opts_init(&a->o);
	a->server_cpu = -1;
	a->ring_bytes = 1u << 20;
	a->chunk = 64u << 10;

	for (i = 1; i < argc; i++) {
		const char *opt = argv[i];

		if (shunt_bench_parse_common(&a->o, argc, argv, &i))
			continue;
		if (!strcmp(opt, "-h") || !strcmp(opt, "--help")) {
			usage(stdout);
			exit(0);
		}
		if (i + 1 >= argc)
			shunt_bench_die(0, "unknown option or missing value: %s", opt);
		if (!strcmp(opt, "--server-cpu")) {
			errno = 0;
			cpu = strtol(argv[++i], &end, 10);
			if (errno || *end || cpu < -1 || cpu >= CPU_SETSIZE)
				shunt_bench_die(0, "--server-cpu: '%s' is not a cpu", argv[i]);
			a->server_cpu = (int)cpu;
		} else if (!strcmp(opt, "--ring-bytes")) {
			if (shunt_bench_parse_size(argv[++i], &a->ring_bytes) < 0 ||
			    a->ring_bytes < 4096 || a->ring_bytes > (1u << 30) ||
			    (a->ring_bytes & (a->ring_bytes - 1)))
				shunt_bench_die(0, "--ring-bytes: '%s' is not a power of two in [4k, 1G]",
						argv[i]);
		} else if (!strcmp(opt, "--copy")) {
			const char *v = argv[++i];

			if (!strcmp(v, "nt"))
				a->nt = 1;
			else if (strcmp(v, "memcpy"))
				shunt_bench_die(0, "--copy: '%s' is neither memcpy nor nt", v);
#if !defined(__x86_64__)
			if (a->nt)
				shunt_bench_die(0, "--copy nt is implemented for x86-64 only");
#endif
		} else if (!strcmp(opt, "--chunk")) {
			if (shunt_bench_parse_size(argv[++i], &a->chunk) < 0 ||
			    a->chunk == 0)
				shunt_bench_die(0, "--chunk: '%s' is not a size", argv[i]);
		} else {
			shunt_bench_die(0, "unknown option %s (try --help)", opt);
		}
	}
	snprintf(a->extra, sizeof(a->extra),
		 "\"ring_bytes\":%" PRIu64 ",\"chunk\":%" PRIu64 ",\"copy\":\"%s\","
		 "\"server_cpu\":%d",
		 a->ring_bytes, a->chunk, a->nt ? "nt" : "memcpy", a->server_cpu);
}

int main(int argc, char **argv)
{
	struct shm_args a;
	struct shm_region *r;
	uint64_t data_off, len;
	pid_t pid, parent;
	int fd;

	parse_args(&a, argc, argv);
	data_off = (sizeof(*r) + 4095) & ~(uint64_t)4095;
	len = data_off + 2 * a.ring_bytes;

	fd = memfd_create("shmring", MFD_CLOEXEC);
	if (fd < 0)
		shunt_bench_die(errno, "memfd_create");
	if (ftruncate(fd, (off_t)len) < 0)
		shunt_bench_die(errno, "ftruncate memfd to %" PRIu64 " bytes", len);
	r = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
		 fd, 0);
	if (r == MAP_FAILED)
		shunt_bench_die(errno, "mmap %" PRIu64 " bytes", len);
	close(fd);
	r->version = SHM_VERSION;
	r->ring_bytes = a.ring_bytes;
	r->data_off = data_off;

	/* Flush stdio before fork so nothing buffered is written twice. */
	fflush(NULL);
	parent = getpid();
	pid = fork();
	if (pid < 0)
		shunt_bench_die(errno, "fork");
	if (pid == 0) {
		/* Never outlive the client, which would leave a core spinning. */
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
			shunt_bench_die(errno, "prctl(PR_SET_PDEATHSIG)");
		if (getppid() != parent)
			_exit(1); /* the client is already gone */
		_exit(run_server(r, &a));
	}
	return run_client(r, &a, pid);
}
