/* SPDX-License-Identifier: MIT */
/*
 * Adaptive waiting for one circuit end (DESIGN decision 4): spin while the
 * peer is likely to answer within microseconds and spinning can pay
 * (spin.h), then sleep on the end's futex after announcing ourselves, so an
 * idle connection costs nothing.
 */
#ifndef SHUNT_WAIT_H
#define SHUNT_WAIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shunt/circuit.h"

/*
 * Wait until @ready(@arg) is true, for the peer end @peer of our end @me:
 * spinning while that can pay (spin.h), then asleep on @me's futex. @waiters
 * is @me's rx_waiters or tx_waiters, incremented while asleep so the peer
 * knows to wake us.
 * @deadline is absolute CLOCK_MONOTONIC nanoseconds, or 0 for none.
 * Returns 0 once ready, -ETIMEDOUT, or -EINTR when a signal handler ran and
 * the call should not be restarted (as recv(2) would report).
 */
int shunt_wait_end(struct shunt_circuit_end *me, const struct shunt_circuit_end *peer,
		   _Atomic uint32_t *waiters, bool (*ready)(void *), void *arg, int64_t deadline);

/* A deadline @timeout_us from now (0: none). */
int64_t shunt_deadline(int64_t timeout_us);

/* A call's timeout, turned into a deadline the first time it is needed. */
struct shunt_timer {
	int64_t timeout_us;		/* SO_RCVTIMEO / SO_SNDTIMEO, 0: none */
	int64_t at;			/* the deadline, once computed */
};

static inline int64_t shunt_timer_deadline(struct shunt_timer *t)
{
	if (!t->at && t->timeout_us > 0)
		t->at = shunt_deadline(t->timeout_us);
	return t->at;
}

static inline void shunt_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

#endif
