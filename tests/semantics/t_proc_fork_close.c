// SPDX-License-Identifier: MIT
// Lifetime of a connection shared across fork: it ends when the last holder
// closes or exits (exit or _exit, closed or not), not before; shutdown acts
// on the socket, whoever holds it; O_NONBLOCK is shared with the open file,
// FD_CLOEXEC is per descriptor; a socket created in the child after the fork
// is the child's alone.
// shunt-expect: shm_connect>=7 shm_accept>=8 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	CHILD_WATCHDOG_S = 30,
	STILL_MS = 100, // an EOF that was coming has come by then
	CMD_GO = 1,
};

// One scene: c is the shared end, s the peer's, kept by the parent only.
struct scene {
	int c, s;
	struct t_chan to_child, to_parent;
	pid_t pid;
};

// Fork with c shared; returns true in the child, which has no copy of s.
static bool scene_fork(struct scene *sc, const char *title)
{
	printf("%s:\n", title);
	t_pair(AF_INET, &sc->c, &sc->s);
	t_chan_open(&sc->to_child);
	t_chan_open(&sc->to_parent);
	sc->pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (sc->pid == 0) {
		close(sc->s);
		return true;
	}
	return false;
}

// Parent: reap the child (once).
static void scene_wait(struct scene *sc)
{
	int st;

	if (!sc->pid)
		return;
	st = t_wait_child(sc->pid);
	sc->pid = 0;
	t_expect(st == 0, "  child exit status %d", st);
}

// Parent: reap the child if not done yet, close everything.
static void scene_end(struct scene *sc)
{
	scene_wait(sc);
	if (sc->c >= 0)
		close(sc->c);
	close(sc->s);
	close(sc->to_child.rd), close(sc->to_child.wr);
	close(sc->to_parent.rd), close(sc->to_parent.wr);
}

// Parent, as the peer: one message each way through the shared end, which
// the child answers (child_echo).
static void peer_round_trip(struct scene *sc, const char *msg)
{
	char buf[64];

	T_REPORT("  peer send", send(sc->s, msg, strlen(msg), 0));
	t_chan_put(&sc->to_child, CMD_GO);
	t_wait_inq(sc->s, (int)strlen(msg));
	T_REPORT_DATA("  peer recv (the child's echo)", recv(sc->s, buf, sizeof(buf), 0), buf);
}

static void child_echo(struct scene *sc)
{
	char buf[64];
	ssize_t r;

	t_chan_get(&sc->to_child);
	r = recv(sc->c, buf, sizeof(buf), 0);
	if (r <= 0)
		t_fatal("child recv");
	t_send_all(sc->c, buf, (size_t)r);
}

static void parent_closes_first(void)
{
	struct scene sc;

	if (scene_fork(&sc, "the parent closes right after the fork, the child goes on")) {
		child_echo(&sc);
		child_echo(&sc);
		t_chan_get(&sc.to_child);
		T_REPORT("  child close", close(sc.c));
		t_chan_put(&sc.to_parent, 1);
		exit(t_finish());
	}
	T_REPORT("  parent close", close(sc.c));
	sc.c = -1;
	printf("  peer sees: %s\n", t_peer_sees(sc.s, STILL_MS));
	peer_round_trip(&sc, "ping");
	peer_round_trip(&sc, "pong");
	printf("  peer sees: %s\n", t_peer_sees(sc.s, STILL_MS));
	t_chan_put(&sc.to_child, CMD_GO);
	t_chan_get(&sc.to_parent);
	printf("  peer sees after the child's close: %s\n", t_peer_sees(sc.s, T_WAIT_MS));
	scene_end(&sc);
}

static void child_exits_holding(bool use_exit)
{
	struct scene sc;

	if (scene_fork(&sc, use_exit ? "the child calls exit() without closing, the parent had closed"
				     : "the child calls _exit() without closing, the parent had closed")) {
		child_echo(&sc);
		t_chan_get(&sc.to_child);
		if (use_exit)
			exit(0);
		_exit(0);
	}
	close(sc.c);
	sc.c = -1;
	peer_round_trip(&sc, "last words");
	printf("  peer sees: %s\n", t_peer_sees(sc.s, STILL_MS));
	t_chan_put(&sc.to_child, CMD_GO);
	scene_wait(&sc);
	printf("  peer sees after the child's exit: %s\n", t_peer_sees(sc.s, T_WAIT_MS));
	close(sc.s);
	close(sc.to_child.rd), close(sc.to_child.wr);
	close(sc.to_parent.rd), close(sc.to_parent.wr);
}

