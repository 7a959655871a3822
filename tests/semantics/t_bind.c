// SPDX-License-Identifier: MIT
// Binding and listening: SO_REUSEADDR, EADDRINUSE from a second process while
// the first listens, a port held by an accepted connection after its listener
// closed, bind twice, bind errors, listen on a connected socket, autobind.
// shunt-needs: companions
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int get_int(int fd, int level, int opt)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, level, opt, &v, &len) < 0)
		t_fatal("getsockopt");
	return v;
}

static void set_int(int fd, int level, int opt, int v)
{
	if (setsockopt(fd, level, opt, &v, sizeof(v)) < 0)
		t_fatal("setsockopt");
}

// Child: told a port, tries to bind it the ways the parent asks.
static int child(struct t_chan *to_child, struct t_chan *to_parent)
{
	struct t_addr a;
	uint32_t port;
	int fd, step;

	t_watchdog(30); // alarms are not inherited across fork
	for (step = 0;; step++) {
		port = t_chan_get(to_child);
		if (port == 0)
			return 0;
		t_addr_make(&a, "127.0.0.1", (uint16_t)port);
		fd = t_socket(AF_INET, SOCK_STREAM);
		if (step % 2)
			set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1);
		printf("child: bind(listening port%s)", step % 2 ? ", SO_REUSEADDR" : "");
		fflush(stdout);
		T_REPORT("", bind(fd, (struct sockaddr *)&a.ss, a.len));
		close(fd);
		t_chan_put(to_parent, 1);
	}
}

static void second_process(struct t_chan *to_child, struct t_chan *to_parent)
{
	struct t_addr a;
	int lfd, fd;

	lfd = t_socket(AF_INET, SOCK_STREAM);
	set_int(lfd, SOL_SOCKET, SO_REUSEADDR, 1);
	t_addr_make(&a, "127.0.0.1", 0);
	if (bind(lfd, (struct sockaddr *)&a.ss, a.len) || listen(lfd, 4))
		t_fatal("bind/listen");
	a = t_sockname(lfd);
	// Plain, then with SO_REUSEADDR: a listener blocks both.
	t_chan_put(to_child, t_addr_port(&a));
	t_chan_get(to_parent);
	t_chan_put(to_child, t_addr_port(&a));
	t_chan_get(to_parent);
	// Also within this process.
	fd = t_socket(AF_INET, SOCK_STREAM);
	set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1);
	T_REPORT("parent: bind(listening port, SO_REUSEADDR)",
		 bind(fd, (struct sockaddr *)&a.ss, a.len));
	close(fd);
	t_chan_put(to_child, 0);
	close(lfd);
}

static void reuseaddr(void)
{
	struct t_addr a, any;
	int lfd, c, s, fd;

	fd = t_socket(AF_INET, SOCK_STREAM);
	printf("SO_REUSEADDR default = %d\n", get_int(fd, SOL_SOCKET, SO_REUSEADDR));
	T_REPORT("setsockopt(SO_REUSEADDR, 1)",
		 setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int)));
	printf("SO_REUSEADDR = %d\n", get_int(fd, SOL_SOCKET, SO_REUSEADDR));
	T_REPORT("setsockopt(SO_REUSEADDR, 7)",
		 setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){ 7 }, sizeof(int)));
	printf("SO_REUSEADDR = %d\n", get_int(fd, SOL_SOCKET, SO_REUSEADDR));
	close(fd);

	// An accepted connection keeps the port after its listener is gone:
	// binding it needs SO_REUSEADDR, on the old listener (the accepted
	// socket inherits it) and on the new socket.
	lfd = t_socket(AF_INET, SOCK_STREAM);
	set_int(lfd, SOL_SOCKET, SO_REUSEADDR, 1);
	t_addr_make(&a, "127.0.0.1", 0);
	if (bind(lfd, (struct sockaddr *)&a.ss, a.len) || listen(lfd, 4))
		t_fatal("bind/listen");
	a = t_sockname(lfd);
	c = t_connect(&a);
	s = t_accept(lfd);
	close(lfd);
	fd = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("bind(port of a live accepted connection)",
		 bind(fd, (struct sockaddr *)&a.ss, a.len));
	close(fd);
	any = a;
	((struct sockaddr_in *)&any.ss)->sin_addr.s_addr = htonl(INADDR_ANY);
	fd = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("bind(0.0.0.0:that port)", bind(fd, (struct sockaddr *)&any.ss, any.len));
	close(fd);
	fd = t_socket(AF_INET, SOCK_STREAM);
	set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1);
	T_REPORT("bind(that port, SO_REUSEADDR)", bind(fd, (struct sockaddr *)&a.ss, a.len));
	T_REPORT("listen on it", listen(fd, 4));
	{
		// The new listener works while the old connection lives on.
		int c2 = t_connect(&a), s2 = t_accept(fd);
		char buf[8];

		T_REPORT("send(c2)", send(c2, "new", 3, 0));
		t_wait_inq(s2, 3);
		T_REPORT_DATA("recv(s2)", recv(s2, buf, sizeof(buf), 0), buf);
		T_REPORT("send(c) on the old connection", send(c, "old", 3, 0));
		t_wait_inq(s, 3);
		T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
		close(c2);
		close(s2);
	}
	close(fd);
	close(c);
	close(s);
}

