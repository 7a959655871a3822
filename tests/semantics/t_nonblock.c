// SPDX-License-Identifier: MIT
// Non-blocking I/O: EAGAIN on empty, filling the send side until EAGAIN and
// draining it, and every way to get or change O_NONBLOCK and FD_CLOEXEC.
// shunt-expect: shm_connect>=4 shm_accept>=4 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

enum {
	FILL_SEED = 0x55,
	HUGE_WRITE = 64 << 20, // larger than any socket buffer or ring
	CHUNK = 65536,
};

static void print_flags(const char *who, int fd)
{
	int fl = fcntl(fd, F_GETFL);
	int fdf = fcntl(fd, F_GETFD);

	printf("%s: F_GETFL = %#o (O_NONBLOCK %s), F_GETFD = %d\n", who, fl,
	       fl >= 0 && (fl & O_NONBLOCK) ? "set" : "clear", fdf);
}

static void empty_reads(int fd)
{
	char buf[16];
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	T_REPORT("recv on empty", recv(fd, buf, sizeof(buf), 0));
	T_REPORT("read on empty", read(fd, buf, sizeof(buf)));
	T_REPORT("readv on empty", readv(fd, &iov, 1));
	T_REPORT("recvmsg on empty", recvmsg(fd, &mh, 0));
	T_REPORT("recvfrom on empty", recvfrom(fd, buf, sizeof(buf), 0, NULL, NULL));
}

// Fill c until EAGAIN, then drain through s and check every byte.
static void fill_and_drain(int c, int s)
{
	static unsigned char buf[CHUNK];
	unsigned char *huge = malloc(HUGE_WRITE);
	uint64_t sent = 0, got = 0;
	int64_t bad = -1;
	ssize_t n;
	int eagain = 0;

	if (!huge)
		t_fatal("malloc");
	t_stream_fill(FILL_SEED, 0, huge, HUGE_WRITE);
	// One write far larger than the buffer: the kernel takes what fits.
	errno = 0;
	n = send(c, huge, HUGE_WRITE, 0);
	t_expect(n > 0 && n < HUGE_WRITE, "huge send: partial, 0 < n < len (%s)",
		 n < 0 ? t_errname(errno) : "ok");
	if (n > 0)
		sent = (uint64_t)n;
	// Keep going in chunks until the socket refuses.
	for (;;) {
		n = send(c, huge + sent, CHUNK, 0);
		if (n < 0) {
			eagain = errno == EAGAIN;
			break;
		}
		sent += (uint64_t)n;
	}
	t_expect(eagain, "then send = -1 EAGAIN");
	T_REPORT("write when full", write(c, huge + sent, CHUNK));
	printf("poll(c, POLLOUT, 0) when full = %s\n",
	       t_poll_str(t_poll1(c, POLLOUT, 0)));

	// Drain everything on the (blocking) server side.
	while (got < sent) {
		size_t want = sent - got < CHUNK ? sent - got : CHUNK;

		n = recv(s, buf, want, 0);
		if (n <= 0)
			t_fatal("drain recv");
		if (bad < 0)
			bad = t_stream_check(FILL_SEED, got, buf, (size_t)n);
		got += (uint64_t)n;
	}
	t_expect(bad < 0, "drained all bytes, content matches");
	printf("poll(c, POLLOUT, 5s) after drain = %s\n",
	       t_poll_str(t_poll1(c, POLLOUT, T_WAIT_MS)));
	T_REPORT("send after drain", send(c, "x", 1, 0));
	t_wait_inq(s, 1);
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	printf("poll(s, POLLIN, 0) when empty = %s\n",
	       t_poll_str(t_poll1(s, POLLIN, 0)));
	free(huge);
}

struct late_sender {
	int fd;
	unsigned delay_ms;
};

static void *send_late(void *arg)
{
	struct late_sender *ls = arg;

	t_sleep_ms(ls->delay_ms);
	t_send_all(ls->fd, "late", 4);
	return NULL;
}