// The child closes or exits, the parent still holds: the connection lives.
static void parent_keeps(bool child_exits)
{
	struct scene sc;
	char buf[64];

	if (scene_fork(&sc, child_exits ? "the child exits holding it, the parent keeps its copy"
					: "the child closes its copy, the parent keeps its copy")) {
		child_echo(&sc);
		t_chan_get(&sc.to_child);
		if (!child_exits)
			T_REPORT("  child close", close(sc.c));
		_exit(t_finish());
	}
	peer_round_trip(&sc, "via the child");
	t_chan_put(&sc.to_child, CMD_GO);
	scene_wait(&sc);
	printf("  peer sees: %s\n", t_peer_sees(sc.s, STILL_MS));
	T_REPORT("  parent send", send(sc.c, "parent", 6, MSG_NOSIGNAL));
	t_wait_inq(sc.s, 6);
	T_REPORT_DATA("  peer recv", recv(sc.s, buf, sizeof(buf), 0), buf);
	T_REPORT("  peer send", send(sc.s, "back", 4, 0));
	t_wait_inq(sc.c, 4);
	T_REPORT_DATA("  parent recv", recv(sc.c, buf, sizeof(buf), 0), buf);
	T_REPORT("  parent close", close(sc.c));
	sc.c = -1;
	printf("  peer sees after the parent's close: %s\n", t_peer_sees(sc.s, T_WAIT_MS));
	close(sc.s);
	close(sc.to_child.rd), close(sc.to_child.wr);
	close(sc.to_parent.rd), close(sc.to_parent.wr);
}

// shutdown is on the socket: the parent's copy is shut down too.
static void child_shuts_down(void)
{
	struct scene sc;
	char buf[64];

	if (scene_fork(&sc, "the child shuts the shared socket down for writing")) {
		T_REPORT("  child send", send(sc.c, "bye", 3, MSG_NOSIGNAL));
		T_REPORT("  child shutdown(SHUT_WR)", shutdown(sc.c, SHUT_WR));
		_exit(t_finish());
	}
	scene_wait(&sc);
	t_wait_inq(sc.s, 3);
	T_REPORT_DATA("  peer recv", recv(sc.s, buf, sizeof(buf), 0), buf);
	printf("  peer sees: %s\n", t_peer_sees(sc.s, T_WAIT_MS));
	T_REPORT("  parent send(MSG_NOSIGNAL)", send(sc.c, "more", 4, MSG_NOSIGNAL));
	T_REPORT("  peer send", send(sc.s, "still open", 10, 0));
	t_wait_inq(sc.c, 10);
	T_REPORT_DATA("  parent recv", recv(sc.c, buf, sizeof(buf), 0), buf);
	printf("  parent poll = %s\n", t_poll_str(t_poll1(sc.c, POLLIN | POLLOUT | POLLRDHUP, 0)));
	scene_end(&sc);
}

// O_NONBLOCK lives in the open file, shared; FD_CLOEXEC in the descriptor.
static void flags(void)
{
	struct scene sc;
	char buf[8];

	if (scene_fork(&sc, "file status flags are shared, descriptor flags are not")) {
		t_set_nonblock(sc.c, true);
		T_REPORT("  child fcntl(F_SETFD, 0)", fcntl(sc.c, F_SETFD, 0));
		_exit(t_finish());
	}
	scene_wait(&sc);
	printf("  parent sees O_NONBLOCK: %s\n", t_is_nonblock(sc.c) ? "set" : "clear");
	T_REPORT("  parent fcntl(F_GETFD) (FD_CLOEXEC)", fcntl(sc.c, F_GETFD));
	T_REPORT("  parent recv, nothing there", recv(sc.c, buf, sizeof(buf), 0));
	scene_end(&sc);
}

// Made after the fork, by the child: the parent never holds it, so it ends
// with the child.
static void made_in_child(void)
{
	struct t_addr a;
	char buf[64];
	int lfd = t_listen_loopback(AF_INET, 4, &a), s;
	struct t_chan ch, go;
	uint32_t child_fd;
	pid_t pid;

	printf("a connection the child makes after the fork:\n");
	t_chan_open(&ch);
	t_chan_open(&go);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		int c;

		// The lowest free number: free in the parent too, as it
		// opens nothing until it has checked.
		c = t_connect(&a);
		close(lfd);
		t_send_all(c, "child's own", 11);
		t_chan_put(&ch, (uint32_t)c);
		t_chan_get(&go);
		_exit(0);
	}
	child_fd = t_chan_get(&ch);
	printf("  the child's descriptor number is open in the parent: %s\n",
	       t_fd_open((int)child_fd) ? "yes" : "no");
	s = t_accept(lfd);
	t_wait_inq(s, 11);
	T_REPORT_DATA("  peer recv", recv(s, buf, sizeof(buf), 0), buf);
	printf("  peer sees: %s\n", t_peer_sees(s, STILL_MS));
	t_chan_put(&go, CMD_GO);
	t_expect(t_wait_child(pid) == 0, "  child exit status 0");
	printf("  peer sees after the child's exit: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(s);
	close(lfd);
	close(ch.rd), close(ch.wr), close(go.rd), close(go.wr);
}

int main(void)
{
	t_start(60);
	parent_closes_first();
	child_exits_holding(true);
	child_exits_holding(false);
	parent_keeps(false);
	parent_keeps(true);
	child_shuts_down();
	flags();
	made_in_child();
	return t_finish();
}
