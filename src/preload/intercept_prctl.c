// SPDX-License-Identifier: MIT
/*
 * The exported prctl(): PR_SET_SECCOMP installs a seccomp filter or strict
 * mode (the way libseccomp falls back to, and the way OpenSSH's sandbox
 * and many others take), which the library must know of before it takes
 * effect. Every other option goes to the kernel as is.
 */
#include <stdarg.h>
#include <sys/prctl.h>

#include "preload/init.h"
#include "preload/seccomp.h"

SHUNT_EXPORT int prctl(int option, ...)
{
	long a[6] = { option };
	va_list ap;

	/* Four more arguments, whatever the option takes, as glibc's prctl() passes them. */
	va_start(ap, option);
	for (int i = 1; i < 5; i++)
		a[i] = (long)va_arg(ap, unsigned long);
	va_end(ap);
	/* Only a seccomp filter concerns the library; dormant, nothing else starts it (init.h). */
	if (option == PR_SET_SECCOMP || !shunt_dormant())
		shunt_ensure_init();
	return (int)shunt_seccomp_prctl(a);
}
