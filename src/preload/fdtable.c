// SPDX-License-Identifier: MIT
/*
 * The fd table. Files are type-stable (their pools never free memory), so a
 * reader may load a slot and then take a reference without a lock: if the
 * object was closed and reused meanwhile, the re-check of the slot catches
 * it (the pattern of the kernel's SLAB_TYPESAFE_BY_RCU).
 *
 * A slot can go stale: its descriptor closed where the library cannot see
 * (a system call made without the C library, a glibc-internal close,
 * io_uring), and the number handed out again. Every new descriptor the
 * library sees forgets its slot (shunt_fdt_forget, shunt_fdt_set); slow
 * paths also check the kernel file's identity (shunt_fdt_get_*_checked).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/kcmp.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/epoll.h"
#include "preload/fdtable.h"
#include "preload/file.h"
#include "preload/util.h"

/* A slot holds NULL, a file, or HIDDEN for one of the library's own descriptors. */
#define HIDDEN ((struct shunt_file *)1)

static _Atomic(struct shunt_file *) *table;
static size_t table_size;
static _Atomic size_t high;	/* one past the highest slot ever set: scans stop there */

static void saw(int fd)
{
	size_t h = atomic_load_explicit(&high, memory_order_relaxed);

	while ((size_t)fd >= h &&
	       !atomic_compare_exchange_weak_explicit(&high, &h, (size_t)fd + 1, memory_order_relaxed,
						      memory_order_relaxed))
		;
}

size_t shunt_fdt_high(void)
{
	return atomic_load_explicit(&high, memory_order_relaxed);
}

/* The kernel never hands out a descriptor at or above fs.nr_open. */
static size_t fd_ceiling(void)
{
	size_t n = 1u << 20;
	char buf[32];
	/* Raw calls: read() and close() are our own wrappers, and we are starting. */
	int fd = (int)shunt_syscall(SYS_openat, AT_FDCWD, "/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t r = shunt_syscall(SYS_read, fd, buf, sizeof(buf) - 1);

		if (r > 0) {
			buf[r] = 0;
			n = strtoul(buf, NULL, 10);
		}
		shunt_syscall(SYS_close, fd);
	}
	if (n < 1024)
		n = 1024;
	return n;
}

int shunt_fdt_init(void)
{
	size_t n = fd_ceiling();
	void *p = mmap(NULL, n * sizeof(*table), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED) {
		shunt_warn("cannot map an fd table of %zu slots: %m", n);
		return -ENOMEM;
	}
	table = p;
	table_size = n;
	return 0;
}

size_t shunt_fdt_size(void)
{
	return table_size;
}

int shunt_fdt_is_ours(int fd)
{
	if ((size_t)fd >= table_size)
		return 0;
	struct shunt_file *f = atomic_load_explicit(&table[fd], memory_order_relaxed);

	return f && f != HIDDEN;
}

int shunt_fdt_is_hidden(int fd)
{
	return (size_t)fd < table_size &&
	       atomic_load_explicit(&table[fd], memory_order_relaxed) == HIDDEN;
}

void shunt_fdt_mark_hidden(int fd, int hidden)
{
	if ((size_t)fd >= table_size)
		return;
	saw(fd);
	atomic_store_explicit(&table[fd], hidden ? HIDDEN : NULL, memory_order_relaxed);
}

struct shunt_file *shunt_fdt_get_file(int fd)
{
	struct shunt_file *f;

	if ((size_t)fd >= table_size)
		return NULL;
	for (;;) {
		/* Acquire pairs with the release in shunt_fdt_set. */
		f = atomic_load_explicit(&table[fd], memory_order_acquire);
		if (!f || f == HIDDEN)
			return NULL;
		if (!shunt_file_tryget(f))
			continue;
		if (atomic_load_explicit(&table[fd], memory_order_acquire) == f)
			return f;
		shunt_file_put(f);
	}
}

static struct shunt_file *get_kind(int fd, int kind)
{
	struct shunt_file *f = shunt_fdt_get_file(fd);

	if (f && f->kind != kind) {
		shunt_file_put(f);
		f = NULL;
	}
	return f;
}

struct shunt_sock *shunt_fdt_get(int fd)
{
	return (struct shunt_sock *)get_kind(fd, SHUNT_FILE_SOCK);
}

struct shunt_epoll *shunt_fdt_get_epoll(int fd)
{
	return (struct shunt_epoll *)get_kind(fd, SHUNT_FILE_EPOLL);
}

/* When the identity cannot be told, nothing is stale. */
enum { UNKNOWN = SHUNT_FDT_IDENT_UNKNOWN };

uint64_t shunt_fdt_sock_ident(int fd)
{
	struct stat st;

	if (shunt_syscall(SYS_fstat, fd, &st) < 0)
		return errno == SHUNT_SYS_DENIED ? UNKNOWN : 0;
	if (!S_ISSOCK(st.st_mode))
		return 0;
	return (uint64_t)st.st_ino;
}

