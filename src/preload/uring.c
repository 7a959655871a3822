// SPDX-License-Identifier: MIT
/*
 * io_uring rings (see uring.h): io_uring_setup learns a ring and maps its
 * submission queue, io_uring_enter lets the library look at the entries
 * the kernel is about to consume (uring_sqe.c), io_uring_register keeps
 * what it knows true (fixed files, registered ring descriptors, a ring
 * enabled or resized). A ring asked for with SQPOLL is made without it: a
 * kernel thread would consume entries before the library saw them, so the
 * library submits them itself at every io_uring_enter, which the
 * application makes because the queue always says NEED_WAKEUP.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/fdtable.h"
#include "preload/ops.h"
#include "preload/uring.h"
#include "preload/util.h"

enum { OFF_SQ_RING = 0, OFF_SQES = 0x10000000, RSRC_REGISTER_SPARSE = 1u << 0 };

/* The io_uring_register arguments that name descriptors. */
struct files_update {			/* IORING_REGISTER_FILES_UPDATE */
	uint32_t offset, resv;
	uint64_t fds;
};
struct rsrc_register {			/* IORING_REGISTER_FILES2 */
	uint32_t nr, flags;
	uint64_t resv2, data, tags;
};
struct rsrc_update2 {			/* IORING_REGISTER_FILES_UPDATE2 */
	uint32_t offset, resv;
	uint64_t data, tags;
	uint32_t nr, resv2;
};
struct rsrc_update {			/* IORING_(UN)REGISTER_RING_FDS */
	uint32_t offset, resv;
	uint64_t data;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_uring *pool;	/* under pool_lock; type-stable, as fdtable.c needs */
static struct shunt_uring *all;		/* under pool_lock: every object ever made, for fork */

/*
 * This thread's registered ring descriptors (IORING_REGISTER_RING_FDS,
 * IORING_SETUP_REGISTERED_FD_ONLY), each holding a reference: the
 * kernel's table is per task too. Dropped when the thread exits (the key's
 * destructor) and in a fork child, which the kernel gives none.
 */
static __thread struct shunt_uring *registered[SHUNT_IOU_RINGFD_MAX];
static pthread_key_t registered_key;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void drop_registered(void *unused)
{
	(void)unused;
	for (int i = 0; i < SHUNT_IOU_RINGFD_MAX; i++) {
		if (registered[i])
			shunt_file_put(&registered[i]->f);
		registered[i] = NULL;
	}
}

static void fork_prepare(void)
{
	pthread_mutex_lock(&pool_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&pool_lock);
}

static void fork_child(void)
{
	/* Only this thread exists: locks other threads held are free again. */
	pthread_mutex_init(&pool_lock, NULL);
	for (struct shunt_uring *u = all; u; u = u->all_next)
		pthread_mutex_init(&u->lock, NULL);
	drop_registered(NULL);
}

static void init_once(void)
{
	pthread_key_create(&registered_key, drop_registered);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static struct shunt_uring *ring_new(void)
{
	struct shunt_uring *u;

	pthread_mutex_lock(&pool_lock);
	u = pool;
	if (u)
		pool = u->next_free;
	pthread_mutex_unlock(&pool_lock);
	if (!u) {
		u = calloc(1, sizeof(*u));
		if (!u)
			return NULL;
		pthread_mutex_init(&u->lock, NULL);
		pthread_mutex_lock(&pool_lock);
		u->all_next = all;
		all = u;
		pthread_mutex_unlock(&pool_lock);
	}
	u->f.kind = SHUNT_FILE_URING;
	u->emulated_sqpoll = false;
	atomic_store(&u->disabled, false);
	u->ring_map = u->sqe_map = NULL;
	/* Release: the fields above are visible to whoever gets a reference. */
	atomic_store_explicit(&u->f.refs, 1, memory_order_release);
	return u;
}

static void unmap(struct shunt_uring *u)
{
	if (u->ring_map)
		munmap(u->ring_map, u->ring_len);
	if (u->sqe_map)
		munmap(u->sqe_map, u->sqe_len);
	u->ring_map = u->sqe_map = NULL;
}

void shunt_uring_release(struct shunt_uring *u)
{
	unmap(u);
	pthread_mutex_lock(&pool_lock);
	u->next_free = pool;
	pool = u;
	pthread_mutex_unlock(&pool_lock);
}

/*
 * Point @u at the submission queue @p describes: our own shared mappings of
 * ring descriptor @fd, or the application's memory with NO_MMAP. 0 or -errno.
 */
static int ring_map(struct shunt_uring *u, int fd, const struct shunt_iou_params *p)
{
	const uint32_t offs[] = { p->sq_head, p->sq_tail, p->sq_mask, p->sq_flags, p->sq_dropped };
	size_t need = 0, sqe_len;
	uint8_t *ring, *sqes;

	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++)
		if (offs[i] + sizeof(uint32_t) > need)
			need = offs[i] + sizeof(uint32_t);
	if (!(u->setup & SHUNT_IOU_SETUP_NO_SQARRAY) &&
	    p->sq_array + (size_t)p->sq_entries * sizeof(uint32_t) > need)
		need = p->sq_array + (size_t)p->sq_entries * sizeof(uint32_t);
	u->sqe_size = u->setup & SHUNT_IOU_SETUP_SQE128 ? 128 : 64;
	sqe_len = (size_t)p->sq_entries * u->sqe_size;
	if (!p->sq_entries || (p->sq_entries & (p->sq_entries - 1)))
		return -EINVAL;
	unmap(u);
	if (u->setup & SHUNT_IOU_SETUP_NO_MMAP) {
		ring = (uint8_t *)(uintptr_t)p->cq_user_addr;
		sqes = (uint8_t *)(uintptr_t)p->sq_user_addr;
	} else {
		if (fd < 0)
			return -EBADF;
		ring = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, OFF_SQ_RING);
		if (ring == MAP_FAILED)
			return -errno;
		sqes = mmap(NULL, sqe_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, OFF_SQES);
		if (sqes == MAP_FAILED) {
			int e = errno;

			munmap(ring, need);
			return -e;
		}
		u->ring_map = ring;
		u->ring_len = need;
		u->sqe_map = sqes;
		u->sqe_len = sqe_len;
	}
	u->entries = p->sq_entries;
	u->mask = p->sq_entries - 1;
	u->head = (_Atomic uint32_t *)(ring + p->sq_head);
	u->tail = (_Atomic uint32_t *)(ring + p->sq_tail);
	u->sq_flags = (_Atomic uint32_t *)(ring + p->sq_flags);
	u->array = u->setup & SHUNT_IOU_SETUP_NO_SQARRAY ? NULL
							 : (const uint32_t *)(ring + p->sq_array);
	u->sqes = sqes;
	return 0;
}

