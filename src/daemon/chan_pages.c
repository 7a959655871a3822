// SPDX-License-Identifier: MIT
/*
 * A channel's freed slots and their memory (docs/connect.md, "A slot's
 * pages"). A connection per request leaves each slot it used with a few
 * resident pages: the circuit's header and the first page of each ring.
 * Giving them back at every free (MADV_REMOVE) cost shuntd a hole punch and
 * a TLB flush in every process mapping the channel, and the next connection
 * in the slot its page faults back, about a third of what such a connection
 * cost in all. So a slot that carried little is given back "warm": its pages
 * stay, and the client rewrites the header as it takes the slot again
 * (chan.c in the library). A ring that carried more than its first page is
 * emptied at once; and once a channel has freed no slot for COOL_MS, its
 * warm slots are emptied too, so that memory still follows use.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "common/sys.h"
#include "daemon/shuntd.h"

enum {
	/* A ring that carried no more than this keeps its pages while warm. */
	WARM_BYTES = 4096,
	/* A channel that freed no slot for this long gives its warm slots' pages back. */
	COOL_MS = 1000,
};

static void empty_slot(struct channel *ch, uint32_t i)
{
	/* A filter or an old kernel: the pages stay, as before the first use. */
	madvise(shuntd_chan_slot(ch, i), shunt_circuit_size(ch->ring_size), MADV_REMOVE);
}

void shuntd_chan_pages_freed(struct shuntd *d, struct channel *ch, uint32_t i)
{
	struct shunt_circuit_hdr *hdr = shuntd_chan_slot(ch, i);
	bool warm = ch->warm != NULL;

	for (unsigned r = 0; r < 2 && warm; r++) {
		/*
		 * Bytes that went through ring @r: a free-running index its
		 * writer kept, so a hint. A lie keeps the liar's own pages
		 * resident until the channel cools, nothing more.
		 */
		uint64_t sent = atomic_load_explicit(&hdr->ring[r].tail, memory_order_relaxed);

		warm = sent <= WARM_BYTES;
	}
	if (!warm) {
		if (ch->warm && ch->warm[i]) {
			ch->warm[i] = 0;
			ch->nwarm--;
		}
		empty_slot(ch, i);
		return;
	}
	if (!ch->warm[i]) {
		ch->warm[i] = 1;
		ch->nwarm++;
	}
	ch->warm_at = shunt_sys_now_ms();
	/* Kept in order of warm_at: the least recently used first. */
	if (ch->warm_listed)
		shunt_list_del(&ch->warm_node);
	shunt_list_add_tail(&d->warm_channels, &ch->warm_node);
	ch->warm_listed = true;
}

/*
 * Empty warm slot @i unless a client has taken it again. A free slot is
 * held (USED, same generation) while it is emptied, so that no client can
 * take it and write its header meanwhile; a sealed one no client can take.
 */
static void cool_slot(struct channel *ch, uint32_t i)
{
	_Atomic uint32_t *st = &shuntd_chan_states(ch)[i];
	uint32_t w = atomic_load(st);
	uint32_t gen = shunt_slot_gen(w);

	if (shunt_slot_state(w) == SHUNT_SLOT_SEALED) {
		empty_slot(ch, i);
		return;
	}
	/* Pairs with the client's CAS in claim_slot: one of the two takes the slot. */
	if (shunt_slot_state(w) != SHUNT_SLOT_FREE ||
	    !atomic_compare_exchange_strong(st, &w, shunt_slot_word(gen, SHUNT_SLOT_USED)))
		return;		/* in use again: emptied when it is freed next */
	empty_slot(ch, i);
	/* S1: as when the slot was freed; the client's acquire CAS pairs with it. */
	atomic_store_explicit(st, shunt_slot_word(gen, SHUNT_SLOT_FREE), memory_order_release);
}

static void cool(struct channel *ch)
{
	for (uint32_t i = 0; i < ch->slots && ch->nwarm; i++) {
		if (!ch->warm[i])
			continue;
		ch->warm[i] = 0;
		ch->nwarm--;
		cool_slot(ch, i);
	}
	shunt_list_del(&ch->warm_node);
	ch->warm_listed = false;
}

void shuntd_chan_pages_forget(struct channel *ch)
{
	if (ch->warm_listed)
		cool(ch);
}

int shuntd_chan_pages_next_tick(struct shuntd *d)
{
	int64_t left;

	if (shunt_list_empty(&d->warm_channels))
		return -1;
	left = shunt_list_first(&d->warm_channels, struct channel, warm_node)->warm_at + COOL_MS -
	       shunt_sys_now_ms();
	return left < 0 ? 0 : (int)left;
}

void shuntd_chan_pages_tick(struct shuntd *d)
{
	int64_t now = shunt_sys_now_ms();

	while (!shunt_list_empty(&d->warm_channels)) {
		struct channel *ch = shunt_list_first(&d->warm_channels, struct channel, warm_node);

		if (ch->warm_at + COOL_MS > now)
			break;
		cool(ch);
	}
}
