// SPDX-License-Identifier: MIT
/*
 * pp: sockperf-like ping-pong and one-way stream benchmark over plain POSIX
 * stream sockets (TCP on 127.0.0.1 or a Unix socket path). It uses nothing but
 * blocking socket calls so that it runs unmodified under `shunt run`.
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
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/*
 * Wire format of the setup message (client to server, once, before any data)
 * and of the stream result (server to client after EOF). Both ends run on the
 * same host from the same build, so fields travel in host byte order.
 */
enum {
	PP_MAGIC = 0x50505348, /* "HSPP" */
	PP_VERSION = 1,
};

struct pp_hello {
	uint32_t magic;
	uint32_t version;
	uint32_t mode; /* enum shunt_bench_mode */
	uint32_t reserved;
	uint64_t size;
	uint64_t warmup_ns; /* receiver-side warm-up in stream mode */
};

struct pp_result {
	uint64_t bytes_total;
	uint64_t bytes_measured;
	uint64_t ns_measured;
};

_Static_assert(sizeof(struct pp_hello) == 32, "pp_hello layout");
_Static_assert(sizeof(struct pp_result) == 24, "pp_result layout");

enum pp_transport { PP_TCP, PP_UNIX };

struct pp_args {
	struct shunt_bench_opts o;
	int server;
	enum pp_transport transport;
	const char *host;
	uint16_t port;
	const char *path;
	const char *ready_file;
	uint64_t connect_timeout_ns;
	uint64_t gap_ns;	/* rtt client: idle this long before each round trip */
};

static struct shunt_bench_id result_id(const struct pp_args *a)
{
	struct shunt_bench_id id = {
		.tool = "pp",
		.transport = a->transport == PP_TCP ? "tcp" : "unix",
		.role = a->server ? "server" : "client",
	};
	return id;
}

/* Send all n bytes; dies on error (a benchmark has no partial success). */
static void send_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	ssize_t r;

	while (n) {
		r = send(fd, p, n, MSG_NOSIGNAL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			shunt_bench_die(errno, "send of %zu bytes", n);
		}
		p += r;
		n -= (size_t)r;
	}
}

/* Receive exactly n bytes. Returns n, or 0 on EOF before the first byte;
 * dies on error or on EOF in the middle of a message. */
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
			shunt_bench_die(0, "peer closed after %zu of %zu bytes",
					got, n);
		}
		got += (size_t)r;
	}
	return n;
}

static void set_nodelay(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		shunt_bench_die(errno, "setsockopt TCP_NODELAY");
}

static socklen_t make_addr(const struct pp_args *a,
			   struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (a->transport == PP_TCP) {
		struct sockaddr_in *sin = (struct sockaddr_in *)ss;

		sin->sin_family = AF_INET;
		sin->sin_port = htons(a->port);
		if (inet_pton(AF_INET, a->host, &sin->sin_addr) != 1)
			shunt_bench_die(0, "--host: '%s' is not an IPv4 address",
					a->host);
		return sizeof(*sin);
	} else {
		struct sockaddr_un *sun = (struct sockaddr_un *)ss;

		if (strlen(a->path) >= sizeof(sun->sun_path))
			shunt_bench_die(0, "--path: '%s' is longer than %zu bytes",
					a->path, sizeof(sun->sun_path) - 1);
		sun->sun_family = AF_UNIX;
		strcpy(sun->sun_path, a->path);
		return sizeof(*sun);
	}
}

/* Tell whoever started us that listen() has returned: under shunt that also
 * means the listener is registered with the daemon, so a connect from now on
 * finds it (one made earlier may legitimately go to the kernel). */
