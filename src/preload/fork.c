// SPDX-License-Identifier: MIT
/* fork(): the child holds what the parent holds, at shuntd too. */
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/chan.h"
#include "preload/conn.h"
#include "preload/control.h"
#include "preload/epoll.h"
#include "preload/family.h"
#include "preload/fdtable.h"
#include "preload/fork.h"
#include "preload/journal.h"
#include "preload/libc.h"
#include "preload/netns.h"
#include "preload/notice.h"
#include "preload/plink.h"
#include "preload/recycle.h"
#include "preload/relisten.h"
#include "preload/sock.h"
#include "preload/spare.h"
#include "preload/trim.h"
#include "preload/util.h"

static pthread_rwlock_t fork_lock = PTHREAD_RWLOCK_INITIALIZER;
/* In a fork child: its claim was sent, and the routes are still the parent's (fork.h). */
static _Atomic bool settle_due;
static pthread_mutex_t settle_lock = PTHREAD_MUTEX_INITIALIZER;

void shunt_fork_enter(void)
{
	pthread_rwlock_rdlock(&fork_lock);
}

void shunt_fork_leave(void)
{
	/*
	 * The end of a call that makes or drops a holding: no other library
	 * lock is held here. Links shuntd prepared for a new connection are
	 * taken now, and listeners registered again with a new shuntd
	 * (usually a load or two: nothing to do).
	 */
	shunt_notice_pull_asked();
	shunt_relisten_run();
	pthread_rwlock_unlock(&fork_lock);
}

void shunt_fork_freeze(void)
{
	pthread_rwlock_wrlock(&fork_lock);
}

void shunt_fork_thaw(void)
{
	pthread_rwlock_unlock(&fork_lock);
}

/* In lock order (notice.h, control.c), so a prepare never waits on a thread waiting on it. */
void shunt_fork_prepare(void)
{
	shunt_notice_fork_prepare();
	shunt_ctl_fork_prepare();
	shunt_plink_fork_prepare();
	shunt_sock_fork_prepare();
	shunt_spare_fork_prepare();
	shunt_epoll_fork_prepare();
	shunt_trim_fork_prepare();
	shunt_chan_fork_prepare();
	shunt_journal_fork_prepare();
}

void shunt_fork_parent(void)
{
	shunt_journal_fork_parent();
	shunt_chan_fork_parent();
	shunt_trim_fork_parent();
	shunt_epoll_fork_parent();
	shunt_spare_fork_parent();
	shunt_sock_fork_parent();
	shunt_plink_fork_parent();
	shunt_ctl_fork_parent();
	shunt_notice_fork_parent();
}

void shunt_fork_child(void)
{
	/* Through the seccomp gate: a filter may forbid getpid (the parent's pid stays). */
	long pid = shunt_syscall(SYS_getpid);

	if (pid > 0)
		shunt_pid = (uint32_t)pid;
	shunt_log_set_pid((int)shunt_pid);
	shunt_trim_fork_child();
	shunt_journal_fork_child();
	shunt_chan_fork_child();
	shunt_epoll_fork_child();
	shunt_spare_fork_child();
	shunt_sock_fork_child();
	shunt_ctl_after_fork();
	shunt_notice_after_fork();
}

/* Whether this process holds a connection carried by a circuit. Under the fork lock. */
static bool holds_circuits(void)
{
	size_t high = shunt_fdt_high();
	bool found = false;

	for (size_t fd = 0; fd < high && !found; fd++) {
		struct shunt_sock *s = shunt_fdt_get((int)fd);

		if (!s)
			continue;
		found = shunt_sock_state(s) == SHUNT_SOCK_CONNECTED ||
			shunt_sock_state(s) == SHUNT_SOCK_CONNECTING;
		shunt_sock_put(s);
	}
	return found;
}

/*
 * In a fork child that no session counts as a holder of its parent's
 * connections (shuntd unreachable at the fork, or refusing the claim): our
 * close must not end them for the parent, as a child closing what it
 * inherited (before exec, say) never ends a kernel connection. They are let
 * go of here: from now on our close only unmaps; the parent's ends them.
 * Right after the fork only this thread exists; a refusal learnt later
 * (shunt_fork_settle) may find others, which a close in the meantime
 * already treated so (shunt_ctl_claim_refused).
 */
static void orphan_inherited(void)
{
	size_t high = shunt_fdt_high();

	for (size_t fd = 0; fd < high; fd++) {
		struct shunt_sock *s = shunt_fdt_get((int)fd);

		if (!s)
			continue;
		if (s->conn && !s->conn->let_go) {
			shunt_notice_unbind(s->conn);
			s->conn->let_go = true;
		}
		shunt_sock_put(s);
	}
	/* Nothing of the parent's is ours at shuntd: our closes of its listeners wait. */
	shunt_family_forsake();
}

/*
 * Before a fork: the ticket for the child (0 without one), its secret and
 * our session (@parent). Takes the fork lock exclusively.
 */
