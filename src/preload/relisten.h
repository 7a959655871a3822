/* SPDX-License-Identifier: MIT */
/*
 * Listeners across a shuntd restart. When the session dies (shuntd killed)
 * the registrations it held die with it, and what shuntd had queued on them;
 * what clients queued in our channels stays counted on the channels' own
 * bells, which each listener then polls in an epoll instance of ours, and
 * accept() still takes it. When a later session is
 * opened with a daemon that knows none of them (shuntd restarted), every
 * listener that was registered is registered again, so that shunt clients
 * reach it in shared memory once more. Listeners that never had a
 * registration (listen() while no daemon answered) stay kernel-only: a
 * thread may be blocked in the kernel's accept() on them, which nothing
 * could wake for a shared-memory client.
 *
 * The work is only recorded where it is learnt (control.c, under its lock)
 * and done at a point where no library lock is held (shunt_relisten_run).
 */
#ifndef SHUNT_RELISTEN_H
#define SHUNT_RELISTEN_H

/* The session died: its registrations are void (control.c, under its lock). */
void shunt_relisten_lost(void);

/* A session was opened that holds none of our registrations (control.c, under its lock). */
void shunt_relisten_renew(void);

/*
 * Do what was recorded: put the listeners of a dead session on bells of
 * their own, or register them again. Called with the fork lock held shared and no other
 * library lock (shunt_fork_leave); a test of one atomic when there is nothing
 * to do.
 */
void shunt_relisten_run(void);

/*
 * A listener just accepted a kernel connection: if this process has no
 * session, or (looked at once a second) its session's shuntd died, try to
 * open one (at most once a second, as every request does) and register
 * again if it finds a new daemon. This is how a server that only ever
 * waits in accept() finds a restarted shuntd. No lock held.
 */
void shunt_relisten_poke(void);

#endif
