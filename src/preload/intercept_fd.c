// SPDX-License-Identifier: MIT
/*
 * Exported wrappers of descriptor-level calls: close, dup*, fcntl, ioctl and
 * the readiness calls poll, ppoll, select, pselect. Sets without a shunt
 * socket go to the C library untouched.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <unistd.h>

#include "common/log.h"
#include "preload/fdtable.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/sock.h"
#include "preload/util.h"

int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts, const sigset_t *mask,
		size_t fdslen);
void __chk_fail(void) __attribute__((noreturn));

SHUNT_EXPORT int close(int fd)
{
	int saved = errno;

	shunt_ensure_init();
	return (int)shunt_ret(shunt_op_close(fd), saved);
}

SHUNT_EXPORT int close_range(unsigned first, unsigned last, int flags)
{
	int saved = errno;

	shunt_ensure_init();
	return (int)shunt_ret(shunt_op_close_range(first, last, flags), saved);
}

/* glibc's closefrom() calls close_range() without going through us. */
SHUNT_EXPORT void closefrom(int lowfd)
{
	int saved = errno;

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

static void warn_hidden(int fd)
{
	if (shunt_fdt_is_hidden(fd))
		shunt_warn("the application replaced descriptor %d that shunt uses; "
			   "connections using it may fall back or stall", fd);
}

SHUNT_EXPORT int dup(int fd)
{
	int r;

	shunt_ensure_init();
	r = shunt_libc.dup(fd);
	if (r >= 0)
		shunt_op_dup(fd, r);
	return r;
}

SHUNT_EXPORT int dup2(int fd, int newfd)
{
	int r;

	shunt_ensure_init();
	warn_hidden(newfd);
	r = shunt_libc.dup2(fd, newfd);
	if (r >= 0)
		shunt_op_dup(fd, r);
	return r;
}

SHUNT_EXPORT int dup3(int fd, int newfd, int flags)
{
	int r;

	shunt_ensure_init();
	warn_hidden(newfd);
	r = shunt_libc.dup3(fd, newfd, flags);
	if (r >= 0)
		shunt_op_dup(fd, r);
	return r;
}

static int do_fcntl(int fd, int cmd, void *arg, int (*libc_fn)(int, int, ...))
{
	struct shunt_sock *s;
	int saved = errno, r;

	shunt_ensure_init();
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
	shunt_ensure_init();
	return do_fcntl(fd, cmd, arg, shunt_libc.fcntl);
}

SHUNT_EXPORT int fcntl64(int fd, int cmd, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, cmd);
	arg = va_arg(ap, void *);
	va_end(ap);
	shunt_ensure_init();
	return do_fcntl(fd, cmd, arg, shunt_libc.fcntl64 ? shunt_libc.fcntl64 : shunt_libc.fcntl);
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
	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.ioctl(fd, req, arg);
	r = shunt_op_ioctl(s, fd, req, arg);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout)
{
	int saved = errno;

	shunt_ensure_init();
	if (!fds || !shunt_poll_has_ours(fds, n))
		return shunt_libc.poll(fds, n, timeout);
	return (int)shunt_ret(shunt_op_poll(fds, n, timeout < 0 ? -1 : timeout * 1000000LL, NULL),
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

SHUNT_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
		       const sigset_t *mask)
{
	int saved = errno;

	shunt_ensure_init();
	if (!fds || !valid_timespec(ts) || !shunt_poll_has_ours(fds, n))
		return shunt_libc.ppoll(fds, n, ts, mask);
	return (int)shunt_ret(shunt_op_poll(fds, n, ts ? ts->tv_sec * 1000000000LL + ts->tv_nsec : -1,
					    mask),
			      saved);
}

SHUNT_EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *ts,
			     const sigset_t *mask, size_t fdslen)
{
	if (fdslen / sizeof(*fds) < n)
		__chk_fail();
	return ppoll(fds, n, ts, mask);
}

/* Whether any descriptor in the three sets is a shunt socket. */
static bool sets_have_ours(int nfds, fd_set *rd, fd_set *wr, fd_set *ex)
{
	for (int fd = 0; fd < nfds; fd++) {
		if (!((rd && FD_ISSET(fd, rd)) || (wr && FD_ISSET(fd, wr)) ||
		      (ex && FD_ISSET(fd, ex))))
			continue;
		if (shunt_fdt_is_ours(fd))
			return true;
	}
	return false;
}

SHUNT_EXPORT int select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
	int saved = errno;
	int64_t left = 0;
	int r;

	shunt_ensure_init();
	if (nfds < 0 || (tv && (tv->tv_sec < 0 || tv->tv_usec < 0 || tv->tv_usec >= 1000000)) ||
	    !sets_have_ours(nfds, rd, wr, ex))
		return shunt_libc.select(nfds, rd, wr, ex, tv);
	r = shunt_op_select(nfds, rd, wr, ex, tv ? tv->tv_sec * 1000000000LL + tv->tv_usec * 1000LL : -1,
			    NULL, &left);
	/* Linux tells the caller how much of the timeout was left. */
	if (tv) {
		tv->tv_sec = left / 1000000000;
		tv->tv_usec = (left % 1000000000) / 1000;
	}
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int pselect(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts,
			 const sigset_t *mask)
{
	int saved = errno;

	shunt_ensure_init();
	if (nfds < 0 || !valid_timespec(ts) || !sets_have_ours(nfds, rd, wr, ex))
		return shunt_libc.pselect(nfds, rd, wr, ex, ts, mask);
	return (int)shunt_ret(shunt_op_select(nfds, rd, wr, ex,
					      ts ? ts->tv_sec * 1000000000LL + ts->tv_nsec : -1,
					      mask, NULL),
			      saved);
}
