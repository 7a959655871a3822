// SPDX-License-Identifier: MIT
/*
 * The victim of tests/control/hostile, run under `shunt run` so that its
 * libshunt reads whatever the hostile peer wrote into their circuit.
 *
 *   victim listen - TIMEOUT_MS BUDGET_MS      listen on 127.0.0.1:0, accept once
 *   victim connect PORT TIMEOUT_MS BUDGET_MS  connect to 127.0.0.1:PORT
 *
 * Phase 1, for BUDGET_MS (or until the connection is over both ways): round
 * after round of poll, recv (blocking with SO_RCVTIMEO = TIMEOUT_MS, with
 * MSG_DONTWAIT, MSG_PEEK, MSG_WAITALL), read with O_NONBLOCK, send
 * (blocking with SO_SNDTIMEO, and MSG_DONTWAIT), epoll_wait, FIONREAD and
 * SO_ERROR. Then it prints {"event": "phase1"} and waits for a line on
 * stdin. Phase 2 sets timeouts of 10^10 s (none, in effect), makes one
 * MSG_DONTWAIT recv and send, then reads until EOF or an error and sends
 * until an error: the test kills the hostile meanwhile, and a peer that is
 * gone must end every call.
 *
 * One JSON line per call: op, ret, err (errno name), ms, and for reads
 * bad (bytes that are not ink: not from the circuit), guard (the bytes
 * past what recv returned are untouched) and exact (the bytes are the
 * hostile's stream at this offset, for the modes that send it honestly).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "t_ink.h"
#include "t_loopback.h"

enum {
	READ_LEN = 4096,
	GUARD = 256,
	GUARD_BYTE = 0xee,	/* not ink */
	SEND_LEN = 128 << 10,	/* two fill a default ring */
	SEND_BYTE = 'V',	/* not ink either: our own bytes must never come back */
};

static uint64_t received;	/* bytes consumed so far: the stream offset */
static int epfd;

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *err_name(int e)
{
	static char other[16];

	switch (e) {
	case 0: return "";
	case EAGAIN: return "EAGAIN";
	case ECONNRESET: return "ECONNRESET";
	case EPIPE: return "EPIPE";
	case ETIMEDOUT: return "ETIMEDOUT";
	case ECONNREFUSED: return "ECONNREFUSED";
	case ENOTCONN: return "ENOTCONN";
	case EINTR: return "EINTR";
	case EINVAL: return "EINVAL";
	case EPERM: return "EPERM";
	case EIO: return "EIO";
	case EBADF: return "EBADF";
	case EFAULT: return "EFAULT";
	case ENOMEM: return "ENOMEM";
	case EPROTO: return "EPROTO";
	default:
		snprintf(other, sizeof(other), "E%d", e);
		return other;
	}
}

static _Noreturn void die(const char *what)
{
	printf("{\"event\": \"error\", \"what\": \"%s\", \"err\": \"%s\"}\n", what, err_name(errno));
	exit(2);
}

static void report(const char *op, long ret, int err, double t0, const char *extra)
{
	printf("{\"op\": \"%s\", \"ret\": %ld, \"err\": \"%s\", \"ms\": %.1f%s}\n", op, ret,
	       ret < 0 ? err_name(err) : "", now_ms() - t0, extra);
	fflush(stdout);
}

/* ---- calls ---- */

/*
 * One recv (or read(), for @flags -1) into a guarded buffer; checks and
 * reports what came. Returns recv's result.
 */
static long do_recv(const char *op, int fd, size_t len, int flags)
{
	static uint8_t buf[(64 << 10) + GUARD];
	char extra[96];
	double t0 = now_ms();
	long r;
	int err, bad = 0;
	bool guard = true, exact = true;

	memset(buf, GUARD_BYTE, len + GUARD);
	r = flags == -1 ? read(fd, buf, len) : recv(fd, buf, len, flags);
	err = errno;
	for (long i = 0; i < r; i++) {
		bad += !t_is_ink(buf[i]);
		exact = exact && buf[i] == t_stream_byte(received + (uint64_t)i);
	}
	for (size_t i = r > 0 ? (size_t)r : 0; i < len + GUARD; i++)
		guard = guard && buf[i] == GUARD_BYTE;
	if (r > 0 && (flags == -1 || !(flags & MSG_PEEK)))
		received += (uint64_t)r;
	snprintf(extra, sizeof(extra), ", \"bad\": %d, \"guard\": %s, \"exact\": %s", bad,
		 guard ? "true" : "false", exact ? "true" : "false");
	report(op, r, err, t0, extra);
	errno = err;
	return r;
}

/* A read() on the descriptor made O_NONBLOCK for it (not MSG_DONTWAIT: the file's flag). */
static long do_read_nonblock(int fd)
{
	long r;

	if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0)
		die("fcntl");
	r = do_recv("read_nonblock", fd, READ_LEN, -1);
	if (fcntl(fd, F_SETFL, 0) < 0)
		die("fcntl");
	return r;
}

static long do_send(const char *op, int fd, size_t len, int flags)
{
	static uint8_t buf[SEND_LEN];
	double t0 = now_ms();
	long r;

	memset(buf, SEND_BYTE, sizeof(buf));
	r = send(fd, buf, len, flags | MSG_NOSIGNAL);
	report(op, r, errno, t0, "");
	return r;
}

