// SPDX-License-Identifier: MIT
/*
 * Exported wrappers of the calls that give the program a new descriptor
 * and are not socket calls: open and its spellings, pipe, socketpair,
 * eventfd, timerfd, signalfd, inotify, fanotify, memfd, pidfd, the temporary
 * file makers and the stdio and dirent openers (which open inside the C
 * library, where no wrapper sees it). Each new number makes the fd table
 * forget what it held there (a descriptor closed behind the library's back)
 * and is held to the program's own descriptor limit (fdlimit.c). fclose and
 * freopen close inside the C library too: a shunt socket opened with
 * fdopen is released as close() would release it.
 *
 * Not seen, and so not covered: descriptors made inside the C library by
 * calls not listed here (getaddrinfo's and syslog's sockets, shm_open,
 * posix_openpt...), by system calls without it, and by io_uring
 * (docs/differences.md). They only matter when a shunt socket was closed
 * unseen as well; slow paths check identities for that (fdtable.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "common/sys.h"
#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/file.h"
#include "preload/init.h"
#include "preload/libc.h"

int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);
int fanotify_init(unsigned int flags, unsigned int event_flags);
int pidfd_open(pid_t pid, unsigned int flags);
int pidfd_getfd(int pidfd, int targetfd, unsigned int flags);
FILE *fopen64(const char *path, const char *mode);
FILE *freopen64(const char *path, const char *mode, FILE *f);
FILE *tmpfile64(void);

/*
 * The C library made descriptor @fd (or failed: < 0, passed on): the
 * program's, or refused when it landed in the library's reserve.
 */
static int new_fd(int fd)
{
	int e = errno;

	if (fd < 0)
		return fd;
	if (shunt_fdlimit_admit(fd) == 0) {
		errno = e;	/* whatever forgetting a stale entry did to it */
		return fd;
	}
	shunt_syscall(SYS_close, fd);
	errno = EMFILE;
	return -1;
}

/*
 * The same for two (pipe, socketpair): both, or neither as the kernel does
 * at its limit, leaving the caller's array as it was (@was).
 */
static int new_pair(int r, int *fds, const int *was)
{
	int e = errno, a, b;

	if (r < 0)
		return r;
	a = shunt_fdlimit_admit(fds[0]);
	b = shunt_fdlimit_admit(fds[1]);
	if (!a && !b) {
		errno = e;
		return r;
	}
	shunt_syscall(SYS_close, fds[0]);
	shunt_syscall(SYS_close, fds[1]);
	fds[0] = was[0];
	fds[1] = was[1];
	errno = EMFILE;
	return -1;
}

/* A FILE the C library opened: the program's, or closed again if refused. */
static FILE *new_file(FILE *f)
{
	int e = errno;

	if (!f)
		return f;
	if (shunt_fdlimit_admit(fileno(f)) == 0) {
		errno = e;
		return f;
	}
	SHUNT_LIBC(fclose)(f);
	errno = EMFILE;
	return NULL;
}

/*
 * Before an open at the program's limit: the kernel's order is the flags
 * (EINVAL), the path (EFAULT, ENOENT for "", ENAMETOOLONG), then EMFILE,
 * before anything is looked up or created. 0 when the call may go ahead,
 * else -1 with errno set.
 */
static int open_room(const char *path, int flags)
{
	if (shunt_fdlimit_room(1) == 0)
		return 0;
	/* An empty path fails after the flags are checked: EINVAL or ENOENT, and no file. */
	if (shunt_syscall(SYS_openat, AT_FDCWD, "", flags, 0) < 0 && errno == EINVAL)
		return -1;
	if (!path)
		errno = EFAULT;
	else if (!*path)
		errno = ENOENT;
	else if (strnlen(path, PATH_MAX) >= PATH_MAX)
		errno = ENAMETOOLONG;
	else
		errno = EMFILE;
	return -1;
}

static mode_t mode_arg(int flags, va_list ap)
{
	return __OPEN_NEEDS_MODE(flags) ? (mode_t)va_arg(ap, int) : 0;
}

SHUNT_EXPORT int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	if (shunt_dormant())
		return SHUNT_LIBC(open)(path, flags, mode);
	shunt_ensure_init();
	if (open_room(path, flags) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(open)(path, flags, mode));
}

SHUNT_EXPORT int open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	if (shunt_dormant())
		return SHUNT_LIBC(open64)(path, flags, mode);
	shunt_ensure_init();
	if (open_room(path, flags) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(open64)(path, flags, mode));
}

