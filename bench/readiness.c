// SPDX-License-Identifier: MIT
/*
 * readiness: two ways for a sleeping process to learn which of its
 * shared-memory connections has something for it (issue 12; docs/waiting.md,
 * "Readiness"), measured without the library so that only the mechanism
 * differs, plus the kernel's TCP loopback as the reference.
 *
 *   readiness MODE N ROUNDS
 *
 * A client and a server process share N connections; each round the client
 * picks one at random, sends on it and sleeps until the server's answer on
 * it arrives; the server sleeps in epoll_wait until some connection has
 * something. Every wait really sleeps (nothing spins), so the figure is a
 * wake-up each way plus the bookkeeping of finding the connection.
 *
 *   eventfd  an eventfd per connection end, each registered in its process's
 *            epoll (the kernel keeps the ready list): the sender writes the
 *            peer's eventfd of that connection.
 *   hub      one eventfd per process in its epoll (today's notice hub): the
 *            sender sets the connection's bit in the peer's notice bitmap
 *            (with a summary word per 64 words) and writes the hub; the woken
 *            process drains the bits to find the connection.
 *   tcp      N kernel TCP loopback connections in the server's epoll.
 *
 * Prints one JSON line: {"mode", "n", "rounds", "rtt_ns", "fds"} where fds
 * is how many descriptors the server process holds for the N connections.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum { CLIENT, SERVER };

/* One connection: a message counter each way (the "ring"). */
struct conn {
	_Atomic uint32_t sent[2];	/* by CLIENT (to the server), by SERVER */
	uint32_t seen[2];		/* private to the receiving side */
};

/* A process's notices (hub mode): bit i set when connection i has something. */
struct notices {
	_Atomic uint64_t summary[4];	/* bit w: word w may have bits (N <= 16384) */
	_Atomic uint64_t bits[256];
};

static int mode_hub, mode_tcp;
static unsigned n;
static struct conn *conns;
static struct notices *notice[2];	/* shared: each side's notices */
static int *efd[2];			/* eventfd mode: per connection, per side */
static int hub[2];			/* hub mode: per side */

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void signal_fd(int fd)
{
	uint64_t one = 1;

	if (write(fd, &one, sizeof(one)) != sizeof(one))
		die("write eventfd");
}

static void drain_fd(int fd)
{
	uint64_t v;

	if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		die("read eventfd");
}

/* @side tells its peer that connection @i has something. */
static void post(int side, unsigned i)
{
	int peer = !side;

	atomic_fetch_add_explicit(&conns[i].sent[side], 1, memory_order_release);
	if (mode_hub) {
		atomic_fetch_or(&notice[peer]->bits[i / 64], 1ull << (i % 64));
		atomic_fetch_or(&notice[peer]->summary[i / 4096], 1ull << (i / 64 % 64));
		signal_fd(hub[peer]);
	} else {
		signal_fd(efd[peer][i]);
	}
}

/* Whether connection @i has something new for @side; takes it. */
static int take(int side, unsigned i)
{
	uint32_t s = atomic_load_explicit(&conns[i].sent[!side], memory_order_acquire);

	if (s == conns[i].seen[side])
		return 0;
	conns[i].seen[side] = s;
	return 1;
}

/*
 * Sleep until something arrives; the connections that have something, in
 * @ready (at most @max). eventfd: the kernel's ready list names them. hub:
 * the hub says "something", the bitmap says what.
 */
static unsigned wait_ready(int side, int ep, unsigned *ready, unsigned max)
{
	struct epoll_event ev[64];
	unsigned got = 0;
	int k;

	do
		k = epoll_wait(ep, ev, 64, -1);
	while (k < 0 && errno == EINTR);
	if (k < 0)
		die("epoll_wait");
	if (!mode_hub) {
		for (int j = 0; j < k && got < max; j++) {
			unsigned i = ev[j].data.u32;

			drain_fd(efd[side][i]);
			if (take(side, i))
				ready[got++] = i;
		}
		return got;
	}
	drain_fd(hub[side]);
	for (unsigned s = 0; s < 4; s++) {
		uint64_t sw = atomic_exchange(&notice[side]->summary[s], 0);

		while (sw && got < max) {
			unsigned w = s * 64 + (unsigned)__builtin_ctzll(sw);
			uint64_t bw = atomic_exchange(&notice[side]->bits[w], 0);

			sw &= sw - 1;
			while (bw && got < max) {
				unsigned i = w * 64 + (unsigned)__builtin_ctzll(bw);

				bw &= bw - 1;
				if (take(side, i))
					ready[got++] = i;
			}
		}
	}
	return got;
}

static int epoll_for(int side)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0)
		die("epoll_create1");
	if (mode_hub) {
		ev.data.u32 = 0;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, hub[side], &ev) < 0)
			die("epoll_ctl");
		return ep;
	}
	for (unsigned i = 0; i < n; i++) {
		ev.data.u32 = i;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, efd[side][i], &ev) < 0)
			die("epoll_ctl");
	}
	return ep;
}

static unsigned count_fds(void)
{
	char path[64];
	unsigned c = 0;

	for (int fd = 0; fd < 65536; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		c += access(path, F_OK) == 0;
	}
	return c;
}

/* ---- the shared-memory modes ---- */

