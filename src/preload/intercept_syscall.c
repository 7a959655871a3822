// SPDX-License-Identifier: MIT
/*
 * The exported syscall(): programs make some socket calls through the C
 * library's generic system call function instead of its wrappers (libuv
 * closes every descriptor with syscall(SYS_close, fd), test suites call
 * syscall(__NR_accept4, ...)). Every number that can touch a shunt socket,
 * an epoll instance of ours, the fd table or the descriptor limit goes to
 * the same handling the C library's wrapper gets; every other number goes
 * to the kernel as it is, after one switch (futex comes through here in
 * the hot loops of some programs).
 *
 * Where the raw call differs from the C library's function, the result is
 * the raw call's: ppoll, pselect6 and epoll_pwait take the signal set's size
 * (EINVAL unless it is the kernel's), pselect6's sixth argument is a {set,
 * size} pair, ppoll and pselect6 write the time left back (glibc's wrappers
 * hide that), signalfd takes a size too, fcntl's values are the kernel's
 * (F_GETOWN is not translated). Calls on descriptors that are none of ours
 * are made as the program made them.
 *
 * libseccomp installs filters with syscall(__NR_seccomp, ...): those go to
 * the library first (seccomp.c). Every call made for the program goes past
 * the library's seccomp gate: it is the program's, for its filters to judge.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/sys.h"
#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/fault.h"
#include "preload/init.h"
#include "preload/ops.h"
#include "preload/seccomp.h"
#include "preload/uring.h"
#include "preload/util.h"

/* The kernel's sigset_t: what ppoll, pselect6 and epoll_pwait insist on. */
enum { KERNEL_SIGSET = _NSIG / 8 };

int close_range(unsigned int first, unsigned int last, int flags);

static bool valid_timespec(const struct timespec *ts)
{
	return !ts || (ts->tv_sec >= 0 && ts->tv_nsec >= 0 && ts->tv_nsec < 1000000000);
}

