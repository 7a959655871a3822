// SPDX-License-Identifier: MIT
/*
 * The two ends of the connection storm (test_storm.py), over plain POSIX
 * calls so that they run unmodified under `shunt run`.
 *
 *   storm server PORTFILE   an echo server on 127.0.0.1, one poll() loop.
 *                           Writes its port to PORTFILE. Commands on stdin:
 *       reopen MS      close the listener; MS ms later listen again on the
 *                      same port (SO_REUSEADDR). Says "closed", "reopened".
 *       stats          "served conns=N bytes=B sum=S open=K errors=E"
 *       quit
 *   storm client PORT THREADS   commands on stdin:
 *       run N STEP [PAUSE_US]
 *                      N connections, THREADS at a time, each: connect,
 *                      (wait PAUSE_US), send a pseudo-random payload (its
 *                      length and bytes from the connection's number),
 *                      shut down writing, read the echo to EOF, compare,
 *                      close. Says "progress K" every STEP connections
 *                      (0: never), then
 *       "done ok=N refused=R reset=X bad=Z bytes=B sum=S ms=T"
 *       quit
 *
 * The server echoes every byte and closes at EOF, once all is echoed. The
 * client retries a connect refused (the listener is closed) and a
 * connection reset before a single byte came back (it was queued on the
 * listener that closed): what the kernel does to them. Anything else is
 * bad: an echo short, long or different, an error, 10 s without progress.
 * sum is the sum of each connection's FNV-1a over its bytes, so the two
 * ends' sums agree only if every byte the server saw is the client's.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>

enum {
	BUF = 64 << 10,
	MAX_PAYLOAD = 48 << 10,	/* an echo fits the socket buffers and rings at once */
	MAX_CONNS = 1024,	/* open at once in the server */
	IO_TIMEOUT_S = 10,
	MAX_BAD_SHOWN = 10,
	PORT_LO = 20000,	/* below the ephemeral range: no client's source port */
	PORT_SPAN = 12000,
};

static _Noreturn void die(const char *what)
{
	printf("error %s: %s\n", what, strerrorname_np(errno) ?: "?");
	fflush(stdout);
	exit(1);
}

static uint64_t fnv1a(uint64_t h, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ULL;
	return h;
}

static const uint64_t fnv_basis = 0xcbf29ce484222325ULL;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static struct sockaddr_in loopback(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* ---- server ---- */

struct conn {
	int fd;
	uint64_t hash, bytes;
	uint8_t *pend;		/* received, not yet echoed */
	size_t plen, poff;
	bool eof;
};

static struct conn conns[MAX_CONNS];
static unsigned nconns;
static uint64_t served, served_bytes, served_sum, errors;

/* -errno, or a listening socket on @port (0: a free one below the ephemeral range). */
static int listen_on(int *port)
{
	int one = 1, fd, tries = *port ? 1 : 200;
	uint32_t r;

	if (getrandom(&r, sizeof(r), 0) != sizeof(r))
		die("getrandom");
	for (int i = 0; i < tries; i++) {
		int p = *port ? *port : PORT_LO + (int)((r + (uint32_t)i * 7919) % PORT_SPAN);
		struct sockaddr_in a = loopback(p);

		fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			die("socket");
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
			die("SO_REUSEADDR");
		if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0) {
			if (listen(fd, 4096) < 0)
				die("listen");
			*port = p;
			return fd;
		}
		close(fd);
		if (errno != EADDRINUSE)
			break;
	}
	return -errno;
}

static void conn_end(unsigned i)
{
	struct conn *c = &conns[i];

	if (c->eof && c->poff == c->plen) {
		served++;
		served_bytes += c->bytes;
		served_sum += c->hash;
	} else {
		errors++;
	}
	close(c->fd);
	free(c->pend);
	conns[i] = conns[--nconns];
}

/* Echo what is pending: 0 when it is sent or waits for POLLOUT, or -errno. */
static int flush(struct conn *c)
{
	while (c->poff < c->plen) {
		ssize_t w = send(c->fd, c->pend + c->poff, c->plen - c->poff, MSG_NOSIGNAL);

		if (w < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		c->poff += (size_t)w;
	}
	c->poff = c->plen = 0;
	return 0;
}

/* The connection's next step (echo what waits, or read and echo); false when it is over. */
static bool serve(struct conn *c)
{
	static uint8_t buf[BUF];
	ssize_t r;

	if (c->plen)
		return flush(c) == 0;
	r = recv(c->fd, buf, sizeof(buf), 0);
	if (r < 0)
		return errno == EAGAIN || errno == EINTR;
	if (r == 0) {
		c->eof = true;
		return false;
	}
	c->hash = fnv1a(c->hash, buf, (size_t)r);
	c->bytes += (uint64_t)r;
	c->pend = realloc(c->pend, (size_t)r);
	if (!c->pend)
		die("realloc");
	memcpy(c->pend, buf, (size_t)r);
	c->plen = (size_t)r;
	c->poff = 0;
	return flush(c) == 0;
}

static void accept_all(int lfd)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EAGAIN || errno == ECONNABORTED || errno == EINTR)
				return;
			die("accept");
		}
		if (nconns == MAX_CONNS)
			die("too many connections");
		conns[nconns++] = (struct conn){ .fd = fd, .hash = fnv_basis };
	}
}

