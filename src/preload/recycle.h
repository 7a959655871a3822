/* SPDX-License-Identifier: MIT */
/*
 * A socket() answered with a connecting socket's spare half (spare.h):
 * its kernel socket is still bound to the port of its last connection. It
 * is presented as a fresh socket (s->recycled) until a connection through
 * a channel from the same address takes that port (chan.c). Whatever else
 * could show the binding (bind, listen, a connect the kernel makes, an
 * option tied to binding), or let another descriptor, process or kernel
 * facility hold the half (dup, fork, exec, SCM_RIGHTS, epoll, io_uring),
 * first gives the socket a fresh kernel half, with what the program set on
 * it so far: from then on it is the socket socket() would have made.
 */
#ifndef SHUNT_RECYCLE_H
#define SHUNT_RECYCLE_H

#include <sys/socket.h>

struct shunt_sock;

/* @s, open as @fd, was just made from a spare half that is still bound. */
void shunt_recycle_note(struct shunt_sock *s);

/*
 * If @s (open as @fd) has a recycled half, give it a fresh one: 0, or
 * -errno when no new socket could be made (EMFILE, ENFILE, ENOBUFS,
 * ENOMEM), the caller's call then failing with it. Takes no lock of
 * @s: a caller may hold s->lock.
 */
int shunt_recycle_fresh(struct shunt_sock *s, int fd);

/* Before a fork: the child would hold every half too. No library lock held. */
void shunt_recycle_fresh_all(void);

/*
 * @s has no recycled half to hide any more: a connection took its port (an
 * ordinary socket now), or @s is released (one fewer to look for before a
 * fork).
 */
void shunt_recycle_done(struct shunt_sock *s);

/* getsockname of a recycled socket: a fresh one's wildcard address, port 0. */
int shunt_recycle_getsockname(const struct shunt_sock *s, struct sockaddr *addr, socklen_t *len);

#endif
