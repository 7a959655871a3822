/* SPDX-License-Identifier: MIT */
/*
 * The seccomp filters this process runs under, as far as the library can
 * know them: every filter the program installs through the C library
 * (prctl(PR_SET_SECCOMP), syscall(SYS_seccomp), libseccomp) is copied
 * before it takes effect, and the stack of them judges each system call the
 * library wants to make on its own behalf (the gate of common/sys.h), as
 * the kernel would: ALLOW and LOG let it through, anything else keeps it
 * from the kernel. A process that started under a filter nobody showed us
 * (exec'd into a sandbox) is judged as forbidding every call.
 *
 * Filters belong to threads in the kernel (without TSYNC, to the installing
 * thread and those it creates later); the library cannot follow which
 * thread holds which, so it judges every thread by every filter any thread
 * installed: never too permissive, at worst a thread takes the slower way.
 */
#ifndef SHUNT_SECCOMP_H
#define SHUNT_SECCOMP_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* A stack of filters: immutable once made, never freed. */
struct shunt_chain;

/* The stack in force (NULL: no filter at all, the common case). */
extern _Atomic(const struct shunt_chain *) shunt_seccomp_current;

static inline const struct shunt_chain *shunt_seccomp_chain(void)
{
	/* Pairs with the release in publish() (seccomp.c). */
	return atomic_load_explicit(&shunt_seccomp_current, memory_order_acquire);
}

/* Whether any filter is in force: one load and a predictable branch. */
static inline bool shunt_seccomp_active(void)
{
	return atomic_load_explicit(&shunt_seccomp_current, memory_order_relaxed) != NULL;
}

/*
 * Whether @c (NULL: no filter) lets the library make system call @nr with
 * @args as they would be passed (pointers included; the instruction pointer
 * is unknown, so a filter that looks at it is taken to forbid the call).
 */
bool shunt_chain_allows(const struct shunt_chain *c, long nr, const long args[6]);

/* The same for the stack in force; missing arguments are 0. */
#define shunt_seccomp_allows(nr, ...) \
	shunt_chain_allows(shunt_seccomp_chain(), (nr), (const long[6]){ __VA_ARGS__ })

/* Whether @c is strict mode (read, write, exit and sigreturn, nothing else). */
bool shunt_chain_strict(const struct shunt_chain *c);

/*
 * At the very start, before any other system call of the library: whether
 * the process already runs under seccomp (a filter installed before exec,
 * which the library never saw). Then every internal call is judged
 * forbidden and true is returned: the library must leave every socket to
 * the kernel. Reads /proc/self/status with openat, read and close only,
 * which the dynamic loader needed to load us anyway. *@pid gets the pid
 * from there (getpid() is a system call a filter may forbid), or 0, and
 * *@fdsize the size of the descriptor table (FDSize: above every open
 * descriptor), or 0; the file is costly to make, so it is read once.
 */
bool shunt_seccomp_start(unsigned *pid, unsigned *fdsize);

/*
 * prctl(@option, ...) and seccomp(@op, @flags, @uargs) on the application's
 * behalf, as the kernel answers them (the result, or -1 with errno), with
 * the library prepared before a filter or strict mode takes effect and
 * judged by it from then on. @raw are the call's own six arguments, passed
 * on unchanged.
 */
long shunt_seccomp_prctl(const long raw[6]);
long shunt_seccomp_syscall(const long raw[6]);

#endif
