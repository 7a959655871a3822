/* SPDX-License-Identifier: MIT */
/*
 * The control client: this process's session with shuntd. Requests are
 * synchronous and serialised by one lock; the daemon never speaks first.
 * When the daemon cannot be reached every request fails with -ENOTCONN and
 * callers use the kernel instead (DESIGN decision 10); a reconnect is tried
 * again at most once a second. A session opened with a daemon that knows
 * none of our listeners (shuntd restarted) has them registered again
 * (relisten.h).
 */
#ifndef SHUNT_CONTROL_H
#define SHUNT_CONTROL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "preload/family.h"
#include "shunt/proto.h"

/*
 * A circuit granted by shuntd: the reply and the descriptors that came with
 * it. Or, for SHUNT_USE_CHANNEL, a channel to use: @chan, its memfd in
 * @memfd and its bell in @bell.
 */
struct shunt_grant {
	struct shunt_msg_circuit msg;
	struct shunt_msg_chan chan;
	int kernel_half;		/* -1 unless msg.flags has SHUNT_CIRCUIT_KERNEL_HALF */
	int memfd;
	uint64_t offset;		/* of the circuit in @memfd: 0, or a channel slot's */
	int bell;			/* -1 unless a channel */
};

/* Set up from the environment (SHUNT_SOCKET); called once by init. */
void shunt_ctl_init(void);

struct shunt_chain;

/*
 * Whether seccomp filter stack @c (NULL: none) lets this process exchange
 * messages with shuntd (and open a session first, if it has none). While
 * the filters in force do not, every request fails with -ENOTCONN, as when
 * shuntd is gone, without touching the session: closing it would end at
 * shuntd what this process still holds.
 */
bool shunt_ctl_usable(const struct shunt_chain *c);

/* Around fork: no thread may be half-way through an exchange with shuntd. */
void shunt_ctl_fork_prepare(void);
void shunt_ctl_fork_parent(void);

/* In a fork child: forget the parent's session; the child makes its own. */
void shunt_ctl_after_fork(void);

/*
 * This process's session id at shuntd, opening the session if need be; 0
 * when shuntd cannot be reached.
 */
uint64_t shunt_ctl_session(void);

/* Whether a session is open now (without opening one). */
bool shunt_ctl_has_session(void);

/*
 * Open the session if there is none, waiting for shuntd no longer than a
 * connect would (SHUNT_CONNECT_WAIT_US): its HELLO reply brings the
 * directory, so that a first connect to a port nobody listens on need not
 * ask too.
 */
void shunt_ctl_open_session(void);

/* What a LISTEN reply hands over, hidden (-1: not handed). */
struct shunt_listen_fds {
	int bells;			/* the listener's bells: an epoll instance */
	int doorbell;			/* shuntd's own doorbell of the listener */
	int announce;			/* this session's count of channels not yet handed to it */
};

/*
 * Register listening socket @fd (or refresh registration @refresh after a
 * second listen(), or to get this session's announce). Returns 0 with
 * *@listener and, if @out is not NULL, in *@out the announce and, for a new
 * registration, the bells and the doorbell; or -errno.
 */
int shunt_ctl_listen(int fd, uint64_t refresh, uint64_t *listener, struct shunt_listen_fds *out);

/* How a process lets go of a listener. */
enum shunt_unlisten_how {
	SHUNT_UNLISTEN_CLOSE,	/* its last descriptor closed, or it stops listening */
	SHUNT_UNLISTEN_SHUT,	/* shutdown(): it stops listening for every holder */
	SHUNT_UNLISTEN_EXIT,	/* the process exits: never waited for */
};

/*
 * Let go of listener @listener, held as family slot @slot (family.h; or
 * SHUNT_FAMILY_NONE), @how: the family's count follows, and a close that
 * leaves others of the family holding it is not waited for.
 */
void shunt_ctl_unlisten(uint64_t listener, int slot, enum shunt_unlisten_how how);

/*
 * The process exits (atexit, _exit): the kernel closes its descriptors, so
 * its closes of the listeners it holds in a family are counted and sent
 * first, not waited for; the family's last holder then waits for them as
 * for any. Nothing for a process in no family, or a vfork child.
 */
void shunt_ctl_exit(void);

/*
 * Ask for a circuit from bound socket @fd to @dst. Returns 0 with *@g,
 * SHUNT_USE_CHANNEL with a channel in *@g (connect through it),
 * SHUNT_USE_KERNEL when no shunt listener matches, another SHUNT_KERNEL_*
 * status (with SHUNT_KERNEL_POLICY, *@why says who and what decided), or
 * -errno.
 */
int shunt_ctl_connect(int fd, const struct shunt_wire_addr *dst, uint32_t flags,
		      struct shunt_grant *g, struct shunt_msg_connect_kernel *why);

