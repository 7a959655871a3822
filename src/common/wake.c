// SPDX-License-Identifier: MIT
/* Waking the holders of a circuit end: futex sleepers, and link notices. */
#include <limits.h>
#include <stdatomic.h>

#include "common/sys.h"
#include "common/wake.h"

int shunt_link_post(struct shunt_link_side *side, uint32_t slot)
{
	uint32_t w = slot / 64;
	uint64_t old;

	if (slot >= SHUNT_LINK_SLOTS)
		return 0;
	/*
	 * Set the slot bit, then the summary bit if the word was empty. The
	 * consumer clears a summary bit before it empties the words under it,
	 * so a bit set here is always found by its current or next drain.
	 */
	old = atomic_fetch_or_explicit(&side->bits[w], 1ull << (slot % 64), memory_order_seq_cst);
	if (!old)
		atomic_fetch_or_explicit(&side->summary[w / 64], 1ull << (w % 64),
					 memory_order_seq_cst);
	/* Pairs with the sleeper's increment of sleepers before it re-checks. */
	return atomic_load_explicit(&side->sleepers, memory_order_seq_cst) != 0;
}

bool shunt_wake_end(struct shunt_circuit_end *end, unsigned why)
{
	/* Pairs with the fence a waiter makes after announcing itself (W1). */
	atomic_thread_fence(memory_order_seq_cst);
	if (((why & SHUNT_WAKE_RX) && atomic_load_explicit(&end->rx_waiters, memory_order_relaxed)) ||
	    ((why & SHUNT_WAKE_TX) && atomic_load_explicit(&end->tx_waiters, memory_order_relaxed))) {
		atomic_fetch_add_explicit(&end->wake, 1, memory_order_relaxed);
		/*
		 * A seccomp filter forbids the wake: sleepers that come later
		 * nap instead (those asleep already were woken, and told, when
		 * the filter was installed: preload/sandbox.c).
		 */
		if (!shunt_futex_wake(&end->wake, INT_MAX) &&
		    !atomic_load_explicit(&end->nap, memory_order_relaxed))
			atomic_store_explicit(&end->nap, 1, memory_order_relaxed);
	}
	return atomic_load_explicit(&end->evented, memory_order_relaxed) != 0;
}
