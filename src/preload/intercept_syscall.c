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
#include "preload/fault.h"
#include "preload/init.h"

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
	case SYS_rt_sigaction:
		/* The program's SIGSEGV and SIGBUS are kept by the library (fault.c). */
		if (shunt_fault_sig((int)a[0]))
			return shunt_fault_rt_sigaction(a[0], a[1], a[2], a[3]);
		break;
	default:
		break;
	}
	return shunt_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
