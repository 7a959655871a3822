/* SPDX-License-Identifier: MIT */
/* The library's own threads (the cork timer, the idle trimmer). */
#ifndef SHUNT_PRELOAD_THREAD_H
#define SHUNT_PRELOAD_THREAD_H

/* A thread of the library's: what it runs, and the name it shows (at most 15 bytes). */
struct shunt_thread {
	void *(*main)(void *arg);	/* called with NULL */
	const char *name;
};

/*
 * Start @t detached, with a small stack (the default one when the
 * program's static TLS does not fit in it) and every signal blocked (no
 * signal of the program's may land in it), named from inside (prctl
 * through the seccomp gate, not a write to /proc on the caller's time). 0,
 * or an error number.
 */
int shunt_thread_start(const struct shunt_thread *t);

#endif
