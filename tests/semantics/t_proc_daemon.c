// SPDX-License-Identifier: MIT
// A server that daemonizes with daemon(3) after it started listening, as
// forking servers do at start: the daemon (glibc forks it internally, and
// the parent exits at once) holds the listener and the connections the
// parent had, so the first client, queued before the daemon took over, is
// accepted and served, and so is a connection the server had already
// accepted; later clients too.
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

enum { DAEMON_WATCHDOG_S = 30 };

// The server: listens, has one client accepted and one queued, daemonizes.
static void server(int lfd, int accepted, struct t_chan *done)
{
	char buf[8];
	int s;

	if (daemon(1, 1) < 0)
		_exit(2);
	t_watchdog(DAEMON_WATCHDOG_S);
	// The connection the server had accepted before: still ours.
	t_recv_all(accepted, buf, 5);
	t_send_all(accepted, buf, 5);
	close(accepted);
	// The client queued before daemon(), then one that came after.
	for (int i = 0; i < 2; i++) {
		s = t_accept(lfd);
		t_recv_all(s, buf, 5);
		t_send_all(s, buf, 5);
		close(s);
	}
	t_chan_put(done, 1);
	exit(0);	/* with its SHUNT_STATS line */
}

static void talk(int c, const char *what)
{
	char buf[8];

	t_send_all(c, what, 5);
	t_recv_all(c, buf, 5);
	printf("  %s: the daemon echoed %.5s, then the client sees %s\n", what, buf,
	       t_peer_sees(c, T_WAIT_MS));
	close(c);
}

int main(void)
{
	struct t_chan done;
	struct t_addr a;
	int lfd, c1, c2, c3, s1, st;
	pid_t pid;

	t_start(60);
	printf("daemon(3) after listen, with one client accepted and one queued:\n");
	lfd = t_listen_loopback(AF_INET, 4, &a);
	c1 = t_connect(&a);
	s1 = t_accept(lfd);
	c2 = t_connect(&a);
	t_chan_open(&done);
	fflush(stdout);
	// A process of ours that daemonizes: daemon() forks again and its parent exits.
	pid = t_fork_tied(DAEMON_WATCHDOG_S);
	if (pid == 0) {
		close(c1);
		close(c2);
		server(lfd, s1, &done);
	}
	close(s1);
	close(lfd);
	st = t_wait_child(pid);
	t_expect(st == 0, "  the server's first process exited (status %d)", st);
	talk(c1, "first");
	talk(c2, "queue");
	c3 = t_connect(&a);
	talk(c3, "later");
	t_expect(t_chan_get(&done) == 1, "  the daemon served all three");
	return t_finish();
}
