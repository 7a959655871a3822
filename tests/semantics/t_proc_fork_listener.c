// SPDX-License-Identifier: MIT
// A listener shared across fork lives until its last holder closes it, as
// a kernel socket lives until its last reference goes: a child that closes
// its copy (as a server's per-connection child does) leaves the parent
// listening, and the other way round; once both closed, whoever was last,
// a connect is refused. Under shunt a holder that closes while another
// holds the listener does not wait for shuntd (docs/connect.md, "Around
// fork"); the last one does, so that the refusal is there when its close
// returns. Each scene runs three times, the client connecting from the
// parent.
// shunt-expect: shm_connect>=9 shm_accept>=6 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum {
	ROUNDS = 3,
	WATCHDOG_S = 30,
	CMD_GO = 1,
};

// connect() to @to: "connected" or the errno's name, the socket closed.
static const char *try_connect(const struct t_addr *to)
{
	int s = socket(to->ss.ss_family, SOCK_STREAM, 0);
	const char *what = "connected";

	if (s < 0)
		t_fatal("socket");
	if (connect(s, (const struct sockaddr *)&to->ss, to->len) < 0)
		what = errno == ECONNREFUSED ? "ECONNREFUSED" : strerror(errno);
	close(s);
	return what;
}

// One connection to @to, accepted on @lfd by this process, one byte each way.
static void round_trip_self(int lfd, const struct t_addr *to)
{
	int c = t_connect(to), a = t_accept(lfd);
	char b = 'x';

	t_send_all(c, &b, 1);
	t_recv_all(a, &b, 1);
	t_send_all(a, &b, 1);
	t_recv_all(c, &b, 1);
	close(a);
	close(c);
	printf("  a connection accepted and echoed\n");
}

// One scene: a listener, forked with two channels to the child.
struct scene {
	struct t_chan go, done;
	struct t_addr at;
	int lfd;
	pid_t pid;
};

// Listen, then fork; true in the child.
static bool scene_fork(struct scene *sc, const char *title)
{
	sc->lfd = t_listen_loopback(AF_INET, 16, &sc->at);
	printf("%s:\n", title);
	t_chan_open(&sc->go);
	t_chan_open(&sc->done);
	sc->pid = t_fork_tied(WATCHDOG_S);
	return sc->pid == 0;
}

// Parent: the child's exit, and the channels closed.
static void scene_end(struct scene *sc)
{
	T_REPORT("  child exit", t_wait_child(sc->pid));
	close(sc->go.rd), close(sc->go.wr), close(sc->done.rd), close(sc->done.wr);
}

// The child closes its copy first; the parent, still listening, is last.
static void child_closes_first(void)
{
	struct scene sc;

	if (scene_fork(&sc, "the child closes first")) {
		T_REPORT("  child close", close(sc.lfd));
		t_chan_put(&sc.done, 1);
		_exit(t_finish());
	}
	t_chan_get(&sc.done);
	round_trip_self(sc.lfd, &sc.at);
	scene_end(&sc);
	round_trip_self(sc.lfd, &sc.at);
	T_REPORT("  parent close", close(sc.lfd));
	printf("  then a connect: %s\n", try_connect(&sc.at));
}

// The parent closes its copy first; the child, still listening, is last.
static void parent_closes_first(void)
{
	struct scene sc;
	char b = 'y';
	int c;

	if (scene_fork(&sc, "the parent closes first")) {
		int a;

		t_chan_get(&sc.go);
		a = t_accept(sc.lfd);
		t_recv_all(a, &b, 1);
		t_send_all(a, &b, 1);
		close(a);
		t_chan_get(&sc.go);	/* once the parent said what it saw */
		T_REPORT("  child close", close(sc.lfd));
		t_chan_put(&sc.done, 1);
		t_chan_get(&sc.go);
		_exit(t_finish());
	}
	T_REPORT("  parent close", close(sc.lfd));
	t_chan_put(&sc.go, CMD_GO);
	c = t_connect(&sc.at);
	t_send_all(c, &b, 1);
	t_recv_all(c, &b, 1);
	printf("  the child accepted and echoed: %c\n", b);
	close(c);
	t_chan_put(&sc.go, CMD_GO);
	t_chan_get(&sc.done);
	printf("  after the child's close, a connect: %s\n", try_connect(&sc.at));
	t_chan_put(&sc.go, CMD_GO);
	scene_end(&sc);
}

// The child closes while the parent still holds the listener, then the
// parent: after the parent's close, refused, with no wait for the child.
static void both_close_child_stays(void)
{
	struct scene sc;

	if (scene_fork(&sc, "both close, the child lives on")) {
		T_REPORT("  child close", close(sc.lfd));
		t_chan_put(&sc.done, 1);
		t_chan_get(&sc.go);
		_exit(t_finish());
	}
	t_chan_get(&sc.done);
	T_REPORT("  parent close", close(sc.lfd));
	printf("  then a connect: %s\n", try_connect(&sc.at));
	t_chan_put(&sc.go, CMD_GO);
	scene_end(&sc);
}

int main(void)
{
	t_start(WATCHDOG_S * 3);
	for (int i = 0; i < ROUNDS; i++) {
		child_closes_first();
		parent_closes_first();
		both_close_child_stays();
	}
	return t_finish();
}
