/* SPDX-License-Identifier: MIT */
/*
 * Internal system calls return >= 0 or -errno (liburing's convention). errno
 * may be clobbered on the way; exported wrappers restore the application's.
 */
#ifndef SHUNT_SYS_H
#define SHUNT_SYS_H

#include <errno.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>

static inline long shunt_sys_ret(long r)
{
	return r == -1 ? -errno : r;
}

/*
 * The C library's syscall(), found once with dlsym(RTLD_NEXT): a system
 * call that no interposer sees, libshunt's own syscall() wrapper included.
 * Every system call the library makes on its own behalf goes through here,
 * so that it is never mistaken for one of the application's. Same contract
 * as syscall(2): the result, or -1 with errno set.
 *
 * shunt_syscall(nr, args...) takes up to six arguments; the macro passes
 * the missing ones as 0, so that exactly six always reach syscall() (a
 * variadic function cannot read arguments it was not given).
 */
long shunt_syscall6(long nr, long a, long b, long c, long d, long e, long f);
#define SHUNT_SYSCALL_SIX(nr, a, b, c, d, e, f, ...)                                  \
	shunt_syscall6((long)(nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), \
		       (long)(f))
#define shunt_syscall(...) SHUNT_SYSCALL_SIX(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)

/*
 * Wait while *word == @val, at most @rel (NULL: forever). Shared (not
 * FUTEX_PRIVATE) because the word lives in memory mapped by other processes.
 * Returns 0 when woken or the value differed, -ETIMEDOUT, or -EINTR when a
 * signal handler ran (the kernel restarts it by itself under SA_RESTART when
 * there is no timeout, which is what recv(2) does too).
 */
static inline int shunt_futex_wait(_Atomic uint32_t *word, uint32_t val,
				   const struct timespec *rel)
{
	long r = shunt_syscall(SYS_futex, word, FUTEX_WAIT, val, rel, NULL, 0);
	if (r == 0)
		return 0;
	return errno == EAGAIN ? 0 : -errno;
}

static inline void shunt_futex_wake(_Atomic uint32_t *word, int n)
{
	shunt_syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* Add 1 to an eventfd; a full counter (never in practice) still wakes. */
static inline void shunt_eventfd_signal(int efd)
{
	uint64_t one = 1;
	(void)!shunt_syscall(SYS_write, efd, &one, sizeof(one));
}

#endif
