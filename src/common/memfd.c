// SPDX-License-Identifier: MIT
/* Mapping a memfd shuntd sent, after checking its size, through the seccomp gate. */
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "common/memfd.h"
#include "common/sys.h"

int shunt_memfd_map(int memfd, size_t size, int prot, const void *at, void **out)
{
	struct stat st;

	/* Raw calls, so that the seccomp gate judges them. */
	if (shunt_syscall(SYS_fstat, memfd, &st) < 0 || (size_t)st.st_size != size)
		return -EPROTO;
	return shunt_memfd_map_range(memfd, 0, size, prot, at, out);
}

int shunt_memfd_map_range(int memfd, uint64_t offset, size_t size, int prot, const void *at,
			  void **out)
{
	void *p = (void *)shunt_syscall(SYS_mmap, at, size, prot,
					MAP_SHARED | (at ? MAP_FIXED : 0), memfd, (long)offset);

	if (p == MAP_FAILED)
		return -errno;
	*out = p;
	return 0;
}
