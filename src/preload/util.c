// SPDX-License-Identifier: MIT
/* Internal descriptors kept out of the application's way, in the reserve (fdlimit.c). */
#include <errno.h>
#include <fcntl.h>

#include "common/sys.h"
#include "preload/fdlimit.h"
#include "preload/fdroom.h"
#include "preload/fdtable.h"
#include "preload/util.h"

uint32_t shunt_pid;

int shunt_fd_dup_hidden(int fd)
{
	for (;;) {
		long moved = shunt_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, (long)shunt_fdlimit_base());
		int err = errno;

		if (moved >= 0) {
			shunt_fdt_mark_hidden((int)moved, 1);
			return (int)moved;
		}
		/* No free number there (EINVAL: the limit was lowered under it): a larger reserve. */
		if ((err != EMFILE && err != EINVAL) || shunt_fdlimit_grow() < 0)
			return err == EINVAL ? -EMFILE : -err;
	}
}

int shunt_fd_hide(int fd)
{
	int moved;

	/* A reply's, landed on the room kept for it: already where it belongs. */
	if (shunt_fdroom_claim(fd)) {
		shunt_fdt_mark_hidden(fd, 1);
		return fd;
	}
	moved = shunt_fd_dup_hidden(fd);

	shunt_close_internal(fd);
	return moved;
}

void shunt_close_reply(int fd)
{
	if (!shunt_fdroom_return(fd))
		shunt_close_internal(fd);
}

void shunt_close_replies(const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			shunt_close_reply(fds[i]);
}

void shunt_close_hidden(int fd)
{
	/* Where the program's range is shared, the room kept for a reply first. */
	if (shunt_fdroom_keep(fd))
		return;
	shunt_fdt_mark_hidden(fd, 0);
	shunt_close_internal(fd);
}