/*
 * Take a queued circuit of listener @listener held as @fd: 0,
 * SHUNT_USE_CHANNEL with a channel of the listener this process did not
 * have (its queue may hold connections), -EAGAIN (shuntd holds none),
 * -ETIMEDOUT (shuntd did not answer in time, SHUNT_CONNECT_WAIT_US),
 * -ENOTCONN (shuntd is gone: what it queued went with it) or -errno.
 */
int shunt_ctl_accept(int fd, uint64_t listener, struct shunt_grant *g);

/*
 * Let go of @end of @circuit. Alone holding it (@shared false), we already
 * published its FIN and shuntd need not answer; otherwise shuntd says
 * whether we were the last holder: SHUNT_LAST, SHUNT_OK, or -errno.
 */
int shunt_ctl_close(uint64_t circuit, unsigned end, bool shared);

/* The link with session @partner: 0 with the reply and its three descriptors, or -errno. */
int shunt_ctl_link(uint64_t partner, struct shunt_msg_link_reply *r, int fds[3]);

/*
 * A link shuntd made for us, or one that died: SHUNT_OK with the reply (and
 * three descriptors unless it has SHUNT_LINK_GONE), SHUNT_NONE, or -errno.
 */
int shunt_ctl_link_next(struct shunt_msg_link_reply *r, int fds[3]);

/*
 * Before fork: a ticket for the child, named here and sent to shuntd
 * without waiting (FORK). 0 with ticket and secret, or -errno.
 */
int shunt_ctl_fork(uint64_t *ticket, uint64_t *secret);

/*
 * Whether the holders counted in each circuit end are known to include
 * every process that holds it: not while shuntd may not have read our
 * FORK yet (no answer to a later request came), nor in a fork child whose
 * claim is unanswered. A close that cannot tell asks shuntd (conn.c).
 */
bool shunt_ctl_holders_known(void);

/* After fork, in the parent: the child's pid, or 0 if fork failed. */
void shunt_ctl_fork_done(uint64_t ticket, pid_t pid);

/*
 * In the fork child: open our own session, claiming the ticket of session
 * @parent (the parent's), without waiting for the answer. 0 once the claim
 * is sent (or granted), or -errno: no session, or a claim refused already.
 */
int shunt_ctl_claim_send(uint64_t ticket, uint64_t secret, uint64_t parent);

/*
 * The answer to the claim sent, waited for if nobody took it yet: 0 when
 * granted, -EACCES when refused (or the session is gone). Once only: the
 * caller acts on it (fork.c).
 */
int shunt_ctl_claim_finish(void);

/*
 * Whether this fork child's claim was refused (or its session lost before
 * the answer), and the child has not acted on it yet: the sockets it
 * inherited are not its to end (fork.c).
 */
bool shunt_ctl_claim_refused(void);

/*
 * Move @circuit onto its companion kernel sockets; @fd is ours (the kernel
 * socket of the end we hold). The caller holds the circuit's four locks.
 */
int shunt_ctl_downgrade(uint64_t circuit, int fd);

/*
 * The kernel half @fd of a socket whose circuit is gone goes back to an
 * unconnected socket out of TCP repair mode (shuntd alone may do that).
 * 0 or -errno.
 */
int shunt_ctl_unrepair(int fd);
/* The path of shuntd's socket this process talks to ("" if too long to use). */
const char *shunt_ctl_path(void);

/*
 * Exec (exec.c; docs/protocol.md). Before an exec or a spawn (@kind, enum
 * shunt_exec_kind): a ticket for the new image (0 or -errno); a hold for it
 * on circuit @circuit's end @end, or on listener @listener, whose socket
 * @fd is (0 or -errno); after it, the spawned child's pid, or 0 when the
 * exec or the spawn failed (the ticket goes).
 */
int shunt_ctl_exec(uint32_t kind, uint64_t *ticket);
int shunt_ctl_exec_keep(uint64_t ticket, int fd, uint64_t circuit, unsigned end,
			uint64_t listener, uint32_t flags);
void shunt_ctl_exec_done(uint64_t ticket, pid_t pid);

/*
 * In the new image: open the first session claiming this process's exec
 * ticket. The number of circuit ends it kept (>= 0), -ENOENT if none,
 * -EBUSY if a session is open already, or -errno.
 */
int shunt_ctl_exec_claim(void);

/*
 * The next circuit end the claimed ticket kept: SHUNT_OK with @g (no kernel
 * half), the inode of the socket it was kept with and its enum
 * shunt_exec_flags; SHUNT_NONE when every one was handed out; or -errno.
 */
int shunt_ctl_exec_next(struct shunt_grant *g, uint64_t *inode, uint32_t *flags);

/*
 * Whether the session is open and shuntd still holds its end (one system
 * call, no exchange). A session found over is dropped, as after a failed
 * request: what the channels made without asking would reach nobody.
 */
bool shunt_ctl_alive(void);

/*
 * Wait until shuntd has read everything this process journaled (a request
 * every shuntd answers; it reads the journal before any request). 0 or
 * -errno.
 */
int shunt_ctl_barrier(void);

/* Close every descriptor of a grant that was not used. */
void shunt_grant_discard(struct shunt_grant *g);

#endif
