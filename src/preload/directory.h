/* SPDX-License-Identifier: MIT */
/*
 * shuntd's directory of listened ports (include/shunt/directory.h), mapped
 * read-only from the HELLO reply: it lets connect() leave to the kernel,
 * without asking, a connection no listener under shunt could take.
 */
#ifndef SHUNT_PRELOAD_DIRECTORY_H
#define SHUNT_PRELOAD_DIRECTORY_H

#include <stdbool.h>
#include <stdint.h>

#include "shunt/proto.h"

/* Map the directory from a HELLO reply (@memfd is closed here). 0 or -errno. */
int shunt_directory_install(int memfd);

/* The session is over: what the directory says is no longer known to be true. */
void shunt_directory_drop(void);

/*
 * Whether shuntd's directory says that no listener it knows could take a
 * connection to @dst: then asking could only be answered "use the kernel".
 * False when there is no directory.
 */
bool shunt_directory_nobody_listens(const struct shunt_wire_addr *dst);

/*
 * Listener @listener's channel epoch: how many channels shuntd has made to
 * it (or to listeners sharing its entry). An acceptor that sees it move
 * since it last asked shuntd asks again: a channel it has not mapped may
 * hold a connection whose doorbell count another entry used up. 0 when
 * there is no directory.
 */
uint32_t shunt_directory_chan_epoch(uint64_t listener);

/*
 * How many sessions hold listener @listener, as shuntd last published it
 * (this one among them); 0 when it is not known (no directory, or another
 * listener's count in its entry).
 */
uint32_t shunt_directory_listener_holders(uint64_t listener);

#endif