static void signal_ready(const struct pp_args *a)
{
	int fd;

	if (!a->ready_file)
		return;
	fd = open(a->ready_file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		shunt_bench_die(errno, "creating %s", a->ready_file);
	close(fd);
}

/* Listen, accept exactly one connection, close the listener. */
static int accept_one(const struct pp_args *a)
{
	struct sockaddr_storage ss;
	socklen_t len = make_addr(a, &ss);
	int one = 1;
	int lfd, fd;

	lfd = socket(ss.ss_family, SOCK_STREAM, 0);
	if (lfd < 0)
		shunt_bench_die(errno, "socket");
	if (a->transport == PP_TCP &&
	    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		shunt_bench_die(errno, "setsockopt SO_REUSEADDR");
	if (a->transport == PP_UNIX)
		unlink(a->path);
	if (bind(lfd, (struct sockaddr *)&ss, len) < 0)
		shunt_bench_die(errno, "bind to %s",
				a->transport == PP_TCP ? "tcp port" : a->path);
	if (listen(lfd, 1) < 0)
		shunt_bench_die(errno, "listen");
	signal_ready(a);
	do
		fd = accept(lfd, NULL, NULL);
	while (fd < 0 && errno == EINTR);
	if (fd < 0)
		shunt_bench_die(errno, "accept");
	close(lfd);
	if (a->transport == PP_UNIX)
		unlink(a->path);
	else
		set_nodelay(fd);
	return fd;
}

/* Connect, retrying while the server is not listening yet (the driver
 * starts both ends at once). */
static int connect_retry(const struct pp_args *a)
{
	struct sockaddr_storage ss;
	socklen_t len = make_addr(a, &ss);
	uint64_t deadline = shunt_bench_now_ns() + a->connect_timeout_ns;
	struct timespec pause = { 0, 5 * 1000 * 1000 };
	int fd;

	for (;;) {
		fd = socket(ss.ss_family, SOCK_STREAM, 0);
		if (fd < 0)
			shunt_bench_die(errno, "socket");
		if (connect(fd, (struct sockaddr *)&ss, len) == 0)
			break;
		if ((errno != ECONNREFUSED && errno != ENOENT &&
		     errno != EINTR) || shunt_bench_now_ns() > deadline)
			shunt_bench_die(errno, "connect to %s",
					a->transport == PP_TCP ? a->host : a->path);
		close(fd);
		nanosleep(&pause, NULL);
	}
	if (a->transport == PP_TCP)
		set_nodelay(fd);
	return fd;
}

static void server_rtt(const struct pp_args *a, int fd)
{
	struct shunt_bench_id id = result_id(a);
	char *buf = shunt_bench_alloc(a->o.size);
	uint64_t n = 0;

	while (recv_all(fd, buf, a->o.size)) {
		send_all(fd, buf, a->o.size);
		n++;
	}
	shunt_bench_print_echo(&id, &a->o, n);
	free(buf);
}

/* Count bytes until EOF. The measured window opens warmup_ns after the first
 * byte and closes at EOF, which the sender issues only after its last message:
 * every byte counted arrived inside the window. */
static void server_stream(const struct pp_args *a, int fd, uint64_t warmup_ns)
{
	size_t cap = a->o.size > SHUNT_BENCH_RECV_CHUNK ? a->o.size
							  : SHUNT_BENCH_RECV_CHUNK;
	char *buf = shunt_bench_alloc(cap);
	struct shunt_bench_id id = result_id(a);
	struct shunt_bench_stream s = { 0 };
	struct pp_result res;
	uint64_t t_first = 0, t_start = 0, t_end, now;
	ssize_t r;

	for (;;) {
		r = recv(fd, buf, cap, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			shunt_bench_die(errno, "recv");
		}
		if (r == 0)
			break;
		s.bytes_total += (uint64_t)r;
		if (t_start) {
			s.bytes_measured += (uint64_t)r;
			continue;
		}
		now = shunt_bench_now_ns();
		if (!t_first)
			t_first = now;
		if (now - t_first >= warmup_ns)
			t_start = now;
	}
	t_end = shunt_bench_now_ns();
	s.ns_measured = t_start ? t_end - t_start : 0;

	res.bytes_total = s.bytes_total;
	res.bytes_measured = s.bytes_measured;
	res.ns_measured = s.ns_measured;
	send_all(fd, &res, sizeof(res));
	s.sender_bytes = s.bytes_total; /* unknown here; the client checks */
	shunt_bench_print_stream(&id, &a->o, &s);
	free(buf);
}

static int run_server(struct pp_args *a)
{
	struct pp_hello h;
	int fd = accept_one(a);

	if (!recv_all(fd, &h, sizeof(h)))
		shunt_bench_die(0, "client closed before the setup message");
	if (h.magic != PP_MAGIC || h.version != PP_VERSION)
		shunt_bench_die(0, "bad setup message (magic %#x version %u)",
				h.magic, h.version);
	if ((h.mode != SHUNT_BENCH_RTT && h.mode != SHUNT_BENCH_STREAM) ||
	    h.size == 0 || h.size > SHUNT_BENCH_MAX_SIZE)
		shunt_bench_die(0, "bad setup message (mode %u size %" PRIu64 ")",
				h.mode, h.size);
	a->o.mode = h.mode;
	a->o.size = h.size;
	if (a->o.mode == SHUNT_BENCH_RTT)
		server_rtt(a, fd);
	else
		server_stream(a, fd, h.warmup_ns);
	close(fd);
	return 0;
}

/* One round trip; the first bytes carry the sequence number and must come
 * back unchanged (a cheap check that the transport delivers what was sent). */
static void one_rtt(int fd, char *out, char *in, size_t size, uint64_t seq)
{
	size_t tag = size < sizeof(seq) ? size : sizeof(seq);

	memcpy(out, &seq, tag);
	send_all(fd, out, size);
	if (!recv_all(fd, in, size))
		shunt_bench_die(0, "server closed during round trip %" PRIu64, seq);
	if (memcmp(out, in, tag))
		shunt_bench_die(0, "round trip %" PRIu64 " came back corrupted", seq);
}

static void client_rtt(const struct pp_args *a, int fd)
{
	const struct shunt_bench_opts *o = &a->o;
	size_t cap = shunt_bench_sample_capacity(o);
	uint32_t *samples = shunt_bench_alloc(cap * sizeof(*samples));
	char *out = shunt_bench_alloc(o->size);
	char *in = shunt_bench_alloc(o->size);
	struct shunt_bench_id id = result_id(a);
	struct shunt_bench_rtt r;
	uint64_t seq = 0, t_start, prev, now, d;
	size_t n = 0;

	memset(out, 0x5a, o->size);
	now = shunt_bench_now_ns();
	for (t_start = now + o->warmup_ns; now < t_start; now = shunt_bench_now_ns())
		one_rtt(fd, out, in, o->size, seq++);

	t_start = prev = shunt_bench_now_ns();
	while (n < cap) {
		if (a->gap_ns) {
			/* Let the server fall asleep: the round trip then includes its wake-up. */
			struct timespec ts = { (time_t)(a->gap_ns / 1000000000),
					       (long)(a->gap_ns % 1000000000) };

			nanosleep(&ts, NULL);
			prev = shunt_bench_now_ns();
		}
		one_rtt(fd, out, in, o->size, seq++);
		now = shunt_bench_now_ns();
		d = now - prev;
		samples[n++] = d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
		prev = now;
		if (o->count ? n >= o->count : now - t_start >= o->duration_ns)
			break;
	}
	shunt_bench_rtt_summary(samples, n, (double)(prev - t_start) / 1e9, &r);
	shunt_bench_print_rtt(&id, o, &r);
	free(in);
	free(out);
	free(samples);
}

static void client_stream(const struct pp_args *a, int fd)
{
	const struct shunt_bench_opts *o = &a->o;
	char *buf = shunt_bench_alloc(o->size);
	/* Read the clock every message for large ones, every 64 for small
	 * ones, where it would otherwise be a visible share of the cost. */
	uint64_t mask = o->size >= 4096 ? 0 : 63;
	uint64_t msgs = 0, sent = 0, now, t_start, t_stop;
	struct shunt_bench_id id = result_id(a);
	struct shunt_bench_stream s = { 0 };
	struct pp_result res;

	memset(buf, 0x5a, o->size);
	now = shunt_bench_now_ns();
	for (t_start = now + o->warmup_ns; now < t_start; now = shunt_bench_now_ns()) {
		send_all(fd, buf, o->size);
		sent++;
	}
	t_start = now;
	t_stop = t_start + o->duration_ns;
	for (;;) {
		send_all(fd, buf, o->size);
		msgs++;
		if (o->count) {
			if (msgs >= o->count)
				break;
		} else if (!(msgs & mask) && shunt_bench_now_ns() >= t_stop) {
			break;
		}
	}
	now = shunt_bench_now_ns();
	/* Half-close so the server sees EOF right after the last byte, then
	 * wait for its numbers: the handshake that closes the window. */
	if (shutdown(fd, SHUT_WR) < 0)
		shunt_bench_die(errno, "shutdown(SHUT_WR)");
	if (!recv_all(fd, &res, sizeof(res)))
		shunt_bench_die(0, "server closed without sending its result");

	s.bytes_total = res.bytes_total;
	s.bytes_measured = res.bytes_measured;
	s.ns_measured = res.ns_measured;
	s.sender_bytes = (sent + msgs) * o->size;
	s.sender_msgs = msgs;
	s.sender_ns = now - t_start;
	shunt_bench_print_stream(&id, o, &s);
	if (s.sender_bytes != s.bytes_total)
		shunt_bench_die(0, "sent %" PRIu64 " bytes but the server received %" PRIu64,
				s.sender_bytes, s.bytes_total);
	free(buf);
}

static int run_client(struct pp_args *a)
{
	struct pp_hello h = {
		.magic = PP_MAGIC,
		.version = PP_VERSION,
		.mode = a->o.mode,
		.size = a->o.size,
		.warmup_ns = a->o.warmup_ns,
	};
	int fd = connect_retry(a);

	send_all(fd, &h, sizeof(h));
	if (a->o.mode == SHUNT_BENCH_RTT)
		client_rtt(a, fd);
	else
		client_stream(a, fd);
	close(fd);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: pp server|client [options]\n"
"  --transport tcp|unix   default tcp\n"
"  --host ADDR            IPv4 address for tcp (default 127.0.0.1)\n"
"  --port N               tcp port (default 7777)\n"
"  --path PATH            unix socket path (required for unix)\n"
"  --mode rtt|stream      client only; the server follows the client\n"
"  --size N[k|M]          message size in bytes (default 8)\n"
"  --duration SEC         measured phase (default 1)\n"
"  --count N              measured iterations/messages instead of duration\n"
"  --warmup SEC           unmeasured phase before it (default 0.2)\n"
"  --cpu N                pin to this CPU (default: not pinned)\n"
"  --connect-timeout SEC  client: retry connect this long (default 10)\n"
"  --ready-file PATH      server: create PATH once listen() has returned\n"
"  --gap-us N             rtt client: sleep N us before each round trip, so the\n"
"                         server is asleep when the request arrives\n"
"Prints one JSON object on stdout.\n");
}

static void parse_args(struct pp_args *a, int argc, char **argv)
{
	int i;
	char *end;
	unsigned long port;

	memset(a, 0, sizeof(*a));
	shunt_bench_opts_init(&a->o);
	a->transport = PP_TCP;
	a->host = "127.0.0.1";
	a->port = 7777;
	a->connect_timeout_ns = 10 * SHUNT_BENCH_NSEC;

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
		if (i + 1 >= argc)
			shunt_bench_die(0, "unknown option or missing value: %s", opt);
		if (!strcmp(opt, "--transport")) {
			const char *v = argv[++i];

			if (!strcmp(v, "tcp"))
				a->transport = PP_TCP;
			else if (!strcmp(v, "unix"))
				a->transport = PP_UNIX;
			else
				shunt_bench_die(0, "--transport: '%s' is neither tcp nor unix", v);
		} else if (!strcmp(opt, "--host")) {
			a->host = argv[++i];
		} else if (!strcmp(opt, "--port")) {
			errno = 0;
			port = strtoul(argv[++i], &end, 10);
			if (errno || *end || port == 0 || port > 65535)
				shunt_bench_die(0, "--port: '%s' is not a port", argv[i]);
			a->port = (uint16_t)port;
		} else if (!strcmp(opt, "--path")) {
			a->path = argv[++i];
		} else if (!strcmp(opt, "--ready-file")) {
			a->ready_file = argv[++i];
		} else if (!strcmp(opt, "--gap-us")) {
			a->gap_ns = strtoull(argv[++i], NULL, 10) * 1000;
		} else if (!strcmp(opt, "--connect-timeout")) {
			double v = strtod(argv[++i], &end);

			if (*end || v < 0 || v > 3600)
				shunt_bench_die(0, "--connect-timeout: '%s' is not seconds", argv[i]);
			a->connect_timeout_ns = (uint64_t)(v * 1e9);
		} else {
			shunt_bench_die(0, "unknown option %s (try --help)", opt);
		}
	}
	if (a->transport == PP_UNIX && !a->path)
		shunt_bench_die(0, "--transport unix needs --path");
}

int main(int argc, char **argv)
{
	struct pp_args a;

	parse_args(&a, argc, argv);
	/* send() uses MSG_NOSIGNAL; this also covers anything it misses. */
	signal(SIGPIPE, SIG_IGN);
	shunt_bench_pin(a.o.cpu);
	return a.server ? run_server(&a) : run_client(&a);
}
