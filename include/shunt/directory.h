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
 */
#ifndef SHUNT_DIRECTORY_H
#define SHUNT_DIRECTORY_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#include "shunt/circuit.h"

#define SHUNT_DIRECTORY_MAGIC 0x72696473u /* "sdir" little-endian */
#define SHUNT_DIRECTORY_VERSION 2u

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
};

static inline size_t shunt_directory_size(void)
{
	return (sizeof(struct shunt_directory) + 4095) & ~(size_t)4095;
}

#endif
