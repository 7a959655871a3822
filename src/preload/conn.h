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

#include "common/list.h"
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
enum { SHUNT_NO_SLOT = 0xffffffffu };

struct shunt_conn {
	struct shunt_circuit_hdr *hdr;
	struct shunt_chan *chan;	/* the channel whose slot it lives in (a reference), or NULL */
	bool in_slot;			/* in a channel's slot (mapped with it, or alone after exec) */
	uint32_t ring_size;
	unsigned end;			/* enum shunt_end_index */
	uint64_t circuit;
	struct shunt_circuit_end *me, *peer;
	struct shunt_wire_addr local, remote;

	/* Under shunt_notice_lock (notice.c): where this process hears of it. */
	struct shunt_sock *owner;	/* who notices go to */
	uint32_t slot;			/* ours on every link, or SHUNT_NO_SLOT */
	int route;			/* our entry in me->route, or -1 */
	uint64_t route_word;		/* what we wrote there */

	/* The link to post through for each route of the peer's end and of ours. */
	struct shunt_plink *_Atomic peer_links[SHUNT_ROUTES];
	struct shunt_plink *_Atomic self_links[SHUNT_ROUTES];

	struct shunt_ring tx;		/* under me->tx_lock */
	struct shunt_ring rx;		/* under me->rx_lock */
	/*
	 * Under me->tx_lock: whether the idle trimmer (trim.c) will look at
	 * the tx ring, and the write position it last saw there (a send
	 * since moved it: not quiet yet). Atomic only because the lock is a
	 * word the peer could break.
	 */
	_Atomic bool trim_armed;
	uint64_t trim_mark;
	uint64_t trim_from;		/* the write position before the send that armed it */
	/* Under the trimmer's lock (trim.c): its queues of armed connections. */
	struct shunt_list trim_node;
	int64_t trim_at;		/* when to look at it */
	bool trim_rest;			/* the last look (trim.h): in the later queue */
	bool trim_listed;		/* on a queue */
	_Atomic bool trim_gone;		/* let go: never queued again */
	/* Under the cork timer's lock (cork.c): its list of connections holding bytes back. */
	struct shunt_conn *cork_next;
	int64_t cork_at;		/* when to look at it next */
	bool cork_listed;		/* on the list */
	_Atomic bool cork_gone;		/* let go: never listed again */

	struct shunt_list all;		/* under conn.c's lock: every connection of the process */

	struct shunt_conn *retired_next;	/* the owning socket's list of shut connections */
	bool let_go;			/* shunt_conn_shut ran: this process no longer holds it */
	_Atomic bool kernel_lie;	/* its KERNEL bit was found false: ignored from now on */
};

/*
 * Attach to the circuit of a grant, taking over its memfd; the kernel half
 * stays in the grant for the caller (on failure all are closed). Returns the
 * connection, or NULL with -errno in *@err. It hears of nothing until bound
 * to its socket (shunt_notice_bind).
 */
struct shunt_conn *shunt_conn_open(struct shunt_grant *g, int *err);

struct shunt_chan;

/*
 * A connection in slot @hdr of channel @chan (one reference of @chan is
 * taken over, dropped when the connection is freed): end @end of circuit
 * @circuit, with the addresses its socket reports. NULL without memory
 * (the reference is dropped).
 */
struct shunt_conn *shunt_conn_attach(struct shunt_chan *chan, struct shunt_circuit_hdr *hdr,
				     unsigned end, uint64_t circuit,
				     const struct shunt_wire_addr *local,
				     const struct shunt_wire_addr *remote);

/*
 * Let go of our end and unmap it. The last holder's close is a FIN, or a
 * reset when @abort (SO_LINGER 0) or when data never read is left (as the
 * kernel does); other holders (after fork) keep the connection.
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
	bool nonblock;			/* O_NONBLOCK of the descriptor, MSG_DONTWAIT, or
					   a negative SO_SNDTIMEO / SO_RCVTIMEO */
	int64_t timeout_us;		/* SO_SNDTIMEO / SO_RCVTIMEO, 0: none */
	int lowat;			/* SO_RCVLOWAT, at least 1 */
	int cmsg_err;			/* send: -errno the kernel finds in the control
					   data (cmsg.c), reported once the state allows */
	bool moved;			/* out: the kernel carries the connection now; the call
					   returned what it moved so far (maybe 0) */
};

/*
 * Send or receive with the socket-call semantics of send(2)/recv(2): flags
 * MSG_DONTWAIT, MSG_MORE, MSG_PEEK, MSG_WAITALL, MSG_TRUNC (discard, or
 * with MSG_PEEK count without copying), MSG_OOB. A blocking send of up to
 * 64 KiB that fits the socket's share of the ring goes in whole, never
 * interleaved with another holder's. Return bytes, or -errno (-EPIPE
 * means the caller may owe a SIGPIPE).
 */
ssize_t shunt_conn_send(struct shunt_conn *c, const struct iovec *iov, int iovcnt, int flags,
			struct shunt_io *io);
