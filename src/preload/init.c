// SPDX-License-Identifier: MIT
/*
 * Start of the library, once per process (shunt_once), and what a fork
 * child must redo. SHUNT_DISABLE=1 turns every socket into a plain kernel
 * socket; so does starting under a seccomp filter the library never saw
 * installed.
 *
 * The start is lazy: it costs a new process about 60 µs of CPU (the
 * seccomp check reads /proc/self/status, the descriptor table is sized,
 * the descriptors the process began with are looked at: docs/connect.md),
 * which most programs a shell or make runs never need. Until a call that
 * can make or meet a socket (socket, accept, connect, epoll, a SIGSEGV
 * handler, a seccomp filter...) the library is dormant (init.h) and every
 * other call goes to the C library as if it were not loaded. The one exception starts at once: a
 * program exec'd with connections kept in shared memory for it (its
 * descriptors are ours from its first instruction), which the program
 * before the exec marks in the new image's environment (exec.c).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/once.h"
#include "common/sys.h"
#include "preload/control.h"
#include "preload/fault.h"
#include "preload/exec.h"
#include "preload/fdtable.h"
#include "preload/fork.h"
#include "preload/handoff.h"
#include "preload/inherited.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/notice.h"
#include "preload/ops.h"
#include "preload/seccomp.h"
#include "preload/stats.h"
#include "preload/util.h"
#include "preload/spin.h"
#include "preload/wait.h"

_Atomic bool shunt_ready;
_Atomic bool shunt_start_begun;
__thread bool shunt_starting_here __attribute__((tls_model("initial-exec")));
static struct shunt_once start_once = SHUNT_ONCE_INIT;
static bool enabled;		/* written once by init */
/* calls under way that began dormant (shunt_dormant_enter), and this thread's */
static _Atomic unsigned dormant_calls;
static __thread unsigned my_dormant_calls;
/* this thread's fork found the library started: its handlers run */
static __thread bool fork_started;

bool shunt_enabled(void)
{
	return enabled;
}

/*
 * Said only when asked for (SHUNT_LOG=info), with a call the gate does not
 * judge: the one system call of the library's own under an unknown filter,
 * a write to stderr, which a program that has a stderr is allowed.
 */
static void say_filtered(void)
{
	static const char msg[] = "]: started under a seccomp filter this library did not see "
				  "installed; every socket stays with the kernel\n";
	char line[256];
	int n;

	if (!shunt_log_enabled(SHUNT_LOG_INFO))
		return;
	n = snprintf(line, sizeof(line), "shunt[%u%s", shunt_pid, msg);
	if (n > 0 && n < (int)sizeof(line))
		(void)!shunt_syscall_app(SYS_write, 2, line, (long)n);
}

bool shunt_dormant_enter(void)
{
	/* D1: with D2, either the start sees this call or this call sees the start. */
	atomic_fetch_add(&dormant_calls, 1);
	if (!atomic_load(&shunt_start_begun)) {
		my_dormant_calls++;
		return true;
	}
	atomic_fetch_sub(&dormant_calls, 1);
	return false;
}

void shunt_dormant_leave(void)
{
	my_dormant_calls--;
	atomic_fetch_sub(&dormant_calls, 1);
}

/* In a child: only this thread lives on, and the dormant calls of others are not its. */
static void only_this_thread(void)
{
	atomic_store(&dormant_calls, my_dormant_calls);
}

void shunt_dormant_fork_leave(pid_t r)
{
	if (r == 0)
		only_this_thread();	/* _Fork runs no fork handler */
	shunt_dormant_leave();
}

/*
 * The library's fork handlers, registered before anything can fork and run
 * only for a library started when the fork began: a start made inside a
 * handler of the program's (its first socket) must not register them then,
 * which would wait for the C library's fork lock, held by that very fork.
 */
static void fork_prepare(void)
{
	fork_started = atomic_load(&shunt_ready);
	if (fork_started)
		shunt_fork_prepare();
}

static void fork_parent(void)
{
	if (fork_started)
		shunt_fork_parent();
}

static void fork_child(void)
{
	only_this_thread();
	if (fork_started)
		shunt_fork_child();
}

static void init(void)
{
	const char *off = getenv("SHUNT_DISABLE");
	unsigned pid, fdsize;
	bool filtered;

	/*
	 * First of all: a process exec'd into a seccomp sandbox must not be
	 * killed for a call of ours, so nothing else is asked of the kernel
	 * before we know (getpid() included).
	 */
	filtered = shunt_seccomp_start(&pid, &fdsize);

	shunt_pid = filtered ? pid : (uint32_t)getpid();
	shunt_log_set_pid((int)shunt_pid);
	/*
	 * Before anything reads program memory, and before the program asks
	 * for its handlers; not under a filter we cannot see, which may kill
	 * the process for rt_sigaction.
	 */
	if (filtered)
		shunt_fault_disable();
	else
		shunt_fault_init();
	shunt_log_setup("shunt", shunt_log_parse(getenv("SHUNT_LOG"), SHUNT_LOG_WARN));
	enabled = !(off && *off && strcmp(off, "0")) && !filtered;
	if (filtered)
		say_filtered();
	if (enabled && shunt_fdt_init() < 0)
		enabled = false;
	shunt_ctl_init();
	shunt_spin_init();
	shunt_stats_init();
	/* After the program's own handlers (atexit runs them in reverse). */
	atexit(shunt_ctl_exit);
	atomic_store_explicit(&shunt_ready, true, memory_order_release);
	shunt_starting_here = false;
	/*
	 * Connections the program before an exec kept in shared memory for us
	 * (their ticket is claimed by the first session, so first), then
	 * listening sockets this program was started with (socket activation,
	 * an exec).
	 */
	if (enabled) {
		struct shunt_inherited *socks;
		size_t n = shunt_inherited_sockets(fdsize, &socks);

		shunt_exec_adopt(socks, n);
		shunt_handoff_inherited(socks, n);
		free(socks);
	}
}

/*
 * Begun before it runs, and after the calls other threads began dormant and
 * must not overlap it (init.h): a fork that copied a start half done would
 * leave its child waiting forever (once.h). This thread's own (a handler of
 * the program's that a fork runs) cannot end first, and need not: the
 * start is done before that fork goes on. Spun, not slept: the seccomp
 * check has not been made.
 */
void shunt_init(void)
{
	/* Set first: a signal may come at any instruction from here on. */
	shunt_starting_here = true;
	/* D2: pairs with D1. */
	atomic_store(&shunt_start_begun, true);
	while (atomic_load(&dormant_calls) > my_dormant_calls)
		shunt_spin_pause();
	shunt_once(&start_once, init);
	shunt_starting_here = false;
}

/*
 * The start waits (above), unless connections were kept for this image
 * across exec. The C library's functions are found at their first call
 * (libc.h), but for those a signal handler may call first: dlsym is not
 * safe in a handler that interrupted the dynamic loader.
 */
__attribute__((constructor)) static void shunt_constructor(void)
{
	(void)SHUNT_LIBC(read);
	(void)SHUNT_LIBC(write);
	(void)SHUNT_LIBC(close);
	(void)SHUNT_LIBC(sigaction);
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	if (getenv(SHUNT_EXEC_KEPT_ENV)) {
		/* The program's environment is the one it was given. */
		unsetenv(SHUNT_EXEC_KEPT_ENV);
		shunt_init();
	}
}