static uint64_t fork_begin(uint64_t *secret, uint64_t *parent)
{
	static bool warned;	/* under the fork lock, held exclusively */
	uint64_t ticket = 0;
	int r = -ENOTCONN;

	/* The child would hold every recycled half too: each gets its fresh one first. */
	shunt_recycle_fresh_all();
	/* Our own session first, if we are a child whose claim is still unanswered. */
	shunt_fork_settle();
	pthread_rwlock_wrlock(&fork_lock);
	/* Nothing registered without a session: nothing for the child to claim. */
	if (shunt_ctl_has_session()) {
		*parent = shunt_ctl_session();
		r = shunt_ctl_fork(&ticket, secret);
		if (r < 0 && r != -ENOTCONN)
			shunt_info("fork: shuntd gave no ticket (%s): the child's sockets may "
				   "end when the parent closes them", strerror(-r));
	}
	/*
	 * Without shuntd nobody counts who holds a connection: the child's
	 * close leaves it to the parent, whose close ends it for both (the
	 * child's calls then fail: EPIPE, or EOF). Said once, where a person
	 * will look.
	 */
	if (r == -ENOTCONN && !warned && holds_circuits()) {
		warned = true;
		shunt_warn("fork while shuntd is unreachable: the child's connections in shared "
			   "memory end when the parent closes them");
	}
	/* The child holds our listeners too (it forsakes them if it holds nothing at shuntd). */
	shunt_family_fork();
	return ticket;
}

/*
 * In the child, once shunt_fork_child ran: our own session, claimed without
 * waiting for shuntd's answer (shunt_fork_settle takes it when needed).
 */
static void fork_child_end(uint64_t ticket, uint64_t secret, uint64_t parent)
{
	pthread_rwlock_init(&fork_lock, NULL);
	pthread_mutex_init(&settle_lock, NULL);
	atomic_store(&settle_due, false);
	if (ticket && shunt_ctl_claim_send(ticket, secret, parent) == 0)
		atomic_store_explicit(&settle_due, true, memory_order_release);
	else
		orphan_inherited();
}

void shunt_fork_settle(void)
{
	if (!atomic_load_explicit(&settle_due, memory_order_acquire))
		return;
	pthread_mutex_lock(&settle_lock);
	if (atomic_load_explicit(&settle_due, memory_order_relaxed)) {
		/* Our routes, so that what the peers post reaches us; or nothing of the parent's. */
		if (shunt_ctl_claim_finish() == 0)
			shunt_notice_reroute();
		else
			orphan_inherited();
		atomic_store_explicit(&settle_due, false, memory_order_release);
	}
	pthread_mutex_unlock(&settle_lock);
}

/* In the parent: the child's pid (or the failure) for shuntd. */
static void fork_parent_end(uint64_t ticket, pid_t pid)
{
	if (ticket)
		shunt_ctl_fork_done(ticket, pid);
	if (pid < 0)
		shunt_family_unfork();
	pthread_rwlock_unlock(&fork_lock);
}

pid_t shunt_op_fork(void)
{
	uint64_t secret = 0, parent = 0, ticket = fork_begin(&secret, &parent);
	pid_t pid = SHUNT_LIBC(fork)();	/* runs shunt_fork_prepare & co. (pthread_atfork) */

	if (pid == 0) {
		fork_child_end(ticket, secret, parent);
		return 0;
	}
	fork_parent_end(ticket, pid);
	return pid;
}

pid_t shunt_op_fork_bare(void)
{
	uint64_t secret = 0, parent = 0, ticket;
	pid_t pid;

	if (!SHUNT_LIBC(_Fork))
		return -ENOSYS;
	ticket = fork_begin(&secret, &parent);
	/* _Fork runs no atfork handler: the library's own, which its state needs, run here. */
	shunt_fork_prepare();
	pid = SHUNT_LIBC(_Fork)();
	if (pid == 0) {
		shunt_fork_child();
		fork_child_end(ticket, secret, parent);
		return 0;
	}
	if (pid < 0)
		pid = -errno;
	shunt_fork_parent();
	fork_parent_end(ticket, pid);
	return pid;
}

/* What a clone child runs first, in its copy of our memory. */
struct clone_call {
	int (*fn)(void *);
	void *arg;
	uint64_t ticket, secret, parent;
	int flags;
};

static int clone_child(void *p)
{
	struct clone_call *cc = p;

	shunt_fork_child();
	if (cc->flags & CLONE_NEWNET)
		shunt_netns_moved();
	fork_child_end(cc->ticket, cc->secret, cc->parent);
	return cc->fn(cc->arg);
}

int shunt_op_clone(int (*fn)(void *), void *stack, int flags, void *arg, pid_t *ptid, void *tls,
		   pid_t *ctid)
{
	struct clone_call cc = { fn, arg, 0, 0, 0, flags };
	int pid;

	/* Another process will hold (or share) our descriptors: recycled halves are fresh first. */
	if (!(flags & CLONE_THREAD))
		shunt_recycle_fresh_all();
	/*
	 * Sharing our memory (a thread, a vfork-like child) or our descriptor
	 * table, it is no fork: it runs as it always did.
	 */
	if (flags & (CLONE_VM | CLONE_THREAD | CLONE_FILES)) {
		pid = SHUNT_LIBC(clone)(fn, stack, flags, arg, ptid, tls, ctid);
		return pid < 0 ? -errno : pid;
	}
	cc.ticket = fork_begin(&cc.secret, &cc.parent);
	shunt_fork_prepare();
	pid = SHUNT_LIBC(clone)(clone_child, stack, flags, &cc, ptid, tls, ctid);
	if (pid < 0)
		pid = -errno;
	shunt_fork_parent();
	fork_parent_end(cc.ticket, pid);
	return pid;
}
