// SPDX-License-Identifier: MIT
/*
 * The shared memory shuntd hands out: anonymous memfds, never named (no
 * /dev/shm file anyone else could open), sealed so that no holder can
 * shrink or grow them under another (a SIGBUS in the victim).
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/shuntd.h"

int shuntd_memfd_sealed(const char *name, size_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), r;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}
