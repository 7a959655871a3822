// SPDX-License-Identifier: MIT
/*
 * The seccomp filters of this process: learnt when the program installs
 * them, stacked as the kernel stacks them, and consulted by the gate of
 * every system call the library makes on its own behalf.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <linux/audit.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/filter.h"
#include "preload/sandbox.h"
#include "preload/seccomp.h"
#include "preload/util.h"

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#elif defined(__riscv) && __riscv_xlen == 64
#define NATIVE_ARCH AUDIT_ARCH_RISCV64
#else
#define NATIVE_ARCH 0	/* unknown: every filter that looks at arch is taken literally */
#endif

enum {
	NR_CACHED = 512,	/* numbers whose verdict may be known once for all arguments */
	MAX_INSNS = 4096,	/* BPF_MAXINSNS */
};

enum chain_mode {
	CHAIN_FILTER,		/* programs we hold copies of */
	CHAIN_STRICT,		/* SECCOMP_MODE_STRICT */
	CHAIN_UNKNOWN,		/* a filter we could not see: everything is forbidden */
};

struct prog {
	unsigned len;
	struct sock_filter insns[];
};

struct shunt_chain {
	enum chain_mode mode;
	unsigned n;			/* programs, the newest first (the kernel's order) */
	const struct prog **progs;
	/* Numbers every program allows whatever the arguments (the kernel's action cache). */
	uint64_t always[NR_CACHED / 64];
};

_Atomic(const struct shunt_chain *) shunt_seccomp_current;

static const struct shunt_chain strict_chain = { .mode = CHAIN_STRICT };
static const struct shunt_chain unknown_chain = { .mode = CHAIN_UNKNOWN };

/* Serialises installs: each one prepares, publishes, installs, and keeps or reverts. */
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;

/* What strict mode allows (mode1_syscalls, native calls only: the library makes no others). */
static bool strict_allows(long nr)
{
	return nr == SYS_read || nr == SYS_write || nr == SYS_exit || nr == SYS_rt_sigreturn;
}

/* One program's answer; one that read the instruction pointer we cannot know forbids. */
static uint32_t run(const struct prog *p, const struct seccomp_data *sd, unsigned *seen)
{
	uint32_t r = shunt_filter_run(p->insns, p->len, sd, seen);

	return (*seen & SHUNT_FILTER_SAW_IP) ? SECCOMP_RET_KILL_PROCESS : r;
}

bool shunt_chain_allows(const struct shunt_chain *c, long nr, const long args[6])
{
	struct seccomp_data sd = { .nr = (int)nr, .arch = NATIVE_ARCH };
	uint32_t ret = SECCOMP_RET_ALLOW;

	if (!c)
		return true;
	if (c->mode == CHAIN_STRICT)
		return strict_allows(nr);
	if (c->mode == CHAIN_UNKNOWN)
		return false;
	if (nr >= 0 && nr < NR_CACHED && (c->always[nr / 64] >> (nr % 64) & 1))
		return true;
	for (int i = 0; i < 6; i++)
		sd.args[i] = (uint64_t)args[i];
	/* seccomp_run_filters: the lowest action wins, the newest filter on a tie. */
	for (unsigned i = 0; i < c->n; i++) {
		unsigned seen;
		uint32_t r = run(c->progs[i], &sd, &seen);

		if (shunt_filter_action(r) < shunt_filter_action(ret))
			ret = r;
	}
	return shunt_filter_allows(ret);
}

bool shunt_chain_strict(const struct shunt_chain *c)
{
	return c && c->mode == CHAIN_STRICT;
}

/* The gate's judge (common/sys.h): the stack in force. */
static bool judge(long nr, const long args[6])
{
	return shunt_chain_allows(shunt_seccomp_chain(), nr, args);
}

/* Make @c the stack in force (NULL: none), with the gate open or shut accordingly. */
static void publish(const struct shunt_chain *c)
{
	/* Release: a thread that sees the chain or the judge sees the chain's contents. */
	atomic_store_explicit(&shunt_seccomp_current, c, memory_order_release);
	atomic_store_explicit(&shunt_sys_gate, c ? judge : NULL, memory_order_release);
}

