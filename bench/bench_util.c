// SPDX-License-Identifier: MIT
/*
 * Shared helpers for the core benchmark programs: clock, pinning, option
 * parsing, latency statistics and JSON output (see bench_util.h).
 */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *prog_name(void)
{
	return program_invocation_short_name;
}

uint64_t shunt_bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SHUNT_BENCH_NSEC + (uint64_t)ts.tv_nsec;
}

void shunt_bench_die(int err, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog_name());
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (err)
		fprintf(stderr, ": %s", strerror(err));
	fputc('\n', stderr);
	exit(1);
}

void shunt_bench_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	if (cpu >= CPU_SETSIZE)
		shunt_bench_die(0, "cpu %d out of range", cpu);
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		shunt_bench_die(errno, "sched_setaffinity to cpu %d", cpu);
}

int shunt_bench_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	default: break;
	}
	if (shift && (!strcmp(end, "iB") || !strcmp(end, "B")))
		end += strlen(end);
	if (*end)
		return -EINVAL;
	if (v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

static uint64_t parse_seconds(const char *opt, const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || v < 0 || v > 3600)
		shunt_bench_die(0, "%s: '%s' is not a number of seconds in [0, 3600]",
				opt, s);
	return (uint64_t)(v * 1e9);
}

void shunt_bench_opts_init(struct shunt_bench_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->mode = SHUNT_BENCH_RTT;
	o->size = 8;
	o->duration_ns = SHUNT_BENCH_NSEC;
	o->warmup_ns = SHUNT_BENCH_NSEC / 5;
	o->cpu = -1;
}

int shunt_bench_parse_common(struct shunt_bench_opts *o, int argc,
			     char **argv, int *i)
{
	const char *opt = argv[*i];
	const char *val;
	char *end;
	long cpu;

	if (strcmp(opt, "--mode") && strcmp(opt, "--size") &&
	    strcmp(opt, "--count") && strcmp(opt, "--duration") &&
	    strcmp(opt, "--warmup") && strcmp(opt, "--cpu"))
		return 0;
	if (*i + 1 >= argc)
		shunt_bench_die(0, "%s needs a value", opt);
	val = argv[++*i];

	if (!strcmp(opt, "--mode")) {
		if (!strcmp(val, "rtt"))
			o->mode = SHUNT_BENCH_RTT;
		else if (!strcmp(val, "stream"))
			o->mode = SHUNT_BENCH_STREAM;
		else
			shunt_bench_die(0, "--mode: '%s' is neither rtt nor stream", val);
	} else if (!strcmp(opt, "--size")) {
		if (shunt_bench_parse_size(val, &o->size) < 0 || o->size == 0 ||
		    o->size > SHUNT_BENCH_MAX_SIZE)
			shunt_bench_die(0, "--size: '%s' is not a size in [1, 64MiB]", val);
	} else if (!strcmp(opt, "--count")) {
		if (shunt_bench_parse_size(val, &o->count) < 0)
			shunt_bench_die(0, "--count: '%s' is not a count", val);
	} else if (!strcmp(opt, "--duration")) {
		o->duration_ns = parse_seconds(opt, val);
	} else if (!strcmp(opt, "--warmup")) {
		o->warmup_ns = parse_seconds(opt, val);
	} else {
		errno = 0;
		cpu = strtol(val, &end, 10);
		if (errno || end == val || *end || cpu < -1 || cpu >= CPU_SETSIZE)
			shunt_bench_die(0, "--cpu: '%s' is not a cpu number", val);
		o->cpu = (int)cpu;
	}
	return 1;
}

size_t shunt_bench_sample_capacity(const struct shunt_bench_opts *o)
{
	uint64_t n = o->count;

	if (!n)
		n = o->duration_ns / (SHUNT_BENCH_NSEC / SHUNT_BENCH_MAX_RTT_RATE) + 1;
	if (n > SHUNT_BENCH_MAX_SAMPLES)
		n = SHUNT_BENCH_MAX_SAMPLES;
	return (size_t)n;
}

long shunt_bench_raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			return -errno;
	}
	return rl.rlim_cur > (rlim_t)LONG_MAX ? LONG_MAX : (long)rl.rlim_cur;
}

void shunt_bench_ready_file(const char *path)
{
	int fd;

	if (!path)
		return;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		shunt_bench_die(errno, "creating %s", path);
	close(fd);
}

