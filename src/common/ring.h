/* SPDX-License-Identifier: MIT */
/*
 * One direction of a circuit as seen by one side: a single-producer
 * single-consumer byte ring whose indices live in shared memory. Each side
 * keeps its own index privately and only reads the other's; whatever it reads
 * is checked, so a hostile peer can never make it touch memory outside the
 * ring (DESIGN decision 3).
 */
#ifndef SHUNT_RING_H
#define SHUNT_RING_H

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/copy.h"
#include "shunt/circuit.h"

struct shunt_ring {
	struct shunt_ring_ctl *ctl;	/* shared: tail and head */
	uint8_t *data;			/* shared: @size bytes */
	uint32_t size;			/* power of two, as shuntd sized it */
	uint64_t pos;			/* ours: the write position (the tail plus any
					   bytes held back) if we produce, head if we consume */
	uint64_t seen;			/* last value read of the other side's index */
	/*
	 * Producer: bytes written past the tail (held back), and the count
	 * last told to the other holders of the socket. Private mirrors of
	 * what the tail and the end's shared count say, so that the data path
	 * reads no line the consumer is polling.
	 */
	uint64_t held, held_told;
	int streamed;			/* producer: streaming stores not yet fenced */
};

/* Attach to ring @r of a mapped circuit; @at_tail for the producer. */
void shunt_ring_attach(struct shunt_ring *ring, struct shunt_circuit_hdr *hdr, unsigned r,
		       uint32_t ring_size, int producer);

/*
 * Producer: free bytes after re-reading the consumer's head (acquire, pairs
 * with the release in shunt_ring_consume), or -EPROTO if the head the peer
 * published is impossible.
 */
static inline long shunt_ring_space(struct shunt_ring *ring)
{
	uint64_t head = atomic_load_explicit(&ring->ctl->head, memory_order_acquire);
	uint64_t used = ring->pos - head;

	if (used > ring->size)
		return -EPROTO;
	ring->seen = head;
	return (long)(ring->size - used);
}

/* Producer: free bytes according to the last head seen (no shared access). */
static inline size_t shunt_ring_space_cached(const struct shunt_ring *ring)
{
	uint64_t used = ring->pos - ring->seen;

	return used > ring->size ? 0 : ring->size - (size_t)used;
}

/*
 * Consumer: bytes available after re-reading the producer's tail (acquire,
 * pairs with the release in shunt_ring_publish), or -EPROTO if impossible.
 */
static inline long shunt_ring_avail(struct shunt_ring *ring)
{
	uint64_t tail = atomic_load_explicit(&ring->ctl->tail, memory_order_acquire);
	uint64_t avail = tail - ring->pos;

	if (avail > ring->size)
		return -EPROTO;
	ring->seen = tail;
	return (long)avail;
}

/* Consumer: bytes available according to the last tail seen. */
static inline size_t shunt_ring_avail_cached(const struct shunt_ring *ring)
{
	return (size_t)(ring->seen - ring->pos);
}

/*
 * Copy @len bytes into the ring at @off past our tail (caller checked
 * space). Large copies stream past the cache (see copy.h); their stores are
 * ordered before the tail by the fence in shunt_ring_publish.
 */
static inline void shunt_ring_put(struct shunt_ring *ring, size_t off, const void *src, size_t len)
{
	size_t at = (size_t)((ring->pos + off) & (ring->size - 1));
	size_t first = ring->size - at;

	if (len < SHUNT_COPY_STREAM_MIN) {
		if (first >= len) {
			memcpy(ring->data + at, src, len);
		} else {
			memcpy(ring->data + at, src, first);
			memcpy(ring->data, (const uint8_t *)src + first, len - first);
		}
		return;
	}
	ring->streamed = 1;
	if (first >= len) {
		shunt_copy_stream(ring->data + at, src, len);
	} else {
		shunt_copy_stream(ring->data + at, src, first);
		shunt_copy_stream(ring->data, (const uint8_t *)src + first, len - first);
	}
}

/* Copy @len bytes out of the ring at @off past our head (caller checked avail). */
static inline void shunt_ring_get(const struct shunt_ring *ring, size_t off, void *dst, size_t len)
{
	size_t at = (size_t)((ring->pos + off) & (ring->size - 1));
	size_t first = ring->size - at;

	if (first >= len) {
		memcpy(dst, ring->data + at, len);
	} else {
		memcpy(dst, ring->data + at, first);
		memcpy((uint8_t *)dst + first, ring->data, len - first);
	}
}

/*
 * A copy that may stop short (the preload's copies of program memory):
 * returns the bytes it did not copy, 0 when it copied them all.
 */
typedef size_t (*shunt_ring_copy_fn)(void *dst, const void *src, size_t len);

/*
 * shunt_ring_put with the caller's copies: @plain below
 * SHUNT_COPY_STREAM_MIN bytes, else @stream (its stores fenced by
 * shunt_ring_publish, as shunt_copy_stream's). 0, or -EFAULT when a copy
 * stopped short; then nothing of it may be published.
 */
