/* SPDX-License-Identifier: MIT */
/*
 * Waking the owner of a circuit end: futex sleepers in blocking calls, and
 * through the link, threads of its process waiting in poll or epoll. Used by
 * the library after it changes a ring or an end's state, and by shuntd when it
 * completes a connection or buries a dead process.
 */
#ifndef SHUNT_WAKE_H
#define SHUNT_WAKE_H

#include <stdint.h>

#include "shunt/circuit.h"
#include "shunt/link.h"

/* What changed, so that only those who wait for it are woken. */
enum shunt_wake_why {
	SHUNT_WAKE_RX = 1u << 0,	/* data or EOF became readable */
	SHUNT_WAKE_TX = 1u << 1,	/* space became writable */
	SHUNT_WAKE_ALL = SHUNT_WAKE_RX | SHUNT_WAKE_TX,
};

/* Where to reach the owner of an end. */
struct shunt_wake_target {
	struct shunt_circuit_end *end;
	struct shunt_link_side *link;	/* the owner's side of the link, or NULL */
	uint32_t slot;			/* the circuit's slot in that link */
	int efd;			/* the owner's link eventfd, or -1 */
};

/*
 * Wake the owner of @t for @why. Must be called after the change it
 * announces has been published: its full fence pairs with the one a waiter
 * makes between announcing itself (rx_waiters, evented, link sleepers) and
 * re-checking the ring, so either the waiter sees the change or we see it.
 */
void shunt_wake(const struct shunt_wake_target *t, unsigned why);

/* Post @slot in a link side's bitmap; returns whether threads sleep there. */
int shunt_link_post(struct shunt_link_side *side, uint32_t slot);

#endif
