// SPDX-License-Identifier: MIT
/*
 * The fd table. Sockets are type-stable (sock.c never frees their memory),
 * so a reader may load a slot and then take a reference without a lock: if
 * the object was closed and reused meanwhile, the re-check of the slot
 * catches it (the pattern of the kernel's SLAB_TYPESAFE_BY_RCU).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "preload/fdtable.h"
#include "preload/sock.h"

/* A slot holds NULL, a socket, or HIDDEN for one of the library's own descriptors. */
#define HIDDEN ((struct shunt_sock *)1)

static _Atomic(struct shunt_sock *) *table;
static size_t table_size;

/* The kernel never hands out a descriptor at or above fs.nr_open. */
static size_t fd_ceiling(void)
{
	size_t n = 1u << 20;
	char buf[32];
	/* Raw calls: read() and close() are our own wrappers, and we are starting. */
	int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/sys/fs/nr_open", O_RDONLY | O_CLOEXEC);

	if (fd >= 0) {
		ssize_t r = syscall(SYS_read, fd, buf, sizeof(buf) - 1);

		if (r > 0) {
			buf[r] = 0;
			n = strtoul(buf, NULL, 10);
		}
		syscall(SYS_close, fd);
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
	struct shunt_sock *s = atomic_load_explicit(&table[fd], memory_order_relaxed);

	return s && s != HIDDEN;
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
	atomic_store_explicit(&table[fd], hidden ? HIDDEN : NULL, memory_order_relaxed);
}

struct shunt_sock *shunt_fdt_get(int fd)
{
	struct shunt_sock *s;

	if ((size_t)fd >= table_size)
		return NULL;
	for (;;) {
		/* Acquire pairs with the release in shunt_fdt_set. */
		s = atomic_load_explicit(&table[fd], memory_order_acquire);
		if (!s || s == HIDDEN)
			return NULL;
		if (!shunt_sock_tryget(s))
			continue;
		if (atomic_load_explicit(&table[fd], memory_order_acquire) == s)
			return s;
		shunt_sock_put(s);
	}
}

struct shunt_sock *shunt_fdt_set(int fd, struct shunt_sock *sock)
{
	struct shunt_sock *old;

	if ((size_t)fd >= table_size)
		return NULL;
	shunt_sock_ref(sock);
	old = atomic_exchange_explicit(&table[fd], sock, memory_order_acq_rel);
	return old == HIDDEN ? NULL : old;
}

struct shunt_sock *shunt_fdt_take(int fd)
{
	struct shunt_sock *s;

	if ((size_t)fd >= table_size)
		return NULL;
	s = atomic_load_explicit(&table[fd], memory_order_relaxed);
	if (!s || s == HIDDEN)
		return NULL;
	/* Only the socket it holds: a concurrent set is the kernel's race too. */
	if (!atomic_compare_exchange_strong(&table[fd], &s, NULL))
		return NULL;
	return s;
}