static inline int shunt_ring_put_by(struct shunt_ring *ring, size_t off, const void *src,
				    size_t len, shunt_ring_copy_fn plain, shunt_ring_copy_fn stream)
{
	size_t at = (size_t)((ring->pos + off) & (ring->size - 1));
	size_t first = ring->size - at;
	shunt_ring_copy_fn copy = len < SHUNT_COPY_STREAM_MIN ? plain : stream;

	if (copy == stream)
		ring->streamed = 1;
	if (first >= len)
		return copy(ring->data + at, src, len) ? -EFAULT : 0;
	if (copy(ring->data + at, src, first) ||
	    copy(ring->data, (const uint8_t *)src + first, len - first))
		return -EFAULT;
	return 0;
}

/* shunt_ring_get with the caller's copy: 0, or -EFAULT when it stopped short. */
static inline int shunt_ring_get_by(const struct shunt_ring *ring, size_t off, void *dst,
				    size_t len, shunt_ring_copy_fn copy)
{
	size_t at = (size_t)((ring->pos + off) & (ring->size - 1));
	size_t first = ring->size - at;

	if (first >= len)
		return copy(dst, ring->data + at, len) ? -EFAULT : 0;
	if (copy(dst, ring->data + at, first) ||
	    copy((uint8_t *)dst + first, ring->data, len - first))
		return -EFAULT;
	return 0;
}

/*
 * After taking the lock of our side: another holder (a process sharing the
 * socket) may have moved our index since we last held it. Take the shared
 * value and forget what we cached of the other side's; every use of either
 * is checked as always, so a value the peer wrote there is harmless.
 */
static inline void shunt_ring_resync(struct shunt_ring *ring, int producer)
{
	_Atomic uint64_t *mine = producer ? &ring->ctl->tail : &ring->ctl->head;
	uint64_t pos = atomic_load_explicit(mine, memory_order_relaxed);

	if (pos != ring->pos) {
		ring->pos = pos;
		ring->seen = producer ? atomic_load_explicit(&ring->ctl->head, memory_order_acquire)
				      : pos;
	}
}

/*
 * Bytes in the ring by the shared indices alone, for readiness checks made
 * without the lock; more than the ring holds means the indices are broken.
 */
static inline uint64_t shunt_ring_used_shared(const struct shunt_ring *ring)
{
	uint64_t tail = atomic_load_explicit(&ring->ctl->tail, memory_order_acquire);

	return tail - atomic_load_explicit(&ring->ctl->head, memory_order_acquire);
}

/*
 * Producer: order the streaming stores made so far before any later store,
 * here and in whichever thread publishes them (release semantics do not).
 */
static inline void shunt_ring_fence(struct shunt_ring *ring)
{
	if (ring->streamed) {
		shunt_copy_fence();
		ring->streamed = 0;
	}
}

/* Producer: make @len more bytes visible (release, pairs with shunt_ring_avail). */
static inline void shunt_ring_publish(struct shunt_ring *ring, size_t len)
{
	shunt_ring_fence(ring);
	ring->pos += len;
	atomic_store_explicit(&ring->ctl->tail, ring->pos, memory_order_release);
}

/*
 * Producer: count @len bytes just put at the write position as written,
 * without making them visible yet (held back, as by TCP_CORK).
 */
static inline void shunt_ring_hold(struct shunt_ring *ring, size_t len)
{
	ring->pos += len;
	ring->held += len;
}

/*
 * Producer: make every byte written visible but the last @keep (release,
 * pairs with shunt_ring_avail).
 */
static inline void shunt_ring_publish_held(struct shunt_ring *ring, size_t keep)
{
	shunt_ring_fence(ring);
	ring->held = keep;
	atomic_store_explicit(&ring->ctl->tail, ring->pos - keep, memory_order_release);
}

/*
 * Give back the memory of the pages lying wholly inside ring positions
 * [@from, @to): they leave the memfd (MADV_REMOVE punches a hole in a
 * shared memory file, in every mapping of it at once) and read as zeros
 * until someone writes them again, which costs a page fault then. The
 * caller makes sure nobody can read or write those bytes meanwhile: a
 * producer holding its lock outside [head, write position), a consumer
 * inside what it consumed before it publishes the head. A range longer
 * than the ring is the whole ring. Returns the bytes given back (0: no
 * whole page in the range), or -errno (a seccomp filter may forbid the
 * call, the mapping may be locked): then the pages just stay.
 */
long shunt_ring_give_back(struct shunt_ring *ring, uint64_t from, uint64_t to);

/* Consumer: return @len bytes of credit (release, pairs with shunt_ring_space). */
static inline void shunt_ring_consume(struct shunt_ring *ring, size_t len)
{
	ring->pos += len;
	atomic_store_explicit(&ring->ctl->head, ring->pos, memory_order_release);
}

#endif
