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

int shuntd_memfd_published(const char *name, size_t size, void **map)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING), r;
	void *p = MAP_FAILED;

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0)
		goto fail;
	/* Ours is mapped before the seal: it stays writable, no later mapping can be. */
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE |
		  F_SEAL_SEAL) < 0)
		goto fail;
	*map = p;
	return fd;
fail:
	r = -errno;
	if (p != MAP_FAILED)
		munmap(p, size);
	close(fd);
	return r;
}