/* The ring behind descriptor @fd (or registered index @fd), with a reference; or NULL. */
static struct shunt_uring *lookup(int fd, bool registered_index)
{
	struct shunt_file *f;

	if (registered_index) {
		struct shunt_uring *u = fd >= 0 && fd < SHUNT_IOU_RINGFD_MAX ? registered[fd] : NULL;

		if (u)
			shunt_file_ref(&u->f);
		return u;
	}
	f = shunt_fdt_get_file(fd);
	if (f && f->kind != SHUNT_FILE_URING) {
		shunt_file_put(f);
		f = NULL;
	}
	return (struct shunt_uring *)f;
}

/* Put @u in this thread's registered slot @slot (a reference taken), dropping what was there. */
static void register_slot(unsigned slot, struct shunt_uring *u)
{
	if (slot >= SHUNT_IOU_RINGFD_MAX)
		return;
	if (registered[slot])
		shunt_file_put(&registered[slot]->f);
	registered[slot] = u;
	if (u) {
		shunt_file_ref(&u->f);
		pthread_setspecific(registered_key, (void *)1);	/* so the destructor runs */
	}
}

static void warn_untracked(const char *why)
{
	static _Atomic bool warned;

	if (!atomic_exchange(&warned, true))
		shunt_warn("io_uring: a ring %s is not watched: operations on shunt sockets made "
			   "through it reach their kernel sockets", why);
}

