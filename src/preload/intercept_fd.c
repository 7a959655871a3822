// SPDX-License-Identifier: MIT
/*
 * Exported wrappers of descriptor-level calls: close, dup*, fcntl, ioctl and
 * the readiness calls poll, ppoll, select, pselect. Sets without a shunt
 * socket go to the C library untouched.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "preload/fdlimit.h"
#include "preload/fault.h"
#include "preload/fdtable.h"
#include "preload/file.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/recycle.h"
#include "preload/sock.h"
#include "preload/util.h"

int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
		size_t fdslen);
void __chk_fail(void) __attribute__((noreturn));

SHUNT_EXPORT int close(int fd)
{
	int saved = errno;

	if (shunt_dormant())
		return SHUNT_LIBC(close)(fd);
	shunt_ensure_init();
	return (int)shunt_ret(shunt_op_close(fd), saved);
}

SHUNT_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	int saved = errno;

	if (shunt_dormant())
		return (int)shunt_syscall_app(SYS_close_range, first, last, flags);
	shunt_ensure_init();
	return (int)shunt_ret(shunt_op_close_range(first, last, flags), saved);
}

/* glibc's closefrom() calls close_range() without going through us. */
SHUNT_EXPORT void closefrom(int lowfd)
{
	int saved = errno;

	if (shunt_dormant() && lowfd >= 0 &&
	    shunt_syscall_app(SYS_close_range, lowfd, ~0U, 0) == 0) {
		errno = saved;
		return;
	}
	shunt_ensure_init();
	if (lowfd < 0)
		lowfd = 0;
	if (shunt_op_close_range((unsigned)lowfd, ~0U, 0) < 0) {
		/* As glibc: close what can be closed one by one, never fail. */
		for (size_t fd = (size_t)lowfd; fd < shunt_fdt_high(); fd++)
			if (!shunt_fdt_is_hidden((int)fd))
				close((int)fd);
	}
	errno = saved;
}

/*
 * A stale fd table entry under @fd (closed behind our back) must not be
 * duplicated, nor a recycled half (recycle.h): two numbers would hold it.
 */
static void check_source(int fd)
{
	struct shunt_file *f = shunt_fdt_get_file_checked(fd);

	if (f) {
		if (f->kind == SHUNT_FILE_SOCK)
			shunt_recycle_fresh((struct shunt_sock *)f, fd);
		shunt_file_put(f);
	}
}

/*
 * The C library duplicated @fd onto @r (or failed: < 0, passed on); @fresh:
 * the kernel chose the number, which may have landed in the reserve.
 */
static int duplicated(int fd, int r, bool fresh)
{
	int e = errno;

	if (r < 0)
		return r;
	if (fresh && shunt_fdlimit_admit(r) < 0) {
		shunt_syscall(SYS_close, r);
		errno = EMFILE;
		return -1;
	}
	shunt_op_dup(fd, r);
	errno = e;
	return r;
}

SHUNT_EXPORT int dup(int fd)
{
	if (shunt_dormant())
		return SHUNT_LIBC(dup)(fd);
	shunt_ensure_init();
	check_source(fd);
	return duplicated(fd, SHUNT_LIBC(dup)(fd), true);
}

SHUNT_EXPORT int dup2(int fd, int newfd)
{
	if (shunt_dormant())
		return SHUNT_LIBC(dup2)(fd, newfd);
	shunt_ensure_init();
	/* ksys_dup3 refuses a target past the limit before it looks at @fd. */
	if (fd != newfd && shunt_fdlimit_check_target(newfd) < 0) {
		errno = EBADF;
		return -1;
	}
	check_source(fd);
	return duplicated(fd, SHUNT_LIBC(dup2)(fd, newfd), false);
}

SHUNT_EXPORT int dup3(int fd, int newfd, int flags)
{
	if (shunt_dormant())
		return SHUNT_LIBC(dup3)(fd, newfd, flags);
	shunt_ensure_init();
	/* After its EINVAL checks (flags, same descriptor), as ksys_dup3 orders them. */
	if (!(flags & ~O_CLOEXEC) && fd != newfd && shunt_fdlimit_check_target(newfd) < 0) {
		errno = EBADF;
		return -1;
	}
	check_source(fd);
	return duplicated(fd, SHUNT_LIBC(dup3)(fd, newfd, flags), false);
}

/* F_DUPFD and F_DUPFD_CLOEXEC: the lowest free number from @arg, in the program's range. */
static int do_dupfd(int fd, int cmd, void *arg, int (*libc_fn)(int, int, ...))
{
	/* do_fcntl reads the argument as an int, f_dupfd as an unsigned one. */
	unsigned int from = (unsigned int)(int)(long)arg;

	if (shunt_fdlimit_check_from(from) < 0) {
		/* EBADF first: the descriptor is looked up before the command runs. */
		if (shunt_syscall(SYS_fcntl, fd, F_GETFD) >= 0)
			errno = EINVAL;
		return -1;
	}
	check_source(fd);
	return duplicated(fd, libc_fn(fd, cmd, arg), true);
}