ssize_t shunt_conn_recv(struct shunt_conn *c, const struct iovec *iov, int iovcnt, int flags,
			struct shunt_io *io);

/*
 * Whether the connection moved onto its kernel sockets (a downgrade): from
 * now on they carry it, for this process and every other holder.
 */
bool shunt_conn_moved(struct shunt_conn *c);

/*
 * The KERNEL bit of @c is a lie: the peer set it (shuntd sets it only after
 * taking the kernel socket out of repair mode, and it was still in repair
 * mode). The bit is ignored from now on and the connection is reset.
 */
void shunt_conn_kernel_lie(struct shunt_conn *c);

/* After it moved: stop hearing of it and let go of it at shuntd, publishing nothing. */
void shunt_conn_let_go(struct shunt_conn *c);

/*
 * Move the connection onto its kernel sockets, because a descriptor of it
 * (@fd, our end's kernel socket) is about to reach code the library does
 * not run in (exec, SCM_RIGHTS). 0, or -errno (no companions: shuntd lacks
 * CAP_NET_ADMIN, or the peer is in another network namespace).
 */
int shunt_conn_downgrade(struct shunt_conn *c, int fd);

/*
 * shutdown(2) on an established connection: 0 or -errno, or
 * SHUNT_CONN_MOVED when the connection moved onto the kernel while it ran,
 * too late for shuntd to see it: the caller shuts its kernel socket down.
 */
enum { SHUNT_CONN_MOVED = 1 };
int shunt_conn_shutdown(struct shunt_conn *c, int how);

/* The poll(2) mask tcp_poll would report for SO_RCVLOWAT @lowat. Lock-free. */
unsigned shunt_conn_poll(struct shunt_conn *c, int lowat);

/* Whether the connection reached the kernel's TCP_CLOSE (getpeername says ENOTCONN). */
bool shunt_conn_closed(struct shunt_conn *c);

/*
 * Whether the peer closed its end (every holder of it), and the connection
 * stayed in shared memory. Read from the peer's words: a lie costs the
 * liar (spare.c).
 */
bool shunt_conn_peer_closed(struct shunt_conn *c);

/*
 * The kernel TCP state (include/net/tcp_states.h numbers) this end would be
 * in: ESTABLISHED, CLOSE_WAIT after the peer's FIN, FIN_WAIT1/2 after ours,
 * CLOSE after both or a reset. On loopback a FIN is acknowledged at once,
 * so LAST_ACK, CLOSING and TIME_WAIT (which only an orphaned socket keeps)
 * are never what a program sees. Lock-free.
 */
int shunt_conn_tcp_state(struct shunt_conn *c);

/* Whether our FIN went out, and whether the peer's arrived (TCP_INFO's byte counts). */
bool shunt_conn_fin_sent(struct shunt_conn *c);
bool shunt_conn_fin_received(struct shunt_conn *c);

/* SO_ERROR: the pending error (cleared), or 0. */
int shunt_conn_take_error(struct shunt_conn *c);

/*
 * FIONREAD and SIOCOUTQ: bytes we have not read; bytes the peer has not
 * (held ones included). SIOCOUTQNSD: bytes held back, not yet sent.
 */
size_t shunt_conn_inq(struct shunt_conn *c);
size_t shunt_conn_outq(struct shunt_conn *c);
size_t shunt_conn_unsent(struct shunt_conn *c);

/* TCP_INQ's count after a receive: unread bytes, or 1 at EOF (tcp_inq_hint). */
size_t shunt_conn_inq_hint(struct shunt_conn *c);

/* Make @err the pending error (recvmmsg keeps one that came after data). */
void shunt_conn_set_error(struct shunt_conn *c, int err);

/*
 * Send what is held back (TCP_CORK, MSG_MORE) now: the cork came off, or
 * TCP_NODELAY was set. Takes the tx lock.
 */
void shunt_conn_push(struct shunt_conn *c);

/*
 * For the cork timer: send what is held back if its 200 ms are up. Returns
 * when to look again (CLOCK_MONOTONIC ns), or 0 when nothing is held.
 * Takes the tx lock.
 */
int64_t shunt_conn_cork_expire(struct shunt_conn *c);

/*
 * For the idle trimmer: if nothing was sent since it last looked, give
 * back the tx ring's pages that no unread or held byte lies in, but the
 * one the next byte goes to unless @rest (the second look, after a longer
 * quiet spell), and tell the peer to give back the rest as it reads them
 * (shunt_circuit_end.idle); disarm after the second. Returns what to do
 * next, enum shunt_trim_next (trim.h): look again soon (a send since, or
 * one under way: the tx lock is only tried, never waited for), later, or
 * never. Takes the tx lock.
 */
int shunt_conn_trim(struct shunt_conn *c, bool rest);

/* SO_SNDBUF or SO_RCVBUF changed: senders waiting for room look again. */
void shunt_conn_bufs_changed(struct shunt_conn *c);

/* Bytes sent and received so far (our own ring positions). */
uint64_t shunt_conn_tx_bytes(struct shunt_conn *c);
uint64_t shunt_conn_rx_bytes(struct shunt_conn *c);

#endif
