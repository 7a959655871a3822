/* SPDX-License-Identifier: MIT */
/* Kernel TCP sockets of this network namespace, from NETLINK_SOCK_DIAG. */
#ifndef SHUNT_SOCKDIAG_H
#define SHUNT_SOCKDIAG_H

#include <stddef.h>
#include <stdint.h>

#include "shunt/proto.h"

struct tcp_entry {
	uint64_t inode;
	uint8_t state;			/* TCP_ESTABLISHED ... from <netinet/tcp.h> */
	struct shunt_wire_addr local, remote;
	uint64_t bytes_sent;		/* sent (tcpi_bytes_sent, retransmissions aside on loopback) */
	uint64_t bytes_received;
};

/* All TCP sockets (IPv4 and IPv6): 0 with a malloc'ed array, or -errno. */
int shunt_sockdiag_tcp(struct tcp_entry **out, size_t *n);

#endif
