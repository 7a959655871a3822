// SPDX-License-Identifier: MIT
// epoll and descriptors closed with the raw system call, as libuv does: a
// connection registered in an epoll instance is closed with
// syscall(SYS_close), and the number comes back as a pipe or an AF_UNIX
// socket, which is registered and pinged; two event loops (threads, each
// with its own epoll instance) then play ping-pong over AF_UNIX on
// descriptors that reused the numbers of closed connections, for many
// rounds. The closed connection's registration is gone with it, and its
// peer sees EOF.
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

enum {
	PEER_MS = 100,
	ROUNDS = 200,
	MAX_EV = 8,
};

// A connected pair whose listener stays open until done(): nothing below
// the client's number is free, so a number it gives back is the lowest.
static int listener = -1;

static void pair(int family, int *client, int *server)
{
	struct t_addr a;

	listener = t_listen_loopback(family, 4, &a);
	*client = t_connect(&a);
	*server = t_accept(listener);
}

static void done(void)
{
	close(listener);
}

static int show(const char *label, int ep, int timeout_ms)
{
	struct epoll_event ev[MAX_EV];
	int n = t_epoll_wait_sorted(ep, ev, MAX_EV, timeout_ms);

	printf("%s: %d", label, n);
	for (int i = 0; i < n; i++)
		printf(" [%llu %s]", (unsigned long long)ev[i].data.u64, t_epoll_str(ev[i].events));
	printf("\n");
	return n;
}

static void add(const char *label, int ep, int fd, uint64_t data)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = data };

	T_REPORT(label, epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
}

static void pipe_on_closed_number(void)
{
	int ep = epoll_create1(0), c, s, p[2];
	char b;

	printf("registered connection closed raw, a pipe on its number:\n");
	pair(AF_INET, &c, &s);
	add("  add(client)", ep, c, 1);
	T_REPORT("  send(peer, \"x\")", send(s, "x", 1, 0));
	show("  wait", ep, T_WAIT_MS);
	T_REPORT("  syscall(SYS_close, client)", syscall(SYS_close, c));
	show("  wait after the close", ep, 0);
	T_REPORT("  pipe", pipe(p));
	t_expect(p[0] == c, "  the pipe's read end has the closed number");
	add("  add(pipe)", ep, p[0], 2);
	show("  wait, nothing written", ep, 0);
	T_REPORT("  write(pipe, \"y\")", write(p[1], "y", 1));
	show("  wait", ep, T_WAIT_MS);
	T_REPORT("  read(pipe)", read(p[0], &b, 1));
	show("  wait, drained", ep, 0);
	T_REPORT("  epoll_ctl(DEL, pipe)", epoll_ctl(ep, EPOLL_CTL_DEL, p[0], NULL));
	printf("  peer sees: %s\n", t_peer_sees(s, PEER_MS));
	close(p[0]);
	close(p[1]);
	close(s);
	close(ep);
	done();
}

// One event loop: waits on its epoll instance for a byte, answers with one.
struct loop {
	int ep, fd, rounds;
	char tag;
	bool starts;
	int seen;
};

static void *run_loop(void *arg)
{
	struct loop *l = arg;
	struct epoll_event ev;
	char b = l->tag;

	if (l->starts && write(l->fd, &b, 1) != 1)
		t_fatal("write");
	while (l->seen < l->rounds) {
		int n = epoll_wait(l->ep, &ev, 1, T_WAIT_MS);

		if (n < 0 && errno == EINTR)
			continue;
		if (n != 1)
			t_fatal("loop %c: epoll_wait says %d after %d rounds", l->tag, n, l->seen);
		if (read(l->fd, &b, 1) != 1)
			t_fatal("loop %c: read", l->tag);
		l->seen++;
		b = l->tag;
		if ((l->starts ? l->seen < l->rounds : true) && write(l->fd, &b, 1) != 1)
			t_fatal("loop %c: write", l->tag);
	}
	return NULL;
}

static void ping_pong(void)
{
	int c1, s1, c2, s2, u[2], l1;
	struct loop a = { .tag = 'a', .starts = true, .rounds = ROUNDS };
	struct loop b = { .tag = 'b', .rounds = ROUNDS };
	pthread_t ta, tb;

	printf("two event loops over AF_UNIX, on numbers of connections closed raw:\n");
	pair(AF_INET, &c1, &s1);
	l1 = listener;
	pair(AF_INET6, &c2, &s2);
	a.ep = epoll_create1(EPOLL_CLOEXEC);
	b.ep = epoll_create1(EPOLL_CLOEXEC);
	add("  add(loop a, tcp)", a.ep, c1, 7);
	add("  add(loop b, tcp)", b.ep, c2, 8);
	T_REPORT("  syscall(SYS_close, tcp 1)", syscall(SYS_close, c1));
	T_REPORT("  syscall(SYS_close, tcp 2)", syscall(SYS_close, c2));
	T_REPORT("  socketpair", socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, u));
	t_expect(u[0] == c1 && u[1] == c2, "  the socketpair has both closed numbers");
	a.fd = u[0];
	b.fd = u[1];
	add("  add(loop a, unix)", a.ep, a.fd, 1);
	add("  add(loop b, unix)", b.ep, b.fd, 2);
	if (pthread_create(&ta, NULL, run_loop, &a) || pthread_create(&tb, NULL, run_loop, &b))
		t_fatal("pthread_create");
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	printf("  rounds: a %d, b %d\n", a.seen, b.seen);
	printf("  peers see: %s, ", t_peer_sees(s1, PEER_MS));
	printf("%s\n", t_peer_sees(s2, PEER_MS));
	close(u[0]);
	close(u[1]);
	close(s1);
	close(s2);
	close(a.ep);
	close(b.ep);
	close(l1);
	done();
}

int main(void)
{
	t_start(60);
	pipe_on_closed_number();
	ping_pong();
	return t_finish();
}
