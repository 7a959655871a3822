// SPDX-License-Identifier: MIT
// Sends on a connection whose peer is gone: killed or exited with our bytes
// unread (a reset: ECONNRESET, then EPIPE; with our buffer full, at once
// once the peer is reaped, blocking or not), killed after reading
// everything (a FIN: one send goes, then EPIPE), or reset by a thread while
// we wait for room.
// shunt-expect: shm_connect>=31 kernel_connect==0 shm_tx_bytes>=1
// (most peers are killed: their counters are never written)
#include "t_harness.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

enum { CHUNK = 65536, MANY = 24 };

static char buf[CHUNK];

// Send non-blocking until even one byte is refused.
static void fill(int c)
{
	t_set_nonblock(c, true);
	while (send(c, buf, sizeof(buf), MSG_NOSIGNAL) > 0)
		;
	while (send(c, buf, 1, MSG_NOSIGNAL) > 0)
		;
}

struct peer {
	pid_t pid;
	struct t_chan port;	// from the peer: the port it listens on
	struct t_chan cmd;	// to the peer: what to do
	struct t_chan done;	// from the peer: it did it
};

enum { DO_EXIT = 1, DO_READ_ALL };

// A peer in a process of its own, forked while this one holds no socket:
// it listens, says where, and holds the end it accepts, which it says it
// did. (A peer killed before it accepts resets the connection from its
// listener's queue; under shunt only shuntd does that, a moment later.)
static void peer_fork(struct peer *p)
{
	struct t_addr a;

	t_chan_open(&p->port);
	t_chan_open(&p->cmd);
	t_chan_open(&p->done);
	p->pid = t_fork_tied(60);
	if (!p->pid) {
		int lfd = t_listen_loopback(AF_INET, 1, &a), s;
		uint32_t what;

		t_chan_put(&p->port, t_addr_port(&a));
		s = t_accept(lfd);
		close(lfd);
		t_chan_put(&p->done, 0);	// accepted: a kill now resets this end
		for (;;) {
			what = t_chan_get(&p->cmd);
			if (what == DO_EXIT)
				exit(0);	// no close: the process exit closes it
			if (what == DO_READ_ALL) {
				t_set_nonblock(s, true);
				while (recv(s, buf, sizeof(buf), 0) > 0 || errno == EINTR)
					;
				t_set_nonblock(s, false);
			}
			t_chan_put(&p->done, what);
		}
	}
}

// Connect to the peer: *@c is our end.
static void peer_connect(struct peer *p, int *c)
{
	struct t_addr a;

	t_addr_make(&a, "127.0.0.1", (uint16_t)t_chan_get(&p->port));
	*c = t_connect(&a);
	t_chan_get(&p->done);
}

static void peer_start(struct peer *p, int *c)
{
	peer_fork(p);
	peer_connect(p, c);
}

static void peer_do(struct peer *p, uint32_t what)
{
	t_chan_put(&p->cmd, what);
	if (what != DO_EXIT)
		t_chan_get(&p->done);
}

static void peer_kill(struct peer *p)
{
	t_kill_child(p->pid);
}

static void peer_reap(struct peer *p)
{
	t_wait_child(p->pid);
}

static void peer_close(struct peer *p)
{
	close(p->port.rd);
	close(p->port.wr);
	close(p->cmd.rd);
	close(p->cmd.wr);
	close(p->done.rd);
	close(p->done.wr);
}

// Under shunt, shuntd also learns that a process died, and tells its peers,
// but a little later than the kernel resets its connections. To show what
// a program sees before shuntd could say anything, shuntd is stopped for
// a moment (found through its control socket); a guardian forked at the
// start wakes it up again, should this process die meanwhile.
static struct t_chan guardian;
static pid_t daemon_pid;

static void guardian_start(void)
{
	t_chan_open(&guardian);
	if (t_fork())
		return;
	close(guardian.wr);
	for (;;) {
		uint32_t pid;

		if (read(guardian.rd, &pid, sizeof(pid)) != sizeof(pid))
			break;
		daemon_pid = (pid_t)pid;
	}
	if (daemon_pid)
		kill(daemon_pid, SIGCONT);
	_exit(0);
}

static void daemon_pause(void)
{
	const char *path = getenv("SHUNT_SOCKET");
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct ucred cred;
	socklen_t len = sizeof(cred);
	int fd;

	if (!path || strlen(path) >= sizeof(a.sun_path))
		return;		// plain: nothing to stop
	strcpy(a.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len))
		t_fatal("finding shuntd");
	close(fd);
	daemon_pid = cred.pid;
	t_chan_put(&guardian, (uint32_t)daemon_pid);
	if (kill(daemon_pid, SIGSTOP))
		t_fatal("stopping shuntd");
}

static void daemon_resume(void)
{
	if (daemon_pid)
		kill(daemon_pid, SIGCONT);
	daemon_pid = 0;
}