/* The program's own call, as it made it: past the seccomp gate, for its filters to judge. */
static long raw(long nr, const long *a)
{
	return shunt_syscall_app(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}

/* A new descriptor from a raw call the library has no wrapper for: as new_fd in intercept_create.c. */
static long created(long r)
{
	int e = errno;

	if (r < 0)
		return r;
	if (shunt_fdlimit_admit((int)r) == 0) {
		errno = e;
		return r;
	}
	shunt_syscall(SYS_close, r);
	errno = EMFILE;
	return -1;
}

/* fcntl: what the library follows goes through its wrapper, the rest as the kernel has it. */
static long raw_fcntl(const long *a)
{
	int cmd = (int)a[1];

	if (cmd == F_SETFL || cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		return fcntl((int)a[0], cmd, (void *)a[2]);
	return raw(SYS_fcntl, a);
}

/* Nanoseconds of a timespec the kernel accepted, -1 for none. */
static int64_t timeout_ns(const struct timespec *ts)
{
	return ts ? ts->tv_sec * 1000000000LL + ts->tv_nsec : -1;
}

/*
 * What poll_select_finish does with the caller's timeout: the time left
 * written back, unless the timeout was zero.
 */
static void time_left(struct timespec *ts, int64_t start, int64_t left_ns)
{
	if (!ts || (!ts->tv_sec && !ts->tv_nsec))
		return;
	if (left_ns < 0) {
		left_ns = timeout_ns(ts) - (shunt_now_ns() - start);
		if (left_ns < 0)
			left_ns = 0;
	}
	ts->tv_sec = left_ns / 1000000000;
	ts->tv_nsec = left_ns % 1000000000;
}

static long raw_ppoll(const long *a)
{
	struct pollfd *fds = (struct pollfd *)a[0];
	nfds_t n = (nfds_t)a[1];
	struct timespec *ts = (struct timespec *)a[2];
	const sigset_t *mask = (const sigset_t *)a[3];
	int saved = errno;
	int64_t start;
	int r;

	if (shunt_dormant())
		return raw(SYS_ppoll, a);
	shunt_ensure_init();
	/* The kernel's order: the timeout, the set's size, the count, the array. */
	if (!valid_timespec(ts) || (mask && (size_t)a[4] != KERNEL_SIGSET))
		return raw(SYS_ppoll, a);
	if (shunt_fdlimit_check_nfds(n) < 0) {
		errno = EINVAL;
		return -1;
	}
	if (!fds || !shunt_poll_has_ours(fds, n))
		return raw(SYS_ppoll, a);
	start = shunt_now_ns();
	r = shunt_op_poll(fds, n, timeout_ns(ts), mask);
	time_left(ts, start, -1);
	return shunt_ret(r, saved);
}

/* Whether any descriptor in the three sets is a shunt socket. */
static bool sets_have_ours(int nfds, fd_set *rd, fd_set *wr, fd_set *ex)
{
	for (int fd = 0; fd < nfds; fd++)
		if (((rd && FD_ISSET(fd, rd)) || (wr && FD_ISSET(fd, wr)) ||
		     (ex && FD_ISSET(fd, ex))) && shunt_fdt_is_ours(fd))
			return true;
	return false;
}

static long raw_pselect6(const long *a)
{
	int n = (int)a[0];
	fd_set *rd = (fd_set *)a[1], *wr = (fd_set *)a[2], *ex = (fd_set *)a[3];
	struct timespec *ts = (struct timespec *)a[4];
	const long *pack = (const long *)a[5];	/* { const sigset_t *set; size_t size; } */
	const sigset_t *mask = NULL;
	int64_t left = 0;
	int saved = errno, r;

	if (shunt_dormant())
		return raw(SYS_pselect6, a);
	shunt_ensure_init();
	if (!valid_timespec(ts))
		return raw(SYS_pselect6, a);
	if (pack) {
		mask = (const sigset_t *)pack[0];
		if (mask && (size_t)pack[1] != KERNEL_SIGSET)
			return raw(SYS_pselect6, a);
	}
	if (n < 0 || !sets_have_ours(n, rd, wr, ex))
		return raw(SYS_pselect6, a);
	r = shunt_op_select(n, rd, wr, ex, timeout_ns(ts), mask, &left);
	time_left(ts, 0, left);
	return shunt_ret(r, saved);
}

static long raw_epoll_pwait(const long *a)
{
	const sigset_t *mask = (const sigset_t *)a[4];

	if (mask && (size_t)a[5] != KERNEL_SIGSET)
		return raw(SYS_epoll_pwait, a);
	return epoll_pwait((int)a[0], (struct epoll_event *)a[1], (int)a[2], (int)a[3], mask);
}

static long raw_epoll_pwait2(const long *a)
{
	const struct timespec *ts = (const struct timespec *)a[3];
	const sigset_t *mask = (const sigset_t *)a[4];

	if (!valid_timespec(ts) || (mask && (size_t)a[5] != KERNEL_SIGSET))
		return raw(SYS_epoll_pwait2, a);
	return epoll_pwait2((int)a[0], (struct epoll_event *)a[1], (int)a[2], ts, mask);
}

/* openat2 has no C library wrapper: the limit checked here, in the kernel's order. */
static long raw_openat2(const long *a)
{
	long b[6] = { a[0], (long)"", a[2], a[3], 0, 0 };

	if (shunt_dormant())
		return raw(SYS_openat2, a);
	shunt_ensure_init();
	if (shunt_fdlimit_room(1) == 0)
		return created(raw(SYS_openat2, a));
	/* How and flags are checked before the path: EINVAL and friends, or ENOENT for "". */
	if (raw(SYS_openat2, b) < 0 && errno != ENOENT)
		return -1;
	errno = *(const char *)a[1] ? EMFILE : ENOENT;
	return -1;
}

static long raw_pipe(long nr, const long *a)
{
	int *fds = (int *)a[0], was[2] = { fds[0], fds[1] };
	long r = raw(nr, a);
	int e = errno;
	bool ok0, ok1;

	if (r < 0 || shunt_dormant())
		return r;
	shunt_ensure_init();
	ok0 = shunt_fdlimit_admit(fds[0]) == 0;
	ok1 = shunt_fdlimit_admit(fds[1]) == 0;
	if (ok0 && ok1) {
		errno = e;
		return r;
	}
	shunt_syscall(SYS_close, fds[0]);
	shunt_syscall(SYS_close, fds[1]);
	fds[0] = was[0];	/* a failed pipe leaves the array alone */
	fds[1] = was[1];
	errno = EMFILE;
	return -1;
}

/* RLIMIT_NOFILE of this process as the program sees it (fdlimit.c). */
static long raw_rlimit(long nr, const long *a)
{
	int saved = errno;
	long r;

	if (shunt_dormant())
		return raw(nr, a);
	shunt_ensure_init();
	switch (nr) {
	case SYS_getrlimit:
		if (a[0] != RLIMIT_NOFILE)
			return raw(nr, a);
		r = shunt_fdlimit_get((struct rlimit *)a[1]);
		break;
	case SYS_setrlimit:
		if (a[0] != RLIMIT_NOFILE)
			return raw(nr, a);
		r = shunt_fdlimit_set((const struct rlimit *)a[1]);
		break;
	default:	/* SYS_prlimit64 */
		if (a[1] != RLIMIT_NOFILE || !shunt_fdlimit_is_self((pid_t)a[0]))
			return raw(nr, a);
		r = shunt_fdlimit_prlimit((const struct rlimit *)a[2], (struct rlimit *)a[3]);
		break;
	}
	return shunt_ret(r, saved);
}

SHUNT_EXPORT long syscall(long nr, ...)
{
	va_list ap;
	long a[6];

	/* Six arguments, whatever the call takes, as glibc's own syscall() reads them. */
	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	switch (nr) {
	/* Descriptors: lifetime and duplicates. */
	case SYS_close:
		return close((int)a[0]);
	case SYS_close_range:
		return close_range((unsigned int)a[0], (unsigned int)a[1], (int)a[2]);
	case SYS_setns:
		return setns((int)a[0], (int)a[1]);
	case SYS_unshare:
		return unshare((int)a[0]);
	case SYS_dup:
		return dup((int)a[0]);
	case SYS_dup2:
		return dup2((int)a[0], (int)a[1]);
	case SYS_dup3:
		return dup3((int)a[0], (int)a[1], (int)a[2]);
	case SYS_fcntl:
		return raw_fcntl(a);
	case SYS_ioctl:
		return ioctl((int)a[0], (unsigned long)a[1], (void *)a[2]);

	/* Sockets. */
	case SYS_socket:
		return socket((int)a[0], (int)a[1], (int)a[2]);
	case SYS_socketpair:
		return socketpair((int)a[0], (int)a[1], (int)a[2], (int *)a[3]);
	case SYS_bind:
		return bind((int)a[0], (const struct sockaddr *)a[1], (socklen_t)a[2]);
	case SYS_listen:
		return listen((int)a[0], (int)a[1]);
	case SYS_accept:
		return accept((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]);
	case SYS_accept4:
		return accept4((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2], (int)a[3]);
	case SYS_connect:
		return connect((int)a[0], (const struct sockaddr *)a[1], (socklen_t)a[2]);
	case SYS_getsockname:
		return getsockname((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]);
	case SYS_getpeername:
		return getpeername((int)a[0], (struct sockaddr *)a[1], (socklen_t *)a[2]);
	case SYS_setsockopt:
		return setsockopt((int)a[0], (int)a[1], (int)a[2], (const void *)a[3],
				  (socklen_t)a[4]);
	case SYS_getsockopt:
		return getsockopt((int)a[0], (int)a[1], (int)a[2], (void *)a[3], (socklen_t *)a[4]);
	case SYS_shutdown:
		return shutdown((int)a[0], (int)a[1]);

	/* The byte stream. */
	case SYS_read:
		return read((int)a[0], (void *)a[1], (size_t)a[2]);
	case SYS_write:
		return write((int)a[0], (const void *)a[1], (size_t)a[2]);
	case SYS_readv:
		return readv((int)a[0], (const struct iovec *)a[1], (int)a[2]);
	case SYS_writev:
		return writev((int)a[0], (const struct iovec *)a[1], (int)a[2]);
	case SYS_sendto:
		return sendto((int)a[0], (const void *)a[1], (size_t)a[2], (int)a[3],
			      (const struct sockaddr *)a[4], (socklen_t)a[5]);
	case SYS_recvfrom:
		return recvfrom((int)a[0], (void *)a[1], (size_t)a[2], (int)a[3],
				(struct sockaddr *)a[4], (socklen_t *)a[5]);
	case SYS_sendmsg:
		return sendmsg((int)a[0], (const struct msghdr *)a[1], (int)a[2]);
	case SYS_recvmsg:
		return recvmsg((int)a[0], (struct msghdr *)a[1], (int)a[2]);
	case SYS_sendmmsg:
		return sendmmsg((int)a[0], (struct mmsghdr *)a[1], (unsigned int)a[2], (int)a[3]);
	case SYS_recvmmsg:
		return recvmmsg((int)a[0], (struct mmsghdr *)a[1], (unsigned int)a[2], (int)a[3],
				(struct timespec *)a[4]);
	case SYS_sendfile:
		return sendfile((int)a[0], (int)a[1], (off_t *)a[2], (size_t)a[3]);
	case SYS_splice:
		return splice((int)a[0], (loff_t *)a[1], (int)a[2], (loff_t *)a[3], (size_t)a[4],
			      (unsigned int)a[5]);

	/* Readiness. */
	case SYS_poll:
		return poll((struct pollfd *)a[0], (nfds_t)a[1], (int)a[2]);
	case SYS_ppoll:
		return raw_ppoll(a);
	case SYS_select:
		return select((int)a[0], (fd_set *)a[1], (fd_set *)a[2], (fd_set *)a[3],
			      (struct timeval *)a[4]);
	case SYS_pselect6:
		return raw_pselect6(a);
	case SYS_epoll_create:
		return epoll_create((int)a[0]);
	case SYS_epoll_create1:
		return epoll_create1((int)a[0]);
	case SYS_epoll_ctl:
		return epoll_ctl((int)a[0], (int)a[1], (int)a[2], (struct epoll_event *)a[3]);
	case SYS_epoll_wait:
		return epoll_wait((int)a[0], (struct epoll_event *)a[1], (int)a[2], (int)a[3]);
	case SYS_epoll_pwait:
		return raw_epoll_pwait(a);
	case SYS_epoll_pwait2:
		return raw_epoll_pwait2(a);

	/* New descriptors: stale fd table entries forgotten, the program's limit kept. */
	case SYS_open:
		return open((const char *)a[0], (int)a[1], (mode_t)a[2]);
	case SYS_openat:
		return openat((int)a[0], (const char *)a[1], (int)a[2], (mode_t)a[3]);
	case SYS_creat:
		return creat((const char *)a[0], (mode_t)a[1]);
	case SYS_openat2:
		return raw_openat2(a);
	case SYS_pipe:
	case SYS_pipe2:
		return raw_pipe(nr, a);
	case SYS_signalfd:
	case SYS_signalfd4:
		/* With an existing signalfd it changes that one and returns it. */
		if (a[0] != -1 || shunt_dormant())
			return raw(nr, a);
		shunt_ensure_init();
		return created(raw(nr, a));
	case SYS_eventfd:
	case SYS_eventfd2:
	case SYS_timerfd_create:
	case SYS_inotify_init:
	case SYS_inotify_init1:
	case SYS_fanotify_init:
	case SYS_memfd_create:
	case SYS_pidfd_open:
	case SYS_pidfd_getfd:
	case SYS_userfaultfd:
	case SYS_perf_event_open:
	case SYS_open_by_handle_at:
	case SYS_mq_open:
	case SYS_fsopen:
	case SYS_fsmount:
	case SYS_fspick:
	case SYS_open_tree:
		if (shunt_dormant())
			return raw(nr, a);
		shunt_ensure_init();
		return created(raw(nr, a));

	/* The descriptor limit, as the program sees it. */
	case SYS_getrlimit:
	case SYS_setrlimit:
	case SYS_prlimit64:
		return raw_rlimit(nr, a);

	/* io_uring: rings the library watches (uring.c). */
	case SYS_io_uring_setup:
	case SYS_io_uring_enter:
	case SYS_io_uring_register:
		shunt_ensure_init();
		return shunt_uring_syscall(nr, a);

	/* Signal dispositions the library keeps (fault.c). */
	case SYS_rt_sigaction:
		/* The program's SIGSEGV and SIGBUS are kept by the library (fault.c). */
		if (a[0] != SIGSEGV && a[0] != SIGBUS && shunt_dormant())
			return raw(nr, a);
		shunt_ensure_init();
		if (shunt_fault_sig((int)a[0]))
			return shunt_fault_rt_sigaction(a[0], a[1], a[2], a[3]);
		return raw(nr, a);

	/* seccomp filters the program installs (seccomp.c). */
	case SYS_seccomp:
		shunt_ensure_init();
		return shunt_seccomp_syscall(a);
	case SYS_prctl:
		return prctl((int)a[0], a[1], a[2], a[3], a[4]);
	default:
		return raw(nr, a);
	}
}
