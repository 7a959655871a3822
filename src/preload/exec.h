/* SPDX-License-Identifier: MIT */
/*
 * Connections across exec. A program exec'd over this one that will run
 * the library too takes our connections over on their circuits: before the
 * exec, shuntd is given an exec ticket holding every circuit end and
 * listener whose descriptor survives it; the new image's library claims it
 * at start (same pid) and rebuilds its sockets before main() runs. When the
 * new image cannot take them (no libshunt in its environment, a static or
 * set-ID program, no ticket), they move onto the kernel as before
 * (handoff.h). Descriptor numbers, flags and kernel sockets never change.
 * posix_spawn is the same for the child it starts, which the parent's
 * sockets stay with too.
 */
#ifndef SHUNT_EXEC_H
#define SHUNT_EXEC_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Set in the new image's environment when shuntd holds an exec ticket for
 * it: its library starts before main() to claim it, rather than lazily
 * (init.c), and takes the variable out of the environment again.
 */
#define SHUNT_EXEC_KEPT_ENV "SHUNT_EXEC_TICKET"

/* What an exec is about to run. */
struct shunt_exec_target {
	const char *path;		/* as given, or the name a PATH search looks for */
	bool search;			/* execvp and friends: search PATH without a slash */
	int dirfd;			/* execveat's, fexecve's descriptor; else AT_FDCWD */
	int at_flags;			/* execveat's AT_EMPTY_PATH (fexecve: always) */
	char *const *envp;		/* the new image's environment */
	bool spawn;			/* posix_spawn: a child execs it; we keep our sockets */
};

/* What shunt_exec_failed must undo. */
struct shunt_exec_undo {
	uint64_t ticket;		/* the exec ticket, or 0 */
	bool frozen;			/* the fork lock is held */
	char **envp;			/* with a ticket: the environment to exec with instead */
};

/* The environment an exec passes: @envp, or the one with the ticket's mark. */
static inline char *const *shunt_exec_env(const struct shunt_exec_undo *u, char *const *envp)
{
	return u->envp ? u->envp : envp;
}

/*
 * Before the exec of @t: keep or move every shunt connection that
 * survives it, and hold the fork lock until shunt_exec_failed (or the exec
 * succeeds and takes the image away). With a ticket, the exec must use the
 * environment shunt_exec_env gives. A child sharing our memory (clone
 * with CLONE_VM, whose exec leaves that memory to us) holds nothing and
 * keeps nothing: it moves the connections onto the kernel, as for a spawn.
 */
struct shunt_exec_undo shunt_exec_prepare(const struct shunt_exec_target *t);

/* The exec returned (it failed): the ticket goes, every socket is as before. errno kept. */
void shunt_exec_failed(struct shunt_exec_undo u);

/*
 * After posix_spawn: the child's pid for the spawn ticket (or -1: the spawn
 * failed, the ticket goes); the fork lock released. errno kept.
 */
void shunt_exec_spawned(struct shunt_exec_undo u, pid_t pid);

struct shunt_inherited;

/*
 * In a new image, from init, before main(): claim the exec ticket of this
 * process if the program before the exec left one, and rebuild the sockets
 * it kept (state, options, the circuit) on the descriptors they have, among
 * the @nsocks sockets @socks it started with.
 */
void shunt_exec_adopt(const struct shunt_inherited *socks, size_t nsocks);

#endif
