// SPDX-License-Identifier: MIT
/*
 * conn: what a connection costs to make and to keep, over plain POSIX
 * calls (so that it runs unmodified under `shunt run`); bench/connect.py
 * drives it.
 *
 *   conn server --port P [--workers N] [--fork 1] [--ready-file F]
 *       accepts; per connection reads 1 byte, echoes it, closes (with
 *       --workers N, N forked processes accept on one listener, prefork;
 *       with --fork 1, a child forked per connection closes the listener
 *       and answers, as PostgreSQL's postmaster and inetd do).
 *   conn loop --port P --count N
 *       N times: socket, connect, write 1, read 1, close; each phase timed.
 *   conn burst --port P --count N
 *       N connects at once (each echoes once), then every close.
 *   conn hold --port P --count N --bytes B [--ready-file F] [--gate 1]
 *       N connections, each carries B bytes once each way, then stays open
 *       and idle until stdin closes (memory at rest; the server must be
 *       `conn sink`). With --gate 1 it first waits for a byte on stdin, so
 *       that a driver can measure it before it connects (bench/memory.py).
 *   conn sink --port P [--ready-file F]
 *       a poll() server for hold: echoes whatever comes, keeps connections.
 *   conn spawn --port P --count N
 *       N times, one after another: fork, and in the child exec this
 *       program as `loop --count 1` (one connection, as a health check or a
 *       CGI client makes); the parent waits for it. Under `shunt run` each
 *       child is a new process of the library: it starts, says HELLO, gets
 *       its channel, connects once and exits. Reports the wall time and
 *       the children's CPU time (getrusage) per process.
 *   conn spawn --port P --count N --connect 0
 *       the same, but each child execs this program as `exit`, which makes
 *       no connection and returns: what the library costs a process that
 *       never uses a socket (a shell script's commands), the floor under
 *       the spawn shape.
 *   conn exit
 *       returns 0 at once.
 *
 * Prints one JSON object on stdout.
 */
#include "bench_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

struct conn_args {
	const char *mode;
	uint16_t port;
	uint64_t count;
	uint64_t bytes;
	int workers;
	const char *ready_file;
	bool gate;
	bool connect;	/* spawn: whether each child connects */
	bool fork;	/* server: a child per connection */
};