static void do_poll(const char *op, int fd, short events, int timeout_ms)
{
	struct pollfd p = { fd, events, 0 };
	char extra[32];
	double t0 = now_ms();
	int r = poll(&p, 1, timeout_ms), err = errno;

	snprintf(extra, sizeof(extra), ", \"revents\": %d", p.revents);
	report(op, r, err, t0, extra);
}

static void do_epoll(int timeout_ms)
{
	struct epoll_event ev;
	char extra[32];
	double t0 = now_ms();
	int r = epoll_wait(epfd, &ev, 1, timeout_ms), err = errno;

	snprintf(extra, sizeof(extra), ", \"events\": %u", r > 0 ? ev.events : 0);
	report("epoll_wait", r, err, t0, extra);
}

static void do_queries(int fd)
{
	char extra[48];
	double t0 = now_ms();
	int v = -1, r = ioctl(fd, FIONREAD, &v), err = errno;
	socklen_t len = sizeof(v);

	snprintf(extra, sizeof(extra), ", \"value\": %d", v);
	report("fionread", r, err, t0, extra);
	t0 = now_ms();
	v = -1;
	r = getsockopt(fd, SOL_SOCKET, SO_ERROR, &v, &len);
	err = errno;
	snprintf(extra, sizeof(extra), ", \"value\": %d", v);
	report("so_error", r, err, t0, extra);
}

static void set_timeouts(int fd, struct timeval tv)
{
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		die("setsockopt");
}

/* ---- setup ---- */

static int accept_one(void)
{
	int port, lfd = t_loopback_listen(&port);

	printf("{\"event\": \"listening\", \"port\": %d, \"pid\": %d}\n", port, (int)getpid());
	fflush(stdout);
	return t_loopback_accept(lfd);
}

/* A call that failed for good (not a timeout or EAGAIN) or said EOF. */
static bool over(long r, int err)
{
	return r == 0 || (r < 0 && err != EAGAIN && err != EINTR);
}

int main(int argc, char **argv)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int fd, timeout_ms, rx_over = 0, tx_over = 0;
	double budget, start;
	char line[16];

	if (argc != 5) {
		fprintf(stderr, "usage: %s listen -|connect PORT TIMEOUT_MS BUDGET_MS\n", argv[0]);
		return 2;
	}
	timeout_ms = atoi(argv[3]);
	budget = atof(argv[4]);
	fd = !strcmp(argv[1], "connect") ? t_loopback_connect(atoi(argv[2])) : accept_one();
	set_timeouts(fd, (struct timeval){ timeout_ms / 1000, (timeout_ms % 1000) * 1000 });
	epfd = epoll_create1(0);
	ev.data.fd = fd;
	if (epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		die("epoll");
	printf("{\"event\": \"connected\", \"pid\": %d}\n", (int)getpid());
	fflush(stdout);

	start = now_ms();
	while (now_ms() - start < budget && (rx_over < 3 || tx_over < 3)) {
		long r;

		do_poll("poll_in", fd, POLLIN, timeout_ms);
		r = do_recv("recv", fd, READ_LEN, 0);
		rx_over += over(r, errno);
		r = do_recv("recv_dontwait", fd, READ_LEN, MSG_DONTWAIT);
		rx_over += over(r, errno);
		do_recv("recv_peek", fd, READ_LEN, MSG_PEEK | MSG_DONTWAIT);
		r = do_read_nonblock(fd);
		rx_over += over(r, errno);
		r = do_recv("recv_waitall", fd, 2 * READ_LEN, MSG_WAITALL);
		rx_over += over(r, errno);
		do_poll("poll_out", fd, POLLOUT, timeout_ms);
		r = do_send("send", fd, SEND_LEN, 0);
		tx_over += over(r, errno);
		r = do_send("send_dontwait", fd, SEND_LEN, MSG_DONTWAIT);
		tx_over += over(r, errno);
		do_epoll(timeout_ms);
		do_queries(fd);
	}
	printf("{\"event\": \"phase1\", \"received\": %llu}\n", (unsigned long long)received);
	fflush(stdout);

	/* Phase 2: the hostile goes now; calls without a timeout must still end. */
	if (!fgets(line, sizeof(line), stdin))
		die("stdin");
	/*
	 * 10^10 s, which the kernel keeps: as good as none, though 10^19 ns
	 * does not fit a deadline's 64 bits (no arithmetic may overflow on it).
	 */
	set_timeouts(fd, (struct timeval){ 10000000000, 0 });
	/* With no timeout to end them, non-blocking calls must still not wait. */
	do_recv("late_dontwait", fd, READ_LEN, MSG_DONTWAIT);
	do_send("late_send_dontwait", fd, SEND_LEN, MSG_DONTWAIT);
	for (int i = 0; i < 100000; i++) {
		/* EAGAIN here is a failure too (no timeout is set): stop and let the test say so. */
		if (do_recv("drain_recv", fd, READ_LEN, 0) <= 0)
			break;
	}
	for (int i = 0; i < 3; i++)
		if (do_send("drain_send", fd, 1, 0) < 0)
			break;
	close(fd);
	printf("{\"event\": \"done\", \"received\": %llu}\n", (unsigned long long)received);
	return 0;
}