static void shm_server(int report)
{
	int ep = epoll_for(SERVER);
	unsigned ready[64], fds = count_fds();

	if (write(report, &fds, sizeof(fds)) != sizeof(fds))
		die("write report");
	for (;;) {
		unsigned k = wait_ready(SERVER, ep, ready, 64);

		for (unsigned j = 0; j < k; j++)
			post(SERVER, ready[j]);
	}
}

static uint64_t rng = 88172645463325252ull;

static unsigned pick(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (unsigned)(rng % n);
}

static int64_t shm_client(unsigned rounds)
{
	int ep = epoll_for(CLIENT);
	unsigned ready[64];
	int64_t t0 = 0;

	for (unsigned r = 0; r < rounds + rounds / 10; r++) {
		unsigned i = pick();

		if (r == rounds / 10)
			t0 = now_ns();
		post(CLIENT, i);
		for (int got = 0; !got;) {
			unsigned k = wait_ready(CLIENT, ep, ready, 64);

			for (unsigned j = 0; j < k; j++)
				got |= ready[j] == i;
		}
	}
	return now_ns() - t0;
}

/* ---- the kernel reference ---- */

static int tcp_listener(uint16_t *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4096) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0)
		die("listen");
	*port = ntohs(a.sin_port);
	return fd;
}

static void tcp_server(int lfd, int report)
{
	struct epoll_event ev = { .events = EPOLLIN }, evs[64];
	int ep = epoll_create1(EPOLL_CLOEXEC);
	unsigned fds;
	char b;

	for (unsigned i = 0; i < n; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC), one = 1;

		if (fd < 0)
			die("accept");
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		ev.data.fd = fd;
		if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
			die("epoll_ctl");
	}
	close(lfd);
	fds = count_fds();
	if (write(report, &fds, sizeof(fds)) != sizeof(fds))
		die("write report");
	for (;;) {
		int k = epoll_wait(ep, evs, 64, -1);

		for (int j = 0; j < k; j++) {
			ssize_t r = read(evs[j].data.fd, &b, 1);

			if (r <= 0)
				_exit(0);
			if (write(evs[j].data.fd, &b, 1) != 1)
				die("write");
		}
	}
}

static int64_t tcp_client(uint16_t port, unsigned rounds, int **out)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int *fds = calloc(n, sizeof(*fds));
	int64_t t0 = 0;
	char b = 'x';

	for (unsigned i = 0; i < n; i++) {
		int one = 1;

		fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof(a)) < 0)
			die("connect");
		setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	for (unsigned r = 0; r < rounds + rounds / 10; r++) {
		int fd = fds[pick()];

		if (r == rounds / 10)
			t0 = now_ns();
		if (write(fd, &b, 1) != 1 || read(fd, &b, 1) != 1)
			die("round trip");
	}
	*out = fds;
	return now_ns() - t0;
}

int main(int argc, char **argv)
{
	struct rlimit rl;
	unsigned rounds, fds = 0;
	int report[2], lfd = -1, *tcp_fds = NULL;
	uint16_t port = 0;
	int64_t ns;
	pid_t pid;

	if (argc != 4) {
		fprintf(stderr, "usage: readiness eventfd|hub|tcp N ROUNDS\n");
		return 2;
	}
	mode_hub = !strcmp(argv[1], "hub");
	mode_tcp = !strcmp(argv[1], "tcp");
	if (!mode_hub && !mode_tcp && strcmp(argv[1], "eventfd"))
		return 2;
	n = (unsigned)atoi(argv[2]);
	rounds = (unsigned)atoi(argv[3]);
	if (n < 1 || n > 16384 || rounds < 10)
		return 2;
	/* Two eventfds per connection in each process, or a socket each (root may raise it). */
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		die("getrlimit");
	if (rl.rlim_max < 2 * n + 64)
		rl.rlim_max = 2 * n + 64;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
		fprintf(stderr, "readiness: needs %u descriptors: %s\n", 2 * n + 64, strerror(errno));
		return 2;
	}
	if (pipe(report) < 0)
		die("pipe");
	if (mode_tcp) {
		lfd = tcp_listener(&port);
	} else {
		conns = mmap(NULL, n * sizeof(*conns), PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		for (int side = 0; side < 2; side++) {
			notice[side] = mmap(NULL, sizeof(struct notices), PROT_READ | PROT_WRITE,
					    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
			if (mode_hub) {
				hub[side] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
				continue;
			}
			efd[side] = calloc(n, sizeof(int));
			for (unsigned i = 0; i < n; i++)
				if ((efd[side][i] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
					die("eventfd");
		}
	}
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		/* Each side holds its own eventfds and its peer's, to signal: 2 per connection. */
		close(report[0]);
		if (mode_tcp)
			tcp_server(lfd, report[1]);
		shm_server(report[1]);
	}
	close(report[1]);
	if (mode_tcp) {
		close(lfd);
		ns = tcp_client(port, rounds, &tcp_fds);
	} else {
		ns = shm_client(rounds);
	}
	if (read(report[0], &fds, sizeof(fds)) != sizeof(fds))
		die("read report");
	if (mode_tcp) {
		for (unsigned i = 0; i < n; i++)
			close(tcp_fds[i]);
	} else {
		kill(pid, SIGKILL);
	}
	waitpid(pid, NULL, 0);
	printf("{\"mode\":\"%s\",\"n\":%u,\"rounds\":%u,\"rtt_ns\":%.1f,\"fds\":%u}\n", argv[1], n,
	       rounds, (double)ns / rounds, fds);
	return 0;
}
