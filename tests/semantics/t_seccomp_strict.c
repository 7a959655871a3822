// SPDX-License-Identifier: MIT
// A worker that enters SECCOMP_MODE_STRICT once connected (read, write,
// exit and sigreturn only; the time-stamp counter off), then reads a
// megabyte with read() and writes a megabyte back with write(), and leaves
// with exit(2) (exit_group is not allowed). Its connection, made before,
// goes on in shared memory: the worker waits and wakes its peer without a
// single call the mode forbids.
// shunt-expect: shm_accept>=1 shm_tx_bytes>=1M shm_rx_bytes>=1M
#include <sys/mman.h>

#include "t_seccomp.h"

enum { BULK = 1 << 20, CHUNK = 48 << 10 };

struct shared {
	struct t_addr addr;
};

static struct shared *sh;
static struct t_chan listening;

static void worker(void *arg)
{
	static char buf[CHUNK];
	size_t got = 0, sent = 0;
	bool right = true;
	int fd;

	(void)arg;
	t_chan_get(&listening);
	fd = t_connect(&sh->addr);
	// Printing once now also gets stdout its buffer: no malloc under strict mode.
	printf("worker: connected\n");
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT, 0, 0, 0) < 0)
		t_fatal("PR_SET_SECCOMP");
	// From here on: read, write and exit, nothing else (printf writes).
	while (got < BULK) {
		ssize_t r = read(fd, buf, sizeof(buf) < BULK - got ? sizeof(buf) : BULK - got);

		if (r <= 0)
			syscall(SYS_exit, 3);
		right &= t_stream_check(3, got, buf, (size_t)r) < 0;
		got += (size_t)r;
	}
	while (sent < BULK) {
		size_t n = sizeof(buf) < BULK - sent ? sizeof(buf) : BULK - sent;
		ssize_t w;

		t_stream_fill(7, sent, buf, n);
		w = write(fd, buf, n);
		if (w <= 0)
			syscall(SYS_exit, 4);
		sent += (size_t)w;
	}
	printf("worker: read %zu bytes%s, wrote %zu\n", got, right ? ", all right" : " WRONG", sent);
	fflush(stdout);
	syscall(SYS_exit, 0);
}

int main(void)
{
	static char buf[CHUNK];
	struct t_child w;
	size_t got = 0;
	bool right = true;
	int lfd, fd;

	t_start(60);
	sh = t_shared_alloc(sizeof(*sh));
	t_chan_open(&listening);
	t_child_start(&w, "worker", worker, NULL);
	lfd = t_listen_loopback(AF_INET, 1, &sh->addr);
	t_chan_put(&listening, 1);
	fd = t_accept(lfd);
	for (size_t off = 0; off < BULK; off += sizeof(buf)) {
		size_t n = sizeof(buf) < BULK - off ? sizeof(buf) : BULK - off;

		t_stream_fill(3, off, buf, n);
		t_send_all(fd, buf, n);
	}
	while (got < BULK) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);

		if (r <= 0)
			t_fatal("recv");
		right &= t_stream_check(7, got, buf, (size_t)r) < 0;
		got += (size_t)r;
	}
	t_expect(right, "main: the worker's megabyte came right");
	T_REPORT("main: close", close(fd));
	t_child_end(&w);
	return t_finish();
}