/* A command from stdin; false on quit or EOF. */
static bool command(int *lfd, int port, double *reopen_at)
{
	char line[128];
	int ms;

	if (!fgets(line, sizeof(line), stdin) || !strncmp(line, "quit", 4))
		return false;
	if (sscanf(line, "reopen %d", &ms) == 1 && *lfd >= 0) {
		close(*lfd);
		*lfd = -1;
		*reopen_at = now_ms() + ms;
		printf("closed\n");
	} else if (!strncmp(line, "stats", 5)) {
		printf("served conns=%llu bytes=%llu sum=%llu open=%u errors=%llu\n",
		       (unsigned long long)served, (unsigned long long)served_bytes,
		       (unsigned long long)served_sum, nconns, (unsigned long long)errors);
	} else {
		printf("error bad command: %s", line);
	}
	fflush(stdout);
	return true;
}

static int server(const char *portfile)
{
	static struct pollfd pfd[MAX_CONNS + 2];
	double reopen_at = 0;
	int port = 0, lfd = listen_on(&port);
	FILE *f;

	if (lfd < 0) {
		errno = -lfd;
		die("listen");
	}
	f = fopen(portfile, "w");
	if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0)
		die(portfile);
	setvbuf(stdin, NULL, _IONBF, 0);	/* poll() sees every line */
	for (;;) {
		unsigned base = 1, n;
		int timeout = -1;

		if (lfd < 0) {
			double left = reopen_at - now_ms();

			if (left <= 0) {
				lfd = listen_on(&port);
				if (lfd < 0) {
					errno = -lfd;
					die("listen again");
				}
				printf("reopened\n");
				fflush(stdout);
			} else {
				timeout = (int)left + 1;
			}
		}
		pfd[0] = (struct pollfd){ .fd = 0, .events = POLLIN };
		if (lfd >= 0)
			pfd[base++] = (struct pollfd){ .fd = lfd, .events = POLLIN };
		for (unsigned i = 0; i < nconns; i++)
			pfd[base + i] = (struct pollfd){ .fd = conns[i].fd,
							 .events = conns[i].plen ? POLLOUT : POLLIN };
		n = nconns;
		if (poll(pfd, base + n, timeout) < 0) {
			if (errno == EINTR)
				continue;
			die("poll");
		}
		/* Backwards: conn_end moves the last connection into the freed place. */
		for (unsigned i = n; i-- > 0;) {
			if (pfd[base + i].revents && !serve(&conns[i]))
				conn_end(i);
		}
		if (lfd >= 0 && base == 2 && pfd[1].revents)
			accept_all(lfd);
		if (pfd[0].revents && !command(&lfd, port, &reopen_at))
			return 0;
	}
}

/* ---- client ---- */

struct tally {
	uint64_t ok, refused, reset, bad, bytes, sum;
};

static struct {
	struct sockaddr_in dst;
	uint64_t seed, end, step;
	long pause_us;
	_Atomic uint64_t next, done;
	pthread_mutex_t lock;	/* the tally and stdout */
	struct tally t;
} cl = { .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t xorshift64s(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 0x2545f4914f6cdd1dULL;
}

/*
 * The payload of connection @idx into @buf, its length returned: up to
 * 4 KiB, and up to MAX_PAYLOAD for one connection in 61 (more than one
 * read and one write at either end).
 */
static size_t payload(uint64_t idx, uint8_t *buf)
{
	uint64_t x = (cl.seed ^ (idx * 0x9e3779b97f4a7c15ULL)) | 1;
	size_t len = 1 + (size_t)(xorshift64s(&x) % (idx % 61 == 0 ? MAX_PAYLOAD : 4096));

	for (size_t i = 0; i < len; i += 8) {
		uint64_t v = xorshift64s(&x);

		memcpy(buf + i, &v, len - i < 8 ? len - i : 8);
	}
	return len;
}

static void bad(uint64_t idx, const char *what, size_t got, size_t want, int err)
{
	pthread_mutex_lock(&cl.lock);
	if (cl.t.bad++ < MAX_BAD_SHOWN) {
		printf("bad idx=%llu %s got=%zu want=%zu err=%s\n", (unsigned long long)idx, what,
		       got, want, err ? strerrorname_np(err) ?: "?" : "-");
		fflush(stdout);
	}
	pthread_mutex_unlock(&cl.lock);
}

static bool send_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		p += w;
		n -= (size_t)w;
	}
	return true;
}

enum outcome { OK, AGAIN, BAD };

