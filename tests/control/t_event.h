/* SPDX-License-Identifier: MIT */
/*
 * How tests/control/echod.c and honest.c tell test_hostile.py what
 * happened: JSON lines on stdout, each one whole and flushed at once, from
 * whichever thread.
 */
#ifndef T_EVENT_H
#define T_EVENT_H

#include <stdarg.h>
#include <stdio.h>

/*
 * Print @fmt and its arguments and a newline, and flush. stdout's own lock
 * (recursive: the calls inside take it again) keeps the line whole when
 * several threads print at once.
 */
static inline void t_event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void t_event(const char *fmt, ...)
{
	va_list ap;

	flockfile(stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	funlockfile(stdout);
}

#endif
