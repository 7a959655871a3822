// SPDX-License-Identifier: MIT
/* The C library's own versions of the functions libshunt interposes. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "common/once.h"
#include "common/sys.h"
#include "preload/libc.h"

struct shunt_libc shunt_libc;

struct shunt_once shunt_libc_once = SHUNT_ONCE_INIT;

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

#define SHUNT_LIBC_ENTRY(ret, name, args) { #name, (void **)&shunt_libc.name },
static const struct {
	const char *name;
	void **slot;
} symbols[] = { SHUNT_LIBC_FUNCTIONS(SHUNT_LIBC_ENTRY) };
#undef SHUNT_LIBC_ENTRY

static void resolve(void)
{
	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		*symbols[i].slot = dlsym(RTLD_NEXT, symbols[i].name);
		if (!*symbols[i].slot && !optional(symbols[i].name))
			die_missing(symbols[i].name);
	}
}

void shunt_libc_resolve_once(void)
{
	shunt_once(&shunt_libc_once, resolve);
}
