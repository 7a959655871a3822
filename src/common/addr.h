/* SPDX-License-Identifier: MIT */
/* Socket addresses: conversion between sockaddr and wire form, tests, formatting. */
#ifndef SHUNT_ADDR_H
#define SHUNT_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "shunt/proto.h"

enum { SHUNT_ADDR_STRLEN = 64 };

/* Convert an AF_INET/AF_INET6 sockaddr to wire form: 0, -EINVAL, -EAFNOSUPPORT. */
int shunt_addr_to_wire(const struct sockaddr *sa, socklen_t len, struct shunt_wire_addr *w);

/* Convert wire form (already checked) to a sockaddr; returns its length. */
socklen_t shunt_addr_from_wire(const struct shunt_wire_addr *w, struct sockaddr_storage *ss);

/* Whether a wire address from an untrusted source is well formed: 0 or -EINVAL. */
int shunt_addr_check(const struct shunt_wire_addr *w);

bool shunt_addr_is_any(const struct shunt_wire_addr *w);
bool shunt_addr_is_loopback(const struct shunt_wire_addr *w);
bool shunt_addr_is_v4mapped(const struct shunt_wire_addr *w);
bool shunt_addr_same_ip(const struct shunt_wire_addr *a, const struct shunt_wire_addr *b);

/* Make @w the loopback address of its family (127.0.0.1 or ::1), port kept. */
void shunt_addr_set_loopback(struct shunt_wire_addr *w);

/* ::ffff:a.b.c.d becomes a.b.c.d (AF_INET); anything else is left alone. */
void shunt_addr_unmap(struct shunt_wire_addr *w);

/* a.b.c.d becomes ::ffff:a.b.c.d (AF_INET6); anything else is left alone. */
void shunt_addr_map_v6(struct shunt_wire_addr *w);

/* "127.0.0.1:80" or "[::1]:80" into @buf (SHUNT_ADDR_STRLEN bytes); returns @buf. */
char *shunt_addr_format(const struct shunt_wire_addr *w, char *buf, size_t n);

/*
 * The addresses both ends of a connection report, as the kernel reports
 * them: from a client bound to @client to @dst, accepted by a listener
 * bound to @listener. The connector sees its own address and the one it
 * connected to (the loopback address it reached for a wildcard @dst); the
 * acceptor sees the address the client reached and the client's, both in
 * the listener's family (v4-mapped on a dual-stack IPv6 listener).
 */
void shunt_addr_ends(const struct shunt_wire_addr *client, const struct shunt_wire_addr *dst,
		     const struct shunt_wire_addr *listener, struct shunt_wire_addr local[2],
		     struct shunt_wire_addr peer[2]);

#endif
