/* SPDX-License-Identifier: MIT */
/*
 * Notices: how the library learns which of its circuits changed without
 * looking at all of them. Each circuit end this process holds gets a slot,
 * a number chosen here and the same on every link; the end's route in the
 * circuit (this session, that slot) tells wakers where to post. A waiter
 * drains the bits of every link it has and routes each slot to the socket
 * owning that circuit, whose epoll registrations then re-check it. One hub
 * epoll instance holds every link eventfd of the process, edge-triggered,
 * so a single descriptor in any wait set covers every peer.
 *
 * Lock order: shunt_notice_lock, then an epoll instance's lock. The notice
 * lock guards the slot table, conn->owner, sockets' watcher lists and
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

/* Put a link eventfd this process drains in the hub, or take it out. */
void shunt_notice_watch_efd(int efd, struct shunt_plink *l);
void shunt_notice_unwatch_efd(int efd);

/*
 * Give @c a slot and a route and send its notices to @owner; undo that
 * before @c goes away. Returns false if @c has no route (more holders watch
 * it than a circuit has routes): then nothing tells this process about it.
 */
bool shunt_notice_bind(struct shunt_conn *c, struct shunt_sock *owner);
void shunt_notice_unbind(struct shunt_conn *c);

/*
 * Drain every link of this process and route each notice; first, when a
 * kernel wait just reported the hub (@hub_fired), consume its edges (a
 * system call, so not while spinning). Picks up links shuntd made for us.
 * Returns how many circuits were noticed. Any thread may call it.
 */
int shunt_notice_drain(bool hub_fired);

/*
 * Take the links shuntd made for us, if its daemon link says it has some,
 * without draining anything else: after a connect or an accept, so that
 * both ends hold their link while shuntd is there to hand it over (a link
 * cannot be had once shuntd is dead). No lock held but the fork lock.
 */
void shunt_notice_pull_asked(void);

/*
 * Post a notice for circuit end @end (ours or the peer's) along its routes:
 * @cache holds a link per route, filled on first use.
 */
struct shunt_circuit_end;
void shunt_notice_post(struct shunt_circuit_end *end, struct shunt_plink *_Atomic *cache);

/*
 * Around a poll/select sleep: list this thread's own eventfd (made on first
 * use, closed when the thread exits), which every drain that consumed hub
 * edges or routed notices signals; then unlist and reset it. begin returns
 * the descriptor to wait on, or -1 (then only the hub wakes this thread).
 */
int shunt_notice_kick_begin(void);
void shunt_notice_kick_end(int fd);

/* Announce (+1) or withdraw (-1) a thread about to sleep on the hub. */
void shunt_notice_sleepers(int delta);

/* Around fork: hold the notice lock so no thread is in the middle of routing. */
void shunt_notice_fork_prepare(void);
void shunt_notice_fork_parent(void);

/*
 * In a fork child, before anything else: the hub, the links and the routes
 * are the parent's; forget them (the slot table stays: same circuits).
 */
void shunt_notice_after_fork(void);

/* In a fork child, once it has its own session: routes to it for every circuit it holds. */
void shunt_notice_reroute(void);

#endif
