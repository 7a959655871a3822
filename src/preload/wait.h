/* SPDX-License-Identifier: MIT */
/*
 * Adaptive waiting for one circuit end (DESIGN decision 4): spin briefly
 * while the peer is likely to answer within microseconds, then yield the CPU
 * a few times, then sleep on the end's futex after announcing ourselves, so
 * an idle connection costs nothing.
 */
#ifndef SHUNT_WAIT_H
#define SHUNT_WAIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shunt/circuit.h"

/* Spin and yield budgets; read once from SHUNT_SPIN_US at start. */
void shunt_wait_init(void);

/* Nanoseconds to spin before yielding; 0 disables spinning. */
int64_t shunt_wait_spin_ns(void);

/*
 * Wait until @ready(@arg) is true. @waiters is this end's rx_waiters or
 * tx_waiters, incremented while asleep so the peer knows to wake us.
 * @deadline is absolute CLOCK_MONOTONIC nanoseconds, or 0 for none.
 * Returns 0 once ready, -ETIMEDOUT, or -EINTR when a signal handler ran and
 * the call should not be restarted (as recv(2) would report).
 */
int shunt_wait_end(struct shunt_circuit_end *me, _Atomic uint32_t *waiters,
		   bool (*ready)(void *), void *arg, int64_t deadline);

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
