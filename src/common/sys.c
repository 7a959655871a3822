// SPDX-License-Identifier: MIT
/*
 * shunt_syscall: the C library's syscall(), bypassing every interposer. The
 * library exports a syscall() of its own (programs close descriptors with
 * it), so its internal system calls must not reach that one.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/sys.h"

static long (*libc_syscall)(long, ...);
static pthread_once_t find_once = PTHREAD_ONCE_INIT;

static void find(void)
{
	libc_syscall = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	/* Not behind us (a program linking us directly): whichever is first. */
	if (!libc_syscall)
		libc_syscall = (long (*)(long, ...))dlsym(RTLD_DEFAULT, "syscall");
	if (!libc_syscall)
		abort();
}

long shunt_syscall6(long nr, long a, long b, long c, long d, long e, long f)
{
	pthread_once(&find_once, find);
	return libc_syscall(nr, a, b, c, d, e, f);
}
