// SPDX-License-Identifier: MIT
/* Socket addresses: conversion between sockaddr and wire form, tests, formatting. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/addr.h"

static const uint8_t v4mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

int shunt_addr_to_wire(const struct sockaddr *sa, socklen_t len, struct shunt_wire_addr *w)
{
	memset(w, 0, sizeof(*w));
	if (!sa || len < (socklen_t)sizeof(sa_family_t))
		return -EINVAL;
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		if (len < (socklen_t)sizeof(*in))
			return -EINVAL;
		w->family = AF_INET;
		w->port = ntohs(in->sin_port);
		memcpy(w->addr, &in->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		if (len < (socklen_t)sizeof(*in6))
			return -EINVAL;
		w->family = AF_INET6;
		w->port = ntohs(in6->sin6_port);
		w->scope_id = in6->sin6_scope_id;
		w->flowinfo = in6->sin6_flowinfo;
		memcpy(w->addr, &in6->sin6_addr, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

socklen_t shunt_addr_from_wire(const struct shunt_wire_addr *w, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	if (w->family == AF_INET) {
		struct sockaddr_in *in = (struct sockaddr_in *)ss;

		in->sin_family = AF_INET;
		in->sin_port = htons(w->port);
		memcpy(&in->sin_addr, w->addr, 4);
		return sizeof(*in);
	}
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	in6->sin6_family = AF_INET6;
	in6->sin6_port = htons(w->port);
	in6->sin6_scope_id = w->scope_id;
	in6->sin6_flowinfo = w->flowinfo;
	memcpy(&in6->sin6_addr, w->addr, 16);
	return sizeof(*in6);
}

int shunt_addr_check(const struct shunt_wire_addr *w)
{
	static const uint8_t zero[12];

	if (w->reserved)
		return -EINVAL;
	if (w->family == AF_INET)
		return w->scope_id || w->flowinfo || memcmp(w->addr + 4, zero, 12) ? -EINVAL : 0;
	if (w->family == AF_INET6)
		return 0;
	return -EINVAL;
}

bool shunt_addr_is_any(const struct shunt_wire_addr *w)
{
	static const uint8_t zero[16];

	return !memcmp(w->addr, zero, w->family == AF_INET ? 4 : 16);
}

bool shunt_addr_is_loopback(const struct shunt_wire_addr *w)
{
	if (w->family == AF_INET)
		return w->addr[0] == 127;
	if (shunt_addr_is_v4mapped(w))
		return w->addr[12] == 127;
	static const uint8_t one[16] = { [15] = 1 };

	return !memcmp(w->addr, one, 16);
}

bool shunt_addr_is_v4mapped(const struct shunt_wire_addr *w)
{
	return w->family == AF_INET6 && !memcmp(w->addr, v4mapped_prefix, 12);
}

bool shunt_addr_same_ip(const struct shunt_wire_addr *a, const struct shunt_wire_addr *b)
{
	return a->family == b->family &&
	       !memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16);
}

void shunt_addr_set_loopback(struct shunt_wire_addr *w)
{
	memset(w->addr, 0, sizeof(w->addr));
	if (w->family == AF_INET) {
		w->addr[0] = 127;
		w->addr[3] = 1;
	} else {
		w->addr[15] = 1;
	}
}

void shunt_addr_unmap(struct shunt_wire_addr *w)
{
	if (!shunt_addr_is_v4mapped(w))
		return;
	memmove(w->addr, w->addr + 12, 4);
	memset(w->addr + 4, 0, 12);
	w->family = AF_INET;
	w->scope_id = 0;
	w->flowinfo = 0;
}

void shunt_addr_map_v6(struct shunt_wire_addr *w)
{
	if (w->family != AF_INET)
		return;
	memmove(w->addr + 12, w->addr, 4);
	memcpy(w->addr, v4mapped_prefix, 12);
	w->family = AF_INET6;
}

char *shunt_addr_format(const struct shunt_wire_addr *w, char *buf, size_t n)
{
	char ip[INET6_ADDRSTRLEN];

	if (w->family != AF_INET && w->family != AF_INET6) {
		snprintf(buf, n, "?");
		return buf;
	}
	inet_ntop(w->family, w->addr, ip, sizeof(ip));
	if (w->family == AF_INET)
		snprintf(buf, n, "%s:%u", ip, w->port);
	else
		snprintf(buf, n, "[%s]:%u", ip, w->port);
	return buf;
}

void shunt_addr_ends(const struct shunt_wire_addr *client, const struct shunt_wire_addr *dst,
		     const struct shunt_wire_addr *listener, struct shunt_wire_addr local[2],
		     struct shunt_wire_addr peer[2])
{
	struct shunt_wire_addr reached = *dst, from = *client;

	shunt_addr_unmap(&reached);
	if (shunt_addr_is_any(&reached))
		shunt_addr_set_loopback(&reached);
	local[0] = *client;
	peer[0] = *dst;
	if (shunt_addr_is_any(dst)) {
		/* connect() to the wildcard reports the loopback peer it reached. */
		peer[0] = reached;
		if (dst->family == AF_INET6 && reached.family == AF_INET)
			shunt_addr_map_v6(&peer[0]);
	}
	shunt_addr_unmap(&from);
	if (listener->family == AF_INET6) {
		shunt_addr_map_v6(&reached);
		shunt_addr_map_v6(&from);
	}
	reached.port = listener->port;
	reached.flowinfo = 0;
	from.flowinfo = 0;
	local[1] = reached;
	peer[1] = from;
}
