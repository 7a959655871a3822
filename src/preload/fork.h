/* SPDX-License-Identifier: MIT */
/*
 * fork(): after it, parent and child both hold every socket made before it,
 * as they hold the same kernel sockets. shuntd is told before the fork (a
 * ticket that holds everything for the child) and the child claims the
 * ticket with a session of its own, sent before fork() returns in it.
 *
 * The child does not wait for the claim's answer: a child that closes the
 * listeners it inherited and answers the connection it was forked for (a
 * server forking per connection) needs nothing from it. Whatever needs the
 * session takes the answer first: a request to shuntd (sent after the
 * claim, so answered after it), and shunt_fork_settle, which makes the
 * child's routes (what its peers post then reaches it) before anything
 * that sleeps on them (poll, select, epoll_wait), and before a fork or an
 * exec hands the child's sockets on.
 *
 * The fork lock keeps what the ticket copies consistent with what the
 * child gets: calls that make or drop a holding (connect, accept, listen,
 * close, shutdown of a listener) hold it shared; fork holds it exclusively
 * from asking for the ticket until the child exists.
 */
#ifndef SHUNT_FORK_H
#define SHUNT_FORK_H

#include <sys/types.h>

void shunt_fork_enter(void);
void shunt_fork_leave(void);

/* In a fork child whose claim is unanswered: take the answer, then routes. Else nothing. */
void shunt_fork_settle(void);

/*
 * No holding made or dropped from freeze to thaw (the fork lock held
 * exclusively): around an exec, whose new image must find at shuntd exactly
 * the sockets it inherits. Not taken when the exec succeeds: the image goes.
 */
void shunt_fork_freeze(void);
void shunt_fork_thaw(void);

/* fork() and vfork() (which may always be a fork). */
pid_t shunt_op_fork(void);

/*
 * _Fork(), which runs no atfork handler (the library still runs its own),
 * and glibc's clone() of a child that copies our memory and descriptor
 * table (no CLONE_VM, CLONE_THREAD or CLONE_FILES): each a fork for
 * shuntd. The pid, 0 in the child, or -errno.
 */
pid_t shunt_op_fork_bare(void);
int shunt_op_clone(int (*fn)(void *), void *stack, int flags, void *arg, pid_t *ptid, void *tls,
		   pid_t *ctid);

/* Registered with pthread_atfork by init: the library's locks across fork. */
void shunt_fork_prepare(void);
void shunt_fork_parent(void);
void shunt_fork_child(void);

#endif
