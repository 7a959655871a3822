// SPDX-License-Identifier: MIT
// The address connect() binds a socket to, whatever bound it before: an
// unbound socket gets a loopback address and a port of its own; one the
// program bound keeps its address and port, and so does one bound by a
// system call made without the C library, which an interposer cannot see.
// The accepted end names the same address as its peer.
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
#include "t_bound.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

// bind(2) as an inline system call, which no interposed function sees.
static long raw_bind(int fd, const struct sockaddr *a, socklen_t len)
{
#if defined(__x86_64__)
	long r;

	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"((long)SYS_bind), "D"((long)fd), "S"(a), "d"((long)len)
			 : "rcx", "r11", "memory");
	return r;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = SYS_bind;
	register long x0 __asm__("x0") = fd;
	register long x1 __asm__("x1") = (long)a;
	register long x2 __asm__("x2") = len;

	__asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
	return x0;
#else
	(void)fd, (void)a, (void)len;
	return -ENOSYS;
#endif
}

// Connect @fd to @to, accept it on @lfd, and say what both ends name.
static void connect_and_look(int fd, int lfd, const struct t_addr *to, const struct t_addr *was)
{
	struct t_addr name = t_connect_bound(fd, to);

	t_expect(t_addr_port(&name) != 0, "  with a port");
	if (was && t_addr_port(was))
		t_expect(t_addr_eq(&name, was), "  the one it was bound to before");
	t_accepted_peer_is(lfd, &name);
	close(fd);
}

int main(void)
{
	struct sockaddr_in in = { .sin_family = AF_INET };
	struct t_addr l, was;
	int lfd, fd;
	long r;

	t_start(30);
	lfd = t_listen_loopback(AF_INET, 8, &l);

	printf("unbound\n");
	connect_and_look(t_socket(AF_INET, SOCK_STREAM), lfd, &l, NULL);

	printf("bound to 127.0.0.2\n");
	fd = t_socket(AF_INET, SOCK_STREAM);
	in.sin_addr.s_addr = htonl(0x7f000002);
	T_REPORT("  bind", bind(fd, (struct sockaddr *)&in, sizeof(in)));
	was = t_sockname(fd);
	connect_and_look(fd, lfd, &l, &was);

	printf("bound to 127.0.0.3 by an inline system call\n");
	fd = t_socket(AF_INET, SOCK_STREAM);
	in.sin_addr.s_addr = htonl(0x7f000003);
	r = raw_bind(fd, (struct sockaddr *)&in, sizeof(in));
	if (r == -ENOSYS) {
		// Not on this architecture: bound the ordinary way, for the same trace.
		r = bind(fd, (struct sockaddr *)&in, sizeof(in));
	}
	t_expect(r == 0, "  bind = 0");
	was = t_sockname(fd);
	connect_and_look(fd, lfd, &l, &was);

	close(lfd);
	return t_finish();
}
