/* SPDX-License-Identifier: MIT */
/*
 * A listener's family: the processes that hold it because they forked from
 * one another count, in a page they all map (inherited by fork), how many of
 * them still hold it, and how many have closed it. A holder that finds others
 * still holding it closes without waiting for shuntd, as closing one of
 * several references to a kernel socket changes nothing anyone can see; the
 * last one waits, and shuntd answers it only once it has read the others'
 * closes (docs/connect.md, "Around fork"), so that a connect after it is
 * refused, whoever learns of it.
 *
 * A process out of the family (a new image after exec, a receiver of the
 * descriptor, one with no room in the page) closes as a lone holder does:
 * it waits. A process that exits closes its family's listeners as the
 * kernel closes its descriptors (control.h, shunt_ctl_exit). Counts only
 * err towards waiting, except for a holder killed before it closed: the
 * count then stays one high.
 */
#ifndef SHUNT_PRELOAD_FAMILY_H
#define SHUNT_PRELOAD_FAMILY_H

#include <stdbool.h>
#include <stdint.h>

enum { SHUNT_FAMILY_NONE = -1 };

/*
 * A slot for listener @listener (shuntd's id), which this process just
 * registered: it holds it alone. The slot, or SHUNT_FAMILY_NONE (no page, or
 * no room in it). Under the fork lock, shared.
 */
int shunt_family_join(uint64_t listener);

/* What this process's leaving of a listener's family found. */
struct shunt_family_leave {
	bool counted;		/* it was of the family: shuntd counts its close */
	uint32_t others;	/* holders of the family left after it */
	uint32_t closes;	/* the family's counted closes so far, this one included */
};

/*
 * This process lets go of @slot's listener (its last descriptor of it
 * closed, or it stops listening). @counted: its close goes to shuntd as a
 * counted one (not for a shutdown, which ends the listener for everyone).
 * Nothing if it does not hold @slot. Under the fork lock, shared.
 */
struct shunt_family_leave shunt_family_leave(int slot, bool counted);

/*
 * Around fork, under the fork lock held exclusively: the child will hold
 * what we hold (_fork); the fork failed after all (_unfork).
 */
void shunt_family_fork(void);
void shunt_family_unfork(void);

/* Whether this process holds a listener in a family. */
bool shunt_family_held(void);

/*
 * Each slot this process holds, with its listener's id, as @fn(slot,
 * listener): at exit, whose closes the kernel makes for it.
 */
void shunt_family_each_held(void (*fn)(int slot, uint64_t listener));

/*
 * This process leaves every family without closing anything: it goes on
 * holding its listeners, but outside (an exec's new image; a fork child
 * that holds nothing of its parent's at shuntd). Its closes then wait.
 */
void shunt_family_forsake(void);

#endif
