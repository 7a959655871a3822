// SPDX-License-Identifier: MIT
/*
 * RLIMIT_NOFILE, shared by the program and the library.
 *
 * The library keeps descriptors of its own: the control socket, the notice
 * hub, link eventfds, each epoll instance's duplicate and bell, listeners'
 * doorbells, per-thread kick eventfds, and for a moment the descriptors a
 * control reply carries. Among the program's descriptors they would take
 * its last numbers: it would meet EMFILE early, and at its limit the
 * library would lose its own replies (MSG_CTRUNC) where the kernel alone
 * would have worked. The program must see exactly its native behaviour at
 * the limit: as many descriptors before EMFILE, the same errno from every
 * call, the same range errors.
 *
 * So the library's descriptors live in a reserve above the program's soft
 * limit. When the reserve is first needed the kernel's soft limit is raised
 * by RESERVE (never the hard limit, which the program may count on), and
 * the program is shown the limits it set: getrlimit, setrlimit, prlimit,
 * sysconf(_SC_OPEN_MAX), getdtablesize and the raw system calls answer with
 * them. What the kernel now allows beyond the program's limit, the library
 * refuses for it:
 *   - a new descriptor that lands in the reserve (every call the library
 *     sees that makes one: shunt_fdlimit_admit) is closed and the call
 *     fails with EMFILE;
 *   - calls the kernel fails with EMFILE before doing anything else (open
 *     before it creates or truncates a file, accept before it takes a
 *     connection off the queue, socketpair before it checks its arguments)
 *     are checked first (shunt_fdlimit_room), so that they have no side
 *     effect and the same errno; this costs two system calls, only once the
 *     program has come within MARGIN of its limit;
 *   - dup2/dup3 onto a number at or above the limit is EBADF, F_DUPFD from
 *     one EINVAL, poll with more entries EINVAL, and SCM_RIGHTS descriptors
 *     beyond it are dropped with MSG_CTRUNC, all as the kernel does;
 *   - the reserve is the library's: close and close_range leave it alone.
 * Before exec and posix_spawn the kernel's soft limit goes back to the
 * program's own (the new program inherits it); the reserve is raised again
 * when the library next needs it. The reserve grows (doubling, up to the
 * hard limit) when the library needs more.
 *
 * Where the hard limit leaves no room (soft == hard, as `ulimit -n N` and
 * many containers set it, or a program that raises its soft limit to the
 * hard one), nothing can be put above the program's range. The library's
 * descriptors then take the highest free numbers below the limit (a window
 * of TOP_WINDOW, growing to a quarter of the range), or below TOP_END in a
 * larger range: the program reaches EMFILE that many descriptors early
 * (docs/differences.md), and in a range larger than TOP_END its numbers
 * past the window's go around it. Presenting a lower limit instead
 * would have made every such program see a different getrlimit, for a
 * difference only a program at its very limit can notice.
 *
 * Lock order: lim_lock is a leaf; it is never held across a call into the
 * rest of the library (the anchor is made outside it).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/sys.h"
#include "preload/fdlimit.h"
#include "preload/fdroom.h"
#include "preload/fdtable.h"
#include "preload/file.h"
#include "preload/util.h"

enum {
	RESERVE = 256,		/* first size of the reserve above the program's limit */
	RESERVE_MIN = 16,	/* less room than this above the limit: treated as none */
	TOP_WINDOW = 64,	/* without room above: the top numbers used, at first */
	/*
	 * ...the top of the first TOP_END numbers, when the range is larger
	 * (or of four times the window, once it grew past a quarter of
	 * them). The kernel's table of a process's descriptors covers its
	 * highest number, and every fork copies it: at 20,000 that cost a
	 * forking server 52 us per child; at 1,048,576 (soft = hard, as
	 * containers often set it) it would be 8 MiB per process.
	 */
	TOP_END = 4096,
	MARGIN_MIN = 8,		/* "near the limit": within limit/16, at least this... */
	MARGIN_MAX = 256,	/* ...and at most this */
};

enum fdlimit_mode {
	MODE_UNSET,		/* no reserve yet: the kernel's limit is the program's */
	MODE_ABOVE,		/* the reserve is above the program's soft limit */
	MODE_TOP,		/* no room above: the top of the program's range */
};

