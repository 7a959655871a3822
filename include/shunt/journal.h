/* SPDX-License-Identifier: MIT */
/*
 * The journal: what a process did without asking shuntd, for shuntd to
 * learn afterwards (docs/connect.md). One per session: a ring of entries
 * the library appends (connections it made or took through a channel,
 * circuit ends it let go of) and shuntd consumes, in batches, when it is
 * kicked, now and then while entries keep coming, before it answers any
 * request of that session (so that a request never overtakes what the
 * journal said before it), and when the process is gone.
 *
 * shuntd checks every entry against what it knows: a process can only
 * journal what concerns its own connections.
 */
#ifndef SHUNT_JOURNAL_H
#define SHUNT_JOURNAL_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#include "shunt/circuit.h"
#include "shunt/proto.h"

#define SHUNT_JOURNAL_MAGIC 0x6c6e726au /* "jrnl" little-endian */
#define SHUNT_JOURNAL_VERSION 3u

enum shunt_journal_geometry {
	/*
	 * A power of two. Each page of the ring is faulted in by its process
	 * and by shuntd the first time round, and stays: 1,024 entries are
	 * 104 KiB per process. At a tick of 2 ms (daemon/journal.c) a full
	 * ring means over 500,000 entries a second, or shuntd starved; the
	 * library then asks shuntd to read it (one round trip per 1,024).
	 */
	SHUNT_JOURNAL_ENTRIES = 1024,
};

enum shunt_journal_type {
	SHUNT_J_CONNECTED = 1,		/* queued a connection in a channel slot */
	SHUNT_J_ACCEPTED = 2,		/* took a queued connection from a channel */
	SHUNT_J_CLOSED = 3,		/* let go of a circuit end, held by this process alone */
};

struct shunt_journal_entry {
	uint16_t type;			/* enum shunt_journal_type */
	uint16_t end;			/* CLOSED: the end let go of */
	uint32_t slot;			/* CONNECTED, ACCEPTED: the channel's slot */
	uint32_t gen;			/* ...and its generation */
	int32_t fd;			/* CONNECTED, ACCEPTED: the socket's descriptor here */
	uint64_t channel;		/* CONNECTED, ACCEPTED */
	uint64_t circuit;		/* CLOSED */
	uint64_t inode;			/* CONNECTED, ACCEPTED: of that socket */
	/* CONNECTED: the client's address and where it connected; ACCEPTED: reached, client. */
	struct shunt_wire_addr addr[2];
};

enum shunt_journal_kick {
	SHUNT_JOURNAL_ASLEEP = 0,	/* shuntd looks only when kicked: kick it */
	SHUNT_JOURNAL_AWAKE = 1,	/* shuntd will look soon anyway */
};

/*
 * The claim word: whether shuntd may still act on the CONNECT that asked
 * with SHUNT_CONNECT_DEADLINE, held as (seq << 2) | state. The library
 * writes PENDING before it sends; shuntd turns it to TAKEN before it
 * touches the socket; the library turns it to ABANDONED when it stops
 * waiting. Whoever's compare-and-swap fails knows the other came first:
 * shuntd then only answers (SHUNT_ABANDONED, or a channel for next time),
 * the library waits for the answer. A newer request's word means the
 * older one was abandoned.
 */
enum shunt_journal_claim {
	SHUNT_CLAIM_PENDING = 1,
	SHUNT_CLAIM_TAKEN = 2,
	SHUNT_CLAIM_ABANDONED = 3,
};

static inline uint64_t shunt_journal_claim(uint32_t seq, enum shunt_journal_claim state)
{
	return (uint64_t)seq << 2 | state;
}

struct shunt_journal_hdr {
	/* Written by shuntd before handing it out. */
	alignas(SHUNT_SHARE_APART) uint32_t magic;
	uint32_t version;
	uint32_t entries;		/* SHUNT_JOURNAL_ENTRIES */
	uint32_t reserved;
	/* Written by shuntd: enum shunt_journal_kick, and how far it has read. */
	alignas(SHUNT_SHARE_APART) _Atomic uint32_t kick;
	alignas(SHUNT_SHARE_APART) _Atomic uint64_t head;
	/* Written by the library: where the next entry goes (free-running). */
	alignas(SHUNT_SHARE_APART) _Atomic uint64_t tail;
	/* Written by both: enum shunt_journal_claim, by compare-and-swap. */
	alignas(SHUNT_SHARE_APART) _Atomic uint64_t claim;
	alignas(SHUNT_SHARE_APART) struct shunt_journal_entry entry[SHUNT_JOURNAL_ENTRIES];
};

_Static_assert(sizeof(struct shunt_journal_entry) == 104, "v2");
_Static_assert(offsetof(struct shunt_journal_hdr, kick) == SHUNT_SHARE_APART, "v2");
_Static_assert(offsetof(struct shunt_journal_hdr, entry) == 5 * SHUNT_SHARE_APART, "v2");

static inline size_t shunt_journal_size(void)
{
	return (sizeof(struct shunt_journal_hdr) + 4095) & ~(size_t)4095;
}

#endif
