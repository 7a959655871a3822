/* SPDX-License-Identifier: MIT */
/*
 * A shunt socket: what the library knows about one open TCP socket that is
 * (or may become) carried by a circuit. One object per open file
 * description: dup'ed descriptors share it, as they share the kernel's file.
 */
#ifndef SHUNT_SOCK_H
#define SHUNT_SOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/list.h"
#include "preload/file.h"
#include "shunt/proto.h"

enum shunt_sock_state {
	SHUNT_SOCK_FRESH,	/* neither connected nor listening; may be bound */
	SHUNT_SOCK_LISTENING,	/* listening (registered with shuntd if listener != 0) */
	SHUNT_SOCK_CONNECTING,	/* circuit queued behind a full backlog */
	SHUNT_SOCK_CONNECTED,	/* circuit established */
	SHUNT_SOCK_KERNEL,	/* moved onto its kernel socket (a downgrade): the kernel answers */
};

/* What a repeated connect() reports (the kernel's SS_CONNECTING dance). */
enum shunt_connect_report {
	SHUNT_CONNECT_NONE,	/* connect() was never called */
	SHUNT_CONNECT_PENDING,	/* EINPROGRESS was returned; next success says 0 */
	SHUNT_CONNECT_DONE,	/* success was reported; next says EISCONN */
};

struct shunt_conn;

/*
 * The connection a bound spare half's port last carried: whether another
 * connection may take that port while the old one could still be alive at
 * the other end (spare.c). Its peer's state, channel slot and port were
 * read from the circuit's shared memory: a lie costs only the liar.
 */
struct shunt_port_past {
	struct shunt_wire_addr local;	/* the address and port the half is bound to */
	bool over;			/* the peer had closed its end when we closed ours */
	uint16_t dst_port;		/* the peer's port */
	uint64_t chan;			/* the channel it lived in, or 0 */
	uint32_t slot, gen;		/* its slot there, and the slot's generation */
};

struct shunt_sock {
	struct shunt_file f;		/* first: what the fd table holds */
	struct shunt_sock *next_free;	/* under the pool lock */
	struct shunt_sock *all_next;	/* under the pool lock: every object, for fork */
	pthread_mutex_t lock;		/* state changes: connect, listen, accept, close */
	int domain;			/* AF_INET or AF_INET6 */
	_Atomic int state;		/* enum shunt_sock_state */
	/*
	 * The options data calls need (opts.c). Once the socket has a circuit
	 * the circuit's copies count, shared with every process holding it;
	 * read them with the shunt_sock_opt_* accessors.
	 */
	_Atomic bool nonblock;		/* O_NONBLOCK of the open file description */
	_Atomic int64_t rcvtimeo_us;	/* SO_RCVTIMEO, 0 = none, < 0 = never wait */
	_Atomic int64_t sndtimeo_us;	/* SO_SNDTIMEO, 0 = none, < 0 = never wait */
	_Atomic int rcvlowat;		/* SO_RCVLOWAT as the kernel stored it */
	_Atomic bool linger_abort;	/* SO_LINGER {1, 0}: close() resets */
	_Atomic uint32_t sndbuf;	/* SO_SNDBUF as read back once set, 0 = never set */
	_Atomic uint32_t rcvbuf;	/* SO_RCVBUF likewise */
	_Atomic uint32_t opts;		/* TCP_CORK, TCP_INQ: enum shunt_end_opts */
	_Atomic int so_error;		/* pending error of a failed circuit connect */
	int connect_report;		/* enum shunt_connect_report, under lock */
	uint64_t listener;		/* id at shuntd, 0 if not registered; under lock */
	int family_slot;		/* preload/family.h, SHUNT_FAMILY_NONE if none; under lock */
	/*
	 * The listener's bells (hidden epoll instance, shuntd's): readable
	 * while a circuit is counted queued, at shuntd or in a channel; or -1.
	 */
	int bells;
	/*
	 * Where accept() sleeps (preload/listenwait.h): our epoll instance
	 * of the kernel socket, the bells it holds (@accept_bells) and its
	 * baton (a hidden eventfd), shared with the processes forked from
	 * ours; or -1. Written under lock, read by accept() without it,
	 * relaxed: the instance and the baton change only when the listener
	 * registers or goes, and a relisten moves @accept_bells in place, so
	 * that a wait that read the old bells ppolls once.
	 */
	_Atomic int accept_ep;
	_Atomic int accept_bells;
	_Atomic int accept_baton;
	/*
	 * shuntd's doorbell of the listener and our session's announce of
	 * new channels (hidden eventfds), with the bells of the channels this
	 * process has: what an EPOLLEXCLUSIVE registration, which the bells
	 * cannot be in, holds instead; or -1. The announce is the session's
	 * that @announce_pid had (a fork child asks for its own).
	 */
	int doorbell;
	int announce;
	uint32_t announce_pid;
	/*
	 * A listener's channel epoch (preload/directory.h) as it was when
	 * shuntd last said it had no more channels for us. One left from an
	 * earlier registration only costs a question.
	 */
	_Atomic uint32_t chan_epoch;
	struct shunt_conn *conn;	/* under lock; read by data calls once CONNECTED */
	struct shunt_conn *retired;	/* shut connections other threads may still touch */
	_Atomic uint32_t inherit;	/* options set that accepted sockets inherit (opts.c) */
	/*
	 * SO_REUSEADDR as the program set it (or the listener it was accepted
	 * from): a kernel half in TCP_REPAIR mode reads 2 (SK_FORCE_REUSE)
	 * until the program sets it again. opts.c.
	 */
	_Atomic bool reuseaddr;
	/*
	 * A listener's own address, asked of the kernel by the first accept
	 * from a channel after listen(): it cannot change while the socket
	 * listens (bind() says EINVAL), and listen() forgets it. Under lock.
	 */
	struct shunt_wire_addr laddr;
	bool laddr_known;
	/*
	 * Bound to nothing, as socket() made it: nothing this process did
	 * since could have bound it (bind, listen, connect), and no other
	 * process holds it (fork, exec and SCM_RIGHTS hand-offs clear it).
	 * Lets a connect through a channel bind it without asking first.
	 */
	_Atomic bool unbound;
	/*
	 * The kernel half is one the library made for an accepted circuit,
	 * and nothing another owner could tell has touched it: no other
	 * descriptor or process held it (dup, fork, exec, SCM_RIGHTS,
	 * io_uring clear it) and the only options set on it are ones
	 * spare.c can put back. Its close keeps the half for the next accept.
	 */
	_Atomic bool spare;
	/* That half is a connecting socket's: bound, it goes to the bound spares. */
	bool spare_bound;
	/* The last connection its port carried, while it is a bound spare's. */
	struct shunt_port_past port_past;
	/*
	 * The kernel half is a bound spare socket() handed out, presented as
	 * fresh until a connection takes its port (recycle.h).
	 */
	_Atomic bool recycled;
	_Atomic int spare_fd;		/* that half kept (spare.h), hidden, until release; or -1 */
	int spare_pool;			/* the pool that counts it as kept since take, or -1 */
	uint64_t spare_refusals;	/* shunt_journal_refusals() when it was kept */
	struct shunt_list watchers;	/* under shunt_notice_lock: its epoll registrations */
};