/*
 * A ring like the SQPOLL one the application asked for with @up, but
 * without the poller: made and mapped, then moved onto the number @*fd of
 * the SQPOLL ring the kernel made (closing it), or, with *@fd < 0, given
 * the lowest free number as io_uring_setup would. Returns its record, or
 * NULL (an SQPOLL ring made stays as it is, not watched).
 */
static struct shunt_uring *unpolled(unsigned entries, struct shunt_iou_params *up, long *fd)
{
	struct shunt_iou_params p = *up;
	struct shunt_uring *u;
	long nfd;

	p.flags &= ~(uint32_t)(SHUNT_IOU_SETUP_SQPOLL | SHUNT_IOU_SETUP_SQ_AFF);
	nfd = shunt_syscall(SYS_io_uring_setup, entries, &p);
	if (nfd < 0)
		return NULL;
	u = ring_new();
	if (u) {
		u->setup = p.flags;
		if (ring_map(u, (int)nfd, &p) < 0 ||
		    (*fd >= 0 && shunt_syscall(SYS_dup3, nfd, *fd, O_CLOEXEC) < 0)) {
			shunt_file_put(&u->f);
			u = NULL;
		}
	}
	if (*fd >= 0 || !u)
		shunt_close_internal((int)nfd);
	else
		*fd = nfd;
	if (!u)
		return NULL;
	u->emulated_sqpoll = true;
	/* What the kernel would have answered for the SQPOLL ring, with its flags. */
	p.flags = up->flags;
	memcpy(up, &p, sizeof(p));
	/* Pairs with the application's acquire load of the flags after it submits. */
	atomic_fetch_or_explicit(u->sq_flags, SHUNT_IOU_SQ_NEED_WAKEUP, memory_order_release);
	return u;
}

/*
 * SQPOLL with ATTACH_WQ asks to share the poller of ring wq_fd; when that
 * ring is one we made without a poller, the kernel refuses (EINVAL). The
 * parameters were read by the kernel, so they are readable.
 */
static bool attaches_to_unpolled(const struct shunt_iou_params *up)
{
	uint32_t both = SHUNT_IOU_SETUP_SQPOLL | SHUNT_IOU_SETUP_ATTACH_WQ;
	struct shunt_uring *w;
	bool r;

	if ((up->flags & both) != both || !(w = lookup((int)up->wq_fd, false)))
		return false;
	r = w->emulated_sqpoll;
	shunt_file_put(&w->f);
	return r;
}

static long setup(unsigned entries, struct shunt_iou_params *up)
{
	struct shunt_uring *u;
	long fd = shunt_sys_ret(shunt_syscall_app(SYS_io_uring_setup, entries, up));
	uint32_t flags;

	pthread_once(&once, init_once);
	if (fd == -EINVAL && shunt_enabled() && attaches_to_unpolled(up)) {
		u = unpolled(entries, up, &fd);
		if (!u)
			return -EINVAL;
		goto made;
	}
	if (fd < 0 || !shunt_enabled())
		return fd;	/* the kernel's answer (the parameters are valid only now) */
	flags = up->flags;
	if (flags & ~(uint32_t)SHUNT_IOU_SETUP_KNOWN) {
		warn_untracked("with setup flags this library does not know");
		return fd;
	}
	/* Nothing a polled-I/O ring does can reach a socket (the kernel refuses). */
	if (flags & SHUNT_IOU_SETUP_IOPOLL)
		return fd;
	if (flags & SHUNT_IOU_SETUP_SQPOLL) {
		if (flags & SHUNT_IOU_SETUP_REGISTERED_FD_ONLY) {
			warn_untracked("with SQPOLL and only a registered descriptor");
			return fd;
		}
		u = unpolled(entries, up, &fd);
		if (!u) {
			warn_untracked("with SQPOLL that could not be made without it");
			return fd;
		}
	} else {
		u = ring_new();
		if (!u)
			return fd;
		u->setup = flags;
		if (ring_map(u, flags & SHUNT_IOU_SETUP_REGISTERED_FD_ONLY ? -1 : (int)fd, up) < 0) {
			shunt_file_put(&u->f);
			warn_untracked("whose queue cannot be mapped");
			return fd;
		}
	}
made:
	flags = up->flags;
	atomic_store(&u->disabled, (flags & SHUNT_IOU_SETUP_R_DISABLED) != 0);
	if (flags & SHUNT_IOU_SETUP_REGISTERED_FD_ONLY) {
		register_slot((unsigned)fd, u);
	} else {
		shunt_fdt_set((int)fd, &u->f);
	}
	shunt_file_put(&u->f);
	return fd;
}

