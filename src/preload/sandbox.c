// SPDX-License-Identifier: MIT
/* Getting the library ready for a seccomp filter, while the filters in force still let it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/conn.h"
#include "preload/control.h"
#include "preload/epoll.h"
#include "preload/fdtable.h"
#include "preload/fdlimit.h"
#include "preload/fork.h"
#include "preload/notice.h"
#include "preload/ops.h"
#include "preload/sandbox.h"
#include "preload/sock.h"
#include "preload/stats.h"
#include "preload/util.h"

/*
 * What running a circuit takes beyond asking shuntd (control.c judges that):
 * mapping its memory (fstat, the seals, a shared mapping, closing the memfd,
 * unmapping at the end), waking the peer (futex, and the eventfd of a link:
 * write), watching links in the hub (epoll_ctl), and for a listener the
 * wait in accept() (ppoll on the socket and its doorbell, sigaction to know
 * whether to restart it). Descriptors are placeholders: a filter that tells
 * descriptors apart is judged again, call by call, by the gate.
 */
static const struct need {
	long nr;
	long args[6];
} circuit_needs[] = {
	{ SYS_fstat, { 0 } },
	{ SYS_fcntl, { 0, F_GET_SEALS } },
	{ SYS_mmap, { 0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, 0, 0 } },
	{ SYS_munmap, { 0 } },
	{ SYS_close, { 0 } },
	{ SYS_futex, { 0, FUTEX_WAKE, INT_MAX } },
	{ SYS_write, { 0, 0, 8 } },
	{ SYS_epoll_ctl, { 0, EPOLL_CTL_ADD, 0, 0 } },
	{ SYS_ppoll, { 0, 2, 0, 0, 8 } },
	{ SYS_rt_sigaction, { 1, 0, 0, 8 } },
};

bool shunt_sandbox_circuits_ok(const struct shunt_chain *c)
{
	if (!c)
		return true;
	for (size_t i = 0; i < sizeof(circuit_needs) / sizeof(circuit_needs[0]); i++)
		if (!shunt_chain_allows(c, circuit_needs[i].nr, circuit_needs[i].args))
			return false;
	return shunt_ctl_usable(c);
}

bool shunt_sandbox_forbids_circuits(void)
{
	return shunt_seccomp_active() && !shunt_sandbox_circuits_ok(shunt_seccomp_chain());
}

/* Remember @s (open as @fd) as let go of, with a reference, for an undo. */
static void note_dropped(struct shunt_sandbox_plan *plan, struct shunt_sock *s, int fd)
{
	struct dropped *d = realloc(plan->dropped, (plan->ndropped + 1) * sizeof(*d));

	if (!d)
		return;		/* an undo leaves it kernel-only: still correct */
	plan->dropped = d;
	if (!shunt_file_tryget(&s->f))
		return;
	d[plan->ndropped++] = (struct dropped){ s, fd };
}

/*
 * Let go of listener @s at shuntd: shunt clients then connect through the
 * kernel, and accept() takes them from the kernel's queue. Its doorbell is
 * left open (a poll() asleep on it looks at it again) but no longer used.
 */
static bool let_go(struct shunt_sock *s)
{
	bool done = false;

	pthread_mutex_lock(&s->lock);
	if (shunt_sock_state(s) == SHUNT_SOCK_LISTENING && s->bells >= 0) {
		/* The doorbell leaves its epoll instances first, then the mode changes. */
		shunt_epoll_sock_bell(s, false);
		shunt_sock_drop_listener(s, false);
		s->bells = -1;
		/* Nobody polls these but epoll, which let go of them above. */
		shunt_sock_close_doorbells(s);
		shunt_epoll_sock_moved(s);
		done = true;
	}
	pthread_mutex_unlock(&s->lock);
	return done;
}

/* Register listener @s, open as @fd, again (an undo). */
static void take_back(struct shunt_sock *s, int fd)
{
	struct shunt_sock *now = shunt_fdt_get(fd);
	if (now)
		shunt_sock_put(now);
	if (now != s)
		return;		/* closed meanwhile */
	pthread_mutex_lock(&s->lock);
	if (shunt_sock_state(s) == SHUNT_SOCK_LISTENING && s->bells < 0 &&
	    shunt_sock_register(s, fd) == 0) {
		shunt_epoll_sock_moved(s);
	}
	pthread_mutex_unlock(&s->lock);
}

/*
 * From now on nobody here can wake the sleepers of @c's ends with a futex:
 * tell them to nap, and wake the ones asleep already so that they hear it.
 */