SHUNT_EXPORT int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	if (shunt_dormant())
		return SHUNT_LIBC(openat)(dirfd, path, flags, mode);
	shunt_ensure_init();
	if (open_room(path, flags) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(openat)(dirfd, path, flags, mode));
}

SHUNT_EXPORT int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = mode_arg(flags, ap);
	va_end(ap);
	if (shunt_dormant())
		return SHUNT_LIBC(openat64)(dirfd, path, flags, mode);
	shunt_ensure_init();
	if (open_room(path, flags) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(openat64)(dirfd, path, flags, mode));
}

/* The fortified spellings (_FORTIFY_SOURCE): they check for a missing mode first. */
SHUNT_EXPORT int __open_2(const char *path, int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(__open_2)(path, flags);
	shunt_ensure_init();
	if (!__OPEN_NEEDS_MODE(flags) && open_room(path, flags) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(__open_2)(path, flags));
}

SHUNT_EXPORT int __open64_2(const char *path, int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(__open64_2)(path, flags);
	shunt_ensure_init();
	if (!__OPEN_NEEDS_MODE(flags) && open_room(path, flags) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(__open64_2)(path, flags));
}

SHUNT_EXPORT int __openat_2(int dirfd, const char *path, int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(__openat_2)(dirfd, path, flags);
	shunt_ensure_init();
	if (!__OPEN_NEEDS_MODE(flags) && open_room(path, flags) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(__openat_2)(dirfd, path, flags));
}

SHUNT_EXPORT int __openat64_2(int dirfd, const char *path, int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(__openat64_2)(dirfd, path, flags);
	shunt_ensure_init();
	if (!__OPEN_NEEDS_MODE(flags) && open_room(path, flags) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(__openat64_2)(dirfd, path, flags));
}

SHUNT_EXPORT int creat(const char *path, mode_t mode)
{
	if (shunt_dormant())
		return SHUNT_LIBC(creat)(path, mode);
	shunt_ensure_init();
	if (open_room(path, O_CREAT | O_WRONLY | O_TRUNC) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(creat)(path, mode));
}

SHUNT_EXPORT int creat64(const char *path, mode_t mode)
{
	if (shunt_dormant())
		return SHUNT_LIBC(creat64)(path, mode);
	shunt_ensure_init();
	if (open_room(path, O_CREAT | O_WRONLY | O_TRUNC) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(creat64)(path, mode));
}

SHUNT_EXPORT int pipe(int fds[2])
{
	int was[2] = { fds[0], fds[1] };

	if (shunt_dormant())
		return SHUNT_LIBC(pipe)(fds);
	shunt_ensure_init();
	return new_pair(SHUNT_LIBC(pipe)(fds), fds, was);
}

SHUNT_EXPORT int pipe2(int fds[2], int flags)
{
	int was[2] = { fds[0], fds[1] };

	if (shunt_dormant())
		return SHUNT_LIBC(pipe2)(fds, flags);
	shunt_ensure_init();
	return new_pair(SHUNT_LIBC(pipe2)(fds, flags), fds, was);
}

SHUNT_EXPORT int socketpair(int domain, int type, int protocol, int fds[2])
{
	int was[2] = { fds[0], fds[1] };

	if (shunt_dormant())
		return SHUNT_LIBC(socketpair)(domain, type, protocol, fds);
	shunt_ensure_init();
	/*
	 * __sys_socketpair takes both numbers before it creates anything,
	 * right after checking the flags: at the limit it is EMFILE whatever
	 * the family or protocol.
	 */
	if (!(type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC | 0xf)) && shunt_fdlimit_room(2) < 0) {
		errno = EMFILE;
		return -1;
	}
	return new_pair(SHUNT_LIBC(socketpair)(domain, type, protocol, fds), fds, was);
}

SHUNT_EXPORT int eventfd(unsigned int initval, int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(eventfd)(initval, flags);
	shunt_ensure_init();
	return new_fd(SHUNT_LIBC(eventfd)(initval, flags));
}

SHUNT_EXPORT int timerfd_create(int clockid, int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(timerfd_create)(clockid, flags);
	shunt_ensure_init();
	return new_fd(SHUNT_LIBC(timerfd_create)(clockid, flags));
}

