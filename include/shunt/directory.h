/* SPDX-License-Identifier: MIT */
/*
 * The directory: what shuntd publishes for every process to read without
 * asking (docs/connect.md, "Connects shuntd is not asked about"). One per
 * network namespace, handed with the HELLO reply of every session in it;
 * shuntd alone writes it (the memfd is sealed against new writable
 * mappings, F_SEAL_FUTURE_WRITE, before it is handed out), the processes
 * map it read-only.
 *
 * It holds, per TCP port, whether shuntd knows a listener on it that a
 * connect from this namespace could reach: one in this namespace (@any),
 * or one in any namespace bound to a wildcard or non-loopback address
 * (@wide). A connect to a port without one could only be answered "use
 * the kernel", so the library does not ask. Bits are set before the
 * LISTEN that made them is answered (a connect after listen() returned
 * sees them) and cleared when the last such listener goes; a stale bit
 * only costs a question. What listens on loopback in another namespace is
 * not in it, as it is not in this namespace's /proc/net/tcp.
 *
 * It also holds, per listener, how many channels shuntd has made to it
 * (include/shunt/chan.h), so that an acceptor learns of a new client's
 * channel from memory no client can write, without waiting for a count on
 * its bell, which its client may never ring (docs/connect.md, "The doorbell").
 *
 * And, per listener, how many sessions hold it, so that a process that
 * closes a listener someone else still holds (a fork child closing what
 * its parent listens on) need not wait for shuntd: that close changes
 * nothing anyone can see, as a close of one of several references to a
 * kernel socket does not (docs/connect.md, "Around fork").
 */
#ifndef SHUNT_DIRECTORY_H
#define SHUNT_DIRECTORY_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#include "shunt/circuit.h"

#define SHUNT_DIRECTORY_MAGIC 0x72696473u /* "sdir" little-endian */
#define SHUNT_DIRECTORY_VERSION 3u

enum shunt_directory_geometry {
	SHUNT_DIRECTORY_WORDS = 65536 / 64,	/* one bit per port */
	SHUNT_DIRECTORY_EPOCHS = 4096,		/* channel epochs, by listener id */
};

struct shunt_directory {
	alignas(SHUNT_SHARE_APART) uint32_t magic;
	uint32_t version;
	/* Bit p: a listener shuntd knows listens on port p in this namespace. */
	alignas(SHUNT_SHARE_APART) _Atomic uint64_t any[SHUNT_DIRECTORY_WORDS];
	/*
	 * Bit p: a listener on port p in any namespace is bound to a wildcard
	 * or a non-loopback address, so a connect to an address other than
	 * loopback may reach it. A listener bound to loopback alone sets only
	 * its bit in @any, of its own namespace's directory.
	 */
	_Atomic uint64_t wide[SHUNT_DIRECTORY_WORDS];
	/*
	 * Listener l's channel epoch is chan_epoch[l % SHUNT_DIRECTORY_EPOCHS]
	 * (l its id at shuntd), in the directory of its namespace: bumped each
	 * time shuntd makes a channel to it, before the client that asked can
	 * queue anything there. Listeners whose ids share an entry share the
	 * epoch; one bumped for another only costs a question.
	 */
	alignas(SHUNT_SHARE_APART) _Atomic uint32_t chan_epoch[SHUNT_DIRECTORY_EPOCHS];
	/*
	 * Listener l's holders are in holds[l % SHUNT_DIRECTORY_EPOCHS], in the
	 * directory of its namespace: shunt_directory_hold(l, n), n the number
	 * of sessions (fork tickets among them) that hold it, 0 once it is
	 * gone. Listeners whose ids share an entry take turns; a reader that
	 * finds another id there knows nothing.
	 */
	_Atomic uint64_t holds[SHUNT_DIRECTORY_EPOCHS];
};

enum {
	SHUNT_DIRECTORY_HOLD_BITS = 16,		/* the count's, below the listener's id */
	SHUNT_DIRECTORY_HOLD_MAX = (1 << SHUNT_DIRECTORY_HOLD_BITS) - 1,
};

/* An entry of holds[]: listener @id (its low 48 bits) held by @n sessions (saturated). */
static inline uint64_t shunt_directory_hold(uint64_t id, uint32_t n)
{
	if (n > SHUNT_DIRECTORY_HOLD_MAX)
		n = SHUNT_DIRECTORY_HOLD_MAX;
	return id << SHUNT_DIRECTORY_HOLD_BITS | n;
}

/* How many sessions hold listener @id by @entry, or 0 when it is another's. */
static inline uint32_t shunt_directory_holders(uint64_t entry, uint64_t id)
{
	if (entry >> SHUNT_DIRECTORY_HOLD_BITS != (id << SHUNT_DIRECTORY_HOLD_BITS) >>
	    SHUNT_DIRECTORY_HOLD_BITS)
		return 0;
	return (uint32_t)(entry & SHUNT_DIRECTORY_HOLD_MAX);
}

static inline size_t shunt_directory_size(void)
{
	return (sizeof(struct shunt_directory) + 4095) & ~(size_t)4095;
}

#endif
