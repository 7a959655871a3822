/* SPDX-License-Identifier: MIT */
/*
 * What the library does about a seccomp filter the program is installing,
 * before it takes effect: whatever a filter will forbid it to do later,
 * it does now or arranges to do without. Listeners let go of shuntd when
 * new circuits will be out of reach (peers then connect through the kernel
 * and are accepted through it), peers told to nap when we will not be able
 * to wake them, the descriptors it will need made while it still can.
 */
#ifndef SHUNT_SANDBOX_H
#define SHUNT_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>

#include "preload/seccomp.h"

struct shunt_sock;

/* What a preparation did, so that a failed install can be undone. */
struct shunt_sandbox_plan {
	const struct shunt_chain *next;
	bool circuits;			/* new circuits can be made under @next */
	bool wake;			/* futex wakes can be made under @next */
	bool clockless;			/* we stopped reading the clock for it */
	unsigned napped;		/* connections whose ends were told to nap */
	size_t ndropped;		/* listeners let go of shuntd, in dropped[] */
	struct dropped {
		struct shunt_sock *s;	/* a reference */
		int fd;
	} *dropped;
};

/*
 * Before filter stack @next replaces @now (both may be NULL: none), with
 * @now still judging the library's calls. Takes the fork lock shared and
 * each socket's lock in turn; no lock of the library held by the caller.
 */
void shunt_sandbox_prepare(const struct shunt_chain *now, const struct shunt_chain *next,
			   struct shunt_sandbox_plan *plan);

/* The kernel refused the filter: registrations come back (under the old stack again). */
void shunt_sandbox_undo(struct shunt_sandbox_plan *plan);

/* The filter is in force as @final: say at SHUNT_LOG=info what it changed. */
void shunt_sandbox_done(struct shunt_sandbox_plan *plan, const struct shunt_chain *final);

/*
 * Whether new circuits can be made and kept under @c (NULL: no filter):
 * shuntd can be asked, their memory mapped, their peers woken, their links
 * watched, accept() can wait for them. When not, connect() and listen()
 * leave the socket to the kernel.
 */
bool shunt_sandbox_circuits_ok(const struct shunt_chain *c);

/* Whether this process's own filter, if any, forbids new circuits (see above). */
bool shunt_sandbox_forbids_circuits(void);

#endif
