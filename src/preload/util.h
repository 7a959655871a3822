/* SPDX-License-Identifier: MIT */
/* Small helpers of the preload: internal descriptors, time, errno boundary. */
#ifndef SHUNT_PRELOAD_UTIL_H
#define SHUNT_PRELOAD_UTIL_H

#include <errno.h>
#include <stdint.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/sys.h"

/* This process's pid (getpid() is a system call): set at start and in a fork child. */
extern uint32_t shunt_pid;

/* Close a descriptor of our own, bypassing the close() wrapper. */
static inline void shunt_close_internal(int fd)
{
	shunt_syscall(SYS_close, fd);
}

/*
 * Move an internal descriptor out of the application's way: to a high
 * number (the kernel hands the application the lowest free ones, and
 * programs notice when that order changes), close-on-exec, and marked so
 * the application cannot close it. Returns the new number, or @fd itself
 * if it cannot be moved. Close it with shunt_close_hidden().
 */
int shunt_fd_hide(int fd);
void shunt_close_hidden(int fd);

/*
 * The soft RLIMIT_NOFILE, or -errno. When a seccomp filter forbids reading
 * it, the last value read (seccomp preparation reads it before a filter
 * takes effect; a filter that forbids prlimit64 keeps the program from
 * changing it too).
 */
long shunt_rlimit_nofile(void);

/* CLOCK_MONOTONIC in nanoseconds, unless a seccomp filter makes it unsafe (common/sys.h). */
static inline int64_t shunt_now_ns(void)
{
	return shunt_sys_now_ns();
}

/*
 * The errno boundary (musl's __syscall_ret): internal results are >= 0 or
 * -errno; exported wrappers set errno only on failure and otherwise give the
 * application back the errno it had.
 */
static inline long shunt_ret(long r, int saved_errno)
{
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	errno = saved_errno;
	return r;
}

#endif
