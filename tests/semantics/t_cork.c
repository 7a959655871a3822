// SPDX-License-Identifier: MIT
// TCP_CORK and MSG_MORE: bytes are held back until the cork comes off, a
// send without MSG_MORE, a full segment's worth, TCP_NODELAY, shutdown or
// close, or at the latest about 200 ms after the first of them, when they
// go out without the sender doing anything. (Checks that something is not
// there yet only count when made well within those 200 ms.)
// shunt-expect: shm_connect>=8 shm_accept>=8 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=100000
#include "t_harness.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

enum {
	SOON_MS = 100,		// well within the kernel's 200 ms
	BIG = 100000,
};

static int inq(int fd)
{
	int n = -1;

	if (ioctl(fd, FIONREAD, &n))
		t_fatal("FIONREAD");
	return n;
}

static int unsent(int fd)
{
	int n = -1;

	if (ioctl(fd, SIOCOUTQNSD, &n))
		t_fatal("SIOCOUTQNSD");
	return n;
}

static void setopt(int fd, int name, int v)
{
	if (setsockopt(fd, IPPROTO_TCP, name, &v, sizeof(v)))
		t_fatal("setsockopt");
}

// "@what: held" when nothing arrived (or when we looked too late to tell).
static void expect_held(const char *what, int s, int n, int64_t since)
{
	int got = inq(s);

	t_expect(got < n || t_elapsed_ms(since) >= SOON_MS, "%s: held back", what);
}

static void expect_arrives(const char *what, int s, int n)
{
	char buf[64];

	t_wait_inq(s, n);
	printf("%s: %d bytes arrive\n", what, n);
	while (n > 0) {
		ssize_t r = recv(s, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf), 0);

		if (r <= 0)
			t_fatal("recv");
		n -= (int)r;
	}
}

static void cork_then_uncork(void)
{
	int c, s;
	int64_t t0;

	t_pair(AF_INET, &c, &s);
	setopt(c, TCP_CORK, 1);
	t0 = t_now_ns();
	t_send_all(c, "hello", 5);
	t_send_all(c, " world", 6);
	expect_held("corked", s, 1, t0);
	t_expect(unsent(c) == 11 || t_elapsed_ms(t0) >= SOON_MS, "corked: SIOCOUTQNSD = 11");
	setopt(c, TCP_CORK, 0);
	expect_arrives("uncorked", s, 11);
	close(c);
	close(s);
}

static void ceiling(const char *what, int flags)
{
	struct pollfd p;
	int c, s, r;
	int64_t t0;

	t_pair(AF_INET, &c, &s);
	if (!flags)
		setopt(c, TCP_CORK, 1);
	t0 = t_now_ns();
	if (send(c, "later", 5, flags) != 5)
		t_fatal("send");
	expect_held(what, s, 1, t0);
	p = (struct pollfd){ .fd = s, .events = POLLIN };
	r = poll(&p, 1, T_WAIT_MS);
	t_expect(r == 1, "%s: readable without another call on the sender", what);
	t_expect(t_elapsed_ms(t0) >= 100, "%s: not before the cork's ceiling", what);
	t_expect(unsent(c) == 0, "%s: nothing left unsent", what);
	expect_arrives(what, s, 5);
	close(c);
	close(s);
}

static void msg_more(void)
{
	int c, s;
	int64_t t0;

	t_pair(AF_INET, &c, &s);
	t0 = t_now_ns();
	if (send(c, "abc", 3, MSG_MORE) != 3 || send(c, "def", 3, MSG_MORE) != 3)
		t_fatal("send");
	expect_held("MSG_MORE", s, 1, t0);
	T_REPORT("send without MSG_MORE", send(c, "g", 1, 0));
	expect_arrives("then", s, 7);
	close(c);
	close(s);
}

static void full_segments(void)
{
	static char big[BIG];
	int c, s, got;
	int64_t t0;

	t_pair(AF_INET, &c, &s);
	setopt(c, TCP_CORK, 1);
	t0 = t_now_ns();
	t_send_all(c, big, BIG);
	t_wait_inq(s, 1);
	got = inq(s);
	t_expect(got < BIG || t_elapsed_ms(t0) >= SOON_MS,
		 "corked %d bytes: full segments go, the rest is held", BIG);
	setopt(c, TCP_CORK, 0);
	expect_arrives("uncorked", s, BIG);
	close(c);
	close(s);
}

static void nodelay(void)
{
	int c, s;
	int64_t t0;

	t_pair(AF_INET, &c, &s);
	setopt(c, TCP_CORK, 1);
	t0 = t_now_ns();
	t_send_all(c, "nagle", 5);
	expect_held("corked", s, 1, t0);
	setopt(c, TCP_NODELAY, 1);
	expect_arrives("TCP_NODELAY set while corked", s, 5);
	// Still corked: the next bytes wait again.
	t0 = t_now_ns();
	t_send_all(c, "again", 5);
	expect_held("corked, TCP_NODELAY on", s, 1, t0);
	setopt(c, TCP_CORK, 0);
	expect_arrives("uncorked", s, 5);
	// MSG_MORE holds back even with TCP_NODELAY.
	t0 = t_now_ns();
	if (send(c, "more", 4, MSG_MORE) != 4)
		t_fatal("send");
	expect_held("MSG_MORE with TCP_NODELAY", s, 1, t0);
	setopt(c, TCP_NODELAY, 1);
	expect_arrives("TCP_NODELAY set again", s, 4);
	close(c);
	close(s);
}

static void ends(void)
{
	char buf[16];
	int c, s;

	t_pair(AF_INET, &c, &s);
	setopt(c, TCP_CORK, 1);
	t_send_all(c, "bye", 3);
	T_REPORT("shutdown(SHUT_WR) while corked", shutdown(c, SHUT_WR));
	t_wait_event(s, POLLRDHUP);
	T_REPORT_DATA("recv", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("recv", recv(s, buf, sizeof(buf), 0));
	close(c);
	close(s);

	t_pair(AF_INET, &c, &s);
	if (send(c, "ciao", 4, MSG_MORE) != 4)
		t_fatal("send");
	T_REPORT("close with MSG_MORE bytes held", close(c));
	t_wait_event(s, POLLRDHUP);
	T_REPORT_DATA("recv", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("recv", recv(s, buf, sizeof(buf), 0));
	close(s);
}

int main(void)
{
	t_start(30);
	cork_then_uncork();
	ceiling("TCP_CORK", 0);
	ceiling("MSG_MORE", MSG_MORE);
	msg_more();
	full_segments();
	nodelay();
	ends();
	return t_finish();
}
