// SPDX-License-Identifier: MIT
/*
 * Every exit of shuntd leaves a line saying why. The ordinary ones are said
 * by the loop and main(); this file covers the rest: a fatal signal (a
 * crash, an abort) prints what it was, where, and a backtrace, then dies of
 * that signal as it would have (core dump included). Only SIGKILL (the OOM
 * killer, kill -9) leaves no line: nothing runs then.
 */
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/shuntd.h"

enum { ALT_STACK = 64 << 10, FRAMES = 64 };

static char alt_stack[ALT_STACK];
#ifdef __SANITIZE_ADDRESS__
/* ASan reports faults itself, and better: it keeps those three. */
static const int fatal[] = { SIGILL, SIGABRT, SIGSYS, SIGTRAP };
#else
static const int fatal[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGSYS, SIGTRAP };
#endif

/* Only async-signal-safe calls below: snprintf into a stack buffer, write. */
static void on_fatal(int sig, siginfo_t *si, void *uctx)
{
	void *frames[FRAMES];
	char line[256];
	int n, len;

	(void)uctx;
	/* si_code <= 0: sent by a process (kill, raise, abort), not a fault. */
	if (si && si->si_code <= 0)
		len = snprintf(line, sizeof(line),
			       "shuntd[%d]: dying of signal %d (%s) sent by pid %d; backtrace:\n",
			       (int)getpid(), sig, sigabbrev_np(sig) ?: "?", (int)si->si_pid);
	else
		len = snprintf(line, sizeof(line),
			       "shuntd[%d]: dying of signal %d (%s), code %d, address %p; "
			       "backtrace:\n", (int)getpid(), sig, sigabbrev_np(sig) ?: "?",
			       si ? si->si_code : 0, si ? si->si_addr : NULL);
	if (len > 0)
		(void)!write(2, line, (size_t)len < sizeof(line) ? (size_t)len : sizeof(line) - 1);
	n = backtrace(frames, FRAMES);
	backtrace_symbols_fd(frames, n, 2);
	/* SA_RESETHAND put the default action back: die of it, as without us. */
	raise(sig);
}

void shuntd_crash_init(void)
{
	stack_t ss = { .ss_sp = alt_stack, .ss_size = sizeof(alt_stack) };
	struct sigaction sa;
	void *warm[1];

	/* backtrace() loads libgcc on its first call: not in a signal handler. */
	backtrace(warm, 1);
	sigaltstack(&ss, NULL);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fatal;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		sigaction(fatal[i], &sa, NULL);
}