static void fcntl_and_fionbio(void)
{
	struct late_sender ls;
	pthread_t th;
	char buf[16];
	int c, s, on;
	int64_t start;

	t_pair(AF_INET, &c, &s);
	print_flags("connected, default", c);
	T_REPORT("fcntl(F_SETFL, O_NONBLOCK)",
		 fcntl(c, F_SETFL, fcntl(c, F_GETFL) | O_NONBLOCK));
	print_flags("after F_SETFL", c);
	empty_reads(c);
	fill_and_drain(c, s);
	T_REPORT("fcntl(F_SETFL, 0)", fcntl(c, F_SETFL, 0));
	print_flags("after clearing", c);

	// Blocking again: recv waits for data that comes later.
	ls.fd = s;
	ls.delay_ms = 100;
	if (pthread_create(&th, NULL, send_late, &ls))
		t_fatal("pthread_create");
	start = t_now_ns();
	T_REPORT_DATA("blocking recv", recv(c, buf, sizeof(buf), 0), buf);
	t_expect(t_elapsed_ms(start) >= 50, "blocking recv waited for the data");
	pthread_join(th, NULL);

	on = 1;
	T_REPORT("ioctl(FIONBIO, 1)", ioctl(c, FIONBIO, &on));
	print_flags("after FIONBIO 1", c);
	T_REPORT("recv after FIONBIO 1", recv(c, buf, sizeof(buf), 0));
	on = 0;
	T_REPORT("ioctl(FIONBIO, 0)", ioctl(c, FIONBIO, &on));
	print_flags("after FIONBIO 0", c);
	ls.fd = s;
	ls.delay_ms = 50;
	if (pthread_create(&th, NULL, send_late, &ls))
		t_fatal("pthread_create");
	T_REPORT_DATA("blocking recv after FIONBIO 0", recv(c, buf, sizeof(buf), 0),
		      buf);
	pthread_join(th, NULL);
	close(c);
	close(s);
}

static void creation_flags(void)
{
	struct t_addr a;
	int lfd, c, s, s2, fd;
	char buf[16];

	fd = socket(AF_INET, SOCK_STREAM, 0);
	print_flags("socket()", fd);
	close(fd);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	print_flags("socket(SOCK_NONBLOCK|SOCK_CLOEXEC)", fd);
	T_REPORT("fcntl(F_SETFD, 0)", fcntl(fd, F_SETFD, 0));
	print_flags("after F_SETFD 0", fd);
	T_REPORT("fcntl(F_SETFD, FD_CLOEXEC)", fcntl(fd, F_SETFD, FD_CLOEXEC));
	print_flags("after F_SETFD FD_CLOEXEC", fd);
	close(fd);

	// A non-blocking listener: accept on an empty queue, and flags of
	// accepted sockets (accept does not inherit O_NONBLOCK on Linux).
	lfd = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	t_addr_make(&a, "127.0.0.1", 0);
	if (bind(lfd, (struct sockaddr *)&a.ss, a.len) || listen(lfd, 4))
		t_fatal("bind/listen");
	a = t_sockname(lfd);
	print_flags("listener SOCK_NONBLOCK", lfd);
	T_REPORT_FD("accept on empty non-blocking listener", accept(lfd, NULL, NULL));
	T_REPORT_FD("accept4 on empty non-blocking listener",
		 accept4(lfd, NULL, NULL, SOCK_CLOEXEC));

	c = t_connect(&a);
	t_wait_event(lfd, POLLIN);
	s = T_REPORT_FD("accept() ready", accept(lfd, NULL, NULL));
	if (s >= 0)
		print_flags("accept()", s);
	T_REPORT_FD("accept again", accept(lfd, NULL, NULL));

	fd = t_connect(&a);
	t_wait_event(lfd, POLLIN);
	s2 = T_REPORT_FD("accept4(SOCK_NONBLOCK|SOCK_CLOEXEC)",
		      accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC));
	if (s2 >= 0) {
		print_flags("accept4(SOCK_NONBLOCK|SOCK_CLOEXEC)", s2);
		T_REPORT("recv on accept4 NONBLOCK socket", recv(s2, buf, 1, 0));
		T_REPORT("send on it", send(s2, "hi", 2, 0));
		t_wait_inq(fd, 2);
		T_REPORT_DATA("peer recv", recv(fd, buf, sizeof(buf), 0), buf);
		close(s2);
	}
	T_REPORT_FD("accept4 bad flags", accept4(lfd, NULL, NULL, 0x1));
	close(fd);
	if (s >= 0)
		close(s);
	close(c);
	close(lfd);

	// Non-blocking from socket() on the connecting side too.
	fd = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	lfd = t_listen_loopback(AF_INET, 4, &a);
	errno = 0;
	if (connect(fd, (struct sockaddr *)&a.ss, a.len) < 0 && errno != EINPROGRESS)
		t_fatal("connect");
	printf("poll(connecting SOCK_NONBLOCK, POLLOUT) = %s\n",
	       t_poll_str(t_wait_event(fd, POLLOUT)));
	s = t_accept(lfd);
	print_flags("SOCK_NONBLOCK connected", fd);
	empty_reads(fd);
	close(s);
	close(fd);
	close(lfd);
}

int main(void)
{
	t_start(30);
	fcntl_and_fionbio();
	creation_flags();
	return t_finish();
}
