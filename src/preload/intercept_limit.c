// SPDX-License-Identifier: MIT
/*
 * Exported wrappers that show the program its own descriptor limit: the
 * library keeps a reserve above it (fdlimit.c), which the program must
 * neither see nor count on. getrlimit, setrlimit and prlimit of
 * RLIMIT_NOFILE for this process go through fdlimit.c; every other resource
 * and process goes to the C library untouched. sysconf(_SC_OPEN_MAX) and
 * getdtablesize() read the limit inside the C library, so they are answered
 * here too.
 */
#include <errno.h>
#include <sys/resource.h>
#include <unistd.h>

#include "preload/fdlimit.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/util.h"

int getrlimit64(__rlimit_resource_t res, struct rlimit64 *rl);
int setrlimit64(__rlimit_resource_t res, const struct rlimit64 *rl);
int prlimit64(pid_t pid, __rlimit_resource_t res, const struct rlimit64 *new,
	      struct rlimit64 *old);

_Static_assert(sizeof(struct rlimit) == sizeof(struct rlimit64) &&
		       sizeof(rlim_t) == sizeof(rlim64_t),
	       "the *64 forms share struct rlimit's layout on this ABI");

SHUNT_EXPORT int getrlimit(__rlimit_resource_t res, struct rlimit *rl)
{
	int saved = errno;

	if (shunt_dormant())
		return SHUNT_LIBC(getrlimit)(res, rl);
	shunt_ensure_init();
	if (res != RLIMIT_NOFILE)
		return SHUNT_LIBC(getrlimit)(res, rl);
	return (int)shunt_ret(shunt_fdlimit_get(rl), saved);
}

SHUNT_EXPORT int setrlimit(__rlimit_resource_t res, const struct rlimit *rl)
{
	int saved = errno;

	if (shunt_dormant())
		return SHUNT_LIBC(setrlimit)(res, rl);
	shunt_ensure_init();
	if (res != RLIMIT_NOFILE)
		return SHUNT_LIBC(setrlimit)(res, rl);
	return (int)shunt_ret(shunt_fdlimit_set(rl), saved);
}

SHUNT_EXPORT int prlimit(pid_t pid, __rlimit_resource_t res, const struct rlimit *new,
			 struct rlimit *old)
{
	int saved = errno;

	if (shunt_dormant())
		return SHUNT_LIBC(prlimit)(pid, res, new, old);
	shunt_ensure_init();
	if (res != RLIMIT_NOFILE || !shunt_fdlimit_is_self(pid))
		return SHUNT_LIBC(prlimit)(pid, res, new, old);
	return (int)shunt_ret(shunt_fdlimit_prlimit(new, old), saved);
}

SHUNT_EXPORT int getrlimit64(__rlimit_resource_t res, struct rlimit64 *rl)
{
	return getrlimit(res, (struct rlimit *)rl);
}

SHUNT_EXPORT int setrlimit64(__rlimit_resource_t res, const struct rlimit64 *rl)
{
	return setrlimit(res, (const struct rlimit *)rl);
}

SHUNT_EXPORT int prlimit64(pid_t pid, __rlimit_resource_t res, const struct rlimit64 *new,
			   struct rlimit64 *old)
{
	return prlimit(pid, res, (const struct rlimit *)new, (struct rlimit *)old);
}

SHUNT_EXPORT long sysconf(int name)
{
	if (shunt_dormant())
		return SHUNT_LIBC(sysconf)(name);
	shunt_ensure_init();
	if (name == _SC_OPEN_MAX)
		return shunt_fdlimit_open_max();
	return SHUNT_LIBC(sysconf)(name);
}

SHUNT_EXPORT int getdtablesize(void)
{
	/* glibc's is the soft limit too. */
	if (shunt_dormant())
		return (int)SHUNT_LIBC(sysconf)(_SC_OPEN_MAX);
	shunt_ensure_init();
	return (int)shunt_fdlimit_open_max();
}
