// SPDX-License-Identifier: MIT
/* fork(): the child holds what the parent holds, at shuntd too. */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "preload/conn.h"
#include "preload/control.h"
#include "preload/epoll.h"
#include "preload/fdtable.h"
#include "preload/fork.h"
#include "preload/libc.h"
#include "preload/notice.h"
#include "preload/plink.h"
#include "preload/relisten.h"
#include "preload/sock.h"
#include "preload/util.h"

static pthread_rwlock_t fork_lock = PTHREAD_RWLOCK_INITIALIZER;

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
	shunt_epoll_fork_prepare();
}

void shunt_fork_parent(void)
{
	shunt_epoll_fork_parent();
	shunt_sock_fork_parent();
	shunt_plink_fork_parent();
	shunt_ctl_fork_parent();
	shunt_notice_fork_parent();
}

void shunt_fork_child(void)
{
	shunt_pid = (uint32_t)getpid();
	shunt_epoll_fork_child();
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
 * Only this thread exists.
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
}

pid_t shunt_op_fork(void)
{
	static bool warned;	/* under the fork lock, held exclusively */
	uint64_t ticket = 0, secret = 0;
	pid_t pid;
	int r = -ENOTCONN;

	pthread_rwlock_wrlock(&fork_lock);
	/* Nothing registered without a session: nothing for the child to claim. */
	if (shunt_ctl_has_session()) {
		r = shunt_ctl_fork(&ticket, &secret);
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
	pid = shunt_libc.fork();
	if (pid == 0) {
		/* The child: shunt_fork_child ran already. Our own session, then routes. */
		pthread_rwlock_init(&fork_lock, NULL);
		if (ticket && shunt_ctl_claim(ticket, secret) == 0)
			shunt_notice_reroute();
		else
			orphan_inherited();
		return 0;
	}
	if (ticket)
		shunt_ctl_fork_done(ticket, pid);
	pthread_rwlock_unlock(&fork_lock);
	return pid;
}
