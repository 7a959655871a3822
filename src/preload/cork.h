/* SPDX-License-Identifier: MIT */
/*
 * The cork timer: bytes a connection holds back (TCP_CORK, MSG_MORE) go
 * out at the latest 200 ms after the first of them, as the kernel's, even
 * when the program does nothing more with the socket.
 */
#ifndef SHUNT_CORK_H
#define SHUNT_CORK_H

#include <stdint.h>

struct shunt_conn;

/*
 * @c holds bytes back from now, until @at (CLOCK_MONOTONIC ns) at the
 * latest: look at it then. Called with its tx lock held; takes the timer's
 * lock, and starts the timer's thread the first time in a process.
 */
void shunt_cork_arm(struct shunt_conn *c, int64_t at);

/*
 * @c is being let go: the timer never touches it again once this returns
 * (it waits for a look at it in progress). Called without its tx lock.
 */
void shunt_cork_forget(struct shunt_conn *c);

#endif
