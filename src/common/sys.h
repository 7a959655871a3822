/* SPDX-License-Identifier: MIT */
/*
 * Internal system calls return >= 0 or -errno (liburing's convention). errno
 * may be clobbered on the way; exported wrappers restore the application's.
 */
#ifndef SHUNT_SYS_H
#define SHUNT_SYS_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/uio.h>
#include <sys/syscall.h>

static inline long shunt_sys_ret(long r)
{
	return r == -1 ? -errno : r;
}

/* A number and up to six arguments, as seven longs (missing ones 0). */
#define SHUNT_SYS_L(x) ((long)(x))
#define SHUNT_SYS_A1(n) SHUNT_SYS_L(n), 0L, 0L, 0L, 0L, 0L, 0L
#define SHUNT_SYS_A2(n, a) SHUNT_SYS_L(n), SHUNT_SYS_L(a), 0L, 0L, 0L, 0L, 0L
#define SHUNT_SYS_A3(n, a, b) SHUNT_SYS_L(n), SHUNT_SYS_L(a), SHUNT_SYS_L(b), 0L, 0L, 0L, 0L
#define SHUNT_SYS_A4(n, a, b, c) \
	SHUNT_SYS_L(n), SHUNT_SYS_L(a), SHUNT_SYS_L(b), SHUNT_SYS_L(c), 0L, 0L, 0L
#define SHUNT_SYS_A5(n, a, b, c, d) \
	SHUNT_SYS_L(n), SHUNT_SYS_L(a), SHUNT_SYS_L(b), SHUNT_SYS_L(c), SHUNT_SYS_L(d), 0L, 0L
#define SHUNT_SYS_A6(n, a, b, c, d, e) \
	SHUNT_SYS_L(n), SHUNT_SYS_L(a), SHUNT_SYS_L(b), SHUNT_SYS_L(c), SHUNT_SYS_L(d), \
	SHUNT_SYS_L(e), 0L
#define SHUNT_SYS_A7(n, a, b, c, d, e, f) \
	SHUNT_SYS_L(n), SHUNT_SYS_L(a), SHUNT_SYS_L(b), SHUNT_SYS_L(c), SHUNT_SYS_L(d), \
	SHUNT_SYS_L(e), SHUNT_SYS_L(f)
#define SHUNT_SYS_PICK(_1, _2, _3, _4, _5, _6, _7, m, ...) m
#define SHUNT_SYS_ARGS(...)                                                        \
	SHUNT_SYS_PICK(__VA_ARGS__, SHUNT_SYS_A7, SHUNT_SYS_A6, SHUNT_SYS_A5,       \
		       SHUNT_SYS_A4, SHUNT_SYS_A3, SHUNT_SYS_A2, SHUNT_SYS_A1)(__VA_ARGS__)

/*
 * The gate of the library's own system calls: NULL while the process runs
 * under no seccomp filter (the only cost then is loading this pointer and
 * one predictable branch), else the judge of each call (preload/seccomp.c):
 * true when the filters the program installed let it through. Published
 * with release; shunt_syscall loads it with acquire, so the judge sees the
 * filters it was published with.
 */
typedef bool (*shunt_sys_gate_fn)(long nr, const long args[6]);
extern _Atomic(shunt_sys_gate_fn) shunt_sys_gate;

/* errno of a call the gate kept from the kernel: no internal call fails so otherwise. */
enum { SHUNT_SYS_DENIED = EPERM };

/*
 * The C library's syscall(), found once with dlsym(RTLD_NEXT): a system
 * call that no interposer sees, libshunt's own syscall() wrapper included.
 * Every system call the library makes on its own behalf goes through here,
 * so that it is never mistaken for one of the application's, and through
 * the gate: one the installed filters would not allow fails with
 * SHUNT_SYS_DENIED instead of reaching the kernel. Same contract as
 * syscall(2): the result, or -1 with errno set.
 */
#define shunt_syscall(...) shunt_syscall6(SHUNT_SYS_ARGS(__VA_ARGS__))

/*
 * The call with all six arguments, the ones not given 0: reading more
 * variadic arguments than were passed reads the caller's stack (AddressSanitizer
 * calls it an underflow), so the macros above pad and cast them instead.
 */
long shunt_syscall6(long nr, long a0, long a1, long a2, long a3, long a4, long a5);