static void bind_errors(void)
{
	struct t_addr a, b;
	int fd, c, s;

	fd = t_socket(AF_INET, SOCK_STREAM);
	t_addr_make(&a, "127.0.0.1", 0);
	T_REPORT("bind(127.0.0.1:0)", bind(fd, (struct sockaddr *)&a.ss, a.len));
	T_REPORT("bind again", bind(fd, (struct sockaddr *)&a.ss, a.len));
	b = t_sockname(fd);
	t_expect(t_addr_port(&b) != 0, "bound: port nonzero");
	close(fd);

	fd = t_socket(AF_INET, SOCK_STREAM);
	t_addr_make(&a, "192.0.2.1", 0);
	T_REPORT("bind(192.0.2.1, not local)", bind(fd, (struct sockaddr *)&a.ss, a.len));
	t_addr_make(&a, "127.0.0.1", 0);
	T_REPORT("bind(short addrlen)", bind(fd, (struct sockaddr *)&a.ss, 8));
	a.ss.ss_family = AF_INET6;
	T_REPORT("bind(AF_INET6 address on AF_INET socket)",
		 bind(fd, (struct sockaddr *)&a.ss, sizeof(struct sockaddr_in)));
	a.ss.ss_family = AF_UNSPEC;
	T_REPORT("bind(AF_UNSPEC)", bind(fd, (struct sockaddr *)&a.ss,
					  sizeof(struct sockaddr_in)));
	close(fd);

	// listen without bind picks an ephemeral port on INADDR_ANY.
	fd = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("listen(unbound)", listen(fd, 4));
	a = t_sockname(fd);
	{
		char host[64];

		t_expect(t_addr_port(&a) != 0, "autobound: port nonzero, host %s",
			 t_addr_host(&a, host, sizeof(host)));
	}
	T_REPORT("listen again (new backlog)", listen(fd, 8));
	T_REPORT("bind after listen", bind(fd, (struct sockaddr *)&b.ss, b.len));
	t_addr_make(&b, "127.0.0.1", t_addr_port(&a));
	c = t_connect(&b);
	s = t_accept(fd);
	printf("connect to the autobound listener via 127.0.0.1: ok\n");

	// listen on a connected socket.
	T_REPORT("listen(connected)", listen(c, 4));
	T_REPORT("listen(accepted)", listen(s, 4));
	T_REPORT("bind(connected)", bind(c, (struct sockaddr *)&b.ss, b.len));
	T_REPORT("send(c) still works", send(c, "ok", 2, 0));
	close(c);
	close(s);
	close(fd);

	fd = t_socket(AF_INET, SOCK_STREAM);
	T_REPORT("listen(-1 backlog)", listen(fd, -1));
	close(fd);
}

int main(void)
{
	struct t_chan to_child, to_parent;
	pid_t pid;
	int st;

	t_start(30);
	t_chan_open(&to_child);
	t_chan_open(&to_parent);
	// Fork before any socket exists: the child is the second process.
	pid = t_fork();
	if (pid == 0)
		return child(&to_child, &to_parent);
	second_process(&to_child, &to_parent);
	st = t_wait_child(pid);
	t_expect(st == 0, "child exit status %d", st);
	reuseaddr();
	bind_errors();
	return t_finish();
}