static pthread_mutex_t lim_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rlimit prog;		/* under lim_lock: what the program set and sees */
static rlim_t real_cur;			/* under lim_lock: the kernel's soft limit as we left it */
static enum fdlimit_mode mode;		/* under lim_lock */
static rlim_t window;			/* under lim_lock: MODE_TOP's numbers at the top */

/*
 * Published under lim_lock for lock-free readers. Relaxed: a reader that
 * sees an old value during a setrlimit does what it would have done an
 * instant earlier, which the kernel's own race allows too.
 */
static _Atomic long refuse_at = LONG_MAX;	/* program descriptors at or above: refused */
static _Atomic long base_at = -1;		/* hidden descriptors from here; -1: set up first */
static _Atomic long near_at = LONG_MAX;		/* a new descriptor at or above: near the limit */
static _Atomic long prog_soft = -1;		/* the program's soft limit, for open_max */
static _Atomic bool near;			/* the program came near its limit: probe */
static _Atomic int anchor = -1;			/* hidden O_PATH descriptor the probes duplicate */

static long kernel_prlimit(const struct rlimit *new, struct rlimit *old)
{
	return shunt_syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, new, old) < 0 ? -errno : 0;
}

static rlim_t margin(rlim_t lim)
{
	rlim_t m = lim / 16;

	return m < MARGIN_MIN ? MARGIN_MIN : m > MARGIN_MAX ? MARGIN_MAX : m;
}

static long as_long(rlim_t v)
{
	return v > LONG_MAX ? LONG_MAX : (long)v;
}

/* Where MODE_TOP's window ends: the first number above it. Under lim_lock. */
static rlim_t top_end_locked(void)
{
	rlim_t end = window > TOP_END / 4 ? 4 * window : TOP_END;

	return prog.rlim_cur < end ? prog.rlim_cur : end;
}

/* Make the published values say what the locked state says. Under lim_lock. */
static void publish_locked(bool set_up)
{
	long limit = as_long(prog.rlim_cur);

	atomic_store_explicit(&prog_soft, limit, memory_order_relaxed);
	atomic_store_explicit(&refuse_at, mode == MODE_ABOVE ? limit : LONG_MAX,
			      memory_order_relaxed);
	/* Sharing the range, the window's base is where the program meets the library. */
	atomic_store_explicit(&near_at,
			      limit - as_long(margin(prog.rlim_cur)) -
				      (set_up && mode == MODE_TOP ? as_long(window) : 0),
			      memory_order_relaxed);
	if (!set_up)
		atomic_store_explicit(&base_at, -1, memory_order_relaxed);
	else if (mode == MODE_ABOVE)
		atomic_store_explicit(&base_at, limit, memory_order_relaxed);
	else
		atomic_store_explicit(&base_at, as_long(top_end_locked() - window),
				      memory_order_relaxed);
}

static void top_window_locked(void)
{
	window = prog.rlim_cur / 4 < TOP_WINDOW ? prog.rlim_cur / 4 : TOP_WINDOW;
}

/*
 * Raise the kernel's soft limit @extra above the program's, if the hard
 * limit has room; otherwise the top of the program's range. Under lim_lock.
 */
static void set_up_locked(rlim_t extra)
{
	rlim_t room = prog.rlim_max > prog.rlim_cur ? prog.rlim_max - prog.rlim_cur : 0;

	if (room >= RESERVE_MIN) {
		struct rlimit r = { prog.rlim_cur + (extra < room ? extra : room), prog.rlim_max };

		if (kernel_prlimit(&r, NULL) == 0) {
			real_cur = r.rlim_cur;
			mode = MODE_ABOVE;
			publish_locked(true);
			return;
		}
	}
	real_cur = prog.rlim_cur;
	mode = MODE_TOP;
	top_window_locked();
	publish_locked(true);
}

/*
 * The kernel's limit is not what we left it (a raw system call we did not
 * see, another process's prlimit): the program's limit is what it says now.
 * Under lim_lock.
 */