static long enter_raw(int fd, unsigned to_submit, unsigned min_complete, unsigned flags,
		      const void *arg, size_t argsz)
{
	return shunt_sys_ret(shunt_syscall_app(SYS_io_uring_enter, fd, to_submit, min_complete, flags,
					   arg, argsz));
}

/*
 * A ring whose application asked for SQPOLL: everything queued is
 * submitted now, and the call answers as with SQPOLL (the count asked to
 * submit, or the wait's result). Called with u->lock held; drops it.
 */
static long enter_unpolled(struct shunt_uring *u, int fd, uint32_t n, unsigned to_submit,
			   unsigned min_complete, unsigned flags, const void *arg, size_t argsz)
{
	unsigned quiet = flags & ~(unsigned)SHUNT_IOU_ENTER_GETEVENTS;
	long r = 0;

	if (n)
		r = enter_raw(fd, n, 0, quiet, arg, argsz);
	pthread_mutex_unlock(&u->lock);
	/* A bad flag is refused as with SQPOLL; anything else the poller would retry. */
	if (r == -EINVAL || r == -EBADF || r == -EOPNOTSUPP)
		return r;
	if (flags & SHUNT_IOU_ENTER_GETEVENTS) {
		r = enter_raw(fd, 0, min_complete, flags, arg, argsz);
		return to_submit ? (long)to_submit : r;
	}
	if (!n && (r = enter_raw(fd, 0, 0, quiet, arg, argsz)) < 0)
		return r;
	return (long)to_submit;
}

static long enter(int fd, unsigned to_submit, unsigned min_complete, unsigned flags,
		  const void *arg, size_t argsz)
{
	struct shunt_uring *u = lookup(fd, flags & SHUNT_IOU_ENTER_REGISTERED_RING);
	unsigned quiet = flags & ~(unsigned)SHUNT_IOU_ENTER_GETEVENTS;
	uint32_t head, tail, n;
	bool bounded, wait;
	long r;

	if (!u || atomic_load(&u->disabled) || (!to_submit && !u->emulated_sqpoll)) {
		if (u)
			shunt_file_put(&u->f);
		return enter_raw(fd, to_submit, min_complete, flags, arg, argsz);
	}
	pthread_mutex_lock(&u->lock);
	/* Acquire pairs with the kernel's release of the head, and the application's of the tail. */
	head = atomic_load_explicit(u->head, memory_order_acquire);
	tail = atomic_load_explicit(u->tail, memory_order_acquire);
	n = tail - head > u->entries ? u->entries : tail - head;
	if (!u->emulated_sqpoll && n > to_submit)
		n = to_submit;
	n = shunt_uring_scan(u, head, n, &bounded);
	if (u->emulated_sqpoll) {
		r = enter_unpolled(u, fd, n, to_submit, min_complete, flags, arg, argsz);
		shunt_file_put(&u->f);
		return r;
	}
	/*
	 * Only the n entries looked at may go (another thread may be queueing
	 * more). The kernel waits only when it submitted all it was asked to.
	 * It may wait with our lock held only for completions that cannot
	 * depend on another thread's submission: the entries' own.
	 */
	wait = (flags & SHUNT_IOU_ENTER_GETEVENTS) && n == to_submit;
	if (!wait || (bounded && min_complete <= n)) {
		r = enter_raw(fd, n, wait ? min_complete : 0, wait ? flags : quiet, arg, argsz);
		pthread_mutex_unlock(&u->lock);
	} else {
		r = enter_raw(fd, n, 0, quiet, arg, argsz);
		pthread_mutex_unlock(&u->lock);
		/* Having submitted, the kernel answers the count whatever the wait says. */
		if (r == (long)to_submit)
			enter_raw(fd, 0, min_complete, flags, arg, argsz);
	}
	shunt_file_put(&u->f);
	return r;
}

