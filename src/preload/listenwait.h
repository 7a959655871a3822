/* SPDX-License-Identifier: MIT */
/*
 * Where a blocking accept() sleeps: an epoll instance of ours per listener,
 * holding the kernel socket and the listener's bells, made when the
 * listener registers so that the processes forked from it (a prefork
 * server's workers) share it. epoll_wait() sleepers of one instance wait
 * exclusively: a connection wakes one accept(), as the kernel's accept
 * wait does. A ppoll() on the bells, which every worker's accept() made
 * before, woke them all for each connection, and all but one found nothing.
 */
#ifndef SHUNT_LISTENWAIT_H
#define SHUNT_LISTENWAIT_H

#include <poll.h>
#include <stdbool.h>
#include <time.h>

struct shunt_sock;

/*
 * Make @s's instance for its kernel socket @fd and its bells (s->bells),
 * replacing any it had. Without one (no descriptor to spare, say) accept()
 * sleeps in ppoll(), as before. Under s->lock.
 */
void shunt_listen_wait_open(struct shunt_sock *s, int fd);

/* @s's bells are now @bell instead of @old (relisten.c). Under s->lock. */
void shunt_listen_wait_rebell(struct shunt_sock *s, int old, int bell);

/* Close @s's instance, if any. Under s->lock, or with @s unreachable. */
void shunt_listen_wait_close(struct shunt_sock *s);

/*
 * Sleep until p[0] (the kernel socket) or p[1] (the bells, or -1 for
 * none) is readable, or @tsp passes (NULL: no limit), with the result
 * ppoll(p, 2, tsp, NULL) would have: the count of ready entries, their
 * revents set, or -1 and errno. @shared: whether we woke in the shared
 * instance, where one sleeper wakes per event: the caller calls
 * shunt_listen_wait_pass() when it is done.
 */
int shunt_listen_wait(struct shunt_sock *s, struct pollfd p[2], const struct timespec *tsp,
		      bool *shared);

/*
 * After a shared wake, done (a connection taken, or not), with kernel
 * socket @kfd and bells @bells: if connections are still queued, wake the
 * next sleeper, as an event for each would have.
 */
void shunt_listen_wait_pass(struct shunt_sock *s, int kfd, int bells);

#endif
