/* SPDX-License-Identifier: MIT */
/*
 * TCP_INFO of circuit sockets (tcpinfo.c): the fields that follow the
 * connection, written over what the kernel half answered; and what the
 * kernel's own TCP_INFO says of a kernel half.
 */
#ifndef SHUNT_TCPINFO_H
#define SHUNT_TCPINFO_H

#include <stdbool.h>
#include <sys/socket.h>

struct shunt_conn;

/* Patch the first @len bytes of a struct tcp_info at @val for connection @c. */
void shunt_tcpinfo_circuit(struct shunt_conn *c, void *val, socklen_t len);
/* The same for a connect still waiting for room in the backlog: SYN_SENT. */
void shunt_tcpinfo_connecting(void *val, socklen_t len);

/*
 * Whether TCP socket @fd (out of repair mode) carries a connection, or
 * carried one that has ended since (FINs both ways, a reset: TCP_CLOSE, but
 * segments went in or out), rather than being one the kernel never
 * connected or a listener.
 */
bool shunt_tcpinfo_carried(int fd);

#endif
