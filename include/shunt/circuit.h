/* SPDX-License-Identifier: MIT */
/*
 * The circuit: the shared-memory region of one shunt connection, a control
 * page followed by two single-producer single-consumer byte rings. See
 * docs/circuit.md for the diagram and the rules each side follows.
 */
#ifndef SHUNT_CIRCUIT_H
#define SHUNT_CIRCUIT_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#define SHUNT_CIRCUIT_MAGIC 0x746e6873u /* "shnt" little-endian */
#define SHUNT_CIRCUIT_VERSION 1u

enum shunt_circuit_geometry {
	SHUNT_CACHELINE = 64,
	SHUNT_CIRCUIT_HDR_SIZE = 4096,
	SHUNT_RING_MIN = 4096,
	SHUNT_RING_MAX = 64 << 20,
	SHUNT_RING_DEFAULT = 256 << 10,
};

/* The two ends. The connector's bytes travel in ring 0, the acceptor's in ring 1. */
enum shunt_end_index {
	SHUNT_END_CONNECTOR = 0,
	SHUNT_END_ACCEPTOR = 1,
};

/* Connection setup state, written only by shuntd. */
enum shunt_setup_state {
	SHUNT_SETUP_PENDING = 0,	/* connector waits: the listener's backlog is full */
	SHUNT_SETUP_ESTABLISHED = 1,	/* in the accept queue or accepted */
	SHUNT_SETUP_REFUSED = 2,	/* the listener went away before accepting */
};

/*
 * State bits of one end, written only by that end (or by shuntd once the
 * process holding it is gone). They only ever get set, never cleared.
 */
enum shunt_end_state {
	SHUNT_END_WR_SHUT = 1u << 0,	/* FIN: no byte follows the ring's tail */
	SHUNT_END_RD_SHUT = 1u << 1,	/* reads return EOF once the ring is empty */
	SHUNT_END_CLOSED = 1u << 2,	/* nobody will ever read this end's rx ring */
	SHUNT_END_RESET = 1u << 3,	/* abortive close: the peer sees ECONNRESET */
};

/*
 * One end's published state. Each field says who writes it; the other side
 * only reads it, and never trusts it beyond "a hint that may be wrong".
 */
struct shunt_circuit_end {
	alignas(SHUNT_CACHELINE) _Atomic uint32_t state; /* owner: enum shunt_end_state */
	_Atomic uint32_t rx_waiters;	/* owner: threads about to sleep for data */
	_Atomic uint32_t tx_waiters;	/* owner: threads about to sleep for space */
	_Atomic uint32_t evented;	/* owner: poll/epoll watchers wanting link notices */
	_Atomic uint32_t wake;		/* peer and shuntd: futex word, bumped to wake owner */
	uint32_t reserved[11];
};

/*
 * One byte ring's indices. They run freely (64-bit, never wrap in practice)
 * and are masked with ring_size - 1 to address bytes. tail is written only by
 * the producer, head only by the consumer, each on its own cache line.
 */
struct shunt_ring_ctl {
	alignas(SHUNT_CACHELINE) _Atomic uint64_t tail;
	alignas(SHUNT_CACHELINE) _Atomic uint64_t head;
};

struct shunt_circuit_hdr {
	alignas(SHUNT_CACHELINE) uint32_t magic;
	uint32_t version;
	uint32_t ring_size;		/* informative; each side uses the size shuntd told it */
	_Atomic uint32_t setup;		/* shuntd: enum shunt_setup_state */
	struct shunt_circuit_end end[2];
	struct shunt_ring_ctl ring[2];
};

_Static_assert(sizeof(struct shunt_circuit_end) == SHUNT_CACHELINE, "end is one line");
_Static_assert(sizeof(struct shunt_ring_ctl) == 2 * SHUNT_CACHELINE, "tail and head apart");
_Static_assert(offsetof(struct shunt_circuit_hdr, setup) == 12, "layout v1");
_Static_assert(offsetof(struct shunt_circuit_hdr, end) == 64, "layout v1");
_Static_assert(offsetof(struct shunt_circuit_hdr, ring) == 192, "layout v1");
_Static_assert(offsetof(struct shunt_circuit_hdr, ring[1].head) == 384, "layout v1");
_Static_assert(sizeof(struct shunt_circuit_hdr) <= SHUNT_CIRCUIT_HDR_SIZE, "fits its page");

/* The ring that carries the bytes an end sends, and the one it receives from. */
static inline unsigned shunt_tx_ring(unsigned end) { return end; }
static inline unsigned shunt_rx_ring(unsigned end) { return end ^ 1u; }

/* Offset of ring @r's bytes in a circuit with rings of @ring_size bytes. */
static inline size_t shunt_ring_offset(unsigned r, uint32_t ring_size)
{
	return SHUNT_CIRCUIT_HDR_SIZE + (size_t)r * ring_size;
}

static inline size_t shunt_circuit_size(uint32_t ring_size)
{
	return SHUNT_CIRCUIT_HDR_SIZE + 2 * (size_t)ring_size;
}

#endif
