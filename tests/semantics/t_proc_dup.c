// SPDX-License-Identifier: MIT
// Descriptors that share one socket: dup, dup2, dup3, F_DUPFD and
// F_DUPFD_CLOEXEC behave as one socket (one byte stream, one O_NONBLOCK,
// per-descriptor FD_CLOEXEC); closing one leaves the others working and the
// connection ends with the last; dup2 over a socket closes it; close_range
// closes the sockets in its range, and only those (also up to ~0U, after
// which a child goes on making connections); CLOSE_RANGE_CLOEXEC then exec:
// the sockets in the range are gone in the new image, the others work there.
// shunt-needs: companions
// shunt-expect: shm_connect>=20 shm_accept>=20 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum {
	BASE = 100, // our own numbers for close_range, away from the library's
	TOP = BASE + 7,
	STILL_MS = 100,
	CHILD_WATCHDOG_S = 30,
	FIRST = 1000,
	SECOND = 100000,
};

static const char *self;

// Move fd to exactly `to` (which must be free), keeping FD_CLOEXEC off.
static int place(int fd, int to)
{
	if (t_fd_open(to) || dup2(fd, to) != to)
		t_fatal("place %d", to);
	close(fd);
	return to;
}

static void round_trip(const char *label, int fd, int peer)
{
	char buf[32];
	bool ok;

	t_send_all(fd, "ping", 4);
	t_recv_all(peer, buf, 4);
	ok = !memcmp(buf, "ping", 4);
	t_send_all(peer, "pong", 4);
	t_recv_all(fd, buf, 4);
	t_expect(ok && !memcmp(buf, "pong", 4), "%s: ping and pong", label);
}

static void dup_family(void)
{
	enum { N = 6 };
	const char *names[N] = { "original", "dup", "dup2", "dup3(O_CLOEXEC)", "F_DUPFD",
				 "F_DUPFD_CLOEXEC" };
	int fd[N], s, r;
	char buf[16], label[64];
	struct t_addr a0;

	printf("one socket, six descriptors:\n");
	t_pair(AF_INET, &fd[0], &s);
	if (fcntl(fd[0], F_SETFD, 0) < 0)
		t_fatal("fcntl");
	fd[1] = dup(fd[0]);
	r = dup2(fd[0], BASE);
	t_expect(r == BASE, "  dup2 returns its target");
	fd[2] = BASE;
	r = dup3(fd[0], BASE + 1, O_CLOEXEC);
	t_expect(r == BASE + 1, "  dup3 returns its target");
	fd[3] = BASE + 1;
	fd[4] = fcntl(fd[0], F_DUPFD, BASE + 2);
	t_expect(fd[4] >= BASE + 2, "  F_DUPFD: the lowest free number from its argument");
	fd[5] = fcntl(fd[0], F_DUPFD_CLOEXEC, 0);
	if (fd[1] < 0 || fd[5] < 0)
		t_fatal("dup");
	a0 = t_sockname(fd[0]);
	for (int i = 0; i < N; i++) {
		snprintf(label, sizeof(label), "  %s: F_GETFD", names[i]);
		T_REPORT(label, fcntl(fd[i], F_GETFD));
	}
	for (int i = 1; i < N; i++) {
		struct t_addr ai = t_sockname(fd[i]);

		if (!t_addr_eq(&a0, &ai))
			t_expect(false, "  %s: same local address", names[i]);
	}
	// One stream: a byte through each, in turn, then back the same way.
	for (int i = 0; i < N; i++)
		t_send_all(fd[i], &"abcdef"[i], 1);
	t_wait_inq(s, N);
	T_REPORT_DATA("  peer recv, a byte sent through each", recv(s, buf, sizeof(buf), 0), buf);
	t_send_all(s, "ABCDEF", N);
	t_wait_inq(fd[0], N);
	for (int i = 0; i < N; i++) {
		snprintf(label, sizeof(label), "  recv(%s, 1)", names[i]);
		T_REPORT_DATA(label, recv(fd[i], buf, 1, 0), buf);
	}
	// One open file: O_NONBLOCK set through one is set for all.
	t_set_nonblock(fd[3], true);
	T_REPORT("  O_NONBLOCK set through dup3; recv(original), nothing there",
		 recv(fd[0], buf, 1, 0));
	t_set_nonblock(fd[0], false);
	// Closing all but one leaves it working; the last close ends it.
	for (int i = 0; i < N - 1; i++)
		close(fd[i]);
	printf("  closed all but F_DUPFD_CLOEXEC; peer sees: %s\n", t_peer_sees(s, STILL_MS));
	round_trip("  F_DUPFD_CLOEXEC", fd[N - 1], s);
	T_REPORT("  close(F_DUPFD_CLOEXEC)", close(fd[N - 1]));
	printf("  peer sees: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(s);
}

static void dup_onto_itself(void)
{
	int c, s;

	printf("dup2 and dup3 of a socket onto itself:\n");
	t_pair(AF_INET, &c, &s);
	t_expect(dup2(c, c) == c, "  dup2(fd, fd) returns fd");
	T_REPORT("  dup3(fd, fd, 0)", dup3(c, c, 0));
	round_trip("  the socket", c, s);
	close(c);
	close(s);
}

static void dup2_over(void)
{
	int c1, s1, c2, s2, p[2];
	char buf[16];

	printf("dup2 over a socket:\n");
	t_pair(AF_INET, &c1, &s1);
	t_pair(AF_INET, &c2, &s2);
	// c2 becomes c1's socket; c2's own connection is closed.
	t_expect(dup2(c1, c2) == c2, "  dup2(another socket, fd) returns fd");
	printf("  peer of the replaced socket sees: %s\n", t_peer_sees(s2, T_WAIT_MS));
	round_trip("  the number now carries the other connection", c2, s1);
	close(c1);
	round_trip("  and keeps it after the first descriptor's close", c2, s1);
	close(c2);
	printf("  its peer sees after the last close: %s\n", t_peer_sees(s1, T_WAIT_MS));
	close(s1);
	close(s2);

	// A pipe over a socket, then a socket over a pipe.
	t_pair(AF_INET, &c1, &s1);
	if (pipe(p) < 0)
		t_fatal("pipe");
	t_expect(dup2(p[1], c1) == c1, "  dup2(pipe, socket fd) returns fd");
	printf("  peer of the replaced socket sees: %s\n", t_peer_sees(s1, T_WAIT_MS));
	T_REPORT("  send on the number, a pipe now", send(c1, "x", 1, MSG_NOSIGNAL));
	T_REPORT("  write on it", write(c1, "x", 1));
	T_REPORT_DATA("  read from the pipe", read(p[0], buf, sizeof(buf)), buf);
	close(c1);
	close(s1);
	t_pair(AF_INET, &c1, &s1);
	t_expect(dup2(c1, p[1]) == p[1], "  dup2(socket, pipe fd) returns fd");
	close(c1);
	T_REPORT("  read from the pipe, its writer replaced", read(p[0], buf, sizeof(buf)));
	round_trip("  the former pipe number carries the connection", p[1], s1);
	close(p[1]);
	close(p[0]);
	printf("  peer sees after its close: %s\n", t_peer_sees(s1, T_WAIT_MS));
	close(s1);
}

static void dup_listener(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a), l2, c, s, r;

	printf("a listener and its dup:\n");
	l2 = dup(lfd);
	T_REPORT("  close(original)", close(lfd));
	c = t_connect(&a);
	s = T_REPORT_FD("  accept(dup)", accept(l2, NULL, NULL));
	round_trip("  the accepted connection", c, s);
	close(c);
	close(s);
	T_REPORT("  close(dup)", close(l2));
	c = t_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC);
	r = connect(c, (struct sockaddr *)&a.ss, a.len);
	t_report("  connect after the last close", r, r < 0 ? errno : T_ERRNO_SENTINEL);
	close(c);
}

