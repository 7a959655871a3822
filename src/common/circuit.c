// SPDX-License-Identifier: MIT
/* Mapping a circuit memfd handed over by shuntd, after checking its geometry. */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/circuit.h"
#include "common/memfd.h"
#include "common/sys.h"

bool shunt_circuit_ring_size_ok(uint32_t ring_size)
{
	return ring_size >= SHUNT_RING_MIN && ring_size <= SHUNT_RING_MAX &&
	       (ring_size & (ring_size - 1)) == 0;
}

int shunt_circuit_map(int memfd, uint32_t ring_size, struct shunt_circuit_hdr **out)
{
	return shunt_circuit_map_at(memfd, 0, ring_size, out);
}

int shunt_circuit_map_at(int memfd, uint64_t offset, uint32_t ring_size,
			 struct shunt_circuit_hdr **out)
{
	size_t size = shunt_circuit_size(ring_size);
	struct stat st;
	void *p;
	int seals, r;

	if (!shunt_circuit_ring_size_ok(ring_size) || offset % SHUNT_CIRCUIT_HDR_SIZE)
		return -EINVAL;
	/* Raw calls, so that the preload's seccomp gate judges them. */
	if (shunt_syscall(SYS_fstat, memfd, &st) < 0)
		return -errno;
	/* A circuit of its own fills its memfd; a channel's slot lies within it. */
	if (!S_ISREG(st.st_mode) || (offset ? (uint64_t)st.st_size < offset + size ||
					      offset + size < offset
					    : (size_t)st.st_size != size))
		return -EPROTO;
	/* A raw call: in the preload, fcntl() is the library's own wrapper. */
	seals = (int)shunt_syscall(SYS_fcntl, memfd, F_GET_SEALS);
	if (seals < 0)
		return -errno;
	if (!(seals & F_SEAL_SHRINK))
		return -EPROTO;
	r = shunt_memfd_map_range(memfd, offset, size, PROT_READ | PROT_WRITE, NULL, &p);
	if (r < 0)
		return r;
	*out = p;
	return 0;
}

void shunt_circuit_unmap(struct shunt_circuit_hdr *hdr, uint32_t ring_size)
{
	/* A seccomp filter may forbid it: then the mapping stays until exit. */
	if (hdr)
		shunt_syscall(SYS_munmap, hdr, shunt_circuit_size(ring_size));
}
