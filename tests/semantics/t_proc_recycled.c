// SPDX-License-Identifier: MIT
// A socket made after connections of this process ended is a fresh one,
// whatever shunt hands it out as (its socket() may be answered with the
// kernel half of an ended connection, still bound: src/preload/recycle.h).
// Before each case one connection is made and ended (the server closes
// first), then a new socket is named, bound, listened on, connected
// elsewhere, given options tied to binding, duplicated, shared with a child,
// registered with epoll; and a server that keeps its connections open never
// sees two of them from one address and port.
// shunt-expect: shm_connect>=20 kernel_connect<=1 recycled>=8 recycled_fresh>=5
// t-timeout: 60
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

enum { KEPT = 6 };

static struct t_addr echo4, echo6;

// Accepts, echoes one byte and closes first, forever.
static void *echo_server(void *arg)
{
	int l = *(int *)arg;

	for (;;) {
		int s = t_accept(l);
		char b;

		if (recv(s, &b, 1, 0) == 1)
			(void)!send(s, &b, 1, 0);
		close(s);
	}
	return NULL;
}

// One connection to @to, ended by the server first: its half may be a spare now.
static void ended_connection(const struct t_addr *to)
{
	int c = t_connect(to);
	char b = 'x';

	if (send(c, &b, 1, 0) != 1 || recv(c, &b, 1, 0) != 1 || recv(c, &b, 1, 0) != 0)
		t_fatal("echo");
	close(c);
	t_sleep_ms(30);	// for shuntd to read that it ended: only then is the half handed out
}

static int after_one(int family)
{
	ended_connection(family == AF_INET ? &echo4 : &echo6);
	return t_socket(family, SOCK_STREAM);
}

static void show_name(const char *label, int fd)
{
	struct t_addr a = t_sockname(fd);
	char host[64];

	printf("%s: %s, port %s\n", label, t_addr_host(&a, host, sizeof(host)),
	       t_addr_port(&a) ? "set" : "0");
}

static void echo_through(int fd)
{
	char b = 'y';

	if (send(fd, &b, 1, 0) != 1 || recv(fd, &b, 1, 0) != 1 || b != 'y')
		t_fatal("echo through");
}

static void fresh_name(void)
{
	int fd = after_one(AF_INET), v = -1;
	socklen_t len = sizeof(v);

	show_name("fresh socket", fd);
	T_REPORT("getpeername", getpeername(fd, (struct sockaddr *)&(struct sockaddr_storage){ 0 },
					    &(socklen_t){ sizeof(struct sockaddr_storage) }));
	getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &v, &len);
	printf("SO_REUSEADDR %d\n", v);
	getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len);
	printf("TCP_NODELAY %d\n", v);
	close(fd);
}

// A new socket of @family with boolean option @name set, bound to @ip port 0.
static int set_then_bind(int family, int level, int name, const char *ip)
{
	int fd = after_one(family), one = 1;
	struct t_addr a;

	T_REPORT("  setsockopt", setsockopt(fd, level, name, &one, sizeof(one)));
	t_addr_make(&a, ip, 0);
	T_REPORT("  bind", bind(fd, (struct sockaddr *)&a.ss, a.len));
	show_name("  bound", fd);
	return fd;
}

static void bind_it(void)
{
	struct t_addr a;
	int fd;

	printf("SO_REUSEADDR, then bind 127.0.0.1:0\n");
	fd = set_then_bind(AF_INET, SOL_SOCKET, SO_REUSEADDR, "127.0.0.1");
	t_addr_make(&a, "127.0.0.1", 0);
	T_REPORT("bind again", bind(fd, (struct sockaddr *)&a.ss, a.len));
	close(fd);
}

static void listen_unbound(void)
{
	int fd = after_one(AF_INET), c, s;
	struct t_addr a;

	T_REPORT("listen unbound", listen(fd, 4));
	show_name("listening", fd);
	a = t_sockname(fd);
	t_addr_make(&a, "127.0.0.1", t_addr_port(&a));
	c = t_connect(&a);
	s = t_accept(fd);
	printf("accepted on it: %s\n", s >= 0 ? "yes" : "no");
	close(s);
	close(c);
	close(fd);
}

static void connect_elsewhere(void)
{
	struct t_addr other;
	int l = t_listen_loopback(AF_INET, 4, &other), fd = after_one(AF_INET), s;
	struct t_addr mine, peer;

	T_REPORT("connect elsewhere", connect(fd, (struct sockaddr *)&other.ss, other.len));
	s = t_accept(l);
	mine = t_sockname(fd);
	peer = t_peername(s);
	t_expect(t_addr_eq(&mine, &peer), "the server names the client as it names itself");
	show_name("connected elsewhere", fd);
	close(s);
	close(fd);
	close(l);
}

static void connect_same(void)
{
	int fd = after_one(AF_INET);

	T_REPORT("connect to the echo server", connect(fd, (struct sockaddr *)&echo4.ss, echo4.len));
	echo_through(fd);
	close(fd);
}

static void refused(void)
{
	struct t_addr gone;
	int l = t_listen_loopback(AF_INET, 1, &gone), fd;

	close(l);
	fd = after_one(AF_INET);
	T_REPORT("connect to a closed port", connect(fd, (struct sockaddr *)&gone.ss, gone.len));
	close(fd);
}

