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
#define SHUNT_CIRCUIT_VERSION 3u

enum shunt_circuit_geometry {
	SHUNT_CACHELINE = 64,
	/*
	 * Fields written by different parties are this far apart: CPUs fetch
	 * lines in pairs (the adjacent-line prefetcher), so two lines of one
	 * 128-byte block still travel together.
	 */
	SHUNT_SHARE_APART = 128,
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
 * State bits of one end, written by its holders (or by shuntd once the last
 * process holding it is gone). They only ever get set, never cleared.
 */
enum shunt_end_state {
	SHUNT_END_WR_SHUT = 1u << 0,	/* FIN: no byte follows the ring's tail */
	SHUNT_END_RD_SHUT = 1u << 1,	/* reads return EOF once the ring is empty */
	SHUNT_END_CLOSED = 1u << 2,	/* nobody will ever read this end's rx ring */
	SHUNT_END_RESET = 1u << 3,	/* abortive close: the peer sees ECONNRESET */
	/*
	 * shuntd only: the connection moved onto the ends' kernel sockets
	 * (every unread byte with it); from now on they carry it.
	 */
	SHUNT_END_KERNEL = 1u << 4,
};

/* Flags of one end that only its holders read (the peer ignores them). */
enum shunt_end_flags {
	SHUNT_FLAG_DEAD = 1u << 0,	/* reset seen or sent: reads say 0, writes EPIPE */
};

/* Boolean socket options of one end that change how its bytes move. */
enum shunt_end_opts {
	SHUNT_OPT_CORK = 1u << 0,	/* TCP_CORK: partial segments wait (conn.c) */
	SHUNT_OPT_INQ = 1u << 1,	/* TCP_INQ: recvmsg reports the bytes left */
};

enum { SHUNT_ROUTES = 8 };

/*
 * One end's shared state. Its holders are the threads and processes that
 * hold the socket (fork shares it, as it shares a kernel socket); they keep
 * here what the kernel keeps in its one struct sock. The peer reads the
 * first line to know whom to wake; nothing here is trusted by anyone beyond
 * "a hint that may be wrong", since the peer maps it too.
 */
struct shunt_circuit_end {
	alignas(SHUNT_SHARE_APART) _Atomic uint32_t state; /* holders: enum shunt_end_state */
	_Atomic uint32_t rx_waiters;	/* holders: threads about to sleep for data */
	_Atomic uint32_t tx_waiters;	/* holders: threads about to sleep for space */
	_Atomic uint32_t evented;	/* holders: poll/epoll watchers wanting notices */
	_Atomic uint32_t wake;		/* peer and shuntd: futex word, bumped to wake holders */
	_Atomic uint32_t flags;		/* holders: enum shunt_end_flags */
	_Atomic uint32_t sk_err;	/* holders: pending error, reported once */
	_Atomic uint32_t holders;	/* shuntd: processes holding this end */
	/*
	 * Holders: the options a data call needs, which belong to the socket
	 * and so are shared by every process holding it (the kernel's copies
	 * stay exact too; these save a system call per call).
	 */
	_Atomic uint32_t nonblock;	/* O_NONBLOCK of the socket's open file */
	_Atomic uint32_t rcvlowat;	/* SO_RCVLOWAT as the kernel stored it */
	_Atomic uint32_t linger_abort;	/* SO_LINGER {1, 0}: the last close resets */
	/*
	 * Peer (or holders): set once by a process that may have to wake this
	 * end's sleepers but cannot make the futex call (a seccomp filter
	 * forbids it). Sleepers then wake by themselves every little while
	 * (wait.c) instead of sleeping until woken. A hint like the rest: a
	 * peer that lies about it only makes our sleepers look more often.
	 */
	_Atomic uint32_t nap;
	_Atomic int64_t rcvtimeo_us;	/* SO_RCVTIMEO, 0: none, < 0: never wait */
	_Atomic int64_t sndtimeo_us;	/* SO_SNDTIMEO, 0: none, < 0: never wait */
	_Atomic uint32_t sndbuf;	/* SO_SNDBUF as read back once set, 0: never set */
	_Atomic uint32_t rcvbuf;	/* SO_RCVBUF likewise; the peer reads it too */
	_Atomic uint32_t opts;		/* enum shunt_end_opts */
	/*
	 * Under tx_lock: bytes written past the ring's tail but not yet
	 * published (TCP_CORK, MSG_MORE), and when they must go out at the
	 * latest (CLOCK_MONOTONIC ns, 0: none held).
	 */
	_Atomic uint32_t corked;
	_Atomic int64_t cork_deadline;
	/*
	 * Holders: the CPU (+ 1) a holder thread last waited on or woke up
	 * on, 0 while it sleeps. The peer's waiters do not spin for us while
	 * they run on that CPU (preload/spin.c). A hint like the rest.
	 */
	_Atomic uint32_t cpu;
	/*
	 * Holders: non-zero when they went quiet with bytes of theirs still
	 * unread; the peer then gives back the ring pages it reads them out
	 * of (conn.c, the idle trimmer). Cleared when they send again. A
	 * hint like the rest: a lie costs the peer system calls and page
	 * faults on the liar's own connection, nothing else.
	 */
	_Atomic uint32_t idle;
	/*
	 * Where notices for this end go: per holder process that watches it in
	 * poll or epoll, (session id << 16 | slot); 0 is a free entry.
	 */
	alignas(SHUNT_SHARE_APART) _Atomic uint64_t route[SHUNT_ROUTES];
	/*
	 * The pids of the processes holding this end, each written by itself
	 * (0: a free entry), the pid namespace they belong to (its inode), and
	 * whether one found no room or another namespace: the peer learns from
	 * them that every holder is gone before shuntd can tell it (conn.c).
	 */
	_Atomic uint64_t pidns;
	_Atomic uint32_t pid[SHUNT_ROUTES];
	_Atomic uint32_t pid_overflow;
	/*
	 * The locks that make the holders one producer of the tx ring and one
	 * consumer of the rx ring (common/lock.h), each on a line of its own:
	 * the peer never touches them, so taking one costs no cache miss.
	 */
	alignas(SHUNT_SHARE_APART) _Atomic uint32_t tx_lock;
	alignas(SHUNT_SHARE_APART) _Atomic uint32_t rx_lock;
};

/*
 * One byte ring's indices. They run freely (64-bit, never wrap in practice)
 * and are masked with ring_size - 1 to address bytes. tail is written only by
 * the producer, head only by the consumer, each on its own cache line.
 */
struct shunt_ring_ctl {
	alignas(SHUNT_SHARE_APART) _Atomic uint64_t tail;
	alignas(SHUNT_SHARE_APART) _Atomic uint64_t head;
};

struct shunt_circuit_hdr {
	alignas(SHUNT_SHARE_APART) uint32_t magic;
	uint32_t version;
	uint32_t ring_size;		/* informative; each side uses the size shuntd told it */
	_Atomic uint32_t setup;		/* shuntd: enum shunt_setup_state */
	struct shunt_circuit_end end[2];
	struct shunt_ring_ctl ring[2];
};

_Static_assert(sizeof(struct shunt_circuit_end) == 4 * SHUNT_SHARE_APART, "four blocks");
_Static_assert(offsetof(struct shunt_circuit_end, cork_deadline) + 8 <= SHUNT_SHARE_APART,
	       "options in the first block");
_Static_assert(offsetof(struct shunt_circuit_end, nap) == 44, "layout v3: nap in what was padding");
_Static_assert(offsetof(struct shunt_circuit_end, rcvtimeo_us) == 48, "layout v3");
_Static_assert(offsetof(struct shunt_circuit_end, cpu) == 88, "layout v3: cpu in what was padding");
_Static_assert(offsetof(struct shunt_circuit_end, idle) == 92, "layout v3: idle in what was padding");
_Static_assert(offsetof(struct shunt_circuit_end, route) == SHUNT_SHARE_APART, "routes apart");
_Static_assert(offsetof(struct shunt_circuit_end, pid_overflow) + 4 <= 2 * SHUNT_SHARE_APART,
	       "pids with the routes");
_Static_assert(offsetof(struct shunt_circuit_end, rx_lock) == 3 * SHUNT_SHARE_APART, "locks apart");
_Static_assert(sizeof(struct shunt_ring_ctl) == 2 * SHUNT_SHARE_APART, "tail and head apart");
_Static_assert(offsetof(struct shunt_circuit_hdr, setup) == 12, "layout v3");
_Static_assert(offsetof(struct shunt_circuit_hdr, end) == 128, "layout v3");
_Static_assert(offsetof(struct shunt_circuit_hdr, ring) == 1152, "layout v3");
_Static_assert(offsetof(struct shunt_circuit_hdr, ring[1].head) == 1536, "layout v3");
_Static_assert(sizeof(struct shunt_circuit_hdr) <= SHUNT_CIRCUIT_HDR_SIZE, "fits its page");

/* A route: which session wants notices for an end, under which of its slots. */
static inline uint64_t shunt_route_make(uint64_t session, uint32_t slot)
{
	return session << 16 | (slot & 0xffff);
}

static inline uint64_t shunt_route_session(uint64_t route)
{
	return route >> 16;
}

static inline uint32_t shunt_route_slot(uint64_t route)
{
	return (uint32_t)(route & 0xffff);
}

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