static int do_fcntl(int fd, int cmd, void *arg, int (*libc_fn)(int, int, ...))
{
	struct shunt_sock *s;
	int saved = errno, r;

	shunt_ensure_init();
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		return do_dupfd(fd, cmd, arg, libc_fn);
	s = shunt_fdt_get(fd);
	if (!s)
		return libc_fn(fd, cmd, arg);
	r = shunt_op_fcntl(s, fd, cmd, arg);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

/* Like glibc's own wrapper, the optional argument is read as a pointer. */
SHUNT_EXPORT int fcntl(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (shunt_dormant())
		return SHUNT_LIBC(fcntl)(fd, cmd, arg);
	return do_fcntl(fd, cmd, arg, SHUNT_LIBC(fcntl));
}

SHUNT_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (!SHUNT_LIBC(fcntl64))
		return fcntl(fd, cmd, arg);
	if (shunt_dormant())
		return SHUNT_LIBC(fcntl64)(fd, cmd, arg);
	return do_fcntl(fd, cmd, arg, SHUNT_LIBC(fcntl64));
}

SHUNT_EXPORT int ioctl(int fd, unsigned long req, ...)
{
	struct shunt_sock *s;
	int saved = errno, r;
	va_list ap;
	void *arg;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (shunt_dormant())
		return SHUNT_LIBC(ioctl)(fd, req, arg);
	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return SHUNT_LIBC(ioctl)(fd, req, arg);
	r = shunt_op_ioctl(s, fd, req, arg);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	int saved = errno;
	/* The system call takes the count as an unsigned int. */
	nfds_t kn = (unsigned int)n;

	if (shunt_dormant())
		return SHUNT_LIBC(poll)(fds, n, timeout);
	shunt_ensure_init();
	/* do_sys_poll's first check, against the program's own limit (fdlimit.c). */
	if (shunt_fdlimit_check_nfds(kn) < 0) {
		errno = EINVAL;
		return -1;
	}
	if (!shunt_poll_has_ours(fds, kn))
		return SHUNT_LIBC(poll)(fds, n, timeout);
	return (int)shunt_ret(shunt_op_poll(fds, kn, timeout < 0 ? -1 : timeout * 1000000LL, NULL),
			      saved);
}

SHUNT_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return poll(fds, n, timeout);
}

static bool valid_timespec(const struct timespec *ts)
{
	return !ts || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000);
}

/* The kernel reads a sigmask before anything else: one it cannot read is EFAULT, in its order. */
static bool mask_copy(const sigset_t *umask, sigset_t *mask)
{
	sigemptyset(mask);
	return !umask || !shunt_get_user(mask, umask, _NSIG / 8);
}

SHUNT_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
		       const sigset_t *mask)
{
	int saved = errno;
	nfds_t kn = (unsigned int)n;
	sigset_t kmask;

	if (shunt_dormant())
		return SHUNT_LIBC(ppoll)(fds, n, ts, mask);
	shunt_ensure_init();
	/* After the timeout's checks, which the kernel makes first. */
	if (valid_timespec(ts) && shunt_fdlimit_check_nfds(kn) < 0) {
		errno = EINVAL;
		return -1;
	}
	/* glibc reads the timeout itself (a bad pointer faults there), the kernel the rest. */
	if (!valid_timespec(ts) || !shunt_poll_has_ours(fds, kn) || !mask_copy(mask, &kmask))
		return SHUNT_LIBC(ppoll)(fds, n, ts, mask);
	return (int)shunt_ret(shunt_op_poll(fds, kn, ts ? ts->tv_sec * 1000000000LL + ts->tv_nsec : -1,
					    mask ? &kmask : NULL),
			      saved);
}

SHUNT_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts,
			     const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return ppoll(fds, n, ts, mask);
}

/*
 * The library's copies of a select's sets: what the kernel's get_fd_set
 * reads, whole words for @nfds descriptors. In @fast when they fit.
 */
struct sets {
	fd_set *rd, *wr, *ex;
	fd_set fast[3];
	void *alloc;
	size_t bytes;
};

static size_t set_bytes(int nfds)
{
	size_t words = ((size_t)nfds + 8 * sizeof(long) - 1) / (8 * sizeof(long));

	return words * sizeof(long);
}

