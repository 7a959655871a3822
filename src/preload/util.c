// SPDX-License-Identifier: MIT
/* Internal descriptors kept out of the application's low numbers. */
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <sys/resource.h>

#include "common/sys.h"
#include "preload/fdtable.h"
#include "preload/util.h"

uint32_t shunt_pid;

static _Atomic long last_nofile = -1;

long shunt_rlimit_nofile(void)
{
	struct rlimit rl;
	long lim;

	/* A raw call, so that the seccomp gate judges it. */
	if (shunt_syscall(SYS_prlimit64, 0L, (long)RLIMIT_NOFILE, NULL, &rl) < 0) {
		lim = atomic_load_explicit(&last_nofile, memory_order_relaxed);
		return errno == SHUNT_SYS_DENIED && lim >= 0 ? lim : -errno;
	}
	lim = rl.rlim_cur > LONG_MAX ? LONG_MAX : (long)rl.rlim_cur;
	atomic_store_explicit(&last_nofile, lim, memory_order_relaxed);
	return lim;
}

int shunt_fd_hide(int fd)
{
	long lim = shunt_rlimit_nofile(), base;
	long moved;

	if (lim < 64) {
		shunt_fdt_mark_hidden(fd, 1);
		return fd;
	}
	/* A quarter from the top of the soft limit, but not absurdly high. */
	base = lim - lim / 4;
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
