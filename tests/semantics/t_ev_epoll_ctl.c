// SPDX-License-Identifier: MIT
// epoll_create, epoll_create1, epoll_ctl and epoll_wait arguments with TCP
// sockets as targets: flags, EEXIST, ENOENT, EBADF, EINVAL (epfd == fd, an
// epfd that is not epoll, bad op, EPOLLEXCLUSIVE misuse), EPERM for files,
// ELOOP for loops and deep nesting, and the order in which they are checked.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

enum {
	CHAIN = 7, // epoll instances nested in a chain
};

// Hidden from the compiler, which would refuse to build the bad calls.
static volatile int v_minus_one = -1, v_too_many = INT_MAX / sizeof(struct epoll_event) + 1;

static void cloexec(const char *label, int fd)
{
	int fl = fcntl(fd, F_GETFD);

	printf("  %s: FD_CLOEXEC %s\n", label,
	       fl < 0 ? t_errname(errno) : fl & FD_CLOEXEC ? "set" : "clear");
}

static void create(void)
{
	int fd;

	T_REPORT("epoll_create(0)", epoll_create(0));
	T_REPORT("epoll_create(-1)", epoll_create(-1));
	fd = T_REPORT_FD("epoll_create(1)", epoll_create(1));
	cloexec("epoll_create(1)", fd);
	close(fd);
	fd = T_REPORT_FD("epoll_create(INT_MAX)", epoll_create(INT_MAX));
	close(fd);
	fd = T_REPORT_FD("epoll_create1(0)", epoll_create1(0));
	cloexec("epoll_create1(0)", fd);
	close(fd);
	fd = T_REPORT_FD("epoll_create1(EPOLL_CLOEXEC)", epoll_create1(EPOLL_CLOEXEC));
	cloexec("epoll_create1(EPOLL_CLOEXEC)", fd);
	close(fd);
	T_REPORT("epoll_create1(O_NONBLOCK)", epoll_create1(O_NONBLOCK));
	T_REPORT("epoll_create1(1)", epoll_create1(1));
}

static struct epoll_event in_ev(uint64_t data)
{
	return (struct epoll_event){ .events = EPOLLIN, .data.u64 = data };
}