static void nap(struct shunt_conn *c)
{
	struct shunt_circuit_end *ends[2] = { c->me, c->peer };

	for (int i = 0; i < 2; i++) {
		atomic_store_explicit(&ends[i]->nap, 1, memory_order_relaxed);
		/* The bump tells a sleeper about to sleep that something changed. */
		atomic_fetch_add_explicit(&ends[i]->wake, 1, memory_order_seq_cst);
		shunt_futex_wake(&ends[i]->wake, INT_MAX);
	}
}

void shunt_sandbox_prepare(const struct shunt_chain *now, const struct shunt_chain *next,
			   struct shunt_sandbox_plan *plan)
{
	struct shunt_sock **seen = NULL;
	size_t nseen = 0, high;
	int kick;

	memset(plan, 0, sizeof(*plan));
	plan->next = next;
	plan->circuits = shunt_sandbox_circuits_ok(next);
	plan->wake = shunt_chain_allows(next, SYS_futex, (const long[6]){ 0, FUTEX_WAKE, INT_MAX });
	if (!shunt_enabled())
		return;
	shunt_fork_enter();
	high = shunt_fdt_high();
	for (size_t fd = 0; fd < high; fd++) {
		struct shunt_sock *s = shunt_fdt_get((int)fd);
		struct shunt_sock **more;
		size_t i;
		int st;

		if (!s)
			continue;
		for (i = 0; i < nseen && seen[i] != s; i++)
			;
		more = i == nseen ? realloc(seen, (nseen + 1) * sizeof(*seen)) : NULL;
		if (!more) {
			shunt_sock_put(s);	/* seen already (dup'ed), or no memory: skipped */
			continue;
		}
		seen = more;
		seen[nseen++] = s;
		st = shunt_sock_state(s);
		if (!plan->circuits && st == SHUNT_SOCK_LISTENING && let_go(s))
			note_dropped(plan, s, (int)fd);
		pthread_mutex_lock(&s->lock);
		if (!plan->wake && (st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING) &&
		    s->conn) {
			nap(s->conn);
			plan->napped++;
		}
		pthread_mutex_unlock(&s->lock);
	}
	for (size_t i = 0; i < nseen; i++)
		shunt_sock_put(seen[i]);
	free(seen);
	/*
	 * What waiting in poll() takes, made now: the hub (every circuit has
	 * one already) and this thread's kick descriptor. The descriptor
	 * limit is learnt now (fdlimit.c), while it may still be asked.
	 */
	shunt_notice_hub();
	kick = shunt_notice_kick_begin();
	if (kick >= 0)
		shunt_notice_kick_end(kick);
	shunt_fdlimit_base();
	/* The exit report needs a file it may not be allowed to open then. */
	shunt_stats_keep_open();
	if (shunt_chain_strict(next)) {
		/* Strict mode turns the time-stamp counter off: the vDSO clock would fault. */
		shunt_sys_go_clockless(true);
		plan->clockless = true;
	}
	shunt_fork_leave();
	(void)now;
}

void shunt_sandbox_undo(struct shunt_sandbox_plan *plan)
{
	if (plan->clockless)
		shunt_sys_go_clockless(false);
	shunt_fork_enter();
	for (size_t i = 0; i < plan->ndropped; i++) {
		take_back(plan->dropped[i].s, plan->dropped[i].fd);
		shunt_sock_put(plan->dropped[i].s);
	}
	shunt_fork_leave();
	/*
	 * Ends told to nap stay so: a peer naps where it could sleep, which
	 * costs it a little time, while clearing a word another process may
	 * have set for the same reason could leave its sleepers asleep.
	 */
	free(plan->dropped);
	plan->dropped = NULL;
	plan->ndropped = 0;
}

void shunt_sandbox_done(struct shunt_sandbox_plan *plan, const struct shunt_chain *final)
{
	for (size_t i = 0; i < plan->ndropped; i++)
		shunt_sock_put(plan->dropped[i].s);
	free(plan->dropped);
	plan->dropped = NULL;
	if (final != plan->next) {
		shunt_warn("seccomp: the filter just installed could not be read; the library makes "
			   "no more system calls of its own and new sockets use the kernel");
		return;
	}
	if (shunt_chain_strict(final))
		shunt_info("seccomp: strict mode; shared-memory connections go on, new ones use "
			   "the kernel");
	else if (!plan->circuits)
		shunt_info("seccomp: a filter forbids what shared-memory connections need; "
			   "new connections use the kernel (%zu listener%s let go of shuntd)",
			   plan->ndropped, plan->ndropped == 1 ? "" : "s");
	else
		shunt_info("seccomp: a filter was installed; shared memory goes on");
	if (!plan->wake && plan->napped)
		shunt_info("seccomp: the filter forbids futex wakes: the peers of %u connection%s "
			   "look for data by themselves", plan->napped, plan->napped == 1 ? "" : "s");
}
