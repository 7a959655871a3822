/* SPDX-License-Identifier: MIT */
/*
 * TCP_INFO of circuit sockets (tcpinfo.c): the fields that follow the
 * connection, written over what the kernel half answered.
 */
#ifndef SHUNT_TCPINFO_H
#define SHUNT_TCPINFO_H

#include <sys/socket.h>

struct shunt_conn;

/* Patch the first @len bytes of a struct tcp_info at @val for connection @c. */
void shunt_tcpinfo_circuit(struct shunt_conn *c, void *val, socklen_t len);
/* The same for a connect still waiting for room in the backlog: SYN_SENT. */
void shunt_tcpinfo_connecting(void *val, socklen_t len);

#endif