static void ctl(int c, int s, int lfd)
{
	int ep = epoll_create1(EPOLL_CLOEXEC), ep2 = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = in_ev(1);
	int fresh = t_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC), file, dead, p[2];
	char tmpl[] = "/tmp/t_ev_epoll_ctl.XXXXXX";

	if (ep < 0 || ep2 < 0)
		t_fatal("epoll_create1");
	if (pipe2(p, O_CLOEXEC) < 0)
		t_fatal("pipe2");
	file = mkostemp(tmpl, O_CLOEXEC);
	if (file < 0)
		t_fatal("mkostemp");
	unlink(tmpl);
	dead = fcntl(c, F_DUPFD_CLOEXEC, 900);
	if (dead < 0)
		t_fatal("F_DUPFD");
	close(dead);

	T_REPORT("ADD tcp_c", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("ADD tcp_c again", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("ADD tcp_c to a second epoll", epoll_ctl(ep2, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("MOD tcp_s (not added)", epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	T_REPORT("DEL tcp_s (not added)", epoll_ctl(ep, EPOLL_CTL_DEL, s, &ev));
	T_REPORT("MOD tcp_c", epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev));
	T_REPORT("DEL tcp_c, NULL event", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	T_REPORT("DEL tcp_c again", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	T_REPORT("ADD tcp_c, NULL event", epoll_ctl(ep, EPOLL_CTL_ADD, c, NULL));
	T_REPORT("ADD listener", epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev));
	T_REPORT("ADD an unconnected socket", epoll_ctl(ep, EPOLL_CTL_ADD, fresh, &ev));
	ev.events = 0;
	T_REPORT("ADD tcp_s with events 0", epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev));
	T_REPORT("MOD tcp_s, NULL event", epoll_ctl(ep, EPOLL_CTL_MOD, s, NULL));
	ev.events = EPOLLIN | EPOLLWAKEUP;
	T_REPORT("MOD tcp_s EPOLLIN|EPOLLWAKEUP (dropped without CAP_BLOCK_SUSPEND)",
		 epoll_ctl(ep, EPOLL_CTL_MOD, s, &ev));
	ev.events = 0xffffffffu;
	T_REPORT("ADD tcp_c with every bit set", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	ev.events = 0x0fffffffu & ~EPOLLEXCLUSIVE;
	T_REPORT("ADD tcp_c with every bit but EXCLUSIVE and the top nibble",
		 epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("DEL tcp_c", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));

	printf("-- EBADF\n");
	ev = in_ev(2);
	T_REPORT("epfd -1", epoll_ctl(-1, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("epfd closed", epoll_ctl(dead, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("fd -1", epoll_ctl(ep, EPOLL_CTL_ADD, -1, &ev));
	T_REPORT("fd closed", epoll_ctl(ep, EPOLL_CTL_ADD, dead, &ev));
	T_REPORT("DEL fd closed", epoll_ctl(ep, EPOLL_CTL_DEL, dead, NULL));
	T_REPORT("epfd closed and fd closed", epoll_ctl(dead, EPOLL_CTL_ADD, dead, &ev));

	printf("-- EPERM\n");
	T_REPORT("ADD a regular file", epoll_ctl(ep, EPOLL_CTL_ADD, file, &ev));
	{
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		int dir = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		int mfd = memfd_create("t_ev", MFD_CLOEXEC);

		T_REPORT("ADD /dev/null", epoll_ctl(ep, EPOLL_CTL_ADD, null, &ev));
		T_REPORT("ADD a directory", epoll_ctl(ep, EPOLL_CTL_ADD, dir, &ev));
		T_REPORT("ADD a memfd", epoll_ctl(ep, EPOLL_CTL_ADD, mfd, &ev));
		T_REPORT("DEL a regular file", epoll_ctl(ep, EPOLL_CTL_DEL, file, NULL));
		close(null);
		close(dir);
		close(mfd);
	}

	printf("-- EINVAL\n");
	T_REPORT("epfd == fd", epoll_ctl(ep, EPOLL_CTL_ADD, ep, &ev));
	T_REPORT("epfd is a TCP socket", epoll_ctl(c, EPOLL_CTL_ADD, s, &ev));
	T_REPORT("epfd is a TCP socket, fd itself", epoll_ctl(c, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("epfd is a listener", epoll_ctl(lfd, EPOLL_CTL_ADD, p[0], &ev));
	T_REPORT("epfd is a pipe", epoll_ctl(p[0], EPOLL_CTL_ADD, c, &ev));
	T_REPORT("op 0", epoll_ctl(ep, 0, c, &ev));
	T_REPORT("op 99", epoll_ctl(ep, 99, c, &ev));
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	T_REPORT("ADD listener again with EPOLLEXCLUSIVE", epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev));
	T_REPORT("MOD listener with EPOLLEXCLUSIVE", epoll_ctl(ep, EPOLL_CTL_MOD, lfd, &ev));
	T_REPORT("ADD tcp_c EPOLLIN|EPOLLEXCLUSIVE", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	ev.events = EPOLLIN;
	T_REPORT("MOD tcp_c (added exclusive) to EPOLLIN", epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev));
	T_REPORT("DEL tcp_c (added exclusive)", epoll_ctl(ep, EPOLL_CTL_DEL, c, NULL));
	{
		static const struct {
			uint32_t extra;
			const char *name;
		} with[] = {
			{ EPOLLONESHOT, "EPOLLONESHOT" }, { EPOLLRDHUP, "EPOLLRDHUP" },
			{ EPOLLPRI, "EPOLLPRI" },	  { EPOLLOUT, "EPOLLOUT" },
			{ EPOLLET, "EPOLLET" },		  { EPOLLRDNORM, "EPOLLRDNORM" },
			{ EPOLLWRNORM, "EPOLLWRNORM" },
			{ EPOLLERR | EPOLLHUP, "EPOLLERR|EPOLLHUP" },
		};
		char label[96];

		for (size_t i = 0; i < sizeof(with) / sizeof(with[0]); i++) {
			ev.events = EPOLLIN | EPOLLEXCLUSIVE | with[i].extra;
			snprintf(label, sizeof(label), "ADD tcp_s EPOLLIN|EPOLLEXCLUSIVE|%s",
				 with[i].name);
			if (T_REPORT(label, epoll_ctl(ep2, EPOLL_CTL_ADD, s, &ev)) == 0)
				epoll_ctl(ep2, EPOLL_CTL_DEL, s, NULL);
		}
	}
	ev.events = EPOLLIN | EPOLLEXCLUSIVE;
	T_REPORT("ADD an epoll fd with EPOLLEXCLUSIVE", epoll_ctl(ep2, EPOLL_CTL_ADD, ep, &ev));

	printf("-- check order\n");
	ev = in_ev(3);
	T_REPORT("epfd a TCP socket, fd closed", epoll_ctl(c, EPOLL_CTL_ADD, dead, &ev));
	T_REPORT("epfd a TCP socket, fd a regular file", epoll_ctl(c, EPOLL_CTL_ADD, file, &ev));
	T_REPORT("op 99, fd a regular file", epoll_ctl(ep, 99, file, &ev));
	T_REPORT("op 99, fd closed", epoll_ctl(ep, 99, dead, &ev));
	T_REPORT("epfd == fd, op 99", epoll_ctl(ep, 99, ep, &ev));
	T_REPORT("MOD EPOLLEXCLUSIVE, fd not added", epoll_ctl(ep, EPOLL_CTL_MOD, s,
		 &(struct epoll_event){ .events = EPOLLIN | EPOLLEXCLUSIVE }));
	T_REPORT("ADD listener again, epfd a TCP socket", epoll_ctl(c, EPOLL_CTL_ADD, lfd, &ev));

	close(fresh);
	close(file);
	close(p[0]);
	close(p[1]);
	close(ep);
	close(ep2);
}

static void loops(int c)
{
	int a = epoll_create1(EPOLL_CLOEXEC), b = epoll_create1(EPOLL_CLOEXEC);
	int chain[CHAIN];
	struct epoll_event ev = in_ev(4);
	char label[96];

	T_REPORT("ADD tcp_c to A", epoll_ctl(a, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("ADD A to B", epoll_ctl(b, EPOLL_CTL_ADD, a, &ev));
	T_REPORT("ADD B to A", epoll_ctl(a, EPOLL_CTL_ADD, b, &ev));
	T_REPORT("ADD B to B", epoll_ctl(b, EPOLL_CTL_ADD, b, &ev));
	T_REPORT("ADD A to B again", epoll_ctl(b, EPOLL_CTL_ADD, a, &ev));
	close(a);
	close(b);

	// chain[i] holds chain[i - 1]; chain[0] holds tcp_c.
	for (int i = 0; i < CHAIN; i++) {
		chain[i] = epoll_create1(EPOLL_CLOEXEC);
		if (chain[i] < 0)
			t_fatal("epoll_create1");
		snprintf(label, sizeof(label), "chain: ADD %s to epoll #%d",
			 i ? "the previous epoll" : "tcp_c", i);
		T_REPORT(label, epoll_ctl(chain[i], EPOLL_CTL_ADD, i ? chain[i - 1] : c, &ev));
	}
	T_REPORT("chain: ADD the last to the first",
		 epoll_ctl(chain[0], EPOLL_CTL_ADD, chain[CHAIN - 1], &ev));
	for (int i = 0; i < CHAIN; i++)
		close(chain[i]);
}

static void wait_args(int c)
{
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event ev = in_ev(5), out[2];

	epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
	T_REPORT("epoll_wait(maxevents 0)", epoll_wait(ep, out, 0, 0));
	T_REPORT("epoll_wait(maxevents -1)", epoll_wait(ep, out, v_minus_one, 0));
	T_REPORT("epoll_wait(maxevents INT_MAX / sizeof(event) + 1)",
		 epoll_wait(ep, out, v_too_many, 0));
	T_REPORT("epoll_wait(epfd a TCP socket)", epoll_wait(c, out, 2, 0));
	T_REPORT("epoll_wait(epfd -1)", epoll_wait(-1, out, 2, 0));
	T_REPORT("epoll_pwait(maxevents 0)", epoll_pwait(ep, out, 0, 0, NULL));
	T_REPORT("epoll_pwait2(epfd a TCP socket)", epoll_pwait2(c, out, 2, NULL, NULL));
	T_REPORT("epoll_pwait2(maxevents 0, bad timeout)",
		 epoll_pwait2(ep, out, 0, &(struct timespec){ 0, -1 }, NULL));
	T_REPORT("epoll_wait(idle, maxevents 1)", epoll_wait(ep, out, 1, 0));
	close(ep);
}

int main(void)
{
	struct t_addr a;
	int c, s, lfd;

	t_start(30);
	printf("-- create\n");
	create();
	t_pair(AF_INET, &c, &s);
	lfd = t_listen_loopback(AF_INET, 4, &a);
	printf("-- ctl\n");
	ctl(c, s, lfd);
	printf("-- loops\n");
	loops(c);
	printf("-- wait arguments\n");
	wait_args(c);
	T_REPORT("send(tcp_s, \"ok\")", send(s, "ok", 2, 0));
	{
		char buf[4];

		T_REPORT_DATA("recv(tcp_c)", recv(c, buf, sizeof(buf), 0), buf);
	}
	close(c);
	close(s);
	close(lfd);
	return t_finish();
}
