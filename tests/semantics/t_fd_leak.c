// SPDX-License-Identifier: MIT
// A server that closes every accepted connection with syscall(SYS_close), as
// libuv does, leaves nothing behind: after T_LEAK_N connections (3000 by
// default; 100000 by hand) the process has the descriptors and the memory
// mappings (/proc/self/fd, /proc/self/maps) it had before them. The client
// is a child process, closing its ends with close(). Under shunt, sockets
// may differ by the library's spare kernel halves, a cache of at most
// SPARES (src/preload/spare.c): a leak per connection would be thousands.
// shunt-expect: shm_connect>=${T_LEAK_N:-3000} shm_accept>=${T_LEAK_N:-3000}
// shunt-expect: kernel_connect==0 kernel_accept==0
// t-timeout: 120
#include "t_harness.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

enum {
	WARM = 64,		// connections before the first count: the library's own set-up
	MAPS_SLACK = 4,		// mappings malloc may add for its own bookkeeping
	SPARES = 4 * 64,	// spare halves shunt keeps: 64 per family, unbound and bound
};

// Descriptors in /proc/self/fd (its own listing's aside), and of those, sockets.
static long count_fds(long *sockets)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long n = 0;

	if (!d)
		t_fatal("opendir /proc/self/fd");
	*sockets = 0;
	while ((e = readdir(d))) {
		char target[64];
		ssize_t len;

		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		n++;
		len = readlinkat(dirfd(d), e->d_name, target, sizeof(target) - 1);
		*sockets += len > 0 && !strncmp(target, "socket:", 7);
	}
	closedir(d);
	return n;
}

static long count_maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	long n = 0;
	int ch;

	if (!f)
		t_fatal("fopen /proc/self/maps");
	while ((ch = fgetc(f)) != EOF)
		n += ch == '\n';
	fclose(f);
	return n;
}

static long rss_kb(void)
{
	return t_status_field("/proc/self/status", "VmRSS");
}

// The client: N connections, one after another, each sending one byte and
// waiting for the server's close.
static void client(const struct t_addr *to, long n)
{
	for (long i = 0; i < n; i++) {
		int c = t_connect(to);
		char b = 'x';

		if (send(c, &b, 1, 0) != 1 || recv(c, &b, 1, 0) != 0)
			t_fatal("client %ld", i);
		close(c);
	}
	exit(0);	/* not _exit: its counters are reported at exit */
}

static void serve(int l, long n)
{
	for (long i = 0; i < n; i++) {
		int s = accept(l, NULL, NULL);
		char b;

		if (s < 0 || recv(s, &b, 1, 0) != 1)
			t_fatal("server %ld", i);
		if (syscall(SYS_close, s) != 0)
			t_fatal("syscall(SYS_close) %ld", i);
	}
}

int main(void)
{
	long n = (long)t_env_u64("T_LEAK_N", 3000), fds0, maps0, fds1, maps1, rss0, socks0, socks1;
	struct t_addr bound;
	bool same;
	pid_t pid;
	int l;

	t_start(110);
	l = t_listen_loopback(AF_INET, 128, &bound);
	pid = t_fork_tied(110);
	if (pid == 0)
		client(&bound, WARM + n);
	serve(l, WARM);
	fds0 = count_fds(&socks0);
	maps0 = count_maps();
	rss0 = rss_kb();
	serve(l, n);
	if (t_wait_child(pid) != 0)
		t_fatal("the client failed");
	fds1 = count_fds(&socks1);
	maps1 = count_maps();
	printf("%ld connections accepted and closed with syscall(SYS_close)\n", n);
	same = fds1 - socks1 == fds0 - socks0 &&
	       (socks1 == socks0 || (t_preloaded() && labs(socks1 - socks0) <= SPARES));
	t_expect(same, "descriptors: as many as before (%s)", same ? "same" : "different");
	t_expect(maps1 <= maps0 + MAPS_SLACK, "mappings: as many as before");
	/* The numbers, on stderr (not part of the trace). */
	fprintf(stderr, "fds %ld -> %ld (sockets %ld -> %ld), maps %ld -> %ld, rss %ld -> %ld kB\n",
		fds0, fds1, socks0, socks1, maps0, maps1, rss0, rss_kb());
	close(l);
	return t_finish();
}