/* 0, -EFAULT when a set cannot be read (the kernel then answers), or -ENOMEM. */
static int sets_import(struct sets *k, int nfds, fd_set *rd, fd_set *wr, fd_set *ex)
{
	fd_set *user[3] = { rd, wr, ex }, *mine[3];
	char *base = NULL;

	k->bytes = set_bytes(nfds);
	k->alloc = NULL;
	if (k->bytes > sizeof(fd_set)) {
		k->alloc = base = calloc(3, k->bytes);
		if (!base)
			return -ENOMEM;
	}
	for (int i = 0; i < 3; i++) {
		mine[i] = NULL;
		if (!user[i])
			continue;
		mine[i] = base ? (fd_set *)(base + (size_t)i * k->bytes) : &k->fast[i];
		if (shunt_get_user(mine[i], user[i], k->bytes)) {
			free(k->alloc);
			return -EFAULT;
		}
	}
	k->rd = mine[0];
	k->wr = mine[1];
	k->ex = mine[2];
	return 0;
}

/* set_fd_set: the results go back; one set that cannot be written is EFAULT. */
static int sets_export(const struct sets *k, fd_set *rd, fd_set *wr, fd_set *ex)
{
	if ((rd && shunt_put_user(rd, k->rd, k->bytes)) ||
	    (wr && shunt_put_user(wr, k->wr, k->bytes)) ||
	    (ex && shunt_put_user(ex, k->ex, k->bytes)))
		return -EFAULT;
	return 0;
}

/* Whether any descriptor in the three sets is a shunt socket (none lies past the table's high). */
static bool sets_have_ours(const struct sets *k, int nfds)
{
	size_t high = shunt_fdt_high();
	int end = high < (size_t)nfds ? (int)high : nfds;

	for (int fd = 0; fd < end; fd++) {
		if (!((k->rd && FD_ISSET(fd, k->rd)) || (k->wr && FD_ISSET(fd, k->wr)) ||
		      (k->ex && FD_ISSET(fd, k->ex))))
			continue;
		if (shunt_fdt_is_ours(fd))
			return true;
	}
	return false;
}

/*
 * select and pselect over sets with a shunt socket: -1 with errno set, or
 * the count; 1 in *@kernel when the C library should answer instead (a set
 * or mask it cannot read, or no shunt socket at all).
 */
static int select_ours(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, int64_t timeout_ns,
		       const sigset_t *umask, int64_t *left, bool *kernel)
{
	int saved = errno, r;
	sigset_t kmask;
	struct sets k;

	*kernel = true;
	r = sets_import(&k, nfds, rd, wr, ex);
	if (r == -EFAULT)
		return 0;
	if (r == 0 && (!sets_have_ours(&k, nfds) || !mask_copy(umask, &kmask))) {
		free(k.alloc);
		return 0;
	}
	*kernel = false;
	if (r == 0) {
		r = shunt_op_select(nfds, k.rd, k.wr, k.ex, timeout_ns, umask ? &kmask : NULL, left);
		if (r >= 0 && sets_export(&k, rd, wr, ex) < 0)
			r = -EFAULT;
		free(k.alloc);
	}
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	int64_t left = 0;
	bool kernel;
	int r;

	if (shunt_dormant())
		return SHUNT_LIBC(select)(nfds, rd, wr, ex, tv);
	shunt_ensure_init();
	/* glibc reads the timeout itself, and refuses a negative one without the kernel. */
	if (nfds < 0 || (tv && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000)))
		return SHUNT_LIBC(select)(nfds, rd, wr, ex, tv);
	r = select_ours(nfds, rd, wr, ex, tv ? tv->tv_sec * 1000000000LL + tv->tv_usec * 1000LL : -1,
			NULL, &left, &kernel);
	if (kernel)
		return SHUNT_LIBC(select)(nfds, rd, wr, ex, tv);
	/* Linux tells the caller how much of the timeout was left (glibc writes it back). */
	if (tv) {
		tv->tv_sec = left / 1000000000;
		tv->tv_usec = (left % 1000000000) / 1000;
	}
	return r;
}

SHUNT_EXPORT int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts,
			 const sigset_t *mask)
{
	bool kernel;
	int r;

	if (shunt_dormant())
		return SHUNT_LIBC(pselect)(nfds, rd, wr, ex, ts, mask);
	shunt_ensure_init();
	if (nfds < 0 || !valid_timespec(ts))
		return SHUNT_LIBC(pselect)(nfds, rd, wr, ex, ts, mask);
	r = select_ours(nfds, rd, wr, ex, ts ? ts->tv_sec * 1000000000LL + ts->tv_nsec : -1, mask,
			NULL, &kernel);
	if (kernel)
		return SHUNT_LIBC(pselect)(nfds, rd, wr, ex, ts, mask);
	return r;
}
