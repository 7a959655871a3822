/* SPDX-License-Identifier: MIT */
/*
 * What an honest client sends on each connection (tests/control/honest.c)
 * and tests/control/echod.c echoes: a header with a magic, the client's id,
 * the connection's number and the payload's length, then a payload that
 * follows from those three. Uppercase letters and digits: never ink
 * (t_ink.h), so a byte of the hostile's can be told from an honest one.
 */
#ifndef T_HONEST_H
#define T_HONEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define T_HONEST_MAGIC "HNST"

enum {
	T_HONEST_HDR = 16,
	T_HONEST_MAX = 16 << 10,	/* longest payload */
};

struct t_honest_hdr {
	char magic[4];
	uint32_t client, seq, len;
};

_Static_assert(sizeof(struct t_honest_hdr) == T_HONEST_HDR, "as on the wire");

/* Byte @i of the payload of connection @seq of client @client. */
static inline uint8_t t_honest_byte(uint32_t client, uint32_t seq, uint32_t i)
{
	uint64_t x = ((uint64_t)client << 32 | seq) * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull;

	x ^= x >> 29;
	return (uint8_t)"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(x * 0x94d049bb133111ebull) >> 58 & 31];
}

static inline bool t_honest_hdr_ok(const struct t_honest_hdr *h)
{
	return !memcmp(h->magic, T_HONEST_MAGIC, 4) && h->len <= T_HONEST_MAX;
}

#endif
