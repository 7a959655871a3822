/* SPDX-License-Identifier: MIT */
/*
 * The channel: shared memory between one client process and the processes
 * that hold one listener, through which the client makes new connections to
 * that listener without asking shuntd (docs/connect.md). shuntd makes it
 * the first time it lets the client reach the listener over shared memory,
 * after deciding what only it can decide (policy, tenants, namespaces); from
 * then on the client carves each new circuit out of the channel's slots and
 * queues it, and the listener's holders take it from the queue, as the
 * kernel's accept queue works. shuntd learns of each connection afterwards
 * from the journals (journal.h), and gives a slot back once both ends are
 * done with it.
 *
 * Everyone who maps a channel can write all of it: the client, the
 * listener's holders and shuntd. So everything in it is a hint that each
 * reader checks (indices in range, slots in their state), and what one of
 * them can spoil is only the connections between these same processes.
 */
#ifndef SHUNT_CHAN_H
#define SHUNT_CHAN_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#include "shunt/circuit.h"
#include "shunt/proto.h"

#define SHUNT_CHAN_MAGIC 0x6e616863u /* "chan" little-endian */
#define SHUNT_CHAN_VERSION 2u

enum shunt_chan_geometry {
	SHUNT_CHAN_SLOTS_MIN = 16,
	SHUNT_CHAN_SLOTS_MAX = 4096,
	SHUNT_CHAN_SLOTS_DEFAULT = 1024,
};

/* The channel's state, written only by shuntd. */
enum shunt_chan_state {
	SHUNT_CHAN_OPEN = 1,		/* new connections may be queued */
	SHUNT_CHAN_CLOSED = 2,		/* no more: ask shuntd (listener gone, policy reloaded...) */
};

/*
 * A slot's state word: the state in the low byte, a generation above it
 * that each new use of the slot increments, so that a stale reference (a
 * queue entry, a journal entry) to an earlier use is recognised.
 */
enum shunt_slot_state {
	SHUNT_SLOT_FREE = 0,		/* shuntd gave it back: a client may take it */
	SHUNT_SLOT_USED = 1,		/* a connection lives in it */
	SHUNT_SLOT_SEALED = 2,		/* the channel is closed for good: nobody takes it */
};

static inline uint32_t shunt_slot_word(uint32_t gen, uint32_t state)
{
	return gen << 8 | (state & 0xff);
}

static inline uint32_t shunt_slot_gen(uint32_t word)
{
	return word >> 8;
}

static inline uint32_t shunt_slot_state(uint32_t word)
{
	return word & 0xff;
}

/*
 * One queued connection. The client fills it in before it moves the tail
 * past it; an acceptor reads it before its compare-and-swap of head takes it.
 */
struct shunt_chan_entry {
	uint32_t slot;
	uint32_t gen;			/* the slot's generation when queued */
	int64_t queued_ns;		/* CLOCK_MONOTONIC: accept takes the oldest first */
	struct shunt_wire_addr client;	/* the client socket's address, as its getsockname */
	struct shunt_wire_addr dst;	/* the address it connected to */
};

struct shunt_chan_hdr {
	/* Written by shuntd before anyone else maps it; constant from then on. */
	alignas(SHUNT_SHARE_APART) uint32_t magic;
	uint32_t version;
	uint32_t slots;			/* how many; also the queue's capacity */
	uint32_t ring_size;		/* of every slot's circuit */
	uint64_t channel;		/* shuntd's id of this channel */
	uint64_t id_base;		/* slot i's circuit is shuntd's circuit id_base + i
					   (shunt_chan_id_base: no other id is ever one of them) */
	uint64_t listener;		/* the listener it reaches */
	uint64_t client;		/* the client's session */
	/* Written by shuntd from then on. */
	alignas(SHUNT_SHARE_APART) _Atomic uint32_t state;	/* enum shunt_chan_state */
	_Atomic uint32_t max_queued;	/* the listener's backlog + 1, as listen() set it */
	/* Written by the client: where its next entry goes (free-running). */
	alignas(SHUNT_SHARE_APART) _Atomic uint64_t tail;
	/*
	 * Written by the acceptors (several processes may hold the listener):
	 * the next entry to take; an acceptor takes it by moving head past
	 * it with a compare-and-swap.
	 */
	alignas(SHUNT_SHARE_APART) _Atomic uint64_t head;
};

_Static_assert(offsetof(struct shunt_chan_hdr, state) == 1 * SHUNT_SHARE_APART, "v2");
_Static_assert(offsetof(struct shunt_chan_hdr, tail) == 2 * SHUNT_SHARE_APART, "v2");
_Static_assert(offsetof(struct shunt_chan_hdr, head) == 3 * SHUNT_SHARE_APART, "v2");
_Static_assert(sizeof(struct shunt_chan_hdr) == 4 * SHUNT_SHARE_APART, "v2");
_Static_assert(sizeof(struct shunt_chan_entry) == 80, "v2");
_Static_assert(SHUNT_CHAN_SLOTS_MAX <= 1 << 16, "slot ids fit shunt_chan_id_base's 16 bits");

/*
 * The circuit ids of a channel's slots: the channel's id (shuntd's ids are
 * below 2^44) above 16 bits for the slot, and the top bit, which no other
 * id of shuntd's has.
 */
static inline uint64_t shunt_chan_id_base(uint64_t channel)
{
	return 1ull << 63 | channel << 16;
}

/*
 * The layout: the header, the queue (@slots entries), the slots' state
 * words (@slots), then the slots' circuits, each page aligned.
 */
static inline size_t shunt_chan_queue_offset(void)
{
	return sizeof(struct shunt_chan_hdr);
}

static inline size_t shunt_chan_states_offset(uint32_t slots)
{
	return shunt_chan_queue_offset() + (size_t)slots * sizeof(struct shunt_chan_entry);
}

static inline size_t shunt_chan_slots_offset(uint32_t slots)
{
	size_t end = shunt_chan_states_offset(slots) + (size_t)slots * sizeof(uint32_t);

	return (end + SHUNT_CIRCUIT_HDR_SIZE - 1) & ~(size_t)(SHUNT_CIRCUIT_HDR_SIZE - 1);
}

static inline size_t shunt_chan_slot_offset(uint32_t slots, uint32_t ring_size, uint32_t i)
{
	return shunt_chan_slots_offset(slots) + (size_t)i * shunt_circuit_size(ring_size);
}

static inline size_t shunt_chan_size(uint32_t slots, uint32_t ring_size)
{
	return shunt_chan_slot_offset(slots, ring_size, slots);
}

#endif
