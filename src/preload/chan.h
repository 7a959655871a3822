/* SPDX-License-Identifier: MIT */
/*
 * Channels in this process (include/shunt/chan.h, docs/connect.md): as a
 * client, the ones shuntd granted for reaching a listener, found by the
 * address connected to, through which connect() makes a connection without
 * asking shuntd; as an acceptor, the ones of the listeners it holds, from
 * which accept() takes connections.
 */
#ifndef SHUNT_PRELOAD_CHAN_H
#define SHUNT_PRELOAD_CHAN_H

#include <stdbool.h>
#include <stdint.h>

#include "preload/control.h"
#include "shunt/journal.h"

struct shunt_chan;
struct shunt_conn;
struct shunt_port_past;

/*
 * Keep the channel of CONNECT reply @g (its memfd and bell taken over) for
 * connecting to @dst from now on. 0 or -errno.
 */
int shunt_chan_install_client(struct shunt_grant *g, const struct shunt_wire_addr *dst);

/*
 * Connect socket @fd (not connected; bound or not) to @dst through the
 * channel kept for it, as connect() would: the socket is bound to the
 * source address first if it is not. Returns 0 with the new connection in
 * *@out (established, queued for accept), -ENOENT when no channel is kept
 * for @dst, -EAGAIN when its accept queue is full (ask shuntd for a circuit
 * of its own), -ENOSPC when every slot holds a connection (ask shuntd, which
 * may give another channel), or -errno from binding the socket.
 */
int shunt_chan_connect(int fd, const struct shunt_wire_addr *dst, struct shunt_conn **out);

/*
 * Keep the channel of ACCEPT reply @g (its memfd and bell taken over), of
 * listener @listener. 0 or -errno.
 */
int shunt_chan_install_listener(struct shunt_grant *g, uint64_t listener);

/*
 * Before this process sleeps: unmap the acceptor channels whose clients
 * left, which installing a new client's channel set aside (one load when
 * there are none).
 */
void shunt_chan_let_go(void);

/*
 * Take the oldest connection queued in this process's channels of listener
 * @listener, whose socket is bound to @laddr, and count it off its
 * channel's bell. Returns 0 with the connection (the acceptor's end) in
 * *@out and its journal entry in *@je (to append with shunt_chan_journal
 * once the accepted socket exists), or -EAGAIN.
 */
int shunt_chan_accept(uint64_t listener, const struct shunt_wire_addr *laddr,
		      struct shunt_conn **out, struct shunt_journal_entry *je);

/*
 * Journal @je for socket @fd (-1: none), whose inode is @inode (0: not
 * known, which shuntd then cannot fetch as a companion): shuntd learns of
 * the connection so.
 */
void shunt_chan_journal(struct shunt_journal_entry *je, int fd, uint64_t inode);

/* Whether any of this process's channels of @listener has a connection queued (a hint). */
bool shunt_chan_pending(uint64_t listener);

/*
 * Before accept() sleeps: spin while spinning can pay (spin.h) for a
 * connection to be queued in one of this process's channels of @listener
 * (none: false at once). True if one is there. @deadline: absolute ns, or 0.
 */
bool shunt_chan_spin_pending(uint64_t listener, int64_t deadline);

/* This process no longer holds @listener: its channels go (their connections stay). */
void shunt_chan_forget_listener(uint64_t listener);

/*
 * The session they were granted in is over (shuntd died): the channels kept
 * for connecting go (the next connect asks shuntd, or the kernel). The
 * acceptors' channels stay: what clients queued in them before shuntd died
 * is shared memory we map, and accept() still takes it.
 */
void shunt_chan_drop_clients(void);

/*
 * Call @fn with the bell of each of this process's channels of @listener,
 * under the lock that keeps them open (take no lock in @fn but epoll's).
 */
void shunt_chan_each_bell(uint64_t listener, void (*fn)(int bell, void *arg), void *arg);

/*
 * The bells of @listener's channels dropped since the last call: @let_go
 * (may be NULL) is called with each, under the same lock, before it is
 * closed. EPOLLEXCLUSIVE registrations hold them (epoll.c).
 */
void shunt_chan_dropped_bells(uint64_t listener, void (*let_go)(int bell, void *arg), void *arg);

/*
 * With no shuntd to ask (shuntd_listener_settle): take what the bells of
 * this process's channels of @listener count beyond what their queues hold,
 * so that poll() stops saying the listener is readable for nothing. Exact
 * with one acceptor; with several, a count may come one over or one short
 * (the accept() it wakes settles again; the next count wakes the other).
 */
void shunt_chan_settle(uint64_t listener);

/*
 * Listener @from is registered again, as @to (a new shuntd): its channels
 * that still hold queued connections become @to's, their bells put in @to's
 * bells (an epoll instance), so that accept() takes them and poll() hears
 * of them, until they are empty; the empty ones go (no client queues in
 * them any more).
 */
void shunt_chan_move_listener(uint64_t from, uint64_t to, int bells);

uint32_t shunt_chan_ring_size(const struct shunt_chan *ch);
void shunt_chan_put(struct shunt_chan *ch);

/* Around fork; in the child, the channels it inherited as a client are its parent's session's. */
void shunt_chan_fork_prepare(void);
void shunt_chan_fork_parent(void);
void shunt_chan_fork_child(void);

/* What connection @c, of a connecting socket about to let it go, leaves its port with. */
void shunt_chan_port_past(struct shunt_conn *c, struct shunt_port_past *past);

/*
 * Whether a connection through @ch may leave from the port whose last
 * connection @past says: that one is over at both ends (its peer closed,
 * or shuntd freed its slot), or it went to another port. The kernel never
 * has two live connections of one address and port pair either.
 */
bool shunt_chan_port_free(struct shunt_chan *ch, const struct shunt_port_past *past);

#endif
