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
 * Move an internal descriptor out of the application's way: into the
 * library's reserve above the program's descriptor limit (fdlimit.c), so
 * that it never takes one of the program's numbers; close-on-exec, and
 * marked so the application cannot close it. Returns the new number, or
 * -errno (-EMFILE: no room even in the reserve) with @fd closed either way:
 * the caller goes on without it, as without shuntd. Close the new one with
 * shunt_close_hidden().
 */
int shunt_fd_hide(int fd);

/* The same, but a hidden duplicate of @fd, which stays open. */
int shunt_fd_dup_hidden(int fd);

void shunt_close_hidden(int fd);

/*
 * Close a descriptor a reply of shuntd's carried, once done with it (a
 * memfd mapped): where the library shares the program's range, its number
 * may be one of the room's (fdroom.h), which stays the library's.
 */
void shunt_close_reply(int fd);

/* shunt_close_reply for each of @n descriptors (-1 entries skipped). */
void shunt_close_replies(const int *fds, unsigned n);


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
