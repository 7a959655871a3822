// SPDX-License-Identifier: MIT
/*
 * Adaptive waiting: spin, yield, then sleep on the end's futex, or in short
 * naps when a seccomp filter keeps the futex from us or the peer.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/sys.h"
#include "preload/spin.h"
#include "preload/util.h"
#include "preload/wait.h"

enum {
	QUICK_LOOKS = 16,		/* ready() calls before the spin's bookkeeping */
	NAP_MIN_NS = 50 * 1000,		/* the first nap when nobody can wake us */
	NAP_MAX_NS = 2 * 1000 * 1000,	/* and the longest: what an idle wait costs then */
};

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

/* Spin, then yield, as long as it can pay (spin.c); true as soon as ready. */
static bool busy_phase(struct shunt_circuit_end *me, const struct shunt_circuit_end *peer,
		       bool (*ready)(void *), void *arg, int64_t deadline)
{
	struct shunt_spin sp;
	bool ok = false;

	/*
	 * A peer on another CPU answering a ping-pong does so within a
	 * fraction of a microsecond: look a few times before any of the
	 * bookkeeping below, which costs more than such an answer takes.
	 */
	for (int i = 0; i < QUICK_LOOKS; i++) {
		if (ready(arg))
			return true;
		shunt_cpu_relax();
	}
	shunt_spin_publish(&me->cpu);
	shunt_spin_begin(&sp, shunt_now_ns(), &peer->cpu);
	for (;;) {
		/*
		 * Pauses pay only within a budget: past it (or with none) one
		 * look per yield, or the 64 would cost 1.6 us of this CPU
		 * before each yield or sleep (25 ns a pause here).
		 */
		int looks = sp.mode == SPIN_AFTER ? 1 : 64;

		for (int i = 0; i < looks; i++) {
			if (ready(arg)) {
				ok = true;
				goto out;
			}
			shunt_cpu_relax();
		}
		if (!shunt_spin_go_on(&sp) || (deadline && sp.last >= deadline))
			break;
	}
	ok = ready(arg);
out:
	shunt_spin_end(&sp, ok);
	return ok;
}

int shunt_wait_end(struct shunt_circuit_end *me, const struct shunt_circuit_end *peer,
		   _Atomic uint32_t *waiters, bool (*ready)(void *), void *arg, int64_t deadline)
{
	int64_t nap = NAP_MIN_NS;

	if (busy_phase(me, peer, ready, arg, deadline))
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
		/* Asleep: nobody need leave our last CPU to us. */
		atomic_store_explicit(&me->cpu, 0, memory_order_relaxed);
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
		shunt_spin_publish(&me->cpu);
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
