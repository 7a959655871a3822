/* SPDX-License-Identifier: MIT */
/*
 * Notices: how the library learns which of its circuits changed without
 * looking at all of them. A peer posts the circuit's slot in the link it
 * shares with this process (and writes the link's eventfd if a thread here
 * sleeps); a waiter drains the bits and routes each notice to the socket
 * owning that circuit, whose epoll registrations then re-check it. One hub
 * epoll instance holds every link eventfd of the process, edge-triggered,
 * so a single descriptor in any wait set covers every peer.
 *
 * Lock order: shunt_notice_lock, then an epoll instance's lock. The notice
 * lock guards slot tables, conn->owner, sockets' watcher lists and
 * registration modes.
 */
#ifndef SHUNT_NOTICE_H
#define SHUNT_NOTICE_H

#include <pthread.h>
#include <stdbool.h>

struct shunt_conn;
struct shunt_plink;
struct shunt_sock;

extern pthread_mutex_t shunt_notice_lock;

/* The hub epoll descriptor (hidden), made on first use; -1 if it cannot be. */
int shunt_notice_hub(void);

/* Put side @side of link @l in the hub (under the plink lock, once per side). */
void shunt_notice_add_link(struct shunt_plink *l, unsigned side);

/* Route notices for @c to @owner from now on; stop before @c goes away. */
void shunt_notice_bind(struct shunt_conn *c, struct shunt_sock *owner);
void shunt_notice_unbind(struct shunt_conn *c);

/*
 * Drain every link side of this process and route each notice; first, when
 * a kernel wait just reported the hub (@hub_fired), consume its edges (a
 * system call, so not while spinning). Returns how many circuits were
 * noticed. Any thread may call it; concurrent drains share the work.
 */
int shunt_notice_drain(bool hub_fired);

/*
 * Announce (+1) or withdraw (-1) a thread about to sleep in a kernel wait
 * that includes the hub, on every link side of this process, so that peers
 * write the eventfds. seq_cst, pairing with shunt_link_post's read of the
 * sleeper count: drain once more after announcing, before sleeping.
 */
void shunt_notice_sleepers(int delta);

/* In a fork child: the hub is shared with the parent; forget it. */
void shunt_notice_after_fork(void);

#endif