SHUNT_EXPORT int signalfd(int fd, const sigset_t *mask, int flags)
{
	int r;

	if (shunt_dormant())
		return SHUNT_LIBC(signalfd)(fd, mask, flags);
	shunt_ensure_init();
	r = SHUNT_LIBC(signalfd)(fd, mask, flags);
	/* With an existing signalfd it changes that one: no new descriptor. */
	return fd == -1 ? new_fd(r) : r;
}

SHUNT_EXPORT int inotify_init(void)
{
	if (shunt_dormant())
		return SHUNT_LIBC(inotify_init)();
	shunt_ensure_init();
	return new_fd(SHUNT_LIBC(inotify_init)());
}

SHUNT_EXPORT int inotify_init1(int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(inotify_init1)(flags);
	shunt_ensure_init();
	return new_fd(SHUNT_LIBC(inotify_init1)(flags));
}

SHUNT_EXPORT int fanotify_init(unsigned int flags, unsigned int event_flags)
{
	if (shunt_dormant() && SHUNT_LIBC(fanotify_init))
		return SHUNT_LIBC(fanotify_init)(flags, event_flags);
	shunt_ensure_init();
	if (!SHUNT_LIBC(fanotify_init)) {
		errno = ENOSYS;
		return -1;
	}
	return new_fd(SHUNT_LIBC(fanotify_init)(flags, event_flags));
}

SHUNT_EXPORT int memfd_create(const char *name, unsigned int flags)
{
	if (shunt_dormant() && SHUNT_LIBC(memfd_create))
		return SHUNT_LIBC(memfd_create)(name, flags);
	shunt_ensure_init();
	if (!SHUNT_LIBC(memfd_create))
		return new_fd((int)shunt_syscall(SYS_memfd_create, name, flags));
	return new_fd(SHUNT_LIBC(memfd_create)(name, flags));
}

SHUNT_EXPORT int pidfd_open(pid_t pid, unsigned int flags)
{
	if (shunt_dormant() && SHUNT_LIBC(pidfd_open))
		return SHUNT_LIBC(pidfd_open)(pid, flags);
	shunt_ensure_init();
	if (!SHUNT_LIBC(pidfd_open))
		return new_fd((int)shunt_syscall(SYS_pidfd_open, pid, flags));
	return new_fd(SHUNT_LIBC(pidfd_open)(pid, flags));
}

SHUNT_EXPORT int pidfd_getfd(int pidfd, int targetfd, unsigned int flags)
{
	if (shunt_dormant() && SHUNT_LIBC(pidfd_getfd))
		return SHUNT_LIBC(pidfd_getfd)(pidfd, targetfd, flags);
	shunt_ensure_init();
	if (!SHUNT_LIBC(pidfd_getfd))
		return new_fd((int)shunt_syscall(SYS_pidfd_getfd, pidfd, targetfd, flags));
	return new_fd(SHUNT_LIBC(pidfd_getfd)(pidfd, targetfd, flags));
}

/* mkstemp and friends: glibc checks the template (EINVAL) before it opens. */
static int temp_room(const char *tmpl, int suffix)
{
	size_t len = tmpl ? strlen(tmpl) : 0;

	if (shunt_fdlimit_room(1) == 0)
		return 0;
	if (suffix < 0 || len < 6 + (size_t)suffix ||
	    memcmp(tmpl + len - suffix - 6, "XXXXXX", 6))
		errno = EINVAL;
	else
		errno = EMFILE;
	return -1;
}

SHUNT_EXPORT int mkstemp(char *tmpl)
{
	if (shunt_dormant())
		return SHUNT_LIBC(mkstemp)(tmpl);
	shunt_ensure_init();
	if (temp_room(tmpl, 0) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(mkstemp)(tmpl));
}

SHUNT_EXPORT int mkostemp(char *tmpl, int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(mkostemp)(tmpl, flags);
	shunt_ensure_init();
	if (temp_room(tmpl, 0) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(mkostemp)(tmpl, flags));
}

SHUNT_EXPORT int mkstemps(char *tmpl, int suffix)
{
	if (shunt_dormant())
		return SHUNT_LIBC(mkstemps)(tmpl, suffix);
	shunt_ensure_init();
	if (temp_room(tmpl, suffix) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(mkstemps)(tmpl, suffix));
}

SHUNT_EXPORT int mkostemps(char *tmpl, int suffix, int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(mkostemps)(tmpl, suffix, flags);
	shunt_ensure_init();
	if (temp_room(tmpl, suffix) < 0)
		return -1;
	return new_fd(SHUNT_LIBC(mkostemps)(tmpl, suffix, flags));
}

