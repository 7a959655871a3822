/* SPDX-License-Identifier: MIT */
/*
 * The lock that makes the holders of one side of a ring (the threads of a
 * process and the processes that share the socket after fork) one producer
 * or one consumer, as the kernel's socket lock does. It is one 32-bit word
 * in shared memory: the pid of its owner, or of its last owner once free,
 * with SHUNT_LOCK_HELD while held and SHUNT_LOCK_WAITERS while someone
 * sleeps on it (after Drepper's "Futexes are tricky", mutex 3). Keeping the
 * last owner tells a new owner whether another process held the lock since
 * it last did, and so whether its cached ring position may be stale: the
 * common case never re-reads a line the peer is polling.
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
	SHUNT_LOCK_HELD = 1u << 30,
	SHUNT_LOCK_OWNER = SHUNT_LOCK_HELD - 1,	/* a pid */
};

/*
 * Take the lock for @me (a pid, never 0) if it is free. *@other says
 * whether someone else had it since @me last did.
 */
static inline bool shunt_lock_try(_Atomic uint32_t *word, uint32_t me, bool *other)
{
	uint32_t v = atomic_load_explicit(word, memory_order_relaxed);

	if (v & (SHUNT_LOCK_HELD | SHUNT_LOCK_WAITERS))
		return false;
	if (!atomic_compare_exchange_strong_explicit(word, &v, me | SHUNT_LOCK_HELD,
						     memory_order_acquire, memory_order_relaxed))
		return false;
	*other = (v & SHUNT_LOCK_OWNER) != me;
	return true;
}

/*
 * Wait for the lock. @deadline is absolute CLOCK_MONOTONIC nanoseconds, or
 * 0 for none. Returns 0 with the lock held (and *@other set, conservatively
 * true), or -ETIMEDOUT.
 */
int shunt_lock_wait(_Atomic uint32_t *word, uint32_t me, int64_t deadline, bool *other);

static inline int shunt_lock(_Atomic uint32_t *word, uint32_t me, int64_t deadline, bool *other)
{
	return shunt_lock_try(word, me, other) ? 0 : shunt_lock_wait(word, me, deadline, other);
}

/* Release: free, with @me as the last owner; wake one sleeper if any. */
static inline void shunt_unlock(_Atomic uint32_t *word, uint32_t me)
{
	if (atomic_exchange_explicit(word, me & SHUNT_LOCK_OWNER, memory_order_release) &
	    SHUNT_LOCK_WAITERS)
		shunt_futex_wake(word, 1);
}

#endif
