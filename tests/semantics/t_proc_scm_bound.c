// SPDX-License-Identifier: MIT
// A privilege-separated server's way with low ports: a helper process
// creates and binds a socket and passes it with SCM_RIGHTS to the worker,
// which connects it. The descriptor the worker receives is new, whatever
// its number held before: here the number of a connection the worker
// closed with the raw system call (which no preload sees), after the
// connection's other end had been handed on (moved onto the kernel). The
// worker's connect, names and bytes are the kernel's, as if the number had
// never been used.
// shunt-expect: shm_connect>=1 shm_accept>=1
#include "t_harness.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { CHILD_WATCHDOG_S = 30 };

// The helper: a socket bound to 127.0.0.1, port chosen by the kernel, sent to the worker.
static void helper(int usock)
{
	struct t_addr a;
	int s = t_socket(AF_INET, SOCK_STREAM);

	t_addr_make(&a, "127.0.0.1", 0);
	if (bind(s, (struct sockaddr *)&a.ss, a.len) < 0)
		t_fatal("helper bind");
	t_send_fd(usock, s, 'b');
	close(s);
	_exit(0);
}

// Holds the end it is given until told to go.
static void holder(int usock)
{
	char b;
	int fd = t_recv_fd(usock, NULL);

	if (read(usock, &b, 1) != 1)
		_exit(1);
	close(fd);
	_exit(0);
}

static void print_addr(const char *what, int fd, bool peer)
{
	struct t_addr a = peer ? t_peername(fd) : t_sockname(fd);
	char host[64];

	printf("  %s: %s\n", what, t_addr_host(&a, host, sizeof(host)));
}

int main(void)
{
	int lfd, c, s, hs[2], us[2], fd, conn, srv, st1, st2;
	struct t_addr a;
	char buf[8];
	pid_t hold, help;

	t_start(60);
	printf("a connection's end handed on, its number closed with the raw system call,\n"
	       "then a bound socket received from a helper onto that number and connected:\n");
	lfd = t_listen_loopback(AF_INET, 4, &a);
	c = t_connect(&a);
	s = t_accept(lfd);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, hs) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, us) < 0)
		t_fatal("socketpair");
	hold = t_fork_tied(CHILD_WATCHDOG_S);
	if (hold == 0)
		holder(hs[1]);
	// The client end goes to the holder (and moves onto the kernel); we keep our copy.
	t_send_fd(hs[0], c, 'h');
	// The server end, closed behind the library's back: its number is free again.
	T_REPORT("  raw close of the server end", syscall(SYS_close, s));
	help = t_fork_tied(CHILD_WATCHDOG_S);
	if (help == 0)
		helper(us[1]);
	fd = t_recv_fd(us[0], NULL);
	t_expect(fd == s, "  the received socket has the number the closed one had");
	T_REPORT("  connect", connect(fd, (struct sockaddr *)&a.ss, a.len));
	print_addr("its local address", fd, false);
	print_addr("its peer", fd, true);
	srv = t_accept(lfd);
	print_addr("the server sees the peer", srv, true);
	T_REPORT("  send", send(fd, "hello", 5, 0));
	T_REPORT_DATA("  server recv", recv(srv, buf, sizeof(buf), 0), buf);
	T_REPORT("  server send", send(srv, "world", 5, 0));
	T_REPORT_DATA("  recv", recv(fd, buf, sizeof(buf), 0), buf);
	conn = fd;
	close(conn);
	close(srv);
	if (write(hs[0], "q", 1) != 1)
		t_fatal("write");
	st1 = t_wait_child(hold);
	st2 = t_wait_child(help);
	t_expect(st1 == 0 && st2 == 0, "  helpers exit status %d %d", st1, st2);
	close(c);
	close(lfd);
	return t_finish();
}
