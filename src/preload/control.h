/* SPDX-License-Identifier: MIT */
/*
 * The control client: this process's session with shuntd. Requests are
 * synchronous and serialised by one lock; the daemon never speaks first.
 * When the daemon cannot be reached every request fails with -ENOTCONN and
 * callers use the kernel instead (DESIGN decision 10); a reconnect is tried
 * again at most once a second.
 */
#ifndef SHUNT_CONTROL_H
#define SHUNT_CONTROL_H

#include <stdint.h>

#include "shunt/proto.h"

/* A circuit granted by shuntd: the reply and the descriptors that came with it. */
struct shunt_grant {
	struct shunt_msg_circuit msg;
	int kernel_half;		/* -1 unless msg.flags has SHUNT_CIRCUIT_KERNEL_HALF */
	int memfd;
	int link_memfd;			/* -1 unless msg.flags has SHUNT_CIRCUIT_NEW_LINK */
	int link_efd_mine;
	int link_efd_peer;
};

/* Set up from the environment (SHUNT_SOCKET); called once by init. */
void shunt_ctl_init(void);

/* In a fork child: forget the parent's session; the child makes its own. */
void shunt_ctl_after_fork(void);

/*
 * Register listening socket @fd (or refresh registration @refresh after a
 * second listen()). Returns 0 with *@listener and, for a new registration,
 * *@doorbell (hidden eventfd); or -errno.
 */
int shunt_ctl_listen(int fd, uint64_t refresh, uint64_t *listener, int *doorbell);

void shunt_ctl_unlisten(uint64_t listener);

/*
 * Ask for a circuit from bound socket @fd to @dst. Returns 0 with *@g,
 * SHUNT_USE_KERNEL when no shunt listener matches, or -errno.
 */
int shunt_ctl_connect(int fd, const struct shunt_wire_addr *dst, uint32_t flags,
		      struct shunt_grant *g);

/* Take a queued circuit of listener @listener held as @fd: 0, -EAGAIN or -errno. */
int shunt_ctl_accept(int fd, uint64_t listener, struct shunt_grant *g);

/* Tell shuntd that @end of @circuit is closed (no reply awaited). */
void shunt_ctl_close(uint64_t circuit, unsigned end);

/* Close every descriptor of a grant that was not used. */
void shunt_grant_discard(struct shunt_grant *g);

#endif
