// SPDX-License-Identifier: MIT
/* The holders' lock: spin briefly, then sleep on the word, checking on the owner. */
#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/lock.h"
#include "common/sys.h"

enum {
	/*
	 * The owner is copying: it is done in a moment, if it runs. Between
	 * short spins we offer the CPU: an owner preempted on ours (holders
	 * outnumber the CPUs) runs now rather than after our whole spin, and
	 * with nobody else runnable here the offer comes straight back.
	 */
	SPINS = 50,
	SPIN_ROUNDS = 4,
	CHECK_NS = 10 * 1000 * 1000,	/* how often a sleeper looks whether the owner lives */
	NAP_NS = 200 * 1000,		/* how often it looks when a filter forbids the futex */
};

static void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

/*
 * Whether the process @owner is gone (a zombie still counts as there, and so
 * does one a seccomp filter keeps us from asking about).
 */
static bool owner_gone(uint32_t owner, uint32_t me)
{
	if (owner == 0 || owner == me)
		return false;
	return shunt_syscall(SYS_kill, (pid_t)owner, 0) < 0 && errno == ESRCH;
}

int shunt_lock_wait(_Atomic uint32_t *word, uint32_t me, int64_t deadline, bool *other)
{
	int64_t napped = 0;

	*other = true;
	for (int round = 0; round < SPIN_ROUNDS; round++) {
		for (int i = 0; i < SPINS; i++) {
			bool o;

			if (shunt_lock_try(word, me, &o))
				return 0;
			relax();
		}
		/* Through the gate: a filter may forbid it (then we just spin on). */
		shunt_syscall(SYS_sched_yield);
	}
	for (;;) {
		uint32_t v = atomic_load_explicit(word, memory_order_relaxed);
		struct timespec rel = { 0, CHECK_NS };
		int r;

		/* Taken after a wait: others may still sleep, so keep the flag. */
		if (!(v & SHUNT_LOCK_HELD)) {
			if (atomic_compare_exchange_strong_explicit(
				    word, &v, me | SHUNT_LOCK_HELD | SHUNT_LOCK_WAITERS,
				    memory_order_acquire, memory_order_relaxed))
				return 0;
			continue;
		}
		if (!(v & SHUNT_LOCK_WAITERS)) {
			if (!atomic_compare_exchange_strong_explicit(word, &v, v | SHUNT_LOCK_WAITERS,
								     memory_order_relaxed,
								     memory_order_relaxed))
				continue;
			v |= SHUNT_LOCK_WAITERS;
		}
		if (deadline) {
			int64_t left = deadline - shunt_sys_now_ns();

			if (left <= 0)
				return -ETIMEDOUT;
			if (left < CHECK_NS)
				rel.tv_nsec = left;
		}
		r = shunt_futex_wait(word, v, &rel);
		/*
		 * A seccomp filter forbids the futex: look again after a nap
		 * (an owner that cannot wake us is just as fine, we look anyway).
		 */
		if (r == -SHUNT_SYS_DENIED) {
			shunt_sys_nap(rel.tv_nsec < NAP_NS ? rel.tv_nsec : NAP_NS);
			napped += NAP_NS;
			r = napped >= CHECK_NS ? -ETIMEDOUT : 0;
			if (r)
				napped = 0;
		}
		/* Still the same owner after a while: it may have died holding the lock. */
		if (r == -ETIMEDOUT && owner_gone(v & SHUNT_LOCK_OWNER, me) &&
		    atomic_compare_exchange_strong_explicit(
			    word, &v, me | SHUNT_LOCK_HELD | SHUNT_LOCK_WAITERS,
			    memory_order_acquire, memory_order_relaxed))
			return 0;
		/* EINTR: a handler ran; the wait goes on, as lock_sock()'s does. */
	}
}
