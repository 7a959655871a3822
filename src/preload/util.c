// SPDX-License-Identifier: MIT
/* Internal descriptors kept out of the application's low numbers. */
#include <fcntl.h>
#include <sys/resource.h>

#include "common/sys.h"
#include "preload/fdtable.h"
#include "preload/util.h"

uint32_t shunt_pid;

int shunt_fd_hide(int fd)
{
	struct rlimit rl;
	rlim_t base;
	long moved;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < 64) {
		shunt_fdt_mark_hidden(fd, 1);
		return fd;
	}
	/* A quarter from the top of the soft limit, but not absurdly high. */
	base = rl.rlim_cur - rl.rlim_cur / 4;
	if (base > 32768)
		base = 32768;
	moved = shunt_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, (long)base);
	if (moved < 0) {
		moved = fd;
	} else {
		shunt_close_internal(fd);
	}
	shunt_fdt_mark_hidden((int)moved, 1);
	return (int)moved;
}

void shunt_close_hidden(int fd)
{
	shunt_fdt_mark_hidden(fd, 0);
	shunt_close_internal(fd);
}
