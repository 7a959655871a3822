// SPDX-License-Identifier: MIT
/* Streaming (non-temporal) copies into a ring. */
#include <stdint.h>
#include <string.h>

#include "common/copy.h"

#if defined(__x86_64__)
#include <emmintrin.h>

void shunt_copy_stream(void *dst, const void *src, size_t len)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	size_t head = (size_t)(-(uintptr_t)d & 15);

	/* Streaming stores need 16-byte aligned destinations: copy up to one. */
	if (head > len)
		head = len;
	memcpy(d, s, head);
	d += head;
	s += head;
	len -= head;
	for (; len >= 64; len -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, len);
}

void shunt_copy_fence(void)
{
	_mm_sfence();
}
#else
void shunt_copy_stream(void *dst, const void *src, size_t len)
{
	memcpy(dst, src, len);
}

void shunt_copy_fence(void)
{
}
#endif
