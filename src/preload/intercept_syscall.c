// SPDX-License-Identifier: MIT
/*
 * The exported syscall(): programs make some socket calls through the C
 * library's generic system call function instead of its wrappers (libuv
 * closes every descriptor with syscall(SYS_close, fd), test suites call
 * syscall(__NR_accept4, ...)), and libseccomp installs filters with
 * syscall(__NR_seccomp, ...). The numbers that concern the library are
 * routed to its own handling; every other number goes to the kernel as is,
 * past the seccomp gate: it is the application's call, for its filters to
 * judge.
 */
#include <errno.h>
#include <stdarg.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/init.h"
#include "preload/seccomp.h"

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
	case SYS_seccomp:
		return shunt_seccomp_syscall(a);
	case SYS_prctl:
		return shunt_seccomp_prctl(a);
	default:
		break;
	}
	return shunt_syscall_app(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
