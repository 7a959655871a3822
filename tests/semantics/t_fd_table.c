// SPDX-License-Identifier: MIT
// With the soft descriptor limit at the hard one (no room above it, as
// `ulimit -n N` and containers leave it), a process's descriptors stay low
// after it made connections and an epoll instance: the kernel's table of
// descriptors covers the highest number, and every fork copies it. Under
// shunt the library's own descriptors sat at the top of the range (19,936
// and up at 20,000), which a forking server paid at every fork.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0
#include "t_harness.h"

#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <unistd.h>

enum { LOW = 4096, HARD_MIN = 2 * LOW };

static long highest_fd(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	long high = -1;

	if (!d)
		t_fatal("opendir /proc/self/fd");
	while ((e = readdir(d))) {
		long n = strtol(e->d_name, NULL, 10);

		if (e->d_name[0] != '.' && n > high)
			high = n;
	}
	closedir(d);
	return high;
}

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct rlimit rl;
	int c[2], s[2], ep;
	char b = 'x';

	t_start(30);
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		t_fatal("getrlimit");
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max < HARD_MIN)
		t_skip("the hard descriptor limit is not a number of at least 8192");
	rl.rlim_cur = rl.rlim_max;
	T_REPORT("setrlimit soft = hard", setrlimit(RLIMIT_NOFILE, &rl));
	for (int i = 0; i < 2; i++) {
		t_pair(AF_INET, &c[i], &s[i]);
		t_send_all(c[i], &b, 1);
		t_recv_all(s[i], &b, 1);
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	T_REPORT("epoll_ctl", epoll_ctl(ep, EPOLL_CTL_ADD, s[0], &ev));
	T_REPORT("epoll_wait", epoll_wait(ep, &ev, 1, 0));
	t_expect(highest_fd() < LOW, "every descriptor below 4096");
	for (int i = 0; i < 2; i++) {
		close(c[i]);
		close(s[i]);
	}
	close(ep);
	return t_finish();
}
