/* SPDX-License-Identifier: MIT */
/*
 * Mapping a memfd shuntd sent: its directory, a journal, a channel, a link,
 * a circuit. What lies inside is the caller's to check (magic, version,
 * geometry): nothing read from shared memory is trusted.
 */
#ifndef SHUNT_COMMON_MEMFD_H
#define SHUNT_COMMON_MEMFD_H

#include <stddef.h>
#include <stdint.h>

/*
 * Map all of @memfd, which must be exactly @size bytes: shared, with @prot,
 * at @at (MAP_FIXED, in place of what is mapped there, so that a reader
 * never touches an unmapped page) or, when @at is NULL, where the kernel
 * puts it. Both system calls go through shunt_syscall, so that the seccomp
 * gate judges them. The memfd stays open; the caller closes it. Returns 0
 * and *@out; -EPROTO when fstat fails or the size differs (what we cannot
 * measure is not what shuntd promised); or mmap's -errno.
 */
int shunt_memfd_map(int memfd, size_t size, int prot, const void *at, void **out);

/*
 * The mapping alone, of @size bytes from @offset, for a caller that checked
 * for itself that @memfd holds them (a circuit in a channel's slot).
 * Returns 0 and *@out, or mmap's -errno.
 */
int shunt_memfd_map_range(int memfd, uint64_t offset, size_t size, int prot, const void *at,
			  void **out);

#endif
