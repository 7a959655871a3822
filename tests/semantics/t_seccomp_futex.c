// SPDX-License-Identifier: MIT
// A server whose seccomp filter kills futex(2) (a single-threaded sandbox
// needs none), talking in blocking reads and writes with a client that is
// already asleep in read() when the filter arrives: the server can then
// neither sleep on a futex nor wake the client with one, and both must
// still see every byte in time. A connection made afterwards reaches the
// server through the kernel.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect>=1 kernel_accept>=1
// shunt-expect: shm_tx_bytes>=10K
#include <sys/mman.h>

#include "t_seccomp.h"

enum { ROUNDS = 50 };

struct shared {
	struct t_addr addr;
	pid_t client;
};

static struct shared *sh;
static struct t_chan listening, connected, done;

static void server(void *arg)
{
	struct t_filter f;
	char buf[256];
	bool right = true;
	int lfd, fd, late;

	(void)arg;
	lfd = t_listen_loopback(AF_INET, 8, &sh->addr);
	t_chan_put(&listening, 1);
	t_chan_put(&listening, 1);
	fd = t_accept(lfd);
	t_chan_get(&connected);
	// The client sleeps in read(): the filter comes while it does.
	t_wait_asleep(sh->client, sh->client, 50);
	t_f_begin(&f);
	t_f_rule(&f, SYS_futex, SECCOMP_RET_KILL_PROCESS);
	t_f_end(&f, SECCOMP_RET_ALLOW);
	t_f_install(&f, true);
	printf("server: filter installed\n");
	for (int round = 0; round < ROUNDS; round++) {
		size_t n = 1 + (size_t)(t_mix64((uint64_t)round) % sizeof(buf));

		t_stream_fill((uint64_t)round, 0, buf, n);
		t_send_all(fd, buf, n);
		// A blocking read: the reply comes once the client saw ours.
		t_recv_all(fd, buf, n);
		right &= t_stream_check((uint64_t)round + 500, 0, buf, n) < 0;
	}
	t_expect(right, "server: %d rounds, every byte right", ROUNDS);
	late = T_REPORT_FD("server: accept after the filter", accept(lfd, NULL, NULL));
	T_REPORT_DATA("server: read", read(late, buf, 5), buf);
	T_REPORT("server: write", write(late, "pong!", 5));
	T_REPORT("server: close late", close(late));
	T_REPORT("server: close", close(fd));
}

static void client(void *arg)
{
	char buf[256];
	bool right = true;
	int fd;

	(void)arg;
	sh->client = getpid();
	t_chan_get(&listening);
	fd = t_connect(&sh->addr);
	t_chan_put(&connected, 1);
	for (int round = 0; round < ROUNDS; round++) {
		size_t n = 1 + (size_t)(t_mix64((uint64_t)round) % sizeof(buf));

		t_recv_all(fd, buf, n);
		right &= t_stream_check((uint64_t)round, 0, buf, n) < 0;
		t_stream_fill((uint64_t)round + 500, 0, buf, n);
		t_send_all(fd, buf, n);
	}
	t_expect(right, "client: %d rounds, every byte right", ROUNDS);
	T_REPORT("client: close", close(fd));
	t_chan_put(&done, 1);
}

int main(void)
{
	struct t_child s, c;
	char buf[8];
	int fd;

	t_start(60);
	sh = t_shared_alloc(sizeof(*sh));
	t_chan_open(&listening);
	t_chan_open(&connected);
	t_chan_open(&done);
	t_child_start(&s, "server", server, NULL);
	t_child_start(&c, "client", client, NULL);
	t_chan_get(&listening);
	t_chan_get(&done);
	fd = t_connect(&sh->addr);
	T_REPORT("main: write", write(fd, "ping!", 5));
	T_REPORT_DATA("main: read", read(fd, buf, 5), buf);
	T_REPORT("main: close", close(fd));
	t_child_end(&s);
	t_child_end(&c);
	return t_finish();
}
