/* SPDX-License-Identifier: MIT */
/*
 * The link: a pair of notice bitmaps shared by two sessions (processes
 * under shunt), through which each tells the other which of its circuits
 * changed, so that a process waiting on many sockets learns what is ready
 * without scanning. A slot number is chosen by the process that drains the
 * side: it is the same on all of that process's links, and a circuit end's
 * routes (circuit.h) say which session and slot want its notices. Every
 * session also has a daemon link, through which shuntd posts.
 */
#ifndef SHUNT_LINK_H
#define SHUNT_LINK_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#include "shunt/circuit.h"

#define SHUNT_LINK_MAGIC 0x6b6e6c73u /* "slnk" */
#define SHUNT_LINK_VERSION 1u

enum shunt_link_geometry {
	SHUNT_LINK_SLOTS = 65536,
	SHUNT_LINK_SLOT_WORDS = SHUNT_LINK_SLOTS / 64,
	SHUNT_LINK_SUMMARY_WORDS = SHUNT_LINK_SLOT_WORDS / 64,
	/*
	 * On a daemon link, shuntd posts this slot to say "ask LINK_NEXT":
	 * it made a link for this process, or one died. No circuit uses it.
	 */
	SHUNT_LINK_SLOT_PULL = SHUNT_LINK_SLOTS - 1,
};

/*
 * Notices addressed to one side. The other side sets a slot's bit (then the
 * summary bit of its word) and, if sleepers is non-zero, writes this side's
 * link eventfd. This side clears bits as it consumes them. Bits are hints:
 * the receiver checks the circuit itself and ignores slots it does not own.
 */
struct shunt_link_side {
	alignas(SHUNT_CACHELINE) _Atomic uint32_t sleepers;	/* owner side */
	alignas(SHUNT_CACHELINE) _Atomic uint64_t summary[SHUNT_LINK_SUMMARY_WORDS];
	alignas(SHUNT_CACHELINE) _Atomic uint64_t bits[SHUNT_LINK_SLOT_WORDS];
};

struct shunt_link_hdr {
	alignas(SHUNT_CACHELINE) uint32_t magic;
	uint32_t version;
	uint32_t slots;
	uint32_t reserved;
	struct shunt_link_side side[2];
};

_Static_assert(offsetof(struct shunt_link_side, summary) == 64, "layout v1");
_Static_assert(offsetof(struct shunt_link_side, bits) == 192, "layout v1");
_Static_assert(offsetof(struct shunt_link_hdr, side) == 64, "layout v1");
_Static_assert(sizeof(struct shunt_link_side) % SHUNT_CACHELINE == 0, "sides apart");

static inline size_t shunt_link_size(void)
{
	return (sizeof(struct shunt_link_hdr) + 4095) & ~(size_t)4095;
}

#endif