/* @old with @p on top, its "always allowed" numbers worked out; NULL without memory. */
static const struct shunt_chain *push(const struct shunt_chain *old, const struct prog *p)
{
	unsigned n = old ? old->n + 1 : 1;
	struct shunt_chain *c = calloc(1, sizeof(*c) + n * sizeof(c->progs[0]));
	const struct prog **progs;

	if (!c)
		return NULL;
	progs = (const struct prog **)(c + 1);
	c->mode = CHAIN_FILTER;
	c->n = n;
	c->progs = progs;
	progs[0] = p;
	for (unsigned i = 1; i < n; i++)
		progs[i] = old->progs[i - 1];
	/*
	 * A number is always allowed if every program allows it on a path
	 * that looked at nothing but the number and the architecture (as the
	 * kernel's seccomp_cache_prepare finds out, by running them).
	 */
	for (long nr = 0; nr < NR_CACHED; nr++) {
		struct seccomp_data sd = { .nr = (int)nr, .arch = NATIVE_ARCH };
		bool always = true;

		for (unsigned i = 0; i < n && always; i++) {
			unsigned seen;
			uint32_t r = run(progs[i], &sd, &seen);

			always = shunt_filter_allows(r) &&
				 !(seen & (SHUNT_FILTER_SAW_ARGS | SHUNT_FILTER_SAW_IP));
		}
		if (always)
			c->always[nr / 64] |= 1ull << (nr % 64);
	}
	return c;
}

/* The chain after program @p (NULL: one we could not copy) went on top of @old. */
static const struct shunt_chain *after(const struct shunt_chain *old, const struct prog *p)
{
	const struct shunt_chain *c;

	if (!p || (old && old->mode != CHAIN_FILTER))
		return &unknown_chain;
	c = push(old, p);
	return c ? c : &unknown_chain;
}

enum copy_result {
	COPIED,
	INVALID,	/* unreadable or impossible: the kernel refuses it by itself */
	LATER,		/* cannot be read safely now: copied once the kernel has read it */
};

/* Read @len bytes at @src of this process without faulting (process_vm_readv). */
static long peek(void *dst, const void *src, size_t len)
{
	struct iovec local = { dst, len }, remote = { (void *)src, len };
	long r = shunt_syscall(SYS_process_vm_readv, (long)shunt_pid, &local, 1L, &remote, 1L, 0L);

	return r < 0 ? -errno : r;
}

/* A copy of the program behind @uargs (a struct sock_fprog), before the kernel sees it. */
static enum copy_result copy_before(const void *uargs, struct prog **out)
{
	struct sock_fprog fp;
	struct prog *p;
	long r;

	*out = NULL;
	if (!uargs)
		return INVALID;
	r = peek(&fp, uargs, sizeof(fp));
	if (r == -SHUNT_SYS_DENIED || r == -ENOSYS || r == -EPERM)
		return LATER;
	if (r != (long)sizeof(fp) || fp.len == 0 || fp.len > MAX_INSNS || !fp.filter)
		return INVALID;
	p = malloc(sizeof(*p) + fp.len * sizeof(p->insns[0]));
	if (!p)
		return LATER;
	p->len = fp.len;
	r = peek(p->insns, fp.filter, fp.len * sizeof(p->insns[0]));
	if (r != (long)(fp.len * sizeof(p->insns[0]))) {
		free(p);
		return r < 0 && r != -EFAULT ? LATER : INVALID;
	}
	if (shunt_filter_check(p->insns, p->len) < 0) {
		free(p);
		return INVALID;
	}
	*out = p;
	return COPIED;
}

/* The copy, once the kernel accepted the program: it read that memory, so can we. */
static struct prog *copy_after(const void *uargs)
{
	const struct sock_fprog *fp = uargs;
	struct prog *p = malloc(sizeof(*p) + fp->len * sizeof(p->insns[0]));

	if (!p)
		return NULL;
	p->len = fp->len;
	memcpy(p->insns, fp->filter, fp->len * sizeof(p->insns[0]));
	if (shunt_filter_check(p->insns, p->len) < 0) {
		free(p);
		return NULL;	/* accepted by the kernel, not by us: judged unknown */
	}
	return p;
}

/*
 * Install a filter (@strict false) or strict mode with the application's
 * own call (@raw, system call @nr). The library gets ready first, while the
 * filters in force still allow what that takes, and is judged by the new
 * stack from before the call on: a thread of ours making a system call in
 * between is held to the stricter rule, never the looser one.
 */
