// SPDX-License-Identifier: MIT
/*
 * Adaptive waiting: spin, yield, then sleep on the end's futex, or in short
 * naps when a seccomp filter keeps the futex from us or the peer.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/sys.h"
#include "preload/util.h"
#include "preload/wait.h"

enum {
	DEFAULT_SPIN_NS = 50 * 1000,
	YIELDS = 16,
	NAP_MIN_NS = 50 * 1000,		/* the first nap when nobody can wake us */
	NAP_MAX_NS = 2 * 1000 * 1000,	/* and the longest: what an idle wait costs then */
};

static int64_t spin_ns = DEFAULT_SPIN_NS;	/* written once by init */

void shunt_wait_init(void)
{
	const char *s = getenv("SHUNT_SPIN_US");

	if (s && *s)
		spin_ns = strtoll(s, NULL, 10) * 1000;
	if (spin_ns < 0)
		spin_ns = 0;
}

int64_t shunt_wait_spin_ns(void)
{
	return spin_ns;
}

int64_t shunt_deadline(int64_t timeout_us)
{
	int64_t now;

	if (timeout_us <= 0)
		return 0;
	now = shunt_now_ns();
	/* Past what the clock counts to (and where the sum would overflow): none. */
	if (timeout_us > (INT64_MAX - now) / 1000)
		return 0;
	return now + timeout_us * 1000;
}

/* Spin then yield; true as soon as ready. */
static bool busy_phase(bool (*ready)(void *), void *arg, int64_t deadline)
{
	int64_t start = shunt_now_ns(), now = start;

	while (now - start < spin_ns) {
		for (int i = 0; i < 64; i++) {
			if (ready(arg))
				return true;
			shunt_cpu_relax();
		}
		now = shunt_now_ns();
		if (deadline && now >= deadline)
			return false;
	}
	for (int i = 0; i < YIELDS; i++) {
		if (ready(arg))
			return true;
		/* Through the gate: a filter may forbid it, and a spin does as well. */
		if (shunt_syscall(SYS_sched_yield) < 0)
			shunt_cpu_relax();
	}
	return ready(arg);
}

int shunt_wait_end(struct shunt_circuit_end *me, _Atomic uint32_t *waiters,
		   bool (*ready)(void *), void *arg, int64_t deadline)
{
	int64_t nap = NAP_MIN_NS;

	if (busy_phase(ready, arg, deadline))
		return 0;
	for (;;) {
		struct timespec rel, *relp = NULL;
		int64_t left = INT64_MAX;
		bool napping;
		uint32_t seq;
		int r;

		/*
		 * W1: announce, then re-check. The seq_cst increment pairs with
		 * the fence in shunt_wake: either the peer sees us waiting and
		 * bumps wake, or we see its change in ready().
		 */
		atomic_fetch_add_explicit(waiters, 1, memory_order_seq_cst);
		seq = atomic_load_explicit(&me->wake, memory_order_seq_cst);
		if (ready(arg)) {
			atomic_fetch_sub_explicit(waiters, 1, memory_order_relaxed);
			return 0;
		}
		if (deadline) {
			left = deadline - shunt_now_ns();
			if (left <= 0) {
				atomic_fetch_sub_explicit(waiters, 1, memory_order_relaxed);
				return -ETIMEDOUT;
			}
		}
		/* Someone who should wake us cannot (see the nap word): look again soon. */
		napping = atomic_load_explicit(&me->nap, memory_order_relaxed);
		if (napping && left > nap)
			left = nap;
		if (left != INT64_MAX) {
			rel.tv_sec = left / 1000000000;
			rel.tv_nsec = left % 1000000000;
			relp = &rel;
		}
		r = shunt_futex_wait(&me->wake, seq, relp);
		if (r == -SHUNT_SYS_DENIED) {
			/* Our own filter forbids the futex: nap, whatever woke us or not. */
			r = shunt_sys_nap(left < nap ? left : nap);
			napping = true;
		}
		atomic_fetch_sub_explicit(waiters, 1, memory_order_relaxed);
		if (ready(arg))
			return 0;
		if (r == -EINTR)
			return -EINTR;
		if (napping) {
			/* A nap ended, not the call's time: only the deadline says that. */
			nap = nap * 2 < NAP_MAX_NS ? nap * 2 : NAP_MAX_NS;
			r = 0;
		}
		if (r == -ETIMEDOUT || (deadline && shunt_now_ns() >= deadline))
			return -ETIMEDOUT;
	}
}