static void resync_locked(void)
{
	struct rlimit k;

	if (kernel_prlimit(NULL, &k) < 0)
		return;
	if (k.rlim_cur == real_cur && k.rlim_max == prog.rlim_max)
		return;
	prog = k;
	real_cur = k.rlim_cur;
	mode = MODE_UNSET;
	publish_locked(false);
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&lim_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&lim_lock);
}

static void fork_child(void)
{
	pthread_mutex_init(&lim_lock, NULL);
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void init(void)
{
	pthread_mutex_lock(&lim_lock);
	if (kernel_prlimit(NULL, &prog) < 0)
		prog.rlim_cur = prog.rlim_max = 1024;
	real_cur = prog.rlim_cur;
	mode = MODE_UNSET;
	publish_locked(false);
	pthread_mutex_unlock(&lim_lock);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static void ensure_init(void)
{
	if (__builtin_expect(atomic_load_explicit(&prog_soft, memory_order_relaxed) < 0, 0))
		pthread_once(&init_once, init);
}

int shunt_fdlimit_base(void)
{
	long b = atomic_load_explicit(&base_at, memory_order_relaxed);

	if (b >= 0)
		return (int)b;
	ensure_init();
	pthread_mutex_lock(&lim_lock);
	if (atomic_load_explicit(&base_at, memory_order_relaxed) < 0) {
		/* First use, or after an exec that failed: the reserve (again). */
		rlim_t extra = mode == MODE_ABOVE && real_cur > prog.rlim_cur ?
				       real_cur - prog.rlim_cur : RESERVE;

		set_up_locked(extra);
	}
	b = atomic_load_explicit(&base_at, memory_order_relaxed);
	pthread_mutex_unlock(&lim_lock);
	return (int)b;
}

int shunt_fdlimit_grow(void)
{
	int r = -EMFILE;

	ensure_init();
	pthread_mutex_lock(&lim_lock);
	if (mode == MODE_ABOVE) {
		rlim_t size = real_cur - prog.rlim_cur;
		struct rlimit want = { real_cur + (size ? size : RESERVE), prog.rlim_max };

		if (want.rlim_cur > prog.rlim_max)
			want.rlim_cur = prog.rlim_max;
		if (want.rlim_cur > real_cur && kernel_prlimit(&want, NULL) == 0) {
			real_cur = want.rlim_cur;
			r = 0;
		}
	} else if (mode == MODE_TOP && window < prog.rlim_cur / 4) {
		window = window * 2 < prog.rlim_cur / 4 ? window * 2 : prog.rlim_cur / 4;
		publish_locked(true);
		r = 0;
	}
	pthread_mutex_unlock(&lim_lock);
	return r;
}

int shunt_fdlimit_admit(int fd)
{
	shunt_fdt_forget(fd);
	return shunt_fdlimit_note(fd);
}

int shunt_fdlimit_note(int fd)
{
	if (fd >= atomic_load_explicit(&near_at, memory_order_relaxed) &&
	    !atomic_load_explicit(&near, memory_order_relaxed)) {
		atomic_store_explicit(&near, true, memory_order_relaxed);
		/* Room for a reply while the window still has some (fdroom.c). */
		shunt_fdroom_stand();
	}
	return fd >= atomic_load_explicit(&refuse_at, memory_order_relaxed) ? -EMFILE : 0;
}

int shunt_fdlimit_refuse(int fd)
{
	struct shunt_file *f = shunt_fdt_take(fd);

	shunt_close_internal(fd);
	if (f)
		shunt_file_put(f);
	return -EMFILE;
}

int shunt_fdlimit_anchor(void)
{
	int a = atomic_load_explicit(&anchor, memory_order_acquire), expect = -1, fd;

	if (a >= 0)
		return a;
	fd = (int)shunt_syscall(SYS_openat, AT_FDCWD, "/", O_PATH | O_CLOEXEC);
	if (fd < 0 || (fd = shunt_fd_hide(fd)) < 0)
		return -1;
	if (!atomic_compare_exchange_strong(&anchor, &expect, fd)) {
		shunt_close_hidden(fd);
		return expect;
	}
	return fd;
}

int shunt_fdlimit_room(unsigned n)
{
	long limit = atomic_load_explicit(&refuse_at, memory_order_relaxed);
	int got[2], a, r = 0;
	unsigned i;

	if (!atomic_load_explicit(&near, memory_order_relaxed) || n > 2)
		return 0;
	/*
	 * Without a reserve above, the kernel's limit is the program's: it
	 * checks, but where the library keeps room in the program's range
	 * (fdroom.c) the call could take a number of it that the kernel
	 * would not have had free: any free number is the program's.
	 */
	if (limit == LONG_MAX && !shunt_fdlimit_shares_range())
		return 0;
	a = shunt_fdlimit_anchor();
	if (a < 0)
		return 0;
	/* The lowest free numbers, as the call would get them. */
	for (i = 0; i < n; i++) {
		got[i] = (int)shunt_syscall(SYS_fcntl, a, F_DUPFD_CLOEXEC, 0);
		if (got[i] < 0 || got[i] >= limit) {
			r = got[i] < 0 && errno != EMFILE ? 0 : -EMFILE;
			i += got[i] >= 0;
			break;
		}
	}
	while (i--)
		shunt_close_internal(got[i]);
	return r;
}

int shunt_fdlimit_hold(int a, unsigned n, int *held, bool room)
{
	int base;
	unsigned kept;

	for (unsigned i = 0; i < n; i++)
		held[i] = -1;
	if (!atomic_load_explicit(&near, memory_order_relaxed))
		return 0;
	/* The room kept in a shared range first, if it may, then what the window has free. */
	kept = room ? shunt_fdroom_take(held, n) : 0;
	base = shunt_fdlimit_base();
	for (unsigned i = kept; i < n; i++) {
		held[i] = (int)shunt_syscall(SYS_fcntl, a, F_DUPFD_CLOEXEC, base);
		if (held[i] < 0 && (errno == EMFILE || errno == EINVAL) && shunt_fdlimit_grow() == 0)
			held[i] = (int)shunt_syscall(SYS_fcntl, a, F_DUPFD_CLOEXEC,
						     shunt_fdlimit_base());
		if (held[i] < 0) {
			shunt_fdlimit_release(i, held);
			return -EMFILE;
		}
		/* Ours while held: a close_range of the program's leaves it. */
		shunt_fdt_mark_hidden(held[i], 1);
	}
	if (room)
		shunt_fdroom_held(held, n);
	return 0;
}

void shunt_fdlimit_release(unsigned n, int *held)
{
	for (unsigned i = 0; i < n; i++) {
		/* Free for the reply: not kept back as room (shunt_close_hidden). */
		if (held[i] >= 0) {
			shunt_fdt_mark_hidden(held[i], 0);
			shunt_close_internal(held[i]);
		}
		held[i] = -1;
	}
}

bool shunt_fdlimit_shares_range(void)
{
	return atomic_load_explicit(&refuse_at, memory_order_relaxed) == LONG_MAX &&
	       atomic_load_explicit(&base_at, memory_order_relaxed) >= 0;
}

bool shunt_fdlimit_near(void)
{
	return atomic_load_explicit(&near, memory_order_relaxed);
}

bool shunt_fdlimit_reserved(int fd)
{
	return fd >= atomic_load_explicit(&refuse_at, memory_order_relaxed);
}

long shunt_fdlimit_reserve_start(void)
{
	return atomic_load_explicit(&refuse_at, memory_order_relaxed);
}

int shunt_fdlimit_check_target(int newfd)
{
	return newfd >= atomic_load_explicit(&refuse_at, memory_order_relaxed) ? -EBADF : 0;
}

int shunt_fdlimit_check_from(long from)
{
	return from >= atomic_load_explicit(&refuse_at, memory_order_relaxed) ? -EINVAL : 0;
}

int shunt_fdlimit_check_nfds(unsigned long n)
{
	long limit = atomic_load_explicit(&refuse_at, memory_order_relaxed);

	return limit != LONG_MAX && n > (unsigned long)limit ? -EINVAL : 0;
}

/* Cut one SCM_RIGHTS message's descriptors from @keep on; true if it had any to cut. */
static bool cut_rights(struct msghdr *msg, struct cmsghdr *c, size_t keep, size_t n)
{
	size_t at = (size_t)((char *)c - (char *)msg->msg_control), end;

	for (size_t i = keep; i < n; i++) {
		int fd;

		memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
		shunt_close_internal(fd);
	}
	if (keep == n)
		return false;
	/* As scm_detach_fds: the message holds the installed ones; none, no message. */
	memset(CMSG_DATA(c) + keep * sizeof(int), 0, (n - keep) * sizeof(int));
	if (keep) {
		c->cmsg_len = CMSG_LEN(keep * sizeof(int));
		end = at + CMSG_SPACE(keep * sizeof(int));
	} else {
		end = at;
	}
	if (end < msg->msg_controllen)
		msg->msg_controllen = end;
	msg->msg_flags |= MSG_CTRUNC;
	return true;
}

void shunt_fdlimit_received(struct msghdr *msg)
{
	if (!msg || !msg->msg_control || msg->msg_controllen < sizeof(struct cmsghdr))
		return;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		size_t n, keep;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		keep = n;
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			/* The kernel stops at the first it cannot install: so do we. */
			if (shunt_fdlimit_admit(fd) < 0 && keep == n)
				keep = i;
		}
		/* The kernel puts SCM_RIGHTS last: nothing follows a cut one. */
		if (cut_rights(msg, c, keep, n))
			break;
	}
}

