// SPDX-License-Identifier: MIT
/* The library's own threads: started the same way, whatever they do. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/thread.h"

static void *trampoline(void *arg)
{
	const struct shunt_thread *t = arg;

	/* Through the seccomp gate: a filter that forbids prctl leaves the name as it is. */
	shunt_syscall(SYS_prctl, PR_SET_NAME, t->name);
	return t->main(NULL);
}

int shunt_thread_start(const struct shunt_thread *t)
{
	sigset_t all, old;
	pthread_attr_t attr;
	pthread_t id;
	int r;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 64 << 10);
	r = pthread_create(&id, &attr, trampoline, (void *)t);
	/*
	 * glibc puts the program's static TLS on every thread's stack and
	 * refuses (EINVAL) a stack too small to hold it: a program with more
	 * than about 56 KiB of _Thread_local data gets the default size, of
	 * which only the pages touched are ever resident.
	 */
	if (r == EINVAL) {
		pthread_attr_destroy(&attr);
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		r = pthread_create(&id, &attr, trampoline, (void *)t);
	}
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return r;
}
