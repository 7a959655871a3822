/* SPDX-License-Identifier: MIT */
/*
 * Spare kernel halves: the unconnected kernel socket under a connection
 * carried by a circuit is kept when the program closes it, and is the
 * next accepted connection's (an accepted one's) or the next socket()'s
 * (a connecting one's, still bound to its port), instead of a socket()
 * and the release of a TCP socket per connection (docs/connect.md, "Spare
 * kernel halves" and "Client halves").
 */
#ifndef SHUNT_SPARE_H
#define SHUNT_SPARE_H

#include <stdbool.h>
#include <stdint.h>

struct shunt_port_past;
struct shunt_sock;

/*
 * A spare kernel half of family @domain as the lowest free descriptor,
 * with accept4's @flags, as a fresh socket() would be but for the options
 * of mask @inherit (as s->inherit has them), which the caller sets next;
 * its identity (shunt_fdt_sock_ident) in *@ident. -1 when there is none
 * (or it could not be handed out: the caller makes a socket).
 *
 * The spare's hidden descriptor stays open as *@kept (else -1), for the
 * caller to give the new socket (shunt_spare_adopt), whose close then keeps
 * nothing more: no copy to make, no look at what the number holds (it is
 * the half, whatever the number holds by then). At most as many sockets
 * keep one as the pool may hold spares, so that spares never take more
 * than twice the pool's numbers. The copy goes back to the pool or is
 * closed at release (shunt_spare_put), and is closed when the socket's
 * half is replaced (recycle.c) or handed on (a downgrade): shunt_spare_drop.
 */
int shunt_spare_take(int domain, int flags, uint32_t inherit, uint64_t *ident, int *kept);

/*
 * A connecting socket's spare half of family @domain, as shunt_spare_take
 * hands one out with socket()'s @flags (SOCK_NONBLOCK, SOCK_CLOEXEC): no
 * option set, but still bound to the port of its last connection, which
 * recycle.c hides until a connection uses it, and which chan.c lets one
 * use only once that connection is over (*@past). -1 when there is none.
 * *@kept as for shunt_spare_take.
 */
int shunt_spare_take_bound(int domain, int flags, uint64_t *ident, struct shunt_port_past *past,
			   int *kept);

/*
 * @s (new, held by nobody else yet) keeps @kept, from shunt_spare_take
 * (@bound false) or shunt_spare_take_bound (true); -1 is none.
 */
void shunt_spare_adopt(struct shunt_sock *s, int kept, bool bound);

/* @kept from shunt_spare_take(_bound) (of family @domain), given to no socket after all: closed. */
void shunt_spare_unadopted(int kept, int domain, bool bound);

/* @s's kept copy, if any, closed: its half is no longer the socket's to keep. */
void shunt_spare_drop(struct shunt_sock *s);

/*
 * @s, open as @fd, is being closed: if nobody could tell its kernel half
 * was used (s->spare) and it still is @fd, keep a hidden duplicate of it
 * in s->spare_fd, for shunt_spare_put, unless one is kept already. @fd
 * stays open for the caller to close. Under the fork lock, as close is.
 */
void shunt_spare_keep(struct shunt_sock *s, int fd);

/*
 * @s is released, its circuit end let go of: its kept half (if any) goes
 * to the spares, to be handed out once shuntd has read that the end was
 * let go of (before, it could still look for the end's socket here).
 */
void shunt_spare_put(struct shunt_sock *s);

/* Fork handlers: the child lets the parent's spares go. */
void shunt_spare_fork_prepare(void);
void shunt_spare_fork_parent(void);
void shunt_spare_fork_child(void);

/* In a fork's child, after shunt_spare_fork_child: @s's copy is the parent's, closed here. */
void shunt_spare_fork_drop(struct shunt_sock *s);

#endif
