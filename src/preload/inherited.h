// SPDX-License-Identifier: MIT
/*
 * The sockets among the descriptors a process starts with: found once, at
 * init, for the exec hand-off (exec.c) and the listening sockets it was
 * started with (handoff.c).
 */
#ifndef SHUNT_PRELOAD_INHERITED_H
#define SHUNT_PRELOAD_INHERITED_H

#include <stddef.h>
#include <stdint.h>

struct shunt_inherited {
	int fd;
	uint64_t ino;			/* of the socket: the descriptors of one share it */
};

/*
 * The open sockets of this process that are not the library's own, in *@out
 * (malloc'd, NULL when none): how many. @fdsize: the size of the process's
 * descriptor table (above every open descriptor), or 0 if unknown.
 */
size_t shunt_inherited_sockets(unsigned fdsize, struct shunt_inherited **out);

#endif
