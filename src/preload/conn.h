/* SPDX-License-Identifier: MIT */
/*
 * A connection over a circuit: one end of it, as this process holds it.
 * Byte-stream semantics follow the kernel's TCP: partial reads and writes,
 * EOF after the peer's FIN, ECONNRESET after its reset (data first), EPIPE
 * once the connection is gone, poll masks computed as tcp_poll does.
 */
#ifndef SHUNT_CONN_H
#define SHUNT_CONN_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "common/ring.h"
#include "common/wake.h"
#include "shunt/proto.h"

struct shunt_grant;
struct shunt_plink;

/*
 * What this process knows of one end. The end's state proper (state bits,
 * pending error, ring positions, the holders' locks) lives in the circuit,
 * shared by every process holding the socket; this is only a private view
 * of it, and the copies of the positions are re-read whenever a lock is
 * taken, since another holder may have moved them.
 */
struct shunt_conn {
	struct shunt_circuit_hdr *hdr;
	uint32_t ring_size;
	unsigned end;			/* enum shunt_end_index */
	uint64_t circuit;
	struct shunt_circuit_end *me, *peer;
	struct shunt_plink *link;
	unsigned link_side;		/* our side of the link */
	uint32_t slot;			/* the circuit's slot in the link */
	struct shunt_sock *owner;	/* under shunt_notice_lock: who notices go to */
	struct shunt_wake_target wake_peer;	/* to wake the other end's owner */
	struct shunt_wake_target wake_self;	/* to wake our own waiters */
	struct shunt_wire_addr local, remote;

	struct shunt_ring tx;		/* under me->tx_lock */
	struct shunt_ring rx;		/* under me->rx_lock */
	struct shunt_conn *retired_next;	/* the owning socket's list of shut connections */
};

/*
 * Attach to the circuit of a grant, taking over its descriptors except the
 * kernel half, which stays in the grant for the caller (on failure all are
 * closed). Returns the connection, or NULL with -errno in *@err.
 */
struct shunt_conn *shunt_conn_open(struct shunt_grant *g, int *err);

/*
 * Close our end: a FIN, or a reset when @abort (SO_LINGER 0) or when data
 * we never read is left (as the kernel does), then tell shuntd and unmap.
 */
void shunt_conn_close(struct shunt_conn *c, bool abort);

/*
 * Close our end like shunt_conn_close but keep the mapping: for a
 * connection other threads may still be inside (a disconnect, a refused
 * connect). Free it with shunt_conn_free once nobody can be.
 */
void shunt_conn_shut(struct shunt_conn *c, bool abort);
void shunt_conn_free(struct shunt_conn *c);

/* The socket's settings a data call needs. */
struct shunt_io {
	bool nonblock;			/* O_NONBLOCK of the descriptor, or MSG_DONTWAIT */
	int64_t timeout_us;		/* SO_SNDTIMEO / SO_RCVTIMEO, 0: none */
	int lowat;			/* SO_RCVLOWAT, at least 1 */
};

/*
 * Send or receive with the socket-call semantics of send(2)/recv(2): flags
 * MSG_DONTWAIT, MSG_PEEK, MSG_WAITALL, MSG_TRUNC (discard), MSG_OOB.
 * Return bytes, or -errno (-EPIPE means the caller may owe a SIGPIPE).
 */
ssize_t shunt_conn_send(struct shunt_conn *c, const struct iovec *iov, int iovcnt, int flags,
			const struct shunt_io *io);
ssize_t shunt_conn_recv(struct shunt_conn *c, const struct iovec *iov, int iovcnt, int flags,
			const struct shunt_io *io);

/* shutdown(2) on an established connection: 0 or -errno. */
int shunt_conn_shutdown(struct shunt_conn *c, int how);

/* The poll(2) mask tcp_poll would report for SO_RCVLOWAT @lowat. Lock-free. */
unsigned shunt_conn_poll(struct shunt_conn *c, int lowat);

/* Whether the connection reached the kernel's TCP_CLOSE (getpeername says ENOTCONN). */
bool shunt_conn_closed(struct shunt_conn *c);

/* SO_ERROR: the pending error (cleared), or 0. */
int shunt_conn_take_error(struct shunt_conn *c);

/* FIONREAD and SIOCOUTQ: bytes we have not read; bytes the peer has not. */
size_t shunt_conn_inq(struct shunt_conn *c);
size_t shunt_conn_outq(struct shunt_conn *c);

/* Bytes sent and received so far (our own ring positions). */
uint64_t shunt_conn_tx_bytes(struct shunt_conn *c);
uint64_t shunt_conn_rx_bytes(struct shunt_conn *c);

#endif
