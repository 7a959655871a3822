// SPDX-License-Identifier: MIT
/* The C library's own versions of the functions libshunt interposes. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/libc.h"

struct shunt_libc shunt_libc;

static void die_missing(const char *name)
{
	static const char pre[] = "shunt: the C library has no symbol ";
	/* No stdio: we may be called from inside the application's I/O. */
	(void)!shunt_syscall(SYS_write, 2, pre, sizeof(pre) - 1);
	(void)!shunt_syscall(SYS_write, 2, name, strlen(name));
	(void)!shunt_syscall(SYS_write, 2, "; cannot continue\n", 18);
	abort();
}

/* Optional: glibc versions without a symbol keep NULL and never see calls to it. */
static int optional(const char *name)
{
	return !strcmp(name, "fcntl64") || !strcmp(name, "__ppoll_chk") ||
	       !strcmp(name, "__poll_chk") || !strcmp(name, "epoll_pwait2") ||
	       !strcmp(name, "execveat") || !strcmp(name, "pidfd_open") ||
	       !strcmp(name, "pidfd_getfd") || !strcmp(name, "fanotify_init") ||
	       !strcmp(name, "memfd_create") || !strcmp(name, "_Fork");
}

void *shunt_libc_find(void **slot, const char *name)
{
	void *p = dlsym(RTLD_NEXT, name);

	if (!p && !optional(name))
		die_missing(name);
	/* Threads that race here find the same address. */
	__atomic_store_n(slot, p, __ATOMIC_RELEASE);
	return p;
}
