// SPDX-License-Identifier: MIT
/*
 * shunt_syscall: the C library's syscall(), bypassing every interposer and
 * judged by the seccomp gate. The library exports a syscall() of its own
 * (programs close descriptors with it), so its internal system calls must
 * not reach that one; and a program under a seccomp filter must not be
 * killed for a call the library made on its own behalf.
 */
#include <dlfcn.h>
#include <poll.h>
#include <stdlib.h>

#include "common/once.h"
#include "common/sys.h"

_Atomic(shunt_sys_gate_fn) shunt_sys_gate;
_Atomic bool shunt_sys_clockless;

static long (*libc_syscall)(long, ...);
static struct shunt_once find_once = SHUNT_ONCE_INIT;
static _Atomic int64_t fake_now;

static void find(void)
{
	libc_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	/* Not behind us (a program linking us directly): whichever is first. */
	if (!libc_syscall)
		libc_syscall = (long (*)(long, ...))dlsym(RTLD_DEFAULT, "syscall");
	if (!libc_syscall)
		abort();
}

long shunt_syscall6(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
	const long a[6] = { a0, a1, a2, a3, a4, a5 };
	shunt_sys_gate_fn gate;

	/* Pairs with the release that published the judge (preload/seccomp.c). */
	gate = atomic_load_explicit(&shunt_sys_gate, memory_order_acquire);
	if (__builtin_expect(gate != NULL, 0) && !gate(nr, a)) {
		errno = SHUNT_SYS_DENIED;
		return -1;
	}
	shunt_once(&find_once, find);
	return libc_syscall(nr, a0, a1, a2, a3, a4, a5);
}

long shunt_syscall_app6(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
	shunt_once(&find_once, find);
	return libc_syscall(nr, a0, a1, a2, a3, a4, a5);
}

int64_t shunt_sys_fake_ns(void)
{
	/* A microsecond a look: deadlines still pass, after a number of looks. */
	return atomic_fetch_add_explicit(&fake_now, 1000, memory_order_relaxed) + 1000;
}

void shunt_sys_go_clockless(bool on)
{
	if (on && !atomic_load(&shunt_sys_clockless)) {
		/* Deadlines computed before stay ahead of the count, as of the clock. */
		atomic_store(&fake_now, shunt_sys_now_ns());
	}
	atomic_store(&shunt_sys_clockless, on);
}

int shunt_sys_nap(int64_t ns)
{
	struct timespec ts = { ns / 1000000000, ns % 1000000000 };

	/* Each denied way costs an evaluation of the filters, not a system call. */
	if (shunt_syscall(SYS_ppoll, NULL, 0, &ts, NULL, 0) >= 0)
		return 0;
	if (errno != SHUNT_SYS_DENIED)
		return errno == EINTR ? -EINTR : 0;
	if (shunt_syscall(SYS_nanosleep, &ts, NULL) >= 0)
		return 0;
	if (errno != SHUNT_SYS_DENIED)
		return errno == EINTR ? -EINTR : 0;
	if (shunt_syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, &ts, NULL) >= 0)
		return 0;
	if (errno != SHUNT_SYS_DENIED)
		return errno == EINTR ? -EINTR : 0;
	if (shunt_syscall(SYS_sched_yield) >= 0)
		return 0;
	/* Nothing that sleeps is allowed: let the CPU breathe a while. */
	for (int64_t i = 0; i < ns / 16 + 1; i++) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#elif defined(__aarch64__)
		__asm__ volatile("yield");
#endif
	}
	return 0;
}