// The fds in [BASE, TOP] for the close_range scenes.
struct range {
	int a, pipe_rd, b, lfd, c, pipe_wr; // BASE+0 .. BASE+5
	int pa, pb, pc;			    // the peers of a, b, c
	struct t_addr laddr;
};

static void range_open(struct range *r)
{
	int p[2], x;

	t_pair(AF_INET, &x, &r->pa);
	r->a = place(x, BASE);
	if (pipe(p) < 0)
		t_fatal("pipe");
	r->pipe_rd = place(p[0], BASE + 1);
	t_pair(AF_INET, &x, &r->pb);
	r->b = place(x, BASE + 2);
	r->lfd = place(t_listen_loopback(AF_INET, 4, &r->laddr), BASE + 3);
	t_pair(AF_INET, &x, &r->pc);
	r->c = place(x, BASE + 4);
	r->pipe_wr = place(p[1], BASE + 5);
}

static void close_range_plain(void)
{
	struct range r;
	int x, e;

	printf("close_range over two sockets, a listener and a pipe end, not over a third socket:\n");
	range_open(&r);
	T_REPORT("  close_range(first, fourth, 0)", close_range(BASE, BASE + 3, 0));
	printf("  open after: a %d, pipe read end %d, b %d, listener %d, c %d, pipe write end %d\n",
	       t_fd_open(r.a), t_fd_open(r.pipe_rd), t_fd_open(r.b), t_fd_open(r.lfd),
	       t_fd_open(r.c), t_fd_open(r.pipe_wr));
	printf("  peer of a sees: %s\n", t_peer_sees(r.pa, T_WAIT_MS));
	printf("  peer of b sees: %s\n", t_peer_sees(r.pb, T_WAIT_MS));
	printf("  peer of c sees: %s\n", t_peer_sees(r.pc, STILL_MS));
	round_trip("  c", r.c, r.pc);
	signal(SIGPIPE, SIG_IGN);
	T_REPORT("  write to the pipe, its reader closed", write(r.pipe_wr, "x", 1));
	signal(SIGPIPE, SIG_DFL);
	x = t_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC);
	e = connect(x, (struct sockaddr *)&r.laddr.ss, r.laddr.len);
	t_report("  connect to the closed listener", e, e < 0 ? errno : T_ERRNO_SENTINEL);
	close(x);
	T_REPORT("  close(a) again", close(r.a));
	close(r.c);
	close(r.pipe_wr);
	close(r.pa), close(r.pb), close(r.pc);
}