static struct sockaddr_in server_addr(uint16_t port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

static void io_all(int fd, void *buf, size_t n, bool out)
{
	char *p = buf;

	while (n) {
		ssize_t r = out ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			shunt_bench_die(r < 0 ? errno : 0, "%s on fd %d", out ? "send" : "recv (EOF)", fd);
		p += r;
		n -= (size_t)r;
	}
}

static int listen_on(uint16_t port, int backlog)
{
	struct sockaddr_in a = server_addr(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		shunt_bench_die(errno, "socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		shunt_bench_die(errno, "bind 127.0.0.1:%u", port);
	if (listen(fd, backlog) < 0)
		shunt_bench_die(errno, "listen");
	return fd;
}

static int connect_to(uint16_t port)
{
	struct sockaddr_in a = server_addr(port);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	if (fd < 0)
		shunt_bench_die(errno, "socket");
	while (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (errno != EINTR)
			shunt_bench_die(errno, "connect 127.0.0.1:%u", port);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* The next connection on @lfd, past interruptions and connections reset while queued. */
static int accept_next(int lfd)
{
	for (;;) {
		int fd = accept(lfd, NULL, NULL);

		if (fd >= 0)
			return fd;
		if (errno != EINTR && errno != ECONNABORTED)
			shunt_bench_die(errno, "accept");
	}
}

/* Read 1 byte, echo it, close. */
static void echo1(int fd)
{
	char c;

	if (recv(fd, &c, 1, 0) == 1)
		send(fd, &c, 1, MSG_NOSIGNAL);
	close(fd);
}

/* One worker: accept, read 1, write 1, close, forever. */
static void serve_echo1(int lfd)
{
	for (;;)
		echo1(accept_next(lfd));
}

/* A child per connection: it closes the listener, answers and exits; we reap. */
static void serve_forked(int lfd)
{
	for (;;) {
		int fd = accept_next(lfd);
		pid_t pid = fork();

		if (pid < 0)
			shunt_bench_die(errno, "fork");
		if (pid == 0) {
			close(lfd);
			echo1(fd);
			_exit(0);
		}
		close(fd);
		while (waitpid(-1, NULL, WNOHANG) > 0)
			;
	}
}

static int run_server(const struct conn_args *a)
{
	int lfd = listen_on(a->port, 4096);
	pid_t *kids;

	if (a->fork) {
		if (a->ready_file)
			shunt_bench_ready_file(a->ready_file);
		serve_forked(lfd);
	}
	if (a->workers <= 1) {
		if (a->ready_file)
			shunt_bench_ready_file(a->ready_file);
		serve_echo1(lfd);
	}
	kids = calloc((size_t)a->workers, sizeof(*kids));
	for (int i = 0; i < a->workers; i++) {
		kids[i] = fork();
		if (kids[i] < 0)
			shunt_bench_die(errno, "fork");
		if (kids[i] == 0)
			serve_echo1(lfd);
	}
	if (a->ready_file)
		shunt_bench_ready_file(a->ready_file);
	/* SIGTERM ends us; our workers go with us. */
	signal(SIGTERM, SIG_DFL);
	for (;;) {
		sigset_t s;
		int sig;

		sigemptyset(&s);
		sigaddset(&s, SIGTERM);
		sigaddset(&s, SIGINT);
		sigprocmask(SIG_BLOCK, &s, NULL);
		sigwait(&s, &sig);
		for (int i = 0; i < a->workers; i++)
			kill(kids[i], SIGKILL);
		while (wait(NULL) > 0)
			;
		return 0;
	}
}

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return a < b ? -1 : a > b;
}

static void print_phase(const char *name, uint32_t *v, uint64_t n, bool comma)
{
	double sum = 0;

	qsort(v, n, sizeof(*v), cmp_u32);
	for (uint64_t i = 0; i < n; i++)
		sum += v[i];
	printf("\"%s\":{\"mean_us\":%.3f,\"p50_us\":%.3f,\"p99_us\":%.3f}%s", name,
	       sum / (double)n / 1000.0, v[n / 2] / 1000.0, v[n * 99 / 100] / 1000.0,
	       comma ? "," : "");
}

static int run_loop(const struct conn_args *a)
{
	uint32_t *t_conn = shunt_bench_alloc(a->count * sizeof(uint32_t));
	uint32_t *t_echo = shunt_bench_alloc(a->count * sizeof(uint32_t));
	uint32_t *t_close = shunt_bench_alloc(a->count * sizeof(uint32_t));
	uint64_t start = shunt_bench_now_ns();

	for (uint64_t i = 0; i < a->count; i++) {
		uint64_t t0 = shunt_bench_now_ns(), t1, t2, t3;
		int fd = connect_to(a->port);
		char c = (char)i;

		t1 = shunt_bench_now_ns();
		io_all(fd, &c, 1, true);
		io_all(fd, &c, 1, false);
		t2 = shunt_bench_now_ns();
		close(fd);
		t3 = shunt_bench_now_ns();
		t_conn[i] = (uint32_t)(t1 - t0);
		t_echo[i] = (uint32_t)(t2 - t1);
		t_close[i] = (uint32_t)(t3 - t2);
	}
	double secs = (double)(shunt_bench_now_ns() - start) / 1e9;

	printf("{\"tool\":\"conn\",\"mode\":\"loop\",\"count\":%" PRIu64 ",\"seconds\":%.6f,"
	       "\"per_conn_us\":%.3f,\"conns_per_s\":%.1f,", a->count, secs,
	       secs * 1e6 / (double)a->count, (double)a->count / secs);
	print_phase("connect", t_conn, a->count, true);
	print_phase("echo", t_echo, a->count, true);
	print_phase("close", t_close, a->count, false);
	printf("}\n");
	return 0;
}

static int run_burst(const struct conn_args *a)
{
	int *fds = shunt_bench_alloc(a->count * sizeof(int));
	uint64_t t0, t1, t2;

	shunt_bench_raise_nofile();
	t0 = shunt_bench_now_ns();
	for (uint64_t i = 0; i < a->count; i++) {
		char c = (char)i;

		fds[i] = connect_to(a->port);
		io_all(fds[i], &c, 1, true);
		io_all(fds[i], &c, 1, false);
	}
	t1 = shunt_bench_now_ns();
	for (uint64_t i = 0; i < a->count; i++)
		close(fds[i]);
	t2 = shunt_bench_now_ns();
	printf("{\"tool\":\"conn\",\"mode\":\"burst\",\"count\":%" PRIu64 ",\"open_s\":%.6f,"
	       "\"close_s\":%.6f,\"seconds\":%.6f}\n", a->count, (t1 - t0) / 1e9, (t2 - t1) / 1e9,
	       (t2 - t0) / 1e9);
	return 0;
}

/* hold: N connections, B bytes each way once, then idle until stdin closes. */
static int run_hold(const struct conn_args *a)
{
	int *fds = shunt_bench_alloc(a->count * sizeof(int));
	char *buf = shunt_bench_alloc(a->bytes ? a->bytes : 1);

	shunt_bench_raise_nofile();
	memset(buf, 'x', a->bytes);
	if (a->gate && read(0, buf, 1) != 1)
		shunt_bench_die(errno, "the gate on stdin closed before it opened");
	for (uint64_t i = 0; i < a->count; i++) {
		fds[i] = connect_to(a->port);
		io_all(fds[i], buf, a->bytes, true);
		io_all(fds[i], buf, a->bytes, false);
	}
	if (a->ready_file)
		shunt_bench_ready_file(a->ready_file);
	while (read(0, buf, 1) > 0)
		;
	for (uint64_t i = 0; i < a->count; i++)
		close(fds[i]);
	printf("{\"tool\":\"conn\",\"mode\":\"hold\",\"count\":%" PRIu64 ",\"bytes\":%" PRIu64 "}\n",
	       a->count, a->bytes);
	return 0;
}

/* sink: poll() over every connection, echo what comes, keep them open. */
static int run_sink(const struct conn_args *a)
{
	int lfd = listen_on(a->port, 4096);
	size_t cap = 1024, n = 1;
	struct pollfd *p = calloc(cap, sizeof(*p));
	static char buf[1 << 16];

	shunt_bench_raise_nofile();
	p[0] = (struct pollfd){ lfd, POLLIN, 0 };
	if (a->ready_file)
		shunt_bench_ready_file(a->ready_file);
	for (;;) {
		if (poll(p, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			shunt_bench_die(errno, "poll");
		}
		for (size_t i = n; i-- > 1;) {
			ssize_t r;

			if (!p[i].revents)
				continue;
			r = recv(p[i].fd, buf, sizeof(buf), MSG_DONTWAIT);
			if (r > 0) {
				io_all(p[i].fd, buf, (size_t)r, true);
			} else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
				close(p[i].fd);
				p[i] = p[--n];
			}
		}
		if (p[0].revents & POLLIN) {
			int fd = accept(lfd, NULL, NULL), one = 1;

			if (fd < 0)
				continue;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			if (n == cap) {
				cap *= 2;
				p = realloc(p, cap * sizeof(*p));
				if (!p)
					shunt_bench_die(ENOMEM, "realloc");
			}
			p[n++] = (struct pollfd){ fd, POLLIN, 0 };
		}
	}
}

static int run_spawn(const struct conn_args *a)
{
	char port[16];
	uint64_t t0 = shunt_bench_now_ns();
	struct rusage ru;
	double secs, cpu;

	snprintf(port, sizeof(port), "%u", a->port);
	for (uint64_t i = 0; i < a->count; i++) {
		pid_t pid = fork();
		int st;

		if (pid < 0)
			shunt_bench_die(errno, "fork");
		if (pid == 0) {
			int null = open("/dev/null", O_WRONLY);

			if (null >= 0)
				dup2(null, STDOUT_FILENO);
			if (a->connect)
				execl("/proc/self/exe", "conn", "loop", "--port", port, "--count",
				      "1", (char *)NULL);
			else
				execl("/proc/self/exe", "conn", "exit", (char *)NULL);
			_exit(127);
		}
		if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			shunt_bench_die(0, "a spawned client failed (status %d)", st);
	}
	secs = (double)(shunt_bench_now_ns() - t0) / 1e9;
	/* What the children took of the CPU, their exec and their exit included. */
	if (getrusage(RUSAGE_CHILDREN, &ru) < 0)
		shunt_bench_die(errno, "getrusage");
	cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
	      (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
	printf("{\"tool\":\"conn\",\"mode\":\"spawn\",\"count\":%" PRIu64 ",\"seconds\":%.6f,"
	       "\"per_process_us\":%.3f,\"child_cpu_us\":%.3f}\n", a->count, secs,
	       secs * 1e6 / (double)a->count, cpu / (double)a->count);
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: conn server|loop|burst|hold|sink|spawn|exit --port P [--count N] [--bytes B]\n"
		   "            [--workers N] [--fork 1] [--ready-file F] [--gate 1]\n"
		   "            [--connect 0]\n");
}

int main(int argc, char **argv)
{
	struct conn_args a = { .count = 1000, .workers = 1, .connect = true };

	if (argc < 2 || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2;
	}
	a.mode = argv[1];
	if (!strcmp(a.mode, "exit"))
		return 0;
	for (int i = 2; i + 1 < argc; i += 2) {
		const char *o = argv[i], *v = argv[i + 1];

		if (!strcmp(o, "--port"))
			a.port = (uint16_t)atoi(v);
		else if (!strcmp(o, "--count"))
			a.count = strtoull(v, NULL, 10);
		else if (!strcmp(o, "--bytes"))
			a.bytes = strtoull(v, NULL, 10);
		else if (!strcmp(o, "--workers"))
			a.workers = atoi(v);
		else if (!strcmp(o, "--ready-file"))
			a.ready_file = v;
		else if (!strcmp(o, "--gate"))
			a.gate = atoi(v) != 0;
		else if (!strcmp(o, "--connect"))
			a.connect = atoi(v) != 0;
		else if (!strcmp(o, "--fork"))
			a.fork = atoi(v) != 0;
		else
			shunt_bench_die(0, "unknown option %s", o);
	}
	if (!a.port || !a.count)
		shunt_bench_die(0, "--port and --count must be set");
	signal(SIGPIPE, SIG_IGN);
	if (!strcmp(a.mode, "server"))
		return run_server(&a);
	if (!strcmp(a.mode, "loop"))
		return run_loop(&a);
	if (!strcmp(a.mode, "burst"))
		return run_burst(&a);
	if (!strcmp(a.mode, "hold"))
		return run_hold(&a);
	if (!strcmp(a.mode, "sink"))
		return run_sink(&a);
	if (!strcmp(a.mode, "spawn"))
		return run_spawn(&a);
	usage(stderr);
	return 2;
}
