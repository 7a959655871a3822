// SPDX-License-Identifier: MIT
// Workers of a pre-fork server asleep in accept() on one listener they
// inherited: a connection wakes one of them, as the kernel's exclusive
// accept wait does, not every one (each woken worker that finds nothing
// costs the machine a context switch, and a prefork server one per worker
// per connection). Seen in each worker's voluntary context switches.
// (Under shunt with fewer than 1,024 descriptors and no room above them the
// library spares none for this: the program raises its limit.)
// shunt-expect: shm_connect>=7 shm_accept>=7 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	WORKERS = 4,
	ROUNDS = 3,
	QUIET_MS = 100,	// asleep this long: blocked in accept(), spins over
};

// Echo one byte per connection; 'q' ends the worker.
static void worker(int lfd)
{
	for (;;) {
		int s = t_accept(lfd);
		char b;

		t_recv_all(s, &b, 1);
		t_send_all(s, &b, 1);
		close(s);
		if (b == 'q')
			exit(0);	// not _exit: its stats line counts its accepts
	}
}

// Voluntary context switches of @pid's main thread: each sleep it woke from.
static long sleeps(pid_t pid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)pid);
	return t_status_field(path, "voluntary_ctxt_switches");
}

static void echo(const struct t_addr *a, char b)
{
	int c = t_connect(a);
	char back;

	t_send_all(c, &b, 1);
	t_recv_all(c, &back, 1);
	t_expect(back == b, "the echo is the byte sent");
	close(c);
}

int main(void)
{
	pid_t kids[WORKERS];
	long before[WORKERS];
	struct t_addr a;
	int lfd;

	t_start(60);
	t_nofile_at_least(1024);
	lfd = t_listen_loopback(AF_INET, 16, &a);
	for (int i = 0; i < WORKERS; i++) {
		kids[i] = t_fork_tied(50);
		if (kids[i] == 0)
			worker(lfd);
	}
	for (int r = 0; r < ROUNDS; r++) {
		int woken = 0;

		for (int i = 0; i < WORKERS; i++)
			t_wait_asleep(kids[i], kids[i], QUIET_MS);
		for (int i = 0; i < WORKERS; i++)
			before[i] = sleeps(kids[i]);
		echo(&a, 'x');
		for (int i = 0; i < WORKERS; i++)
			t_wait_asleep(kids[i], kids[i], QUIET_MS);
		for (int i = 0; i < WORKERS; i++)
			woken += sleeps(kids[i]) != before[i];
		printf("round %d: workers woken by one connection: %d\n", r, woken);
	}
	for (int i = 0; i < WORKERS; i++)
		echo(&a, 'q');
	for (int i = 0; i < WORKERS; i++)
		t_expect(t_wait_child(kids[i]) == 0, "a worker exits 0");
	return t_finish();
}
