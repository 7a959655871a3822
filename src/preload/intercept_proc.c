// SPDX-License-Identifier: MIT
/* Exported wrappers of the calls that make processes: fork and vfork. */
#include <unistd.h>

#include "preload/fork.h"
#include "preload/init.h"

SHUNT_EXPORT pid_t fork(void)
{
	shunt_ensure_init();
	return shunt_op_fork();
}

/*
 * vfork is a fork here: its child shares our memory until it execs, and
 * would otherwise run our code (a claim, a session) in the parent's memory.
 * POSIX lets vfork be fork; a correct vfork child cannot tell.
 */
SHUNT_EXPORT pid_t vfork(void)
{
	shunt_ensure_init();
	return shunt_op_fork();
}
