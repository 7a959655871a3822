// SPDX-License-Identifier: MIT
#ifndef SHUNT_COMMON_BIND_PORT_H
#define SHUNT_COMMON_BIND_PORT_H

#include <sys/socket.h>

#include "shunt/proto.h"

/*
 * Bind socket @fd to @sa (a port of 0: one of its own) as connect() binds
 * it, and say in @local where it is bound, port included, also when the
 * program set IP_BIND_ADDRESS_NO_PORT. 0 or -errno (-EADDRNOTAVAIL: no
 * port left; -EINVAL: bound already).
 */
int shunt_bind_as_connect(int fd, const struct sockaddr *sa, socklen_t len,
			  struct shunt_wire_addr *local);

#endif