static void tries(const char *what, int c, int flags)
{
	printf("%s:\n", what);
	T_REPORT("  send", send(c, "x", 1, MSG_NOSIGNAL | flags));
	T_REPORT("  send", send(c, "x", 1, MSG_NOSIGNAL | flags));
}

static void killed_full(bool blocking)
{
	struct peer p;
	int c;

	peer_start(&p, &c);
	fill(c);
	peer_kill(&p);
	t_set_nonblock(c, !blocking);
	tries(blocking ? "peer killed, buffer full, blocking" : "peer killed, buffer full", c, 0);
	close(c);
	peer_close(&p);
}

// As the kernel does, before shuntd has run: once the peer is reaped, the
// reset is there.
static void killed_full_daemon_stopped(void)
{
	struct peer p;
	int c;

	peer_start(&p, &c);
	fill(c);
	daemon_pause();
	peer_kill(&p);
	tries("peer killed, buffer full, nothing else ran", c, 0);
	daemon_resume();
	close(c);
	peer_close(&p);
}

// Many peers killed at once: each send right after reaping them still
// finds its peer gone, not its buffer merely full.
static void many_killed_full(void)
{
	struct peer p[MANY];
	int c[MANY], resets = 0, pipes = 0, other = 0;

	for (int i = 0; i < MANY; i++)
		peer_fork(&p[i]);
	for (int i = 0; i < MANY; i++) {
		peer_connect(&p[i], &c[i]);
		fill(c[i]);
	}
	for (int i = 0; i < MANY; i++)
		kill(p[i].pid, SIGKILL);
	for (int i = 0; i < MANY; i++)
		peer_reap(&p[i]);
	for (int i = 0; i < MANY; i++) {
		ssize_t r = send(c[i], "x", 1, MSG_NOSIGNAL);

		if (r < 0 && errno == ECONNRESET)
			resets++;
		else
			other++;
		r = send(c[i], "x", 1, MSG_NOSIGNAL);
		if (r < 0 && errno == EPIPE)
			pipes++;
	}
	printf("%d peers killed, buffers full: %d sends said ECONNRESET, then %d EPIPE, "
	       "%d something else\n", MANY, resets, pipes, other);
	for (int i = 0; i < MANY; i++) {
		close(c[i]);
		peer_close(&p[i]);
	}
}

static void exited_full(void)
{
	struct peer p;
	int c;

	peer_start(&p, &c);
	fill(c);
	peer_do(&p, DO_EXIT);
	peer_reap(&p);
	tries("peer exited, buffer full", c, 0);
	close(c);
	peer_close(&p);
}

static void killed_unread_not_full(void)
{
	struct peer p;
	int c;

	peer_start(&p, &c);
	t_send_all(c, "unread", 6);
	peer_kill(&p);
	printf("peer killed, some bytes unread: poll = %s\n",
	       t_poll_str(t_wait_event(c, POLLERR)));
	t_set_nonblock(c, true);
	tries("then", c, 0);
	close(c);
	peer_close(&p);
}

static void killed_after_reading(void)
{
	struct peer p;
	int c;

	peer_start(&p, &c);
	t_send_all(c, "read", 4);
	peer_do(&p, DO_READ_ALL);
	peer_kill(&p);
	printf("peer killed after reading all: poll = %s\n",
	       t_poll_str(t_wait_event(c, POLLRDHUP)));
	t_set_nonblock(c, true);
	tries("then", c, 0);
	close(c);
	peer_close(&p);
}

struct resetter {
	int fd;
	pid_t sender;
};

static void *reset_later(void *arg)
{
	struct resetter *r = arg;
	struct linger lg = { 1, 0 };

	t_wait_asleep(getpid(), r->sender, 200);
	if (setsockopt(r->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)))
		t_fatal("SO_LINGER");
	close(r->fd);
	return NULL;
}

// Same process: the peer resets while we wait for room.
static void reset_while_blocked(void)
{
	struct resetter r;
	pthread_t th;
	int c, s;

	t_pair(AF_INET, &c, &s);
	fill(c);
	t_set_nonblock(c, false);
	r.fd = s;
	r.sender = (pid_t)syscall(SYS_gettid);
	if (pthread_create(&th, NULL, reset_later, &r))
		t_fatal("pthread_create");
	printf("peer resets while a blocking send waits for room:\n");
	T_REPORT("  send", send(c, buf, 100, MSG_NOSIGNAL));
	pthread_join(th, NULL);
	T_REPORT("  send", send(c, buf, 100, MSG_NOSIGNAL));
	close(c);
}

int main(void)
{
	t_start(60);
	guardian_start();
	killed_full_daemon_stopped();
	killed_full(false);
	killed_full(true);
	many_killed_full();
	exited_full();
	killed_unread_not_full();
	killed_after_reading();
	reset_while_blocked();
	return t_finish();
}
