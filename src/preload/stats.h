/* SPDX-License-Identifier: MIT */
/*
 * Per-process transport counters. With SHUNT_STATS=FILE, a process appends
 * them to FILE as one JSON line when it exits: how tests prove that bytes
 * really went through shared memory and not through the kernel.
 */
#ifndef SHUNT_STATS_H
#define SHUNT_STATS_H

#include <stdatomic.h>
#include <stdint.h>

struct shunt_stats {
	_Atomic uint64_t shm_connect;		/* connect() that got a circuit */
	_Atomic uint64_t shm_accept;		/* accept() that returned a circuit */
	_Atomic uint64_t kernel_connect;	/* connect() left to the kernel */
	_Atomic uint64_t kernel_accept;		/* accept() of a kernel connection */
	_Atomic uint64_t shm_tx_bytes;		/* of closed connections; live ones added at exit */
	_Atomic uint64_t shm_rx_bytes;
	_Atomic uint64_t fallback_nodaemon;	/* shuntd could not be reached */
	_Atomic uint64_t fallback_error;	/* shuntd or the circuit failed */
	_Atomic uint64_t fallback_policy;	/* the policy left the connect to the kernel */
	_Atomic uint64_t fallback_limit;	/* a tenant's limit did */
	_Atomic uint64_t policy_refused;	/* the policy refused the connect */
	_Atomic uint64_t fallback_seccomp;	/* a seccomp filter forbids what a circuit needs */
	_Atomic uint64_t fallback_late;		/* shuntd was late (SHUNT_CONNECT_WAIT_US): the kernel */
	_Atomic uint64_t late_waits;		/* of those, connects that waited for it in vain */
	_Atomic uint64_t kernel_unlistened;	/* shuntd's directory: no listener there, not asked */
	_Atomic uint64_t trim_idle;		/* tx rings the idle trimmer gave pages of back */
	_Atomic uint64_t trim_read;		/* receives that gave back the pages they emptied */
	_Atomic uint64_t accept_asks;		/* accepts that asked shuntd (the doorbell rang) */
	_Atomic uint64_t ctl_asks;		/* requests to shuntd waited for (HELLO included) */
	_Atomic uint64_t recycled;		/* socket() answered with a bound spare (recycle.h) */
	_Atomic uint64_t recycled_fresh;	/* of those, given a fresh half after all */
	_Atomic int max_fd;			/* highest fd ever made a shunt socket */
};

extern struct shunt_stats shunt_stats;

/* Read SHUNT_STATS and arrange for the report at exit. */
void shunt_stats_init(void);

/*
 * Open the report's file now and keep it (hidden) for the exit: a seccomp
 * filter about to be installed may forbid opening files by then.
 */
void shunt_stats_keep_open(void);

/* Note that @fd became a shunt socket (for the exit report's walk). */
void shunt_stats_saw_fd(int fd);

#endif