static long install(long nr, const long raw[6], bool strict, unsigned flags, const void *uargs)
{
	const struct shunt_chain *old, *next;
	struct shunt_sandbox_plan plan;
	struct prog *p = NULL;
	bool ok, later = false;
	long r;
	int err;

	pthread_mutex_lock(&install_lock);
	old = shunt_seccomp_chain();
	/* Under strict mode or a filter we never saw, nothing more can be learnt. */
	if (old && old->mode != CHAIN_FILTER) {
		pthread_mutex_unlock(&install_lock);
		return shunt_syscall_app(nr, raw[0], raw[1], raw[2], raw[3], raw[4], raw[5]);
	}
	if (strict) {
		next = &strict_chain;
	} else {
		switch (copy_before(uargs, &p)) {
		case COPIED:
			next = after(old, p);
			break;
		case LATER:
			later = true;
			next = &unknown_chain;
			break;
		default:
			/* The kernel refuses it (EFAULT, EINVAL): nothing changes. */
			r = shunt_syscall_app(nr, raw[0], raw[1], raw[2], raw[3], raw[4], raw[5]);
			if (r == 0 || (r > 0 && (flags & SECCOMP_FILTER_FLAG_NEW_LISTENER))) {
				/* It took it all the same: what it does we cannot tell. */
				publish(&unknown_chain);
				shunt_warn("seccomp: a filter this library cannot read was installed; "
					   "it makes no more system calls of its own");
			}
			pthread_mutex_unlock(&install_lock);
			return r;
		}
	}
	shunt_sandbox_prepare(old, next, &plan);
	publish(next);
	r = shunt_syscall_app(nr, raw[0], raw[1], raw[2], raw[3], raw[4], raw[5]);
	err = r < 0 ? errno : 0;
	/* TSYNC says which thread it could not move with a positive number. */
	ok = r == 0 || (r > 0 && (flags & SECCOMP_FILTER_FLAG_NEW_LISTENER));
	if (!ok) {
		/* Nothing changed. The copy stays: a thread may still be judging by it. */
		publish(old);
		shunt_sandbox_undo(&plan);
	} else {
		if (later) {
			next = after(old, copy_after(uargs));
			publish(next);
		}
		shunt_sandbox_done(&plan, next);
	}
	pthread_mutex_unlock(&install_lock);
	if (r < 0)
		errno = err;
	return r;
}

long shunt_seccomp_prctl(const long raw[6])
{
	int saved = errno;
	long r;

	if (raw[0] != PR_SET_SECCOMP || (raw[1] != SECCOMP_MODE_STRICT && raw[1] != SECCOMP_MODE_FILTER))
		return shunt_syscall_app(SYS_prctl, raw[0], raw[1], raw[2], raw[3], raw[4], raw[5]);
	/* prctl_set_seccomp: strict mode ignores the third argument; no flags. */
	r = install(SYS_prctl, raw, raw[1] == SECCOMP_MODE_STRICT, 0, (const void *)raw[2]);
	/* Our own calls on the way may have changed errno: on success it is the caller's. */
	if (r >= 0)
		errno = saved;
	return r;
}

long shunt_seccomp_syscall(const long raw[6])
{
	unsigned op = (unsigned)raw[0], flags = (unsigned)raw[1];
	int saved = errno;
	long r;

	/* do_seccomp: strict mode takes no flags and no argument; queries change nothing. */
	if (op == SECCOMP_SET_MODE_STRICT && !flags && !raw[2])
		r = install(SYS_seccomp, raw, true, 0, NULL);
	else if (op == SECCOMP_SET_MODE_FILTER)
		r = install(SYS_seccomp, raw, false, flags, (const void *)raw[2]);
	else
		return shunt_syscall_app(SYS_seccomp, raw[0], raw[1], raw[2], raw[3], raw[4], raw[5]);
	if (r >= 0)
		errno = saved;
	return r;
}

/* The number after "\n@key:" in @s, or -1. */
static long field(const char *s, const char *key)
{
	size_t n = strlen(key);

	for (const char *at = s; (at = strstr(at, key)); at += n)
		if ((at == s || at[-1] == '\n') && at[n] == ':')
			return strtol(at + n + 1, NULL, 10);
	return -1;
}

bool shunt_seccomp_start(unsigned *pid, unsigned *fdsize)
{
	char buf[8192];
	size_t n = 0;
	long r, mode;
	int fd;

	*pid = *fdsize = 0;
	/* Raw calls with the gate still open: what the dynamic loader made already. */
	fd = (int)shunt_syscall(SYS_openat, AT_FDCWD, "/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;	/* no /proc: nothing to go by (said in docs/differences.md) */
	while (n < sizeof(buf) - 1 && (r = shunt_syscall(SYS_read, fd, buf + n, sizeof(buf) - 1 - n)) > 0)
		n += (size_t)r;
	shunt_syscall(SYS_close, fd);
	buf[n] = 0;
	r = field(buf, "Pid");
	*pid = r > 0 ? (unsigned)r : 0;
	r = field(buf, "FDSize");
	*fdsize = r > 0 && r <= UINT32_MAX ? (unsigned)r : 0;
	mode = field(buf, "Seccomp");
	if (mode <= 0)
		return false;
	publish(&unknown_chain);
	return true;
}
