/* SPDX-License-Identifier: MIT */
/*
 * Room kept for the library's descriptors where they share the program's
 * range (the hard limit leaves none above it: fdlimit.c's top window).
 * fdroom.c says why and how.
 */
#ifndef SHUNT_FDROOM_H
#define SHUNT_FDROOM_H

#include <stdbool.h>

#include "shunt/proto.h"

/* How many numbers stand kept: as many as one control reply carries. */
enum { SHUNT_FDROOM = (int)SHUNT_MSG_MAX_FDS };

/*
 * Keep up to SHUNT_FDROOM free numbers of the window occupied, once the
 * program came near its limit there; let them go when the library's
 * descriptors no longer share its range. Takes only numbers already free
 * in the window; never waits (a thread already at it is enough).
 */
void shunt_fdroom_stand(void);

/*
 * Up to @n of the kept numbers, moved into @held (hidden descriptors, to
 * be closed by shunt_fdlimit_release right before a receive, so that what
 * arrives lands there). Returns how many.
 */
unsigned shunt_fdroom_take(int *held, unsigned n);

/* The numbers a request holds for its reply (shunt_fdlimit_hold): let go before the receive. */
void shunt_fdroom_held(const int *held, unsigned n);

/*
 * The reply's @n descriptors @fds were received: those that landed on
 * numbers the program had free are moved into the room (@fds says where
 * they are now), those on the room noted as the room's, and the room's
 * numbers still free kept again.
 */
void shunt_fdroom_received(int *fds, unsigned n);

/*
 * Whether @fd, about to be hidden, sits on a number of the room a reply
 * landed on: it stays there (once; the number is the library's).
 */
bool shunt_fdroom_claim(int fd);

/*
 * Hidden descriptor @fd is done with: keep its number as room instead of
 * closing it, if the room is short (its file is closed, the number stays
 * the library's). True if kept.
 */
bool shunt_fdroom_keep(int fd);

/*
 * A reply's descriptor @fd (not hidden: a memfd mapped, say) is done with:
 * if it sits on a number of the room (it landed there), that number is kept
 * as room again, in place; true then, else the caller closes it. Without
 * this the number would come free, one the program never has without the
 * library, and an accept at its limit would succeed where the kernel's says
 * EMFILE.
 */
bool shunt_fdroom_return(int fd);

#endif
