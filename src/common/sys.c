// SPDX-License-Identifier: MIT
/*
 * shunt_syscall: the C library's syscall(), bypassing every interposer. The
 * library exports a syscall() of its own (programs close descriptors with
 * it), so its internal system calls must not reach that one.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>

#include "common/once.h"
#include "common/sys.h"

static long (*libc_syscall)(long, ...);
static struct shunt_once find_once = SHUNT_ONCE_INIT;

static void find(void)
{
	libc_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	/* Not behind us (a program linking us directly): whichever is first. */
	if (!libc_syscall)
		libc_syscall = (long (*)(long, ...))dlsym(RTLD_DEFAULT, "syscall");
	if (!libc_syscall)
		abort();
}

long shunt_syscall(long nr, ...)
{
	va_list ap;
	long a[6];

	/*
	 * Six arguments, whatever the call takes: what glibc's syscall()
	 * itself reads, from the registers a variadic call fills.
	 */
	va_start(ap, nr);
	for (int i = 0; i < 6; i++)
		a[i] = va_arg(ap, long);
	va_end(ap);
	shunt_once(&find_once, find);
	return libc_syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]);
}
