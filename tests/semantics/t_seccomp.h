// SPDX-License-Identifier: MIT
// Seccomp filters for the t_seccomp_* programs: a small builder of classic
// BPF programs in the style of OpenSSH's sandbox-seccomp-filter.c (check the
// architecture, load the number, one rule after another, a default action),
// and children whose output the parent prints in a fixed order.
#ifndef T_SECCOMP_H
#define T_SECCOMP_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "t_harness.h"

#if defined(__x86_64__)
#define T_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define T_ARCH AUDIT_ARCH_AARCH64
#else
#error "an AUDIT_ARCH for this machine"
#endif

#define T_ARG_LO(n) (offsetof(struct seccomp_data, args[n]))
#define T_ARG_HI(n) (offsetof(struct seccomp_data, args[n]) + 4)

struct t_filter {
	struct sock_filter insns[1024];
	unsigned n;
};

static inline void t_f_put(struct t_filter *f, struct sock_filter insn)
{
	if (f->n == sizeof(f->insns) / sizeof(f->insns[0]))
		t_fatal("filter too long");
	f->insns[f->n++] = insn;
}

// The architecture must be ours (or the process dies), then the number is loaded.
static inline void t_f_begin(struct t_filter *f)
{
	f->n = 0;
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
						offsetof(struct seccomp_data, arch)));
	t_f_put(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, T_ARCH, 1, 0));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
						offsetof(struct seccomp_data, nr)));
}

// System call nr gets action ret (whatever its arguments).
static inline void t_f_rule(struct t_filter *f, long nr, uint32_t ret)
{
	t_f_put(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, ret));
}

static inline void t_f_allow(struct t_filter *f, long nr)
{
	t_f_rule(f, nr, SECCOMP_RET_ALLOW);
}

// nr gets ret when argument arg (all 64 bits) equals val; otherwise the
// rules after this one decide (OpenSSH's SC_ALLOW_ARG).
static inline void t_f_rule_arg(struct t_filter *f, long nr, int arg, uint64_t val, uint32_t ret)
{
	t_f_put(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 6));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, T_ARG_LO(arg)));
	t_f_put(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)val, 0, 3));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, T_ARG_HI(arg)));
	t_f_put(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)(val >> 32),
						0, 1));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, ret));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
						offsetof(struct seccomp_data, nr)));
}

// nr with argument arg holding only bits of mask is allowed; with other
// bits it fails with err (OpenSSH's mmap rule: SC_DENY_UNLESS_ARG_MASK).
static inline void t_f_allow_mask(struct t_filter *f, long nr, int arg, uint32_t mask, int err)
{
	t_f_put(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 7));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, T_ARG_LO(arg)));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~mask));
	t_f_put(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 3));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, T_ARG_HI(arg)));
	t_f_put(f, (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (uint32_t)err));
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
}

// What every other call gets.
static inline void t_f_end(struct t_filter *f, uint32_t ret)
{
	t_f_put(f, (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, ret));
}

// What any program here needs to finish: print, allocate, exit, take its
// watchdog's signal, read the clock (the vDSO may fall back to the call).
static inline void t_f_allow_basics(struct t_filter *f)
{
	static const long basics[] = {
		SYS_read, SYS_write, SYS_close, SYS_exit, SYS_exit_group, SYS_brk, SYS_munmap,
		SYS_mremap, SYS_rt_sigreturn, SYS_rt_sigprocmask, SYS_clock_gettime,
		SYS_clock_nanosleep, SYS_nanosleep, SYS_restart_syscall, SYS_getpid, SYS_gettid,
		SYS_getrandom, SYS_madvise,
	};

	for (size_t i = 0; i < sizeof(basics) / sizeof(basics[0]); i++)
		t_f_allow(f, basics[i]);
	// Memory only as malloc wants it: private and anonymous (OpenSSH's rule).
	t_f_allow_mask(f, SYS_mmap, 3, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
		       EINVAL);
}

// Install f with prctl(PR_SET_SECCOMP) (use_syscall false) or seccomp(2),
// after PR_SET_NO_NEW_PRIVS; fatal if the kernel refuses.
static inline void t_f_install(struct t_filter *f, bool use_syscall)
{
	struct sock_fprog fp = { .len = (unsigned short)f->n, .filter = f->insns };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		t_fatal("PR_SET_NO_NEW_PRIVS");
	if (use_syscall ? syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp) :
			  prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp, 0, 0))
		t_fatal("installing the seccomp filter");
}

// A child whose stdout goes to a pipe, printed by the parent (t_child_end)
// after the child is gone: the trace never depends on who runs first.
struct t_child {
	pid_t pid;
	int out;
	const char *name;
};

static inline void t_child_start(struct t_child *c, const char *name, void (*fn)(void *),
				 void *arg)
{
	int p[2];

	if (pipe(p) < 0)
		t_fatal("pipe");
	c->name = name;
	c->pid = t_fork_tied(60);
	if (c->pid == 0) {
		close(p[0]);
		if (dup2(p[1], 1) < 0)
			t_fatal("dup2");
		close(p[1]);
		fn(arg);
		fflush(stdout);
		exit(t_finish());
	}
	close(p[1]);
	c->out = p[0];
}

// Wait for the child and print what it printed, then its exit status.
static inline int t_child_end(struct t_child *c)
{
	char buf[4096];
	ssize_t n;
	int st;

	printf("--- %s\n", c->name);
	fflush(stdout);
	while ((n = read(c->out, buf, sizeof(buf))) > 0)
		if (write(1, buf, (size_t)n) != n)
			t_fatal("write");
	close(c->out);
	st = t_wait_child(c->pid);
	printf("--- %s exits with %d\n", c->name, st);
	return st;
}

#endif
