// SPDX-License-Identifier: MIT
/* Attaching a side to one byte ring of a mapped circuit, and giving its pages back. */
#include <sys/mman.h>
#include <unistd.h>

#include "common/ring.h"
#include "common/sys.h"

void shunt_ring_attach(struct shunt_ring *ring, struct shunt_circuit_hdr *hdr, unsigned r,
		       uint32_t ring_size, int producer)
{
	ring->ctl = &hdr->ring[r];
	ring->data = (uint8_t *)hdr + shunt_ring_offset(r, ring_size);
	ring->size = ring_size;
	/*
	 * Start from what the shared indices say. A fresh circuit has both at 0;
	 * later attachers (a process that received the socket) trust only their
	 * own index from then on and re-check the other side's on every read.
	 */
	ring->pos = atomic_load_explicit(producer ? &ring->ctl->tail : &ring->ctl->head,
					 memory_order_acquire);
	ring->seen = ring->pos;
	ring->held = ring->held_told = 0;
	ring->streamed = 0;
}

/* Give back the whole pages of [@p, @p + @len): how many bytes, or -errno. */
static long give_back(uint8_t *p, size_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1);
	uintptr_t b = ((uintptr_t)p + len) & ~(page - 1);

	if (b <= a)
		return 0;
	/* A raw call, so that the preload's seccomp gate judges it. */
	return shunt_syscall(SYS_madvise, a, b - a, MADV_REMOVE) < 0 ? -errno : (long)(b - a);
}

long shunt_ring_give_back(struct shunt_ring *ring, uint64_t from, uint64_t to)
{
	uint64_t len = to - from;
	size_t at = (size_t)(from & (ring->size - 1)), first = ring->size - at;
	long a, b;

	/* All of it: in one piece, or the page the wrap splits would stay. */
	if (len >= ring->size)
		return give_back(ring->data, ring->size);
	if (first >= len)
		return give_back(ring->data + at, (size_t)len);
	a = give_back(ring->data + at, first);
	b = give_back(ring->data, (size_t)len - first);
	return a < 0 ? a : b < 0 ? b : a + b;
}
