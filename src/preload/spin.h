/* SPDX-License-Identifier: MIT */
/*
 * Spinning only while it can pay (docs/waiting.md). A waiter spins for a
 * peer on another CPU to answer; it must not spin while that peer, or
 * anyone else, needs the waiter's own CPU. Every wait for a circuit (recv,
 * send on a full ring, connect, poll, select, epoll_wait) runs its spin
 * through one struct shunt_spin, which decides from what the waiter can see
 * by itself: how recent spins of this thread ended (a learned budget),
 * where the peer last ran, and whether a periodic sched_yield() handed the
 * CPU to someone.
 */
#ifndef SHUNT_SPIN_H
#define SHUNT_SPIN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum shunt_spin_mode {
	SPIN_PAUSE,			/* spinning on the CPU, within the budget */
	SPIN_YIELD,			/* within the budget, but yielding: someone wants the CPU */
	SPIN_AFTER,			/* the budget is spent: yields while others run, then sleep */
};

/* One wait's spin. Lives on the waiter's stack. */
struct shunt_spin {
	int64_t start;			/* when the wait began (ns) */
	int64_t last;			/* the last clock reading */
	int64_t budget;			/* how long it may spin, from start */
	int64_t next_yield;		/* when to offer the CPU next */
	const _Atomic uint32_t *peer_cpu;	/* the peer end's word, or NULL */
	unsigned yields;		/* made since the budget was spent */
	enum shunt_spin_mode mode;
	bool probing;			/* a spin the learned budget did not grant */
	bool contended;			/* someone else ran on our CPU meanwhile */
};

/* SHUNT_SPIN_US, the most any wait spins (0: never); once, at start. */
void shunt_spin_init(void);

/*
 * Begin the spin of a wait that starts at @now. @peer_cpu is the word where
 * the peer end's holders publish their CPU (shunt_spin_publish), or NULL
 * when the wait is for many peers at once (poll, epoll).
 */
void shunt_spin_begin(struct shunt_spin *s, int64_t now, const _Atomic uint32_t *peer_cpu);

/*
 * Whether to look at the condition again rather than sleep; the caller
 * looks between calls, a few dozen times (and once more after a false,
 * before it sleeps). Reads the clock; may yield the CPU: while spinning
 * now and then, and at each call once the spin is over, as long as someone
 * else runs here when it does. Once false, false for good.
 */
bool shunt_spin_go_on(struct shunt_spin *s);

/*
 * The wait is over: @ready says whether the condition came true without
 * sleeping. Teaches this thread's budget (only the caller of begin may call).
 */
void shunt_spin_end(struct shunt_spin *s, bool ready);

/*
 * Publish the calling thread's CPU in @word (a word this end's holders
 * write and the peer reads), if it changed: waiters on the peer's side then
 * know not to spin for us while they run on the CPU we need.
 */
void shunt_spin_publish(_Atomic uint32_t *word);

#endif