/* fopen's mode is parsed before anything is opened: a bad one is EINVAL. */
static int fopen_room(const char *path, const char *mode)
{
	if (shunt_fdlimit_room(1) == 0)
		return 0;
	if (!mode || (*mode != 'r' && *mode != 'w' && *mode != 'a'))
		errno = EINVAL;
	else if (path && !*path)
		errno = ENOENT;
	else
		errno = EMFILE;
	return -1;
}

SHUNT_EXPORT FILE *fopen(const char *path, const char *mode)
{
	if (shunt_dormant())
		return SHUNT_LIBC(fopen)(path, mode);
	shunt_ensure_init();
	if (fopen_room(path, mode) < 0)
		return NULL;
	return new_file(SHUNT_LIBC(fopen)(path, mode));
}

SHUNT_EXPORT FILE *fopen64(const char *path, const char *mode)
{
	if (shunt_dormant())
		return SHUNT_LIBC(fopen64)(path, mode);
	shunt_ensure_init();
	if (fopen_room(path, mode) < 0)
		return NULL;
	return new_file(SHUNT_LIBC(fopen64)(path, mode));
}

SHUNT_EXPORT FILE *tmpfile(void)
{
	if (shunt_dormant())
		return SHUNT_LIBC(tmpfile)();
	shunt_ensure_init();
	if (shunt_fdlimit_room(1) < 0) {
		errno = EMFILE;
		return NULL;
	}
	return new_file(SHUNT_LIBC(tmpfile)());
}

SHUNT_EXPORT FILE *tmpfile64(void)
{
	if (shunt_dormant())
		return SHUNT_LIBC(tmpfile64)();
	shunt_ensure_init();
	if (shunt_fdlimit_room(1) < 0) {
		errno = EMFILE;
		return NULL;
	}
	return new_file(SHUNT_LIBC(tmpfile64)());
}

SHUNT_EXPORT DIR *opendir(const char *path)
{
	DIR *d;
	int e;

	if (shunt_dormant())
		return SHUNT_LIBC(opendir)(path);
	shunt_ensure_init();
	if (*path && shunt_fdlimit_room(1) < 0) {
		errno = EMFILE;
		return NULL;
	}
	d = SHUNT_LIBC(opendir)(path);
	e = errno;
	if (d && shunt_fdlimit_admit(dirfd(d)) < 0) {
		closedir(d);
		errno = EMFILE;
		return NULL;
	}
	errno = e;
	return d;
}

/*
 * Closing a FILE closes its descriptor inside the C library. If that is a
 * shunt socket (fdopen), it leaves the table first, as close() does it, so
 * that a descriptor another thread gets under the same number meanwhile
 * starts clean.
 */
static struct shunt_file *closing(FILE *f)
{
	int fd = f ? fileno(f) : -1;

	return fd >= 0 && shunt_fdt_is_ours(fd) ? shunt_fdt_take(fd) : NULL;
}

SHUNT_EXPORT int fclose(FILE *f)
{
	struct shunt_file *sf;
	int r, e;

	if (shunt_dormant())
		return SHUNT_LIBC(fclose)(f);
	shunt_ensure_init();
	sf = closing(f);
	r = SHUNT_LIBC(fclose)(f);
	e = errno;
	if (sf)
		shunt_file_put(sf);
	errno = e;
	return r;
}

/* freopen closes the old descriptor and opens a new one, under the same FILE. */
static FILE *do_freopen(FILE *(*fn)(const char *, const char *, FILE *), const char *path,
			const char *mode, FILE *f)
{
	struct shunt_file *sf = closing(f);
	FILE *r = fn(path, mode, f);
	int e = errno;

	if (sf)
		shunt_file_put(sf);
	if (r)
		shunt_fdt_forget(fileno(r));
	errno = e;
	return r;
}

SHUNT_EXPORT FILE *freopen(const char *path, const char *mode, FILE *f)
{
	if (shunt_dormant())
		return SHUNT_LIBC(freopen)(path, mode, f);
	shunt_ensure_init();
	return do_freopen(SHUNT_LIBC(freopen), path, mode, f);
}

SHUNT_EXPORT FILE *freopen64(const char *path, const char *mode, FILE *f)
{
	if (shunt_dormant())
		return SHUNT_LIBC(freopen64)(path, mode, f);
	shunt_ensure_init();
	return do_freopen(SHUNT_LIBC(freopen64), path, mode, f);
}
