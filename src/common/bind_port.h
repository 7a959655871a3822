// SPDX-License-Identifier: MIT
#ifndef SHUNT_COMMON_BIND_PORT_H
#define SHUNT_COMMON_BIND_PORT_H

#include <sys/socket.h>

/*
 * Give socket @fd, which a bind to @sa left without a port, a port of its
 * own, as connect() would. 0 or -errno (-EADDRNOTAVAIL: no port left).
 */
int shunt_bind_port(int fd, const struct sockaddr *sa, socklen_t len);

#endif