int shunt_fdlimit_prlimit(const struct rlimit *new, struct rlimit *old)
{
	struct rlimit before;
	long r = 0;

	ensure_init();
	/* do_prlimit's first check, before any other. */
	if (new && new->rlim_cur > new->rlim_max)
		return -EINVAL;
	pthread_mutex_lock(&lim_lock);
	resync_locked();
	before = prog;
	if (new) {
		struct rlimit want = *new;
		rlim_t room = new->rlim_max - new->rlim_cur;
		rlim_t extra = mode == MODE_ABOVE && real_cur > prog.rlim_cur ?
				       real_cur - prog.rlim_cur : RESERVE;

		/* The reserve follows the new limit, if the new hard limit has room. */
		if (mode != MODE_UNSET && room >= RESERVE_MIN)
			want.rlim_cur += extra < room ? extra : room;
		/* The kernel's errors are the program's: EPERM past nr_open or the hard limit. */
		r = kernel_prlimit(&want, NULL);
		if (r == 0) {
			if (new->rlim_cur < prog.rlim_cur)
				atomic_store_explicit(&near, true, memory_order_relaxed);
			prog = *new;
			real_cur = want.rlim_cur;
			if (mode != MODE_UNSET) {
				mode = real_cur > prog.rlim_cur ? MODE_ABOVE : MODE_TOP;
				top_window_locked();
			}
			publish_locked(mode != MODE_UNSET);
		}
	}
	pthread_mutex_unlock(&lim_lock);
	if (r == 0 && old)
		*old = before;
	return (int)r;
}

int shunt_fdlimit_get(struct rlimit *old)
{
	return old ? shunt_fdlimit_prlimit(NULL, old) : -EFAULT;
}

int shunt_fdlimit_set(const struct rlimit *new)
{
	return new ? shunt_fdlimit_prlimit(new, NULL) : -EFAULT;
}

long shunt_fdlimit_open_max(void)
{
	ensure_init();
	return atomic_load_explicit(&prog_soft, memory_order_relaxed);
}

bool shunt_fdlimit_is_self(pid_t pid)
{
	return pid == 0 || (uint32_t)pid == shunt_pid || pid == (pid_t)shunt_syscall(SYS_gettid);
}

void shunt_fdlimit_exec(void)
{
	ensure_init();
	pthread_mutex_lock(&lim_lock);
	if (mode == MODE_ABOVE && real_cur != prog.rlim_cur) {
		struct rlimit r = prog;

		if (kernel_prlimit(&r, NULL) == 0) {
			real_cur = prog.rlim_cur;
			/* Raised again by the next hidden descriptor, if the exec fails. */
			atomic_store_explicit(&base_at, -1, memory_order_relaxed);
		}
	}
	pthread_mutex_unlock(&lim_lock);
}
