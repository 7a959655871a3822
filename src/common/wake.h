/* SPDX-License-Identifier: MIT */
/*
 * Waking the holders of a circuit end: futex sleepers in blocking calls
 * here, and threads waiting in poll or epoll through the links their routes
 * name (the library and shuntd each resolve routes their own way). Used
 * after a ring or an end's state changed, and by shuntd when it completes a
 * connection or buries a dead process.
 */
#ifndef SHUNT_WAKE_H
#define SHUNT_WAKE_H

#include <stdbool.h>
#include <stdint.h>

#include "shunt/circuit.h"
#include "shunt/link.h"

/* What changed, so that only those who wait for it are woken. */
enum shunt_wake_why {
	SHUNT_WAKE_RX = 1u << 0,	/* data or EOF became readable */
	SHUNT_WAKE_TX = 1u << 1,	/* space became writable */
	SHUNT_WAKE_ALL = SHUNT_WAKE_RX | SHUNT_WAKE_TX,
};

/*
 * Wake the futex sleepers of @end waiting for @why; returns whether
 * watchers (poll, epoll) want notices for it, which the caller then posts
 * along the end's routes. Must be called after the change it announces has
 * been published: its full fence pairs with the one a waiter makes between
 * announcing itself (rx_waiters, evented, link sleepers) and re-checking the
 * ring, so either the waiter sees the change or we see the waiter.
 */
bool shunt_wake_end(struct shunt_circuit_end *end, unsigned why);

/* Post @slot in a link side's bitmap; returns whether threads sleep there. */
int shunt_link_post(struct shunt_link_side *side, uint32_t slot);

#endif
