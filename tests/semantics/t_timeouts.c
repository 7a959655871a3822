// SPDX-License-Identifier: MIT
// SO_RCVTIMEO and SO_SNDTIMEO: read back, recv/accept/MSG_WAITALL time out
// with EAGAIN after about the timeout, a send on a full connection returns
// what it took and then times out, invalid values are refused.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

enum {
	TIMEO_MS = 200,
	LOW_MS = 150, // bounds for "about TIMEO_MS"
	HIGH_MS = 2000,
	HUGE_SEND = 64 << 20,
};

static void set_timeo(int fd, int opt, long ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	if (setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv)) < 0)
		t_fatal("setsockopt(timeout)");
}

static void print_timeo(const char *label, int fd, int opt)
{
	struct timeval tv = { -1, -1 };
	socklen_t len = sizeof(tv);

	if (getsockopt(fd, SOL_SOCKET, opt, &tv, &len) < 0)
		printf("%s: getsockopt = -1 %s\n", label, t_errname(errno));
	else
		printf("%s = {%ld, %ld} len %u\n", label, (long)tv.tv_sec,
		       (long)tv.tv_usec, (unsigned)len);
}

static void within(const char *what, int64_t start)
{
	int64_t ms = t_elapsed_ms(start);

	t_expect(ms >= LOW_MS && ms <= HIGH_MS, "%s: elapsed within [%dms,%dms]",
		 what, LOW_MS, HIGH_MS);
}

static void options(int c)
{
	struct timeval tv;
	int fd = t_socket(AF_INET, SOCK_STREAM);

	print_timeo("SO_RCVTIMEO default", fd, SO_RCVTIMEO);
	print_timeo("SO_SNDTIMEO default", fd, SO_SNDTIMEO);
	set_timeo(fd, SO_RCVTIMEO, 2500);
	print_timeo("SO_RCVTIMEO after set 2.5s", fd, SO_RCVTIMEO);
	tv = (struct timeval){ .tv_sec = 0, .tv_usec = 2000000 };
	T_REPORT("SO_RCVTIMEO tv_usec 2000000",
		 setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)));
	tv = (struct timeval){ .tv_sec = -1, .tv_usec = 0 };
	T_REPORT("SO_SNDTIMEO tv_sec -1", setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO,
						       &tv, sizeof(tv)));
	print_timeo("SO_SNDTIMEO after -1", fd, SO_SNDTIMEO);
	T_REPORT("SO_RCVTIMEO optlen 4", setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, 4));
	tv = (struct timeval){ 0, 0 };
	T_REPORT("SO_RCVTIMEO {0,0}", setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv,
						  sizeof(tv)));
	print_timeo("SO_RCVTIMEO after {0,0}", fd, SO_RCVTIMEO);
	close(fd);

	set_timeo(c, SO_RCVTIMEO, TIMEO_MS);
	set_timeo(c, SO_SNDTIMEO, TIMEO_MS);
	print_timeo("SO_RCVTIMEO connected after set 200ms", c, SO_RCVTIMEO);
	print_timeo("SO_SNDTIMEO connected after set 200ms", c, SO_SNDTIMEO);
}

static void receive_timeouts(int c, int s)
{
	char buf[32];
	int64_t start;

	start = t_now_ns();
	T_REPORT("recv on empty with SO_RCVTIMEO", recv(c, buf, sizeof(buf), 0));
	within("recv timeout", start);
	start = t_now_ns();
	T_REPORT("read on empty with SO_RCVTIMEO", read(c, buf, sizeof(buf)));
	within("read timeout", start);

	// MSG_WAITALL returns the partial data at the timeout.
	T_REPORT("send(s, \"abc\")", send(s, "abc", 3, 0));
	t_wait_inq(c, 3);
	start = t_now_ns();
	T_REPORT_DATA("recv(c, 10, MSG_WAITALL)", recv(c, buf, 10, MSG_WAITALL), buf);
	within("MSG_WAITALL timeout", start);

	// MSG_DONTWAIT does not wait for the timeout.
	start = t_now_ns();
	T_REPORT("recv(MSG_DONTWAIT)", recv(c, buf, sizeof(buf), MSG_DONTWAIT));
	t_expect(t_elapsed_ms(start) < LOW_MS, "MSG_DONTWAIT returned at once");

	// Data arriving before the timeout ends the wait.
	T_REPORT("send(s, \"d\")", send(s, "d", 1, 0));
	T_REPORT_DATA("recv with data", recv(c, buf, sizeof(buf), 0), buf);
}

static void send_timeouts(int c, int s)
{
	static unsigned char chunk[65536];
	char *huge = calloc(1, HUGE_SEND);
	uint64_t got = 0, sent = 0;
	int64_t start;
	ssize_t n;
	int i;

	if (!huge)
		t_fatal("calloc");
	// The first send blocks once the buffers are full and returns what it
	// managed to queue when the timeout expires.
	start = t_now_ns();
	errno = 0;
	n = send(c, huge, HUGE_SEND, 0);
	t_expect(n > 0 && n < HUGE_SEND, "send 64 MiB: partial, 0 < n < len (%s)",
		 n < 0 ? t_errname(errno) : "ok");
	within("partial send timeout", start);
	if (n > 0)
		sent = (uint64_t)n;
	// A bit of room may be left below the wake-up threshold: keep sending
	// small pieces until a send times out.
	for (i = 0; i < 100000; i++) {
		start = t_now_ns();
		errno = 0;
		n = send(c, huge, 4096, 0);
		if (n < 0)
			break;
		sent += (uint64_t)n;
	}
	t_report("send on the full connection, eventually", n, errno);
	within("send timeout", start);
	start = t_now_ns();
	T_REPORT("write on the full connection", write(c, huge, 4096));
	within("write timeout", start);
	while (got < sent) {
		n = recv(s, chunk, sizeof(chunk), 0);
		if (n <= 0)
			t_fatal("drain");
		got += (uint64_t)n;
	}
	t_expect(got == sent, "drained what the partial send took");
	free(huge);
}

static void accept_timeout(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a);
	int64_t start;

	set_timeo(lfd, SO_RCVTIMEO, TIMEO_MS);
	start = t_now_ns();
	T_REPORT_FD("accept with SO_RCVTIMEO", accept(lfd, NULL, NULL));
	within("accept timeout", start);
	close(lfd);
}

int main(void)
{
	int c, s;

	t_start(30);
	t_pair(AF_INET, &c, &s);
	options(c);
	receive_timeouts(c, s);
	send_timeouts(c, s);
	close(c);
	close(s);
	accept_timeout();
	return t_finish();
}
