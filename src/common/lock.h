/* SPDX-License-Identifier: MIT */
/*
 * The lock that makes the holders of one side of a ring (the threads of a
 * process and the processes that share the socket after fork) one producer
 * or one consumer, as the kernel's socket lock does. It is one 32-bit word
 * in shared memory: 0 when free, else the owner's pid, with
 * SHUNT_LOCK_WAITERS set while someone sleeps on it (Drepper's "Futexes are
 * tricky", mutex 3).
 *
 * The word lives in memory the peer can write, so it is never trusted: a
 * wait is bounded by the caller's deadline, and an owner that died holding
 * the lock (kill -9 in the middle of a copy) is noticed and replaced. It is
 * held only while bytes are copied, never while sleeping for data or space,
 * so waiting for it is as short as the kernel's lock_sock() and, like it,
 * not interrupted by signals.
 */
#ifndef SHUNT_LOCK_H
#define SHUNT_LOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/sys.h"

enum {
	SHUNT_LOCK_WAITERS = 1u << 31,
	SHUNT_LOCK_OWNER = 0x7fffffff,
};

/* Take the lock for @me (a pid, never 0) if it is free. */
static inline bool shunt_lock_try(_Atomic uint32_t *word, uint32_t me)
{
	uint32_t free_word = 0;

	return atomic_compare_exchange_strong_explicit(word, &free_word, me, memory_order_acquire,
						       memory_order_relaxed);
}

/*
 * Wait for the lock. @deadline is absolute CLOCK_MONOTONIC nanoseconds, or
 * 0 for none. Returns 0 with the lock held, or -ETIMEDOUT.
 */
int shunt_lock_wait(_Atomic uint32_t *word, uint32_t me, int64_t deadline);

static inline int shunt_lock(_Atomic uint32_t *word, uint32_t me, int64_t deadline)
{
	return shunt_lock_try(word, me) ? 0 : shunt_lock_wait(word, me, deadline);
}

static inline void shunt_unlock(_Atomic uint32_t *word)
{
	if (atomic_exchange_explicit(word, 0, memory_order_release) & SHUNT_LOCK_WAITERS)
		shunt_futex_wake(word, 1);
}

#endif
