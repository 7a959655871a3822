/* SPDX-License-Identifier: MIT */
/* Process-wide start of the library: once, from the constructor or the first call. */
#ifndef SHUNT_INIT_H
#define SHUNT_INIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <sys/types.h>

extern _Atomic bool shunt_ready;
extern _Atomic bool shunt_start_begun;
/*
 * This thread is in shunt_init, running the start or waiting for it, and
 * the start has not got as far as shunt_ready: a call it makes meanwhile
 * comes from a signal handler of the program's (the start calls no
 * wrapper of its own), and must not wait for the start it interrupted.
 * Initial-exec: one load, on every call before the start is done.
 */
extern __thread bool shunt_starting_here __attribute__((tls_model("initial-exec")));

void shunt_init(void);

/*
 * Dormant: the library has not started (init.c), so no descriptor is ours
 * and nothing the kernel holds was changed by it. A call that concerns only
 * the program's descriptors, limits or other signals then goes straight to
 * the C library, and the start is left to a call that can make or meet a
 * socket. A start under way in another thread is not dormant: such a call
 * waits for it; one under way in this thread is (shunt_starting_here).
 */
static inline bool shunt_dormant(void)
{
	/* Started: one load on every call, the one shunt_ensure_init makes next. */
	if (__builtin_expect(atomic_load_explicit(&shunt_ready, memory_order_acquire), 1))
		return false;
	return !atomic_load(&shunt_start_begun) || shunt_starting_here;
}

/*
 * A call made dormant that the start must not overlap: a fork (whose child
 * would copy a start half done) or a change to SIGSEGV or SIGBUS (which the
 * start takes over). True when the call may go to the C library, and the
 * start then waits for shunt_dormant_leave; false when the start has
 * begun, and the caller must take the started path.
 */
bool shunt_dormant_enter(void);
void shunt_dormant_leave(void);
/* The same for fork: @r its result, 0 in the child (which has only this thread). */
void shunt_dormant_fork_leave(pid_t r);

/* Every wrapper starts here: a load and a predictable branch once started. */
static inline void shunt_ensure_init(void)
{
	if (__builtin_expect(!atomic_load_explicit(&shunt_ready, memory_order_acquire), 0))
		shunt_init();
}

/* Mark a function as part of the interface the application sees. */
#define SHUNT_EXPORT __attribute__((visibility("default")))

#endif
