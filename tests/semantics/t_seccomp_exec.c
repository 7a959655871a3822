// SPDX-License-Identifier: MIT
// A program exec'd into a sandbox: its parent installs a seccomp filter and
// execs it (as systemd does a service with SystemCallFilter=), so the
// library it loads never saw the filter. The filter lets through what the
// dynamic loader and the C library need to start, and kills calls a
// program loading the library might make on its own (getpid, getdents64,
// futex, eventfd2, epoll_create1, sendmsg, recvmsg; socket(AF_UNIX) fails).
// The program then talks to a server over TCP, as with the kernel alone.
// shunt-expect: kernel_accept>=1 shm_accept==0
#include <sys/mman.h>

#include "t_seccomp.h"

struct shared {
	struct t_addr addr;
};

static struct shared *sh;
static struct t_chan listening;
static const char *self;

// The exec'd image, under the filter from its very first instruction.
static int sandboxed(const char *port)
{
	struct t_addr a;
	char buf[8];
	int fd;

	t_start(30);
	t_addr_make(&a, "127.0.0.1", (uint16_t)atoi(port));
	fd = T_REPORT_FD("sandboxed: connect", t_connect(&a));
	T_REPORT("sandboxed: write", write(fd, "hello", 5));
	T_REPORT_DATA("sandboxed: read", read(fd, buf, 5), buf);
	T_REPORT("sandboxed: socket(AF_UNIX)", socket(AF_UNIX, SOCK_STREAM, 0));
	T_REPORT("sandboxed: close", close(fd));
	return t_finish();
}

static void launcher(void *arg)
{
	static const long killed[] = { SYS_getpid, SYS_getdents64, SYS_futex, SYS_eventfd2,
				       SYS_epoll_create1, SYS_sendmsg, SYS_recvmsg };
	struct t_filter f;
	char port[16];

	(void)arg;
	t_chan_get(&listening);
	snprintf(port, sizeof(port), "%u", (unsigned)t_addr_port(&sh->addr));
	t_f_begin(&f);
	for (size_t i = 0; i < sizeof(killed) / sizeof(killed[0]); i++)
		t_f_rule(&f, killed[i], SECCOMP_RET_KILL_PROCESS);
	t_f_rule_arg(&f, SYS_socket, 0, AF_UNIX, SECCOMP_RET_ERRNO | EAFNOSUPPORT);
	t_f_end(&f, SECCOMP_RET_ALLOW);
	t_f_install(&f, false);
	fflush(stdout);
	execl(self, self, "sandboxed", port, (char *)NULL);
	t_fatal("execl");
}

int main(int argc, char **argv)
{
	struct t_child l;
	char buf[8];
	int lfd, fd;

	if (argc == 3 && !strcmp(argv[1], "sandboxed"))
		return sandboxed(argv[2]);
	self = t_self_path(argv[0]);
	t_start(60);
	sh = t_shared_alloc(sizeof(*sh));
	t_chan_open(&listening);
	t_child_start(&l, "launcher", launcher, NULL);
	lfd = t_listen_loopback(AF_INET, 1, &sh->addr);
	t_chan_put(&listening, 1);
	fd = t_accept(lfd);
	T_REPORT_DATA("main: read", read(fd, buf, 5), buf);
	T_REPORT("main: write", write(fd, "world", 5));
	T_REPORT("main: close", close(fd));
	t_child_end(&l);
	return t_finish();
}
