// SPDX-License-Identifier: MIT
/* fork(): the child holds what the parent holds, at shuntd too. */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "preload/control.h"
#include "preload/epoll.h"
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

pid_t shunt_op_fork(void)
{
	uint64_t ticket = 0, secret = 0;
	pid_t pid;
	int r;

	pthread_rwlock_wrlock(&fork_lock);
	/* Nothing registered without a session: nothing for the child to claim. */
	if (shunt_ctl_has_session()) {
		r = shunt_ctl_fork(&ticket, &secret);
		if (r < 0)
			shunt_info("fork: shuntd gave no ticket (%s): the child's sockets may "
				   "end when the parent closes them", strerror(-r));
	}
	pid = shunt_libc.fork();
	if (pid == 0) {
		/* The child: shunt_fork_child ran already. Our own session, then routes. */
		pthread_rwlock_init(&fork_lock, NULL);
		if (ticket && shunt_ctl_claim(ticket, secret) == 0)
			shunt_notice_reroute();
		return 0;
	}
	if (ticket)
		shunt_ctl_fork_done(ticket, pid);
	pthread_rwlock_unlock(&fork_lock);
	return pid;
}
