// SPDX-License-Identifier: MIT
// An accepted socket starts as the kernel makes one, whatever the program
// did to the accepted socket closed before it: options, file flags and
// descriptor flags are the listener's or the defaults, never left over.
// (Under shunt the closed one's kernel half is the next one's: spare.c.)
// A socket still open as a duplicate is never the next one.
// shunt-expect: shm_connect>=12 shm_accept>=12 kernel_accept==0
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SET_RCVBUF = 8192 };

/*
 * After a close, before the next accept: under shunt, a listen() is a
 * request, before which shuntd reads what this process journaled, so the
 * closed one's kernel half is the next one's from here on (spare.c). To
 * the kernel it is a listener more, and gone.
 */
static void settle(void)
{
	close(t_listen_loopback(AF_INET, 1, NULL));
}

static const struct {
	const char *name;
	int level, opt;
	bool v6;	/* only on IPv6 sockets; !v6 IPPROTO_IP ones only on IPv4 */
} opts[] = {
	{ "SO_KEEPALIVE", SOL_SOCKET, SO_KEEPALIVE, false },
	{ "SO_PRIORITY", SOL_SOCKET, SO_PRIORITY, false },
	{ "SO_OOBINLINE", SOL_SOCKET, SO_OOBINLINE, false },
	{ "SO_RCVLOWAT", SOL_SOCKET, SO_RCVLOWAT, false },
	{ "SO_REUSEADDR", SOL_SOCKET, SO_REUSEADDR, false },
	{ "SO_RCVBUF", SOL_SOCKET, SO_RCVBUF, false },
	{ "TCP_NODELAY", IPPROTO_TCP, TCP_NODELAY, false },
	{ "TCP_KEEPIDLE", IPPROTO_TCP, TCP_KEEPIDLE, false },
	{ "TCP_KEEPINTVL", IPPROTO_TCP, TCP_KEEPINTVL, false },
	{ "TCP_KEEPCNT", IPPROTO_TCP, TCP_KEEPCNT, false },
	{ "TCP_USER_TIMEOUT", IPPROTO_TCP, TCP_USER_TIMEOUT, false },
	{ "IP_TOS", IPPROTO_IP, IP_TOS, false },
	{ "IP_TTL", IPPROTO_IP, IP_TTL, false },
	{ "IPV6_TCLASS", IPPROTO_IPV6, IPV6_TCLASS, true },
	{ "IPV6_UNICAST_HOPS", IPPROTO_IPV6, IPV6_UNICAST_HOPS, true },
};

static bool applies(int family, int i)
{
	if (opts[i].level == IPPROTO_IP)
		return family == AF_INET;
	return !opts[i].v6 || family == AF_INET6;
}

static void show(const char *label, int family, int fd)
{
	struct linger l = { -1, -1 };
	struct timeval tv = { -1, -1 };
	struct stat st;
	socklen_t len;

	printf("%s:\n", label);
	for (unsigned i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
		int v = -1;

		if (!applies(family, (int)i))
			continue;
		len = sizeof(v);
		if (getsockopt(fd, opts[i].level, opts[i].opt, &v, &len) < 0)
			printf("  %s: %s\n", opts[i].name, t_errname(errno));
		else if (opts[i].opt == SO_RCVBUF && opts[i].level == SOL_SOCKET)
			/* Not the size itself: it depends on the machine. */
			printf("  %s: %s\n", opts[i].name, v == 2 * SET_RCVBUF ? "as set" : "not set");
		else
			printf("  %s: %d\n", opts[i].name, v);
	}
	len = sizeof(l);
	T_REPORT("  getsockopt(SO_LINGER)", getsockopt(fd, SOL_SOCKET, SO_LINGER, &l, &len));
	printf("    onoff %d linger %d\n", l.l_onoff, l.l_linger);
	len = sizeof(tv);
	T_REPORT("  getsockopt(SO_RCVTIMEO)", getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len));
	printf("    %ld s %ld us\n", (long)tv.tv_sec, (long)tv.tv_usec);
	printf("  F_GETFL %#x F_GETFD %d socket %d\n", fcntl(fd, F_GETFL), fcntl(fd, F_GETFD),
	       fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode));
}

static void set_int(int fd, int level, int opt, int v)
{
	if (setsockopt(fd, level, opt, &v, sizeof(v)) < 0)
		t_fatal("setsockopt(%d, %d)", level, opt);
}