/*
 * Replace the socket's connection, keeping the old one mapped until the
 * socket itself is released (another thread may be inside it). Under lock.
 */
void shunt_sock_retire_conn(struct shunt_sock *s, bool abort);

/*
 * Let go of a listener at shuntd (@shutdown: it stops listening for every
 * process holding it, as shutdown() on a shared socket does). Its bells
 * stay open until the socket is released or listens anew: threads still
 * blocked in accept() may be polling it. Under lock, or last reference.
 */
void shunt_sock_drop_listener(struct shunt_sock *s, bool shutdown);
void shunt_sock_close_bells(struct shunt_sock *s);
/*
 * Close the doorbell and announce alone, which only epoll registrations
 * poll (let go of them first): the bells stay for sleepers in accept() or
 * poll(). Under lock.
 */
void shunt_sock_close_doorbells(struct shunt_sock *s);

/*
 * Register listener @s (open as @fd, listening) with shuntd: its id, bells,
 * doorbell and announce, or none of them (0, or -errno). Under lock.
 */
int shunt_sock_register(struct shunt_sock *s, int fd);

/*
 * Listener @s (open as @fd) is about to get an EPOLLEXCLUSIVE registration:
 * make sure its announce is this process's session's (a fork child
 * inherited its parent's), asking shuntd if not. No lock held.
 */
void shunt_sock_own_announce(struct shunt_sock *s, int fd);

/*
 * A listener's setting shuntd follows changed (TCP_DEFER_ACCEPT): shuntd
 * reads the registered socket @fd anew. Takes the lock.
 */
void shunt_sock_listener_refresh(struct shunt_sock *s, int fd);

/* A new socket for @domain with one reference, or NULL without memory. */
struct shunt_sock *shunt_sock_new(int domain, bool nonblock);

/*
 * Drop a reference. The last one closes the connection or unregisters the
 * listener — the moment the kernel would release the socket — and returns
 * the object to the pool.
 */
static inline void shunt_sock_put(struct shunt_sock *s)
{
	shunt_file_put(&s->f);
}

/* Called by shunt_file_put when the last reference is gone. */
void shunt_sock_release(struct shunt_sock *s);

/* Around fork (fork.c): the pool's lock, and in the child every socket's lock anew. */
void shunt_sock_fork_prepare(void);
void shunt_sock_fork_parent(void);
void shunt_sock_fork_child(void);

/* The options as the socket has them now (opts.c). */
bool shunt_sock_opt_nonblock(struct shunt_sock *s);
int64_t shunt_sock_opt_rcvtimeo(struct shunt_sock *s);
int64_t shunt_sock_opt_sndtimeo(struct shunt_sock *s);
int shunt_sock_opt_rcvlowat(struct shunt_sock *s);
bool shunt_sock_opt_linger_abort(struct shunt_sock *s);

/*
 * SO_SNDBUF and SO_RCVBUF as set on the socket (0: never set, the kernel
 * sizes the buffer itself), and the enum shunt_end_opts bits.
 */
uint32_t shunt_sock_opt_sndbuf(struct shunt_sock *s);
uint32_t shunt_sock_opt_rcvbuf(struct shunt_sock *s);
uint32_t shunt_sock_opt_flags(struct shunt_sock *s);

/* A circuit was just attached to @s: it takes the socket's options (under lock). */
void shunt_sock_opts_to_circuit(struct shunt_sock *s);

/* State, with acquire ordering: a CONNECTED socket's conn is visible. */
static inline int shunt_sock_state(struct shunt_sock *s)
{
	return atomic_load_explicit(&s->state, memory_order_acquire);
}

#endif
