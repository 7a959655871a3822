// SPDX-License-Identifier: MIT
// A socket another process bound, then connected by the process that made
// it: one made before fork and bound by the child, one passed with
// SCM_RIGHTS and bound by the receiver. connect() keeps the address and
// port the other process bound it to.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0 kernel_accept==0
#include "t_bound.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { CHILD_WATCHDOG_S = 30 };

static void bind_to(int fd, uint32_t ip)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(ip) };

	if (bind(fd, (struct sockaddr *)&in, sizeof(in)) < 0)
		t_fatal("bind");
}

static void connect_and_look(const char *what, int fd, int lfd, const struct t_addr *to)
{
	struct t_addr was = t_sockname(fd), name;

	printf("%s\n", what);
	t_expect(t_addr_port(&was) != 0, "  bound to a port");
	name = t_connect_bound(fd, to);
	t_expect(t_addr_eq(&name, &was), "  the address and port the other process bound");
	t_accepted_peer_is(lfd, &name);
	close(fd);
}

int main(void)
{
	struct t_chan bound;
	struct t_addr l;
	int lfd, before, sent, sv[2];
	pid_t pid;

	t_start(30);
	lfd = t_listen_loopback(AF_INET, 8, &l);
	before = t_socket(AF_INET, SOCK_STREAM);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		t_fatal("socketpair");
	t_chan_open(&bound);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		int got;

		close(sv[0]);
		bind_to(before, 0x7f000002);
		got = t_recv_fd(sv[1], NULL);
		bind_to(got, 0x7f000003);
		t_chan_put(&bound, 1);
		_exit(0);
	}
	close(sv[1]);
	sent = t_socket(AF_INET, SOCK_STREAM);
	t_send_fd(sv[0], sent, 's');
	t_chan_get(&bound);
	t_expect(t_wait_child(pid) == 0, "child exit status 0");
	connect_and_look("made before fork, bound by the child", before, lfd, &l);
	connect_and_look("sent with SCM_RIGHTS, bound by the receiver", sent, lfd, &l);
	close(sv[0]);
	close(lfd);
	return t_finish();
}
