/* SPDX-License-Identifier: MIT */
/*
 * The C library's own versions of every function libshunt interposes,
 * each found with dlsym(RTLD_NEXT) when first called (SHUNT_LIBC). Calls
 * that are not ours go there untouched; the library's internal plumbing
 * uses raw system calls instead.
 */
#ifndef SHUNT_PRELOAD_LIBC_H
#define SHUNT_PRELOAD_LIBC_H

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#define SHUNT_LIBC_FUNCTIONS(X) \
	X(int, socket, (int, int, int)) \
	X(int, bind, (int, const struct sockaddr *, socklen_t)) \
	X(int, listen, (int, int)) \
	X(int, accept, (int, struct sockaddr *, socklen_t *)) \
	X(int, accept4, (int, struct sockaddr *, socklen_t *, int)) \
	X(int, connect, (int, const struct sockaddr *, socklen_t)) \
	X(int, getsockname, (int, struct sockaddr *, socklen_t *)) \
	X(int, getpeername, (int, struct sockaddr *, socklen_t *)) \
	X(int, setsockopt, (int, int, int, const void *, socklen_t)) \
	X(int, getsockopt, (int, int, int, void *, socklen_t *)) \
	X(int, shutdown, (int, int)) \
	X(int, close, (int)) \
	X(ssize_t, send, (int, const void *, size_t, int)) \
	X(ssize_t, sendto, (int, const void *, size_t, int, const struct sockaddr *, socklen_t)) \
	X(ssize_t, sendmsg, (int, const struct msghdr *, int)) \
	X(int, sendmmsg, (int, struct mmsghdr *, unsigned int, int)) \
	X(ssize_t, recv, (int, void *, size_t, int)) \
	X(ssize_t, recvfrom, (int, void *, size_t, int, struct sockaddr *, socklen_t *)) \
	X(ssize_t, recvmsg, (int, struct msghdr *, int)) \
	X(int, recvmmsg, (int, struct mmsghdr *, unsigned int, int, struct timespec *)) \
	X(ssize_t, read, (int, void *, size_t)) \
	X(ssize_t, write, (int, const void *, size_t)) \
	X(ssize_t, readv, (int, const struct iovec *, int)) \
	X(ssize_t, writev, (int, const struct iovec *, int)) \
	X(ssize_t, __read_chk, (int, void *, size_t, size_t)) \
	X(ssize_t, __recv_chk, (int, void *, size_t, size_t, int)) \
	X(ssize_t, __recvfrom_chk, (int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *)) \
	X(int, fcntl, (int, int, ...)) \
	X(int, fcntl64, (int, int, ...)) \
	X(int, ioctl, (int, unsigned long, ...)) \
	X(int, poll, (struct pollfd *, nfds_t, int)) \
	X(int, __poll_chk, (struct pollfd *, nfds_t, int, size_t)) \
	X(int, ppoll, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *)) \
	X(int, __ppoll_chk, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t)) \
	X(int, select, (int, fd_set *, fd_set *, fd_set *, struct timeval *)) \
	X(int, pselect, (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *)) \
	X(int, dup, (int)) \
	X(int, dup2, (int, int)) \
	X(int, dup3, (int, int, int)) \
	X(int, open, (const char *, int, ...)) \
	X(int, open64, (const char *, int, ...)) \
	X(int, openat, (int, const char *, int, ...)) \
	X(int, openat64, (int, const char *, int, ...)) \
	X(int, __open_2, (const char *, int)) \
	X(int, __open64_2, (const char *, int)) \
	X(int, __openat_2, (int, const char *, int)) \
	X(int, __openat64_2, (int, const char *, int)) \
	X(int, creat, (const char *, mode_t)) \
	X(int, creat64, (const char *, mode_t)) \
	X(int, pipe, (int *)) \
	X(int, pipe2, (int *, int)) \
	X(int, socketpair, (int, int, int, int *)) \
	X(int, eventfd, (unsigned int, int)) \
	X(int, timerfd_create, (int, int)) \
	X(int, signalfd, (int, const sigset_t *, int)) \
	X(int, inotify_init, (void)) \
	X(int, inotify_init1, (int)) \
	X(int, fanotify_init, (unsigned int, unsigned int)) \
	X(int, memfd_create, (const char *, unsigned int)) \
	X(int, pidfd_open, (pid_t, unsigned int)) \
	X(int, pidfd_getfd, (int, int, unsigned int)) \
	X(int, mkstemp, (char *)) \
	X(int, mkostemp, (char *, int)) \
	X(int, mkstemps, (char *, int)) \
	X(int, mkostemps, (char *, int, int)) \
	X(FILE *, fopen, (const char *, const char *)) \
	X(FILE *, fopen64, (const char *, const char *)) \
	X(FILE *, freopen, (const char *, const char *, FILE *)) \
	X(FILE *, freopen64, (const char *, const char *, FILE *)) \
	X(FILE *, tmpfile, (void)) \
	X(FILE *, tmpfile64, (void)) \
	X(int, fclose, (FILE *)) \
	X(DIR *, opendir, (const char *)) \
	X(int, getrlimit, (__rlimit_resource_t, struct rlimit *)) \
	X(int, setrlimit, (__rlimit_resource_t, const struct rlimit *)) \
	X(int, prlimit, (pid_t, __rlimit_resource_t, const struct rlimit *, struct rlimit *)) \
	X(long, sysconf, (int)) \
	X(ssize_t, sendfile, (int, int, off_t *, size_t)) \
	X(ssize_t, sendfile64, (int, int, off_t *, size_t)) \
	X(ssize_t, splice, (int, loff_t *, int, loff_t *, size_t, unsigned int)) \
	X(int, epoll_create, (int)) \
	X(int, epoll_create1, (int)) \
	X(int, epoll_ctl, (int, int, int, struct epoll_event *)) \
	X(int, epoll_wait, (int, struct epoll_event *, int, int)) \
	X(int, epoll_pwait, (int, struct epoll_event *, int, int, const sigset_t *)) \
	X(int, epoll_pwait2, (int, struct epoll_event *, int, const struct timespec *, const sigset_t *)) \
	X(pid_t, fork, (void)) \
	X(pid_t, _Fork, (void)) \
	X(int, clone, (int (*)(void *), void *, int, void *, ...)) \
	X(int, execve, (const char *, char *const[], char *const[])) \
	X(int, execv, (const char *, char *const[])) \
	X(int, execvp, (const char *, char *const[])) \
	X(int, execvpe, (const char *, char *const[], char *const[])) \
	X(int, fexecve, (int, char *const[], char *const[])) \
	X(int, execveat, (int, const char *, char *const[], char *const[], int)) \
	X(int, posix_spawn, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			     const posix_spawnattr_t *, char *const[], char *const[])) \
	X(int, posix_spawnp, (pid_t *, const char *, const posix_spawn_file_actions_t *, \
			      const posix_spawnattr_t *, char *const[], char *const[])) \
	X(int, posix_spawn_file_actions_adddup2, (posix_spawn_file_actions_t *, int, int)) \
	X(int, system, (const char *)) \
	X(FILE *, popen, (const char *, const char *)) \
	X(int, sigaction, (int, const struct sigaction *, struct sigaction *)) \
	X(__sighandler_t, signal, (int, __sighandler_t)) \
	X(__sighandler_t, __sysv_signal, (int, __sighandler_t)) \
	X(__sighandler_t, sigset, (int, __sighandler_t)) \
	X(int, sigignore, (int)) \
	X(int, siginterrupt, (int, int)) \
	X(FILE *, fdopen, (int, const char *))

#define SHUNT_LIBC_POINTER(ret, name, args) ret (*name) args;
struct shunt_libc {
	SHUNT_LIBC_FUNCTIONS(SHUNT_LIBC_POINTER)
};
#undef SHUNT_LIBC_POINTER

/* Each slot filled in by its first SHUNT_LIBC; never changed afterwards. */
extern struct shunt_libc shunt_libc;

/*
 * The C library's @name, found on first use rather than all 107 at start:
 * dlsym costs about 0.3 µs a symbol, 30 µs for the table, which a process
 * that calls a few of them (most never make a socket: init.c) need not
 * pay. A symbol missing from the C library aborts the process at its first
 * use with a message naming it (a jump to NULL otherwise); an optional one
 * (optional() in libc.c: newer than some glibc) is NULL, and callers check.
 */
#define SHUNT_LIBC(name) \
	((__typeof__(shunt_libc.name))shunt_libc_get((void **)&shunt_libc.name, #name))

void *shunt_libc_find(void **slot, const char *name);

static inline void *shunt_libc_get(void **slot, const char *name)
{
	void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	return __builtin_expect(p != NULL, 1) ? p : shunt_libc_find(slot, name);
}

#endif
