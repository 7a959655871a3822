/* SPDX-License-Identifier: MIT */
/* Mapping a circuit memfd handed over by shuntd, after checking its geometry. */
#ifndef SHUNT_COMMON_CIRCUIT_H
#define SHUNT_COMMON_CIRCUIT_H

#include <stdbool.h>
#include <stdint.h>

#include "shunt/circuit.h"

/* Whether @ring_size is a size shuntd may use: a power of two in range. */
bool shunt_circuit_ring_size_ok(uint32_t ring_size);

/*
 * Map the circuit in @memfd read-write. The memfd must be exactly
 * shunt_circuit_size(@ring_size) bytes and sealed against shrinking, so no
 * one can truncate it under us (a SIGBUS on access). The fd stays open; the
 * caller closes it. Returns 0 and *@out, or -errno.
 */
int shunt_circuit_map(int memfd, uint32_t ring_size, struct shunt_circuit_hdr **out);

/*
 * The same for a circuit that starts @offset bytes into @memfd (a channel's
 * slot, include/shunt/chan.h): the memfd must hold all of it, @offset must
 * be page aligned.
 */
int shunt_circuit_map_at(int memfd, uint64_t offset, uint32_t ring_size,
			 struct shunt_circuit_hdr **out);

void shunt_circuit_unmap(struct shunt_circuit_hdr *hdr, uint32_t ring_size);

#endif
