/* SPDX-License-Identifier: MIT */
/*
 * A thread that moves to another network namespace (setns, unshare). The
 * session, its channels and its spare halves belong to the namespace the
 * process said HELLO from: shuntd resolves its connects and listeners
 * there. So once any thread has moved, the sockets the process makes from
 * then on are left to the kernel, which puts each in its thread's
 * namespace; the sockets made before keep going through shunt, in the
 * namespace they were made in, as their kernel sockets do.
 */
#ifndef SHUNT_NETNS_H
#define SHUNT_NETNS_H

#include <stdbool.h>
#include <stdint.h>

/* The calling thread's network namespace (its inode), 0 when it cannot be read. */
uint64_t shunt_netns_now(void);

/* A call that may move the thread between namespaces ended: @before was shunt_netns_now(). */
void shunt_netns_after(uint64_t before);

/* A child made in a new network namespace (clone with CLONE_NEWNET) starts moved. */
void shunt_netns_moved(void);

/* Whether some thread of the process left the namespace of its session. */
bool shunt_netns_left(void);

#endif
