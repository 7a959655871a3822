// SPDX-License-Identifier: MIT
// A privilege-separated server and its client, each under a seccomp filter
// modelled on OpenSSH's preauth sandbox (sandbox-seccomp-filter.c): read,
// write, poll, futex, the clock, memory as malloc wants it, the recv and
// send family on the sockets they already have (and, for the server,
// accept on its listener); opening files fails with EACCES; anything else
// (socket, connect, sendmsg elsewhere, epoll, eventfd, getrlimit...) kills.
// They set up first, then talk both ways over the connection they made
// before their filters; the server then accepts a new connection, which
// reaches it through the kernel. No SIGSYS, the same bytes, and shared
// memory for the connection set up before the filters.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect>=1 kernel_accept>=1
// shunt-expect: shm_tx_bytes>=200K shm_rx_bytes>=200K
#include <poll.h>
#include <sys/mman.h>

#include "t_seccomp.h"

enum { ROUNDS = 40, MAX_MSG = 30000 };

struct shared {
	struct t_addr addr;
};

static struct shared *sh;
static struct t_chan listening, filtered, client_done;

// What the filters of both ends let through; @fd's recv/send family, @lfd's accept.
static void privsep_filter(struct t_filter *f, int fd, int lfd)
{
	static const long calls[] = { SYS_recvfrom, SYS_sendto, SYS_recvmsg, SYS_sendmsg };
	static const long files[] = { SYS_open, SYS_openat, SYS_stat, SYS_fstat, SYS_lstat,
				      SYS_newfstatat, SYS_statx };

	t_f_begin(f);
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		t_f_rule(f, files[i], SECCOMP_RET_ERRNO | EACCES);
	t_f_allow_basics(f);
	t_f_allow(f, SYS_poll);
	t_f_allow(f, SYS_ppoll);
	t_f_allow(f, SYS_select);
	t_f_allow(f, SYS_pselect6);
	t_f_allow(f, SYS_futex);
	t_f_allow(f, SYS_shutdown);
	t_f_allow(f, SYS_getsockopt);
	t_f_allow(f, SYS_getsockname);
	t_f_allow(f, SYS_getpeername);
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
		t_f_rule_arg(f, calls[i], 0, (uint64_t)fd, SECCOMP_RET_ALLOW);
	if (lfd >= 0) {
		t_f_rule_arg(f, SYS_accept, 0, (uint64_t)lfd, SECCOMP_RET_ALLOW);
		t_f_rule_arg(f, SYS_accept4, 0, (uint64_t)lfd, SECCOMP_RET_ALLOW);
	}
	t_f_end(f, SECCOMP_RET_KILL_PROCESS);
}

static size_t msg_len(int round)
{
	return 1 + (size_t)(t_mix64((uint64_t)round) % MAX_MSG);
}

// Wait with poll, as a sandboxed child does, then read all of it.
static void poll_recv_all(int fd, char *buf, size_t n)
{
	while (n) {
		struct pollfd p = { fd, POLLIN, 0 };
		ssize_t r;

		if (poll(&p, 1, -1) != 1 || !(p.revents & POLLIN))
			t_fatal("poll");
		r = recv(fd, buf, n, MSG_DONTWAIT);
		if (r <= 0)
			t_fatal("recv");
		buf += r;
		n -= (size_t)r;
	}
}

static void server(void *arg)
{
	static char req[MAX_MSG], rep[MAX_MSG];
	struct t_filter f;
	bool right = true;
	int lfd, fd, late;

	(void)arg;
	lfd = t_listen_loopback(AF_INET, 8, &sh->addr);
	t_chan_put(&listening, 1);
	t_chan_put(&listening, 1);
	fd = t_accept(lfd);
	privsep_filter(&f, fd, lfd);
	t_f_install(&f, false);
	printf("server: filter installed\n");
	t_chan_put(&filtered, 1);
	for (int round = 0; round < ROUNDS; round++) {
		size_t n = msg_len(round);

		poll_recv_all(fd, req, n);
		right &= t_stream_check((uint64_t)round, 0, req, n) < 0;
		t_stream_fill((uint64_t)round + 1000, 0, rep, n);
		t_send_all(fd, rep, n);
	}
	t_expect(right, "server: %d requests, every byte right", ROUNDS);
	// After the filter: a new connection, accepted (through the kernel).
	late = T_REPORT_FD("server: accept after the filter", accept(lfd, NULL, NULL));
	T_REPORT_DATA("server: read", read(late, req, 5), req);
	T_REPORT("server: write", write(late, "pong!", 5));
	T_REPORT("server: close late", close(late));
	T_REPORT("server: close", close(fd));
}

static void client(void *arg)
{
	static char req[MAX_MSG], rep[MAX_MSG];
	struct t_filter f;
	bool right = true;
	int fd;

	(void)arg;
	t_chan_get(&listening);
	fd = t_connect(&sh->addr);
	privsep_filter(&f, fd, -1);
	t_f_install(&f, true);
	printf("client: filter installed\n");
	for (int round = 0; round < ROUNDS; round++) {
		size_t n = msg_len(round);

		t_stream_fill((uint64_t)round, 0, req, n);
		if (round % 2)
			t_send_all(fd, req, n);
		else if (write(fd, req, n) != (ssize_t)n)	// a blocking write: all of it
			t_fatal("write");
		if (round % 3)
			poll_recv_all(fd, rep, n);
		else
			t_recv_all(fd, rep, n);
		right &= t_stream_check((uint64_t)round + 1000, 0, rep, n) < 0;
	}
	t_expect(right, "client: %d replies, every byte right", ROUNDS);
	T_REPORT("client: close", close(fd));
	t_chan_put(&client_done, 1);
}

int main(void)
{
	struct t_child s, c;
	char buf[8];
	int fd;

	t_start(60);
	sh = t_shared_alloc(sizeof(*sh));
	t_chan_open(&listening);
	t_chan_open(&filtered);
	t_chan_open(&client_done);
	t_child_start(&s, "server", server, NULL);
	t_child_start(&c, "client", client, NULL);
	t_chan_get(&listening);
	t_chan_get(&filtered);
	t_chan_get(&client_done);
	// A connection made once the server is sandboxed.
	fd = t_connect(&sh->addr);
	T_REPORT("main: write", write(fd, "ping!", 5));
	T_REPORT_DATA("main: read", read(fd, buf, 5), buf);
	T_REPORT("main: close", close(fd));
	t_child_end(&s);
	t_child_end(&c);
	return t_finish();
}
