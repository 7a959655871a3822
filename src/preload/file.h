/* SPDX-License-Identifier: MIT */
/*
 * What the fd table holds: a reference-counted object per open file
 * description the library manages: a socket, an epoll instance, or an
 * io_uring ring the application made through syscall() (uring.h).
 * Each kind embeds struct shunt_file first and comes from a type-stable pool
 * of its own, so references can be taken without a lock (see fdtable.c).
 */
#ifndef SHUNT_FILE_H
#define SHUNT_FILE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum shunt_file_kind {
	SHUNT_FILE_SOCK = 1,
	SHUNT_FILE_EPOLL = 2,
	SHUNT_FILE_URING = 3,
};

struct shunt_file {
	_Atomic int refs;		/* 0 while on its pool's free list */
	int kind;			/* enum shunt_file_kind, fixed for the object's life */
	/*
	 * Which kernel file it stands for, to tell it from a file put under
	 * the same number behind the library's back (fdtable.c): a socket's
	 * inode number, set when it is first put in the table; 0 until then.
	 * Reset by whoever takes the object from its pool.
	 */
	_Atomic uint64_t ident;
};

static inline void shunt_file_ref(struct shunt_file *f)
{
	atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
}

/* Take a reference unless the object is free. */
static inline bool shunt_file_tryget(struct shunt_file *f)
{
	int r = atomic_load_explicit(&f->refs, memory_order_relaxed);

	while (r > 0)
		if (atomic_compare_exchange_weak_explicit(&f->refs, &r, r + 1,
							  memory_order_acquire,
							  memory_order_relaxed))
			return true;
	return false;
}

/* Drop a reference; the last one releases the object as its kind does. */
void shunt_file_put(struct shunt_file *f);

#endif