uint64_t shunt_fdt_sock_inode(int fd)
{
	struct shunt_file *f = get_kind(fd, SHUNT_FILE_SOCK);
	uint64_t id = 0;

	if (f) {
		id = atomic_load_explicit(&f->ident, memory_order_relaxed);
		shunt_file_put(f);
	}
	return id == UNKNOWN ? 0 : id;
}

/* Drop the table's reference to what a slot held, or note a lost hidden descriptor. */
static void drop_old(int fd, struct shunt_file *old)
{
	if (old == HIDDEN) {
		/*
		 * One of the library's own descriptors was replaced (dup2 onto
		 * it) or closed behind its back (an inline system call,
		 * io_uring): whatever used it now reaches the application's
		 * file. Nothing can mend that here; say so.
		 */
		shunt_warn("the application replaced descriptor %d that shunt uses; "
			   "connections using it may fall back or stall", fd);
		return;
	}
	if (old)
		shunt_file_put(old);
}

void shunt_fdt_set(int fd, struct shunt_file *f)
{
	struct shunt_file *old;
	uint64_t none = 0;

	if ((size_t)fd >= table_size)
		return;
	saw(fd);
	/* dup'ed descriptors share the object, and its identity. */
	if (f->kind == SHUNT_FILE_SOCK && !atomic_load_explicit(&f->ident, memory_order_relaxed))
		atomic_compare_exchange_strong(&f->ident, &none, shunt_fdt_sock_ident(fd));
	shunt_file_ref(f);
	old = atomic_exchange_explicit(&table[fd], f, memory_order_acq_rel);
	drop_old(fd, old);
}

struct shunt_file *shunt_fdt_take(int fd)
{
	struct shunt_file *f;

	if ((size_t)fd >= table_size)
		return NULL;
	f = atomic_load_explicit(&table[fd], memory_order_relaxed);
	if (!f || f == HIDDEN)
		return NULL;
	/* Only the file it holds: a concurrent set is the kernel's race too. */
	if (!atomic_compare_exchange_strong(&table[fd], &f, NULL))
		return NULL;
	return f;
}

void shunt_fdt_forget(int fd)
{
	struct shunt_file *f;

	if ((size_t)fd >= table_size)
		return;
	f = atomic_load_explicit(&table[fd], memory_order_relaxed);
	if (__builtin_expect(!f, 1))
		return;
	/* The number was free when the kernel handed it out: whatever we held is gone. */
	if (!atomic_compare_exchange_strong(&table[fd], &f, NULL))
		return;
	drop_old(fd, f);
}

/* Whether @f is still the kernel file open as @fd. */
static bool still_same(int fd, struct shunt_file *f)
{
	uint64_t now;
	long r;

	if (f->kind == SHUNT_FILE_SOCK) {
		uint64_t id = atomic_load_explicit(&f->ident, memory_order_relaxed);

		/* Unknown (the fstat at set failed or is forbidden): nothing to compare with. */
		if (!id || id == UNKNOWN)
			return true;
		now = shunt_fdt_sock_ident(fd);
		return now == UNKNOWN || now == id;
	}
	/* An io_uring ring keeps no descriptor of its own to compare with: trust. */
	if (f->kind != SHUNT_FILE_EPOLL)
		return true;
	/*
	 * Every epoll instance has the same anonymous inode: ask whether @fd
	 * and our own duplicate are one open file. Without kcmp (a seccomp
	 * filter, a kernel without it) there is no cheap way to tell: trust.
	 */
	r = shunt_syscall(SYS_kcmp, shunt_pid, shunt_pid, KCMP_FILE, fd,
			  ((struct shunt_epoll *)f)->kfd);
	if (r < 0)
		return errno != EBADF;
	return r != 1 && r != 2;
}

struct shunt_file *shunt_fdt_get_file_checked(int fd)
{
	struct shunt_file *f = shunt_fdt_get_file(fd), *t;

	if (!f || still_same(fd, f))
		return f;
	/* Stale: forget it, unless someone else put something else there meanwhile. */
	t = f;
	if (atomic_compare_exchange_strong(&table[fd], &t, NULL))
		shunt_file_put(f);
	shunt_file_put(f);
	return NULL;
}

static struct shunt_file *get_kind_checked(int fd, int kind)
{
	struct shunt_file *f = shunt_fdt_get_file_checked(fd);

	if (f && f->kind != kind) {
		shunt_file_put(f);
		f = NULL;
	}
	return f;
}

struct shunt_sock *shunt_fdt_get_checked(int fd)
{
	return (struct shunt_sock *)get_kind_checked(fd, SHUNT_FILE_SOCK);
}

struct shunt_epoll *shunt_fdt_get_epoll_checked(int fd)
{
	return (struct shunt_epoll *)get_kind_checked(fd, SHUNT_FILE_EPOLL);
}
