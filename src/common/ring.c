// SPDX-License-Identifier: MIT
/* Attaching a side to one byte ring of a mapped circuit. */
#include "common/ring.h"

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
