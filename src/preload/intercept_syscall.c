// SPDX-License-Identifier: MIT
/*
 * The exported syscall(): programs make some socket calls through the C
 * library's generic system call function instead of its wrappers (libuv
 * closes every descriptor with syscall(SYS_close, fd), test suites call
 * syscall(__NR_accept4, ...)). The numbers that concern the library are
 * routed to its own handling; every other number goes to the kernel as is.
 */
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/init.h"
#include "preload/uring.h"

SHUNT_EXPORT long syscall(long nr, ...)
{
	va_list ap;
	long a[6];

	/* Six arguments, whatever the call takes, as glibc's own syscall() reads them. */
	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	shunt_ensure_init();
	switch (nr) {
	case SYS_io_uring_setup:
	case SYS_io_uring_enter:
	case SYS_io_uring_register:
		return shunt_uring_syscall(nr, a);
	default:
		break;
	}
	return shunt_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
