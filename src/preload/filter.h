/* SPDX-License-Identifier: MIT */
/*
 * Seccomp programs (classic BPF over struct seccomp_data), checked and run
 * as the kernel checks and runs them: what lets the library know, before
 * making one of its own system calls, what a filter the program installed
 * would do to it. Pure code: no system call, no allocation.
 */
#ifndef SHUNT_FILTER_H
#define SHUNT_FILTER_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

/* Which parts of the seccomp_data a run of a program looked at. */
enum shunt_filter_seen {
	SHUNT_FILTER_SAW_NR = 1u << 0,
	SHUNT_FILTER_SAW_ARCH = 1u << 1,
	SHUNT_FILTER_SAW_IP = 1u << 2,		/* instruction_pointer */
	SHUNT_FILTER_SAW_ARGS = 1u << 3,
};

/*
 * Whether the kernel would accept @insns (@len instructions) as a seccomp
 * filter program: bpf_check_classic's checks, then seccomp_check_filter's
 * subset of instructions. 0, or -EINVAL for anything else. A program this
 * rejects is never run here.
 */
int shunt_filter_check(const struct sock_filter *insns, unsigned len);

/*
 * Run a program that passed shunt_filter_check on @sd, as the kernel does:
 * its return value (action and data). *@seen gets the parts of @sd the run
 * read (enum shunt_filter_seen), so a caller can tell a verdict that
 * depended on what it could not know (the instruction pointer).
 */
uint32_t shunt_filter_run(const struct sock_filter *insns, unsigned len,
			  const struct seccomp_data *sd, unsigned *seen);

/*
 * The action of a return value, ordered as the kernel orders them when
 * filters stack (seccomp_run_filters): the smaller wins.
 */
static inline int32_t shunt_filter_action(uint32_t ret)
{
	return (int32_t)(ret & SECCOMP_RET_ACTION_FULL);
}

/* Whether the call runs: ALLOW, or LOG (which only logs it). */
static inline bool shunt_filter_allows(uint32_t ret)
{
	uint32_t a = ret & SECCOMP_RET_ACTION_FULL;

	return a == SECCOMP_RET_ALLOW || a == SECCOMP_RET_LOG;
}

#endif