/* One connection's attempt; AGAIN when the kernel would have the client retry. */
static enum outcome attempt(uint64_t idx, const uint8_t *out, size_t len, uint8_t *in,
			    struct tally *t)
{
	struct timeval tv = { IO_TIMEOUT_S, 0 };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), err;
	size_t got = 0;
	ssize_t r = 0;

	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0) {
		bad(idx, "socket", 0, len, errno);
		if (fd >= 0)
			close(fd);
		return BAD;
	}
	if (connect(fd, (struct sockaddr *)&cl.dst, sizeof(cl.dst)) < 0) {
		err = errno;
		close(fd);
		if (err == ECONNREFUSED) {
			t->refused++;
			nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
			return AGAIN;
		}
		bad(idx, "connect", 0, len, err);
		return BAD;
	}
	if (cl.pause_us)
		nanosleep(&(struct timespec){ 0, cl.pause_us * 1000 }, NULL);
	if (!send_all(fd, out, len) || shutdown(fd, SHUT_WR) < 0)
		goto failed;
	while (got <= len && (r = recv(fd, in + got, len + 1 - got, 0)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			goto failed;
		got += (size_t)r;
	}
	close(fd);
	if (got != len || memcmp(in, out, len)) {
		bad(idx, got < len ? "short" : got > len ? "long" : "differs", got, len, 0);
		return BAD;
	}
	t->ok++;
	t->bytes += len;
	t->sum += fnv1a(fnv_basis, out, len);
	return OK;
failed:
	err = errno;
	close(fd);
	/*
	 * Queued on a listener that closed: never accepted, so nothing came
	 * back, and reset (ENOTCONN: shutdown() after the reset came).
	 */
	if (got == 0 && (err == ECONNRESET || err == EPIPE || err == ENOTCONN)) {
		t->reset++;
		return AGAIN;
	}
	bad(idx, err == EAGAIN ? "timeout" : "io", got, len, err);
	return BAD;
}

static void *client_thread(void *arg)
{
	static _Thread_local uint8_t out[MAX_PAYLOAD], in[MAX_PAYLOAD + 1];
	struct tally t = { 0 };
	uint64_t idx;

	(void)arg;
	while ((idx = atomic_fetch_add(&cl.next, 1)) < cl.end) {
		size_t len = payload(idx, out);
		uint64_t done;

		while (attempt(idx, out, len, in, &t) == AGAIN)
			;
		done = atomic_fetch_add(&cl.done, 1) + 1;
		if (done % cl.step == 0) {
			pthread_mutex_lock(&cl.lock);
			printf("progress %llu\n", (unsigned long long)done);
			fflush(stdout);
			pthread_mutex_unlock(&cl.lock);
		}
	}
	pthread_mutex_lock(&cl.lock);
	cl.t.ok += t.ok;
	cl.t.refused += t.refused;
	cl.t.reset += t.reset;
	cl.t.bytes += t.bytes;
	cl.t.sum += t.sum;
	pthread_mutex_unlock(&cl.lock);
	return NULL;
}

static void run(unsigned threads, uint64_t n, uint64_t step, long pause_us)
{
	pthread_t tid[64];
	double t0 = now_ms();
	uint64_t first = atomic_load(&cl.next);

	cl.t = (struct tally){ 0 };
	cl.end = first + n;
	cl.step = step ? step : n + 1;
	cl.pause_us = pause_us;
	atomic_store(&cl.done, 0);
	for (unsigned i = 0; i < threads; i++)
		if ((errno = pthread_create(&tid[i], NULL, client_thread, NULL)))
			die("pthread_create");
	for (unsigned i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	/* The threads took one number each past the end. */
	atomic_store(&cl.next, cl.end);
	printf("done ok=%llu refused=%llu reset=%llu bad=%llu bytes=%llu sum=%llu ms=%.0f\n",
	       (unsigned long long)cl.t.ok, (unsigned long long)cl.t.refused,
	       (unsigned long long)cl.t.reset, (unsigned long long)cl.t.bad,
	       (unsigned long long)cl.t.bytes, (unsigned long long)cl.t.sum, now_ms() - t0);
	fflush(stdout);
}

static int client(int port, unsigned threads)
{
	char line[128];
	unsigned long long n, step;
	long pause_us;

	if (threads == 0 || threads > 64)
		return 2;
	cl.dst = loopback(port);
	if (getrandom(&cl.seed, sizeof(cl.seed), 0) != sizeof(cl.seed))
		die("getrandom");
	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin) && strncmp(line, "quit", 4)) {
		pause_us = 0;
		if (sscanf(line, "run %llu %llu %ld", &n, &step, &pause_us) >= 2 &&
		    pause_us >= 0 && pause_us < 1000000) {
			run(threads, n, step, pause_us);
		} else {
			printf("error bad command: %s", line);
			fflush(stdout);
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "server"))
		return server(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "client"))
		return client(atoi(argv[2]), (unsigned)atoi(argv[3]));
	fprintf(stderr, "usage: storm server PORTFILE | client PORT THREADS\n");
	return 2;
}
