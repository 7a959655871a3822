// SPDX-License-Identifier: MIT
// Installs the kernel refuses change nothing: a filter that would keep the
// library from shuntd, offered with a flag the kernel does not know, with
// flags it refuses together, from a bad pointer, or as a broken program,
// fails as it does without the library, and the listener made before is
// still shuntd's: the next client connects in shared memory.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_accept==0
#include <sys/mman.h>

#include "t_seccomp.h"

struct shared {
	struct t_addr addr;
};

static struct shared *sh;
static struct t_chan ready;

static void server(void *arg)
{
	struct sock_filter broken[] = { BPF_STMT(BPF_LD | BPF_MEM, 0),
					BPF_STMT(BPF_RET | BPF_A, 0) };
	struct sock_fprog bad = { .len = 2, .filter = broken };
	struct t_filter f;
	struct sock_fprog fp;
	char buf[64];
	ssize_t r;
	int lfd, fd;

	(void)arg;
	lfd = t_listen_loopback(AF_INET, 8, &sh->addr);
	t_f_begin(&f);
	t_f_rule(&f, SYS_sendmsg, SECCOMP_RET_KILL_PROCESS);
	t_f_rule(&f, SYS_recvmsg, SECCOMP_RET_KILL_PROCESS);
	t_f_end(&f, SECCOMP_RET_ALLOW);
	fp = (struct sock_fprog){ .len = (unsigned short)f.n, .filter = f.insns };
	T_REPORT("server: no_new_privs", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0));
	T_REPORT("server: seccomp(unknown flag)",
		 syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 1u << 30, &fp));
	T_REPORT("server: seccomp(TSYNC | NEW_LISTENER)",
		 syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
			 SECCOMP_FILTER_FLAG_TSYNC | SECCOMP_FILTER_FLAG_NEW_LISTENER, &fp));
	T_REPORT("server: seccomp(bad pointer)",
		 syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, (void *)8));
	T_REPORT("server: seccomp(broken program)",
		 syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &bad));
	T_REPORT("server: prctl(unknown mode)", prctl(PR_SET_SECCOMP, 7, &fp, 0, 0));
	T_REPORT("server: seccomp(strict, with a flag)",
		 syscall(SYS_seccomp, SECCOMP_SET_MODE_STRICT, 1, NULL));
	T_REPORT("server: PR_GET_SECCOMP", prctl(PR_GET_SECCOMP, 0, 0, 0, 0));
	t_chan_put(&ready, 1);
	fd = t_accept(lfd);
	while ((r = read(fd, buf, sizeof(buf))) > 0)
		t_send_all(fd, buf, (size_t)r);
	T_REPORT("server: read at the end", r);
	T_REPORT("server: close", close(fd));
}

int main(void)
{
	struct t_child s;
	char buf[16];
	int fd;

	t_start(60);
	sh = t_shared_alloc(sizeof(*sh));
	t_chan_open(&ready);
	t_child_start(&s, "server", server, NULL);
	t_chan_get(&ready);
	fd = t_connect(&sh->addr);
	t_send_all(fd, "still shuntd's", 14);
	t_recv_all(fd, buf, 14);
	printf("main: echoed \"%.14s\"\n", buf);
	T_REPORT("main: close", close(fd));
	t_child_end(&s);
	return t_finish();
}
