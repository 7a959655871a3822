/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers for the benchmark programs (pp, shmring, epoll_echo): clock,
 * CPU pinning, argument parsing, latency statistics and the one-line JSON
 * report.
 * Deliberately independent of src/: the benchmarks must measure shunt from
 * the outside, like any unmodified program.
 */
#ifndef SHUNT_BENCH_UTIL_H
#define SHUNT_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

enum shunt_bench_mode {
	SHUNT_BENCH_RTT = 1,    /* ping-pong: send size, wait for size back */
	SHUNT_BENCH_STREAM = 2, /* one-way: one send per message, receiver counts */
};

/* Nanoseconds per second; a macro so that it is 64-bit in any expression. */
#define SHUNT_BENCH_NSEC 1000000000ull

enum {
	/* Largest message the programs accept; the driver goes up to 1 MiB. */
	SHUNT_BENCH_MAX_SIZE = 64u << 20,
	/* The receiver reads with buffers of at least this many bytes. */
	SHUNT_BENCH_RECV_CHUNK = 64u << 10,
	/* Cap on recorded round trips (4 bytes each): 64 MiB of samples. */
	SHUNT_BENCH_MAX_SAMPLES = 16u << 20,
	/* Assumed best-case round trips per second, to size the sample buffer. */
	SHUNT_BENCH_MAX_RTT_RATE = 10000000u,
};

/* Parameters common to every benchmark program, filled by
 * shunt_bench_parse_common(); counts of 0 mean "not given". */
struct shunt_bench_opts {
	enum shunt_bench_mode mode;
	uint64_t size;        /* message size in bytes */
	uint64_t count;       /* measured iterations/messages; 0: use duration */
	uint64_t duration_ns; /* measured phase length */
	uint64_t warmup_ns;   /* unmeasured phase before it */
	int cpu;              /* CPU to pin to, -1: do not pin */
};

/* Latency summary of a run of round trips, all in nanoseconds. */
struct shunt_bench_rtt {
	uint64_t iterations;
	double seconds; /* wall time of the measured phase */
	double mean, min, p50, p90, p99, p999, max;
};

/* Throughput as seen by the receiver over its measured window. */
struct shunt_bench_stream {
	uint64_t bytes_total;    /* everything received, warm-up included */
	uint64_t bytes_measured; /* received inside the measured window */
	uint64_t ns_measured;    /* length of the measured window */
	uint64_t sender_bytes;   /* what the sender says it sent */
	uint64_t sender_ns;      /* sender's own measured phase */
	uint64_t sender_msgs;
};

/* CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall with a TSC clocksource). */
uint64_t shunt_bench_now_ns(void);

/* Print "prog: what: strerror(err)" to stderr and exit(1). err is a positive
 * errno or 0 for none. Benchmarks have nothing to clean up that exit() would
 * not, so failing loudly and at once is the whole policy. */
__attribute__((noreturn, format(printf, 2, 3)))
void shunt_bench_die(int err, const char *fmt, ...);

/* Pin the calling thread to cpu (no-op for cpu < 0); dies on failure. */
void shunt_bench_pin(int cpu);

/* Parse "123", "4k", "64KiB", "1M", "1MiB" (binary multiples). Returns 0 and
 * stores the value, or -EINVAL. */
int shunt_bench_parse_size(const char *s, uint64_t *out);

/* Fill o with the defaults: rtt, 8 bytes, 1 s measured after 0.2 s warm-up,
 * not pinned. */
void shunt_bench_opts_init(struct shunt_bench_opts *o);

/* Try to consume argv[*i] (and its value) as one of the common options:
 * --mode --size --count --duration --warmup --cpu. Returns 1 if consumed
 * (advancing *i to the value), 0 if the option is not a common one, and dies
 * with a message on a bad value. */
int shunt_bench_parse_common(struct shunt_bench_opts *o, int argc,
			     char **argv, int *i);

/* Number of samples to allocate for an rtt run described by o. */
size_t shunt_bench_sample_capacity(const struct shunt_bench_opts *o);

/* Raise the soft RLIMIT_NOFILE to the hard limit (never lowers it): a
 * program with thousands of connections needs more than the usual 1024.
 * Returns the soft limit now in force (capped at LONG_MAX), or -errno. */
long shunt_bench_raise_nofile(void);

/* Create (or truncate) path, to tell the driver that a server's listen() has
 * returned; no-op for a NULL path, dies on failure. */
void shunt_bench_ready_file(const char *path);

/* Allocate and pre-fault n zeroed bytes aligned to 4096 so that the first
 * touch never lands inside a measured phase; dies on failure. */
void *shunt_bench_alloc(size_t n);

/* Sort samples[0..n) in place and summarise them into r (n may be 0).
 * seconds is the wall time of the measured phase. */
void shunt_bench_rtt_summary(uint32_t *samples, size_t n, double seconds,
			     struct shunt_bench_rtt *r);

/* Identify a result: tool/transport/role are short identifiers without
 * characters that need escaping; extra is NULL or more members of the JSON
 * object, already formatted ("\"ring_bytes\":4096"). */
struct shunt_bench_id {
	const char *tool;
	const char *transport;
	const char *role;
	const char *extra;
};

/* Write the result as one JSON object followed by a newline on stdout:
 * rtt statistics (client), the echo count (rtt server), or stream numbers. */
void shunt_bench_print_rtt(const struct shunt_bench_id *id,
			   const struct shunt_bench_opts *o,
			   const struct shunt_bench_rtt *r);
void shunt_bench_print_echo(const struct shunt_bench_id *id,
			    const struct shunt_bench_opts *o,
			    uint64_t iterations);
void shunt_bench_print_stream(const struct shunt_bench_id *id,
			      const struct shunt_bench_opts *o,
			      const struct shunt_bench_stream *s);

#endif
