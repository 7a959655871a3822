/* SPDX-License-Identifier: MIT */
/*
 * Run a function once per process, like pthread_once, but without a system
 * call: glibc's pthread_once ends each first run with a futex wake, and a
 * process exec'd under a seccomp filter that forbids futex would be killed
 * for it at start-up, before the library could know of the filter. A
 * thread that finds another one running the function spins until it is
 * done, which happens only when threads race into the library before its
 * constructor has finished. Like pthread_once, a fork in the middle of a
 * run leaves the child waiting forever: never fork from the function.
 */
#ifndef SHUNT_ONCE_H
#define SHUNT_ONCE_H

#include <stdatomic.h>

enum shunt_once_state {
	SHUNT_ONCE_NEW = 0,
	SHUNT_ONCE_RUNNING = 1,
	SHUNT_ONCE_DONE = 2,
};

struct shunt_once {
	_Atomic int state;	/* enum shunt_once_state */
};

#define SHUNT_ONCE_INIT { SHUNT_ONCE_NEW }

/* A spinning thread's pause, which costs no system call. */
static inline void shunt_spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

static inline void shunt_once(struct shunt_once *o, void (*fn)(void))
{
	int v = SHUNT_ONCE_NEW;

	/* O1: pairs with the release below: what fn() wrote is seen once DONE is. */
	if (__builtin_expect(atomic_load_explicit(&o->state, memory_order_acquire) ==
			     SHUNT_ONCE_DONE, 1))
		return;
	if (atomic_compare_exchange_strong_explicit(&o->state, &v, SHUNT_ONCE_RUNNING,
						    memory_order_acquire, memory_order_acquire)) {
		fn();
		atomic_store_explicit(&o->state, SHUNT_ONCE_DONE, memory_order_release);
		return;
	}
	while (atomic_load_explicit(&o->state, memory_order_acquire) != SHUNT_ONCE_DONE)
		shunt_spin_pause();
}

#endif