/*
 * The same call made on the application's behalf (its own syscall(), the
 * calls its wrappers pass on as they are): past the gate, so the kernel
 * applies the filters to it exactly as it would without the library.
 */
#define shunt_syscall_app(...) shunt_syscall_app6(SHUNT_SYS_ARGS(__VA_ARGS__))
long shunt_syscall_app6(long nr, long a0, long a1, long a2, long a3, long a4, long a5);

/*
 * Set when reading the clock could hurt the process: strict seccomp turns
 * the time-stamp counter off (the vDSO's clock_gettime would then fault),
 * and a filter may forbid the clock_gettime system call the vDSO falls back
 * to. Clock readers then use shunt_sys_fake_ns(), a count that only moves
 * forward: timeouts become approximate, nothing else breaks.
 */
extern _Atomic bool shunt_sys_clockless;
int64_t shunt_sys_fake_ns(void);

/* Stop (@on) or resume reading the clock; the count starts where the clock was. */
void shunt_sys_go_clockless(bool on);

/* CLOCK_MONOTONIC in nanoseconds (or the count above, when clockless). */
static inline int64_t shunt_sys_now_ns(void)
{
	struct timespec ts;

	if (__builtin_expect(atomic_load_explicit(&shunt_sys_clockless, memory_order_relaxed), 0))
		return shunt_sys_fake_ns();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The same in milliseconds (shuntd's ticks and deadlines). */
static inline int64_t shunt_sys_now_ms(void)
{
	return shunt_sys_now_ns() / 1000000;
}

/*
 * Sleep about @ns without a futex, by whatever the filters allow (a timed
 * ppoll, nanosleep, clock_nanosleep, sched_yield, or a spin of the CPU,
 * which needs no system call at all). Returns 0, or -EINTR when a signal
 * handler ran during the sleep.
 */
int shunt_sys_nap(int64_t ns);

/*
 * Wait while *word == @val, at most @rel (NULL: forever). Shared (not
 * FUTEX_PRIVATE) because the word lives in memory mapped by other processes.
 * Returns 0 when woken or the value differed, -ETIMEDOUT, -EINTR when a
 * signal handler ran (the kernel restarts it by itself under SA_RESTART when
 * there is no timeout, which is what recv(2) does too), or -SHUNT_SYS_DENIED
 * when a seccomp filter forbids the wait: the caller sleeps another way.
 */
static inline int shunt_futex_wait(_Atomic uint32_t *word, uint32_t val,
				   const struct timespec *rel)
{
	long r = shunt_syscall(SYS_futex, word, FUTEX_WAIT, val, rel, NULL, 0);
	if (r == 0)
		return 0;
	return errno == EAGAIN ? 0 : -errno;
}

/*
 * Wake up to @n sleepers; false when a seccomp filter forbids it (the
 * sleepers must then be ones that look again by themselves: see the nap
 * word of a circuit end).
 */
static inline bool shunt_futex_wake(_Atomic uint32_t *word, int n)
{
	return shunt_syscall(SYS_futex, word, FUTEX_WAKE, n, NULL, NULL, 0) >= 0 ||
	       errno != SHUNT_SYS_DENIED;
}

/* Add 1 to an eventfd; a full counter (never in practice) still wakes. */
static inline void shunt_eventfd_signal(int efd)
{
	uint64_t one = 1;
	(void)!shunt_syscall(SYS_write, efd, &one, sizeof(one));
}

/*
 * Take 1 from an EFD_SEMAPHORE eventfd if it has any, without waiting even
 * when another holder of the file cleared its O_NONBLOCK (RWF_NOWAIT;
 * offset -1 is the file's own, as read's). A kernel or seccomp filter that
 * refuses that gets the plain read. Whether one was taken.
 */
static inline bool shunt_eventfd_take(int efd)
{
	uint64_t v;
	struct iovec io = { &v, sizeof(v) };
	long r = shunt_syscall(SYS_preadv2, efd, &io, 1, -1L, 0L, RWF_NOWAIT);

	if (r < 0 && (errno == EOPNOTSUPP || errno == EINVAL || errno == ENOSYS ||
		      errno == SHUNT_SYS_DENIED))
		r = shunt_syscall(SYS_read, efd, &v, sizeof(v));
	return r == sizeof(v);
}

#endif