void *shunt_bench_alloc(size_t n)
{
	void *p;

	if (!n)
		n = 1;
	p = aligned_alloc(4096, (n + 4095) & ~(size_t)4095);
	if (!p)
		shunt_bench_die(ENOMEM, "allocating %zu bytes", n);
	/* Fault every page in now and keep it resident (best effort: the
	 * default RLIMIT_MEMLOCK may be too small, and that is fine). */
	memset(p, 0, n);
	(void)mlock(p, n);
	return p;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted samples, q in (0, 1]. */
static double percentile(const uint32_t *sorted, size_t n, double q)
{
	size_t rank = (size_t)(q * (double)n + 0.999999);

	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return sorted[rank - 1];
}

void shunt_bench_rtt_summary(uint32_t *samples, size_t n, double seconds,
			     struct shunt_bench_rtt *r)
{
	double sum = 0;
	size_t i;

	memset(r, 0, sizeof(*r));
	r->iterations = n;
	r->seconds = seconds;
	if (!n)
		return;
	qsort(samples, n, sizeof(*samples), cmp_u32);
	for (i = 0; i < n; i++)
		sum += samples[i];
	r->mean = sum / (double)n;
	r->min = samples[0];
	r->max = samples[n - 1];
	r->p50 = percentile(samples, n, 0.50);
	r->p90 = percentile(samples, n, 0.90);
	r->p99 = percentile(samples, n, 0.99);
	r->p999 = percentile(samples, n, 0.999);
}

static void print_head(const struct shunt_bench_id *id,
		       const struct shunt_bench_opts *o)
{
	printf("{\"tool\":\"%s\",\"transport\":\"%s\",\"role\":\"%s\","
	       "\"mode\":\"%s\",\"size\":%" PRIu64 ",\"cpu\":%d,",
	       id->tool, id->transport, id->role,
	       o->mode == SHUNT_BENCH_RTT ? "rtt" : "stream", o->size, o->cpu);
	if (id->extra && *id->extra)
		printf("%s,", id->extra);
}

void shunt_bench_print_rtt(const struct shunt_bench_id *id,
			   const struct shunt_bench_opts *o,
			   const struct shunt_bench_rtt *r)
{
	print_head(id, o);
	printf("\"iterations\":%" PRIu64 ",\"seconds\":%.6f,"
	       "\"rtt_ns\":{\"mean\":%.1f,\"min\":%.0f,\"p50\":%.0f,\"p90\":%.0f,"
	       "\"p99\":%.0f,\"p999\":%.0f,\"max\":%.0f}}\n",
	       r->iterations, r->seconds, r->mean, r->min, r->p50, r->p90,
	       r->p99, r->p999, r->max);
	fflush(stdout);
}

void shunt_bench_print_echo(const struct shunt_bench_id *id,
			    const struct shunt_bench_opts *o,
			    uint64_t iterations)
{
	print_head(id, o);
	printf("\"iterations\":%" PRIu64 "}\n", iterations);
	fflush(stdout);
}

void shunt_bench_print_stream(const struct shunt_bench_id *id,
			      const struct shunt_bench_opts *o,
			      const struct shunt_bench_stream *s)
{
	double secs = (double)s->ns_measured / 1e9;
	double ssecs = (double)s->sender_ns / 1e9;
	double msgs = (double)s->bytes_measured / (double)o->size;

	print_head(id, o);
	printf("\"bytes_total\":%" PRIu64 ",\"bytes\":%" PRIu64 ","
	       "\"seconds\":%.6f,\"messages\":%.0f,\"msgs_per_s\":%.1f,"
	       "\"mb_per_s\":%.3f,\"bytes_match\":%s,"
	       "\"sender\":{\"bytes\":%" PRIu64 ",\"messages\":%" PRIu64 ","
	       "\"seconds\":%.6f,\"msgs_per_s\":%.1f}}\n",
	       s->bytes_total, s->bytes_measured, secs, msgs,
	       secs > 0 ? msgs / secs : 0.0,
	       secs > 0 ? (double)s->bytes_measured / secs / 1e6 : 0.0,
	       s->sender_bytes == s->bytes_total ? "true" : "false",
	       s->sender_bytes, s->sender_msgs, ssecs,
	       ssecs > 0 ? (double)s->sender_msgs / ssecs : 0.0);
	fflush(stdout);
}