// Everything a program might set on an accepted socket, then close it.
static void use_and_close(int family, int s, bool buffers)
{
	struct linger l = { 1, 5 };
	struct timeval tv = { 3, 0 };

	set_int(s, IPPROTO_TCP, TCP_NODELAY, 1);
	set_int(s, SOL_SOCKET, SO_KEEPALIVE, 1);
	set_int(s, SOL_SOCKET, SO_PRIORITY, 3);
	set_int(s, SOL_SOCKET, SO_OOBINLINE, 1);
	set_int(s, SOL_SOCKET, SO_RCVLOWAT, 7);
	set_int(s, SOL_SOCKET, SO_REUSEADDR, 1);
	set_int(s, IPPROTO_TCP, TCP_KEEPIDLE, 77);
	set_int(s, IPPROTO_TCP, TCP_KEEPINTVL, 11);
	set_int(s, IPPROTO_TCP, TCP_KEEPCNT, 4);
	set_int(s, IPPROTO_TCP, TCP_USER_TIMEOUT, 9000);
	if (family == AF_INET) {
		set_int(s, IPPROTO_IP, IP_TOS, 0x10);
		set_int(s, IPPROTO_IP, IP_TTL, 9);
	} else {
		set_int(s, IPPROTO_IPV6, IPV6_TCLASS, 0x20);
		set_int(s, IPPROTO_IPV6, IPV6_UNICAST_HOPS, 9);
	}
	if (buffers)
		set_int(s, SOL_SOCKET, SO_RCVBUF, SET_RCVBUF);
	if (setsockopt(s, SOL_SOCKET, SO_LINGER, &l, sizeof(l)) < 0 ||
	    setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0)
		t_fatal("setsockopt(SO_LINGER/SO_RCVTIMEO)");
	t_set_nonblock(s, true);
	fcntl(s, F_SETFD, FD_CLOEXEC);
	show("used", family, s);
	close(s);
}

static int accept_one(int lfd, const struct t_addr *a, int flags, int *c)
{
	int s;

	settle();
	*c = t_connect(a);
	s = accept4(lfd, NULL, NULL, flags);
	if (s < 0)
		t_fatal("accept4");
	return s;
}

static ino_t inode_of(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		t_fatal("fstat");
	return st.st_ino;
}

// A socket closed while a duplicate of it stays open is still the
// duplicate's: the next accepted one is another socket.
static void duplicated(int family, bool by_fcntl)
{
	struct t_addr a;
	int lfd = t_listen_loopback(family, 8, &a), c, c2, s, d, s2;

	s = accept_one(lfd, &a, 0, &c);
	d = by_fcntl ? fcntl(s, F_DUPFD, 0) : dup(s);
	if (d < 0)
		t_fatal("dup");
	close(s);
	s2 = accept_one(lfd, &a, 0, &c2);
	printf("accepted after closing one whose %s stays open: another socket %d\n",
	       by_fcntl ? "F_DUPFD copy" : "dup", inode_of(s2) != inode_of(d));
	close(s2);
	close(c2);
	close(d);
	close(c);
	close(lfd);
}

static void run(int family)
{
	struct t_addr a;
	int lfd = t_listen_loopback(family, 8, &a), lfd2, c, c2, s;

	printf("-- %s\n", family == AF_INET ? "IPv4" : "IPv6");
	s = accept_one(lfd, &a, 0, &c);
	show("first accepted", family, s);
	use_and_close(family, s, false);
	close(c);
	s = accept_one(lfd, &a, 0, &c);
	show("accepted after one was used and closed", family, s);
	use_and_close(family, s, true);
	close(c);
	s = accept_one(lfd, &a, SOCK_NONBLOCK | SOCK_CLOEXEC, &c);
	show("accepted non-blocking, close-on-exec, after buffers were set", family, s);
	close(s);
	close(c);

	// A listener whose options its connections inherit.
	lfd2 = t_socket(family, SOCK_STREAM);
	set_int(lfd2, SOL_SOCKET, SO_KEEPALIVE, 1);
	set_int(lfd2, IPPROTO_TCP, TCP_NODELAY, 1);
	set_int(lfd2, IPPROTO_TCP, TCP_KEEPIDLE, 123);
	t_addr_make(&a, family == AF_INET ? "127.0.0.1" : "::1", 0);
	if (bind(lfd2, (struct sockaddr *)&a.ss, a.len) < 0 || listen(lfd2, 8) < 0)
		t_fatal("bind/listen");
	a = t_sockname(lfd2);
	s = accept_one(lfd2, &a, 0, &c);
	show("accepted from a listener with options", family, s);
	use_and_close(family, s, false);
	// Two at once: one closed while the other is open.
	s = accept_one(lfd2, &a, 0, &c2);
	show("accepted from it after one was used", family, s);
	close(s);
	close(c2);
	close(c);
	close(lfd2);
	a = t_sockname(lfd);
	s = accept_one(lfd, &a, 0, &c);
	show("accepted from the first listener again", family, s);
	close(s);
	close(c);
	close(lfd);
	duplicated(family, false);
	duplicated(family, true);
}

int main(void)
{
	t_start(60);
	run(AF_INET);
	run(AF_INET6);
	return t_finish();
}
