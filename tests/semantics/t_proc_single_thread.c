// SPDX-License-Identifier: MIT
// A program that made one connection and exchanged a little on it is still
// single-threaded, so what only a single-threaded process may do still works:
// unshare(CLONE_NEWUSER), as sandboxes do, refuses a caller with threads.
// (Under shunt the idle trimmer's thread is put off: trim.h.)
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0
#include "t_harness.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { BYTES = 100 };

int main(void)
{
	char buf[BYTES] = { 0 }, back[BYTES];
	struct t_chan port;
	struct t_addr a;
	int c;
	pid_t pid;

	t_start(30);
	t_chan_open(&port);
	pid = fork();
	if (pid < 0)
		t_fatal("fork");
	if (pid == 0) {
		// The echo server, its own process: the parent's only socket is its client.
		int lfd = t_listen_loopback(AF_INET, 1, &a), s;

		t_chan_put(&port, t_addr_port(&a));
		s = t_accept(lfd);
		t_recv_all(s, back, BYTES);
		t_send_all(s, back, BYTES);
		exit(0);	// not _exit: its stats line says it accepted on shared memory
	}
	t_addr_make(&a, "127.0.0.1", (uint16_t)t_chan_get(&port));
	c = t_connect(&a);
	t_send_all(c, buf, BYTES);
	t_recv_all(c, back, BYTES);
	t_expect(t_dir_entries("/proc/self/task") == 1, "one thread after the exchange");
	T_REPORT("unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER));
	close(c);
	T_REPORT("child", t_wait_child(pid));
	return t_finish();
}