static void reuseport_pair(void)
{
	int a = after_one(AF_INET), b, one = 1;
	struct t_addr at;

	T_REPORT("SO_REUSEPORT a", setsockopt(a, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)));
	t_addr_make(&at, "127.0.0.1", 0);
	T_REPORT("bind a", bind(a, (struct sockaddr *)&at.ss, at.len));
	at = t_sockname(a);
	b = after_one(AF_INET);
	T_REPORT("SO_REUSEPORT b", setsockopt(b, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)));
	T_REPORT("bind b to a's port", bind(b, (struct sockaddr *)&at.ss, at.len));
	close(a);
	close(b);
}

static void v6only(void)
{
	printf("IPV6_V6ONLY, then bind [::]:0\n");
	close(set_then_bind(AF_INET6, IPPROTO_IPV6, IPV6_V6ONLY, "::"));
}

static void dup_then_bind(void)
{
	int fd = after_one(AF_INET), d = dup(fd);
	struct t_addr a, x, y;

	t_addr_make(&a, "127.0.0.1", 0);
	T_REPORT("bind through the duplicate", bind(d, (struct sockaddr *)&a.ss, a.len));
	x = t_sockname(fd);
	y = t_sockname(d);
	t_expect(t_addr_eq(&x, &y), "both descriptors name one socket");
	close(d);
	close(fd);
}

static void child_binds(void)
{
	int fd = after_one(AF_INET), p[2];
	struct t_addr a, seen;
	pid_t pid;

	if (pipe(p))
		t_fatal("pipe");
	pid = t_fork_tied(30);
	if (pid == 0) {
		t_addr_make(&a, "127.0.0.1", 0);
		if (bind(fd, (struct sockaddr *)&a.ss, a.len))
			_exit(1);
		a = t_sockname(fd);
		(void)!write(p[1], &a, sizeof(a));
		_exit(0);
	}
	if (read(p[0], &a, sizeof(a)) != sizeof(a) || t_wait_child(pid) != 0)
		t_fatal("the child could not bind");
	seen = t_sockname(fd);
	t_expect(t_addr_eq(&a, &seen), "the parent sees the child's bind");
	close(p[0]);
	close(p[1]);
	close(fd);
}

static void epoll_then_listen(void)
{
	int fd = after_one(AF_INET), ep = epoll_create1(0), c;
	struct epoll_event ev = { .events = EPOLLIN }, got;
	struct t_addr a;

	T_REPORT("epoll_ctl ADD", epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
	t_addr_make(&a, "127.0.0.1", 0);
	T_REPORT("bind", bind(fd, (struct sockaddr *)&a.ss, a.len));
	T_REPORT("listen", listen(fd, 4));
	a = t_sockname(fd);
	c = t_connect(&a);
	T_REPORT("epoll_wait", epoll_wait(ep, &got, 1, 5000));
	printf("event: %s\n", t_epoll_str(got.events));
	close(c);
	close(fd);
	close(ep);
}

static void nonblocking(void)
{
	int fd = after_one(AF_INET);

	t_set_nonblock(fd, true);
	errno = 0;
	printf("connect non-blocking: %s\n",
	       connect(fd, (struct sockaddr *)&echo4.ss, echo4.len) == 0 ? "0"
	       : errno == EINPROGRESS				       ? "EINPROGRESS"
								       : t_errname(errno));
	printf("writable: %s\n", t_poll_str(t_poll1(fd, POLLOUT, 5000)));
	t_set_nonblock(fd, false);
	echo_through(fd);
	close(fd);
}

// A server that keeps every connection: the client closes first, then
// connects again; the live ones must come from distinct ports.
static void kept_open(void)
{
	struct t_addr at, peers[KEPT];
	int l = t_listen_loopback(AF_INET, KEPT, &at), kept[KEPT], distinct = 1;

	for (int i = 0; i < KEPT; i++) {
		int c = t_connect(&at);

		kept[i] = t_accept(l);
		peers[i] = t_peername(kept[i]);
		close(c);
		t_sleep_ms(30);
	}
	for (int i = 0; i < KEPT; i++)
		for (int j = 0; j < i; j++)
			distinct &= !t_addr_eq(&peers[i], &peers[j]);
	t_expect(distinct, "%d live connections from %d distinct addresses", KEPT, KEPT);
	for (int i = 0; i < KEPT; i++)
		close(kept[i]);
	close(l);
}

int main(void)
{
	pthread_t t4, t6;
	int l4, l6;

	t_start(50);
	l4 = t_listen_loopback(AF_INET, 16, &echo4);
	l6 = t_listen_loopback(AF_INET6, 16, &echo6);
	if (pthread_create(&t4, NULL, echo_server, &l4) || pthread_create(&t6, NULL, echo_server, &l6))
		t_fatal("pthread_create");
	fresh_name();
	bind_it();
	listen_unbound();
	connect_elsewhere();
	connect_same();
	refused();
	reuseport_pair();
	v6only();
	dup_then_bind();
	child_binds();
	epoll_then_listen();
	nonblocking();
	kept_open();
	return t_finish();
}