// Everything from BASE up, the library's own descriptors too if it keeps
// any there: the child goes on with a socket below the range and a new one.
static void close_range_to_the_top(void)
{
	struct range r;
	struct t_addr la;
	int low, plow, lfd, s, st;
	char buf[16];
	pid_t pid;

	printf("close_range(first, ~0U, 0) in a child, which then goes on:\n");
	range_open(&r);
	t_pair(AF_INET, &low, &plow);
	lfd = t_listen_loopback(AF_INET, 4, &la);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		int c;

		close(r.pa), close(r.pb), close(r.pc), close(plow), close(lfd);
		if (close_range(BASE, ~0U, 0) < 0)
			t_fatal("close_range");
		if (t_fd_open(r.a) || t_fd_open(r.b) || t_fd_open(r.c))
			_exit(2);
		t_send_all(low, "low", 3);
		c = t_connect(&la);
		t_send_all(c, "new", 3);
		t_recv_all(c, buf, 2);
		_exit(memcmp(buf, "ok", 2) ? 3 : 0);
	}
	t_wait_inq(plow, 3);
	T_REPORT_DATA("  peer recv from the socket below the range", recv(plow, buf, sizeof(buf), 0),
		      buf);
	s = t_accept(lfd);
	t_recv_all(s, buf, 3);
	t_send_all(s, "ok", 2);
	printf("  the child's new connection: \"%.3s\"\n", buf);
	st = t_wait_child(pid);
	t_expect(st == 0, "  in the child: a, b, c closed (status %d)", st);
	printf("  peer of a sees (the parent still holds a): %s\n", t_peer_sees(r.pa, STILL_MS));
	round_trip("  a in the parent", r.a, r.pa);
	close(s), close(lfd), close(low), close(plow);
	close(r.a), close(r.b), close(r.c), close(r.lfd), close(r.pipe_rd), close(r.pipe_wr);
	close(r.pa), close(r.pb), close(r.pc);
}

// --image A B C: a and b must have been closed by the exec, c talks. The
// peer checks a and b while the image waits for its second message.
static int image(int a, int b, int c)
{
	if (t_fd_open(a) || t_fd_open(b))
		return 2;
	return t_talk_holder(c, c, FIRST) ? 0 : 3;
}

static void close_range_cloexec(bool all_above)
{
	struct range r;
	char a[16], b[16], c[16];
	char *argv[] = { (char *)self, "--image", a, b, c, NULL };
	int st;
	bool ok;
	pid_t pid;

	printf("close_range(%s, CLOSE_RANGE_CLOEXEC), then execv:\n",
	       all_above ? "3, ~0U" : "first, fourth");
	range_open(&r);
	t_talk_peer_first(r.pc, FIRST);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		close(r.pa), close(r.pb), close(r.pc);
		snprintf(a, sizeof(a), "%d", r.a);
		snprintf(b, sizeof(b), "%d", r.b);
		// From 3 up everything goes: c survives as stdin.
		if (all_above && dup2(r.c, STDIN_FILENO) < 0)
			t_fatal("dup2");
		snprintf(c, sizeof(c), "%d", all_above ? STDIN_FILENO : r.c);
		if (close_range(all_above ? 3 : BASE, all_above ? ~0U : BASE + 3,
				CLOSE_RANGE_CLOEXEC) < 0)
			t_fatal("close_range");
		execv(self, argv);
		_exit(127);
	}
	close(r.a), close(r.b), close(r.c), close(r.lfd), close(r.pipe_rd), close(r.pipe_wr);
	printf("  peer of a sees: %s\n", t_peer_sees(r.pa, T_WAIT_MS));
	printf("  peer of b sees: %s\n", t_peer_sees(r.pb, T_WAIT_MS));
	ok = t_talk_peer_rest(r.pc, FIRST, SECOND);
	st = t_wait_child(pid);
	t_expect(ok && st == 0,
		 "  in the image: a and b closed, c talking, every byte right (status %d)", st);
	printf("  then the peer of c sees: %s\n", t_peer_sees(r.pc, T_WAIT_MS));
	close(r.pa), close(r.pb), close(r.pc);
}

int main(int argc, char **argv)
{
	struct rlimit rl;

	t_start(60);
	self = t_self_path(argv[0]);
	if (argc == 5 && !strcmp(argv[1], "--image"))
		return image(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 4 * BASE)
		t_skip("RLIMIT_NOFILE below %d: no room for descriptors at %d", 4 * BASE, BASE);
	dup_family();
	dup_onto_itself();
	dup2_over();
	dup_listener();
	close_range_plain();
	close_range_to_the_top();
	close_range_cloexec(false);
	close_range_cloexec(true);
	return t_finish();
}
