// SPDX-License-Identifier: MIT
// epoll and an inherited connection: a set the child makes after the fork
// sees it; a set made before the fork reports it to the child; blocked in
// epoll_wait in both processes, one message wakes both. (Two kernel
// behaviours shunt does not reproduce are left out, see docs/differences.md:
// an edge taken through a set shared across fork is gone for the other
// process, and a registration outlives the close of the last descriptor in
// one process while another process holds the socket.)
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

enum {
	CHILD_WATCHDOG_S = 30,
	STILL_MS = 100,
	TAG = 42, // data.u64 of the connection
};

static int epoll_with(int fd, uint32_t events)
{
	struct epoll_event ev = { .events = events, .data.u64 = TAG };
	int ep = epoll_create1(EPOLL_CLOEXEC);

	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
		t_fatal("epoll setup");
	return ep;
}

// "N EVENTS" or "0" for epoll_wait on ep; static buffer.
static const char *wait_str(int ep, int timeout_ms)
{
	static char buf[128];
	struct epoll_event ev[2];
	int n = t_epoll_wait_sorted(ep, ev, 2, timeout_ms);

	if (n == 0)
		return "0";
	snprintf(buf, sizeof(buf), "%d %s%s", n, t_epoll_str(ev[0].events),
		 ev[0].data.u64 == TAG ? "" : " (wrong data)");
	return buf;
}

static void report_wait(const char *label, int ep, int timeout_ms)
{
	printf("%s = %s\n", label, wait_str(ep, timeout_ms));
}

// The child's own epoll set, on the inherited connection.
static void child_set(void)
{
	struct t_chan go, done;
	char buf[16], line[128];
	int c, s;
	pid_t pid;

	printf("an epoll set made by the child after the fork:\n");
	t_pair(AF_INET, &c, &s);
	t_chan_open(&go);
	t_chan_open(&done);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		int ep;

		close(s);
		ep = epoll_with(c, EPOLLIN | EPOLLRDHUP);
		report_wait("  child epoll_wait, idle", ep, 0);
		t_chan_put(&done, getpid());
		// Printed once the parent has printed its send.
		snprintf(line, sizeof(line), "%s", wait_str(ep, -1));
		t_chan_get(&go);
		printf("  child epoll_wait, blocked until data = %s\n", line);
		T_REPORT_DATA("  child recv", recv(c, buf, sizeof(buf), 0), buf);
		t_chan_put(&done, 1);
		t_chan_get(&go);
		report_wait("  child epoll_wait after the peer's shutdown", ep, -1);
		_exit(t_finish());
	}
	close(c);
	t_wait_asleep(pid, (pid_t)t_chan_get(&done), 50);
	T_REPORT("  peer send", send(s, "hello", 5, 0));
	t_chan_put(&go, 1);
	t_chan_get(&done);
	T_REPORT("  peer shutdown(SHUT_WR)", shutdown(s, SHUT_WR));
	t_chan_put(&go, 1);
	t_expect(t_wait_child(pid) == 0, "  child exit status 0");
	close(s);
	close(go.rd), close(go.wr), close(done.rd), close(done.wr);
}

// One epoll instance, inherited: the same set in both processes.
static void shared_set(void)
{
	struct t_chan done, go;
	int c, s, ep;
	pid_t pid;

	printf("an EPOLLET set made before the fork, waited on by the child:\n");
	t_pair(AF_INET, &c, &s);
	t_chan_open(&done);
	t_chan_open(&go);
	ep = epoll_with(c, EPOLLIN | EPOLLET);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		char line[128];

		close(s);
		snprintf(line, sizeof(line), "%s", wait_str(ep, -1));
		t_chan_get(&go);
		printf("  child epoll_wait = %s\n", line);
		t_chan_put(&done, 1);
		_exit(t_finish());
	}
	T_REPORT("  peer send", send(s, "x", 1, 0));
	t_chan_put(&go, 1);
	t_chan_get(&done);
	t_expect(t_wait_child(pid) == 0, "  child exit status 0");
	T_REPORT("  peer send", send(s, "y", 1, 0));
	report_wait("  parent epoll_wait after a new edge", ep, T_WAIT_MS);
	close(ep);
	close(c);
	close(s);
	close(done.rd), close(done.wr), close(go.rd), close(go.wr);
}

// Both processes blocked in epoll_wait, each on its own set.
static void both_waiting(void)
{
	struct t_chan ready, woke;
	struct epoll_event ev;
	char buf[16];
	int c, s, ep;
	pid_t pid;

	printf("parent and child blocked in epoll_wait on their own sets:\n");
	t_pair(AF_INET, &c, &s);
	t_chan_open(&ready);
	t_chan_open(&woke);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		int cep;

		close(s);
		cep = epoll_with(c, EPOLLIN);
		t_chan_put(&ready, 1);
		if (t_epoll_wait_sorted(cep, &ev, 1, -1) != 1 || ev.events != EPOLLIN)
			_exit(2);
		t_chan_put(&woke, 1);
		_exit(0);
	}
	ep = epoll_with(c, EPOLLIN);
	t_chan_get(&ready);
	t_wait_asleep(pid, pid, 50);
	T_REPORT("  peer send", send(s, "both", 4, 0));
	report_wait("  parent epoll_wait", ep, -1);
	t_chan_get(&woke);
	t_expect(t_wait_child(pid) == 0, "  child epoll_wait = 1 EPOLLIN too");
	T_REPORT_DATA("  parent recv", recv(c, buf, sizeof(buf), 0), buf);
	report_wait("  parent epoll_wait, all read", ep, 0);
	close(ep);
	close(c);
	close(s);
	close(ready.rd), close(ready.wr), close(woke.rd), close(woke.wr);
}

int main(void)
{
	t_start(60);
	child_set();
	shared_set();
	both_waiting();
	return t_finish();
}
