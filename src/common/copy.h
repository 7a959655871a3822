/* SPDX-License-Identifier: MIT */
/*
 * Copies into a ring. Large ones use non-temporal stores: the ring's lines
 * were last read by the consumer on the other core, and an ordinary store
 * would first have to pull each of them back (a read for ownership); a
 * streaming store writes around the cache instead. Measured in bench/.
 */
#ifndef SHUNT_COPY_H
#define SHUNT_COPY_H

#include <stddef.h>

enum {
	/*
	 * Below this, bytes still in cache serve the consumer better. At 4 KiB
	 * streaming already wins: 10.2 GB/s one-way instead of 2.6, for 0.2 µs
	 * more round trip (bench/core.py, 2026-11-21, this 2-vCPU EPYC VM).
	 */
	SHUNT_COPY_STREAM_MIN = 4 << 10,
};

/*
 * Copy @len bytes from @src to @dst with streaming stores where the
 * platform has them (a plain memcpy elsewhere). The stores are weakly
 * ordered: call shunt_copy_fence() before publishing them.
 */
void shunt_copy_stream(void *dst, const void *src, size_t len);

/* Order earlier streaming stores before later stores (sfence on x86). */
void shunt_copy_fence(void);

#endif
