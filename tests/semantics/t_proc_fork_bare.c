// SPDX-License-Identifier: MIT
// Children made without fork(): _Fork() (no atfork handlers) and glibc's
// clone() without CLONE_VM. Each holds what the parent held, as after fork:
// a connection the parent closes stays open for the child; a listener the
// child makes is the child's alone, and once the child closed it and exited
// the port is free for the parent to listen on, and its clients reach the
// parent's listener.
// shunt-expect: shm_connect>=6 shm_accept>=6 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

pid_t _Fork(void);

enum {
	CHILD_WATCHDOG_S = 30,
	CLONE_STACK = 256 << 10,
};

enum how { BY_FORK_BARE, BY_CLONE };

struct job {
	enum how how;
	int c, s;		// a connection: the child's end, the peer's
	int lfd;		// the parent's listener, closed in the child
	struct t_chan to_parent;
	int exit_closed;	// close the listener before exiting
};

static const char *how_name(enum how h)
{
	return h == BY_FORK_BARE ? "_Fork()" : "clone() without CLONE_VM";
}

// The child: make a listener, say its port, serve one client, talk on the
// inherited connection, then exit (closing the listener first or not).
static int child(void *arg)
{
	struct job *j = arg;
	struct t_addr a;
	char buf[8];
	int l, s;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	t_watchdog(CHILD_WATCHDOG_S);
	close(j->s);
	close(j->lfd);
	l = t_listen_loopback(AF_INET, 4, &a);
	t_chan_put(&j->to_parent, t_addr_port(&a));
	s = t_accept(l);
	t_recv_all(s, buf, 4);
	t_send_all(s, buf, 4);
	// The client closes first: its side, not the listener's port, has the TIME_WAIT.
	if (recv(s, buf, 1, 0) != 0)
		_exit(3);
	close(s);
	t_recv_all(j->c, buf, 6);
	t_send_all(j->c, "child!", 6);
	if (j->exit_closed)
		close(l);
	_exit(memcmp(buf, "parent", 6) ? 2 : 0);
}

static pid_t start(struct job *j)
{
	pid_t pid;

	fflush(stdout);
	if (j->how == BY_FORK_BARE) {
		pid = _Fork();
		if (pid == 0)
			child(j);
	} else {
		char *stack = malloc(CLONE_STACK);

		if (!stack)
			t_fatal("malloc");
		pid = clone(child, stack + CLONE_STACK, SIGCHLD, j);
		free(stack);
	}
	if (pid < 0)
		t_fatal("start child");
	return pid;
}

static void scene(enum how how, bool exit_closed)
{
	struct job j = { .how = how, .exit_closed = exit_closed };
	struct t_addr a, mine;
	char buf[8];
	int c, s, l, st;
	uint16_t port;
	pid_t pid;

	printf("%s, the child %s its listener:\n", how_name(how),
	       exit_closed ? "closes" : "exits holding");
	j.lfd = t_listen_loopback(AF_INET, 4, &mine);
	t_pair(AF_INET, &j.c, &j.s);
	t_chan_open(&j.to_parent);
	pid = start(&j);
	// The connection is the child's too: our close ends nothing.
	T_REPORT("  parent close of the shared end", close(j.c));
	port = (uint16_t)t_chan_get(&j.to_parent);
	t_addr_make(&a, "127.0.0.1", port);
	c = t_connect(&a);
	t_send_all(c, "ping", 4);
	t_recv_all(c, buf, 4);
	close(c);
	t_send_all(j.s, "parent", 6);
	t_recv_all(j.s, buf, 6);
	printf("  the child answered on the connection: %.6s\n", buf);
	st = t_wait_child(pid);
	t_expect(st == 0, "  child exit status %d", st);
	printf("  then the peer sees: %s\n", t_peer_sees(j.s, T_WAIT_MS));
	close(j.s);
	// The child's port, free again: the parent listens there and is reached.
	l = t_socket(AF_INET, SOCK_STREAM);
	{
		int one = 1;

		setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	}
	T_REPORT("  parent bind to the child's port", bind(l, (struct sockaddr *)&a.ss, a.len));
	T_REPORT("  parent listen", listen(l, 4));
	c = t_connect(&a);
	s = t_accept(l);
	t_send_all(c, "again", 5);
	t_recv_all(s, buf, 5);
	printf("  the parent's listener got: %.5s\n", buf);
	close(s);
	close(c);
	close(l);
	close(j.lfd);
	close(j.to_parent.rd);
	close(j.to_parent.wr);
}

int main(void)
{
	t_start(60);
	scene(BY_FORK_BARE, true);
	scene(BY_FORK_BARE, false);
	scene(BY_CLONE, true);
	scene(BY_CLONE, false);
	return t_finish();
}
