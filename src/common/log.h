/* SPDX-License-Identifier: MIT */
/* Logging to stderr with a program prefix and a level chosen once at start. */
#ifndef SHUNT_LOG_H
#define SHUNT_LOG_H

enum shunt_log_level {
	SHUNT_LOG_QUIET = 0,
	SHUNT_LOG_ERROR = 1,
	SHUNT_LOG_WARN = 2,
	SHUNT_LOG_INFO = 3,
	SHUNT_LOG_DEBUG = 4,
};

/* Set the prefix ("shunt", "shuntd") and level. Call once before logging. */
void shunt_log_setup(const char *prefix, enum shunt_log_level level);

/* The pid to print when a seccomp filter forbids asking for it. */
void shunt_log_set_pid(int pid);

/* Parse "quiet|error|warn|info|debug" (NULL: @dflt). */
enum shunt_log_level shunt_log_parse(const char *s, enum shunt_log_level dflt);

/* Whether a message at @level would be printed. */
int shunt_log_enabled(enum shunt_log_level level);

/*
 * Print one line "prefix[pid]: message" if @level is enabled. Writes with a
 * raw write(2) on fd 2, so it never re-enters the preload's wrappers and
 * leaves errno as it found it.
 */
void shunt_log(enum shunt_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#define shunt_err(...) shunt_log(SHUNT_LOG_ERROR, __VA_ARGS__)
#define shunt_warn(...) shunt_log(SHUNT_LOG_WARN, __VA_ARGS__)
#define shunt_info(...) shunt_log(SHUNT_LOG_INFO, __VA_ARGS__)
#define shunt_debug(...) shunt_log(SHUNT_LOG_DEBUG, __VA_ARGS__)

#endif
