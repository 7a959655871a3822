// SPDX-License-Identifier: MIT
/* Logging to stderr with a program prefix and a level chosen once at start. */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "common/log.h"
#include "common/sys.h"

/* Written once by shunt_log_setup before any thread logs. */
static const char *log_prefix = "shunt";
static enum shunt_log_level log_level = SHUNT_LOG_WARN;
static _Atomic int known_pid;	/* for when getpid is forbidden (seccomp) */

void shunt_log_set_pid(int pid)
{
	atomic_store_explicit(&known_pid, pid, memory_order_relaxed);
}

void shunt_log_setup(const char *prefix, enum shunt_log_level level)
{
	log_prefix = prefix;
	log_level = level;
}

enum shunt_log_level shunt_log_parse(const char *s, enum shunt_log_level dflt)
{
	static const char *const names[] = { "quiet", "error", "warn", "info", "debug" };

	if (!s || !*s)
		return dflt;
	for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(s, names[i]))
			return (enum shunt_log_level)i;
	return dflt;
}

int shunt_log_enabled(enum shunt_log_level level)
{
	return level <= log_level;
}

void shunt_log(enum shunt_log_level level, const char *fmt, ...)
{
	char line[512];
	int saved = errno;
	va_list ap;
	int n;

	if (!shunt_log_enabled(level))
		return;
	/* Through the gate: in the preload, a seccomp filter may forbid getpid. */
	long pid = shunt_syscall(SYS_getpid);

	if (pid < 0)
		pid = atomic_load_explicit(&known_pid, memory_order_relaxed);
	n = snprintf(line, sizeof(line), "%s[%ld]: ", log_prefix, pid);
	va_start(ap, fmt);
	n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(line) - 2)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	(void)!shunt_syscall(SYS_write, 2, line, (size_t)n);
	errno = saved;
}