/* IORING_REGISTER_RESIZE_RINGS succeeded: the queue is elsewhere now. */
static void resized(int fd, bool registered_index, const struct shunt_iou_params *p)
{
	struct shunt_uring *u = lookup(fd, registered_index);
	int r;

	if (!u)
		return;
	pthread_mutex_lock(&u->lock);
	r = ring_map(u, registered_index ? -1 : fd, p);
	if (r < 0) {
		/* Nothing to look at any more: the ring is passed through from now on. */
		atomic_store(&u->disabled, true);
		warn_untracked("resized where it cannot be mapped again");
	}
	pthread_mutex_unlock(&u->lock);
	shunt_file_put(&u->f);
}

static long reg(int fd, unsigned op, void *arg, unsigned nr)
{
	long r = shunt_sys_ret(shunt_syscall_app(SYS_io_uring_register, fd, op, arg, nr));
	bool by_index = op & SHUNT_IOU_REGISTER_USE_REGISTERED_RING;
	struct shunt_uring *u;

	/* Arguments the kernel accepted are readable. */
	if (r < 0 || !arg || !shunt_enabled())
		return r;
	switch (op & ~(unsigned)SHUNT_IOU_REGISTER_USE_REGISTERED_RING) {
	case SHUNT_IOU_REGISTER_FILES:
		shunt_uring_fixed_files(arg, nr);
		break;
	case SHUNT_IOU_REGISTER_FILES2: {
		const struct rsrc_register *rr = arg;

		if (!(rr->flags & RSRC_REGISTER_SPARSE) && rr->data)
			shunt_uring_fixed_files((const int32_t *)(uintptr_t)rr->data, rr->nr);
		break;
	}
	case SHUNT_IOU_REGISTER_FILES_UPDATE: {
		const struct files_update *fu = arg;

		shunt_uring_fixed_files((const int32_t *)(uintptr_t)fu->fds, (uint32_t)r);
		break;
	}
	case SHUNT_IOU_REGISTER_FILES_UPDATE2: {
		const struct rsrc_update2 *u2 = arg;

		shunt_uring_fixed_files((const int32_t *)(uintptr_t)u2->data, (uint32_t)r);
		break;
	}
	case SHUNT_IOU_REGISTER_ENABLE_RINGS:
		u = lookup(fd, by_index);
		if (u) {
			atomic_store(&u->disabled, false);
			shunt_file_put(&u->f);
		}
		break;
	case SHUNT_IOU_REGISTER_RING_FDS:
	case SHUNT_IOU_UNREGISTER_RING_FDS: {
		const struct rsrc_update *ru = arg;
		bool add = (op & ~(unsigned)SHUNT_IOU_REGISTER_USE_REGISTERED_RING) ==
			   SHUNT_IOU_REGISTER_RING_FDS;

		pthread_once(&once, init_once);
		/* The kernel wrote back the slots it chose; it answers how many it did. */
		for (long i = 0; i < r; i++) {
			u = add ? lookup((int)ru[i].data, false) : NULL;
			register_slot(ru[i].offset, u);
			if (u)
				shunt_file_put(&u->f);
		}
		break;
	}
	case SHUNT_IOU_REGISTER_RESIZE_RINGS:
		resized(fd, by_index, arg);
		break;
	case SHUNT_IOU_REGISTER_RESTRICTIONS:
		/* Entries rewritten into NOPs fail where NOP is not allowed: rare, and said. */
		shunt_info("io_uring: a restricted ring; operations shunt performs complete as NOPs");
		break;
	default:
		break;
	}
	return r;
}

long shunt_uring_syscall(long nr, const long a[6])
{
	int saved = errno;
	long r;

	switch (nr) {
	case SYS_io_uring_setup:
		r = setup((unsigned)a[0], (struct shunt_iou_params *)a[1]);
		break;
	case SYS_io_uring_enter:
		r = enter((int)a[0], (unsigned)a[1], (unsigned)a[2], (unsigned)a[3],
			  (const void *)a[4], (size_t)a[5]);
		break;
	case SYS_io_uring_register:
		r = reg((int)a[0], (unsigned)a[1], (void *)a[2], (unsigned)a[3]);
		break;
	default:
		r = shunt_sys_ret(shunt_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]));
		break;
	}
	return shunt_ret(r, saved);
}
