/* SPDX-License-Identifier: MIT */
/*
 * "Ink": the only bytes tests/control/hostile ever puts in a ring, so the
 * victim can tell a byte that came from the circuit from one that came from
 * anywhere else. The stream is the ink sequence of the honest modes (stall,
 * exit-mid), which the victim checks byte for byte.
 */
#ifndef T_INK_H
#define T_INK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

static inline uint8_t t_ink(uint32_t r)
{
	return (uint8_t)('a' + (r & 15));
}

static inline bool t_is_ink(uint8_t b)
{
	return b >= 'a' && b <= 'p';
}

/* Byte @i of the stream; the higher bits make a shift by a ring size show. */
static inline uint8_t t_stream_byte(uint64_t i)
{
	return t_ink((uint32_t)(i ^ (i >> 8) ^ (i >> 16) ^ (i >> 24)));
}

static inline void t_stream(uint8_t *buf, uint64_t off, size_t len)
{
	for (size_t k = 0; k < len; k++)
		buf[k] = t_stream_byte(off + k);
}

#endif
