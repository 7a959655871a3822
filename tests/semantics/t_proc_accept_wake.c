// SPDX-License-Identifier: MIT
// Workers of a pre-fork server asleep in accept() on one listener they
// inherited: a connection wakes one of them, as the kernel's exclusive
// accept wait does, not every one (each woken worker that finds nothing
// costs the machine a context switch, and a prefork server one per worker
// per connection). Seen in each worker's voluntary context switches.
// A shutdown() of the listener then wakes every one of them, and a thread of
// the parent asleep there too: their accept() fails with EINVAL.
// (Under shunt with fewer than 1,024 descriptors and no room above them the
// library spares none for this: the program raises its limit.)
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	WORKERS = 4,
	ROUNDS = 3,
	QUIET_MS = 100,	// asleep this long: blocked in accept(), spins over
};

// Echo one byte per connection, until accept() fails: EINVAL after shutdown.
static void worker(int lfd)
{
	for (;;) {
		int s = accept(lfd, NULL, NULL);
		char b;

		if (s < 0)
			exit(errno == EINVAL ? 0 : 1);	// not _exit: the stats line
		t_recv_all(s, &b, 1);
		t_send_all(s, &b, 1);
		close(s);
	}
}

struct sleeper {
	int lfd;
	pid_t tid;	// set once running
	int ret, err;	// its accept()'s
};

static void *accept_thread(void *arg)
{
	struct sleeper *w = arg;
	int lfd = w->lfd;

	__atomic_store_n(&w->tid, gettid(), __ATOMIC_SEQ_CST);
	w->ret = accept(lfd, NULL, NULL);
	w->err = errno;
	return NULL;
}

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
	{
		struct sleeper w = { lfd, 0, 0, 0 };
		pthread_t th;

		if (pthread_create(&th, NULL, accept_thread, &w))
			t_fatal("pthread_create");
		while (!__atomic_load_n(&w.tid, __ATOMIC_SEQ_CST))
			t_sleep_ms(1);
		for (int i = 0; i < WORKERS; i++)
			t_wait_asleep(kids[i], kids[i], QUIET_MS);
		t_wait_asleep(getpid(), w.tid, QUIET_MS);
		T_REPORT("shutdown(listener)", shutdown(lfd, SHUT_RDWR));
		pthread_join(th, NULL);
		t_report("a thread's accept after shutdown", w.ret, w.err);
	}
	for (int i = 0; i < WORKERS; i++)
		t_expect(t_wait_child(kids[i]) == 0, "a worker's accept fails with EINVAL");
	return t_finish();
}
