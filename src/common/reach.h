/* SPDX-License-Identifier: MIT */
/*
 * Whether a program will load libshunt.so at all: a statically linked
 * program, one the loader runs in secure mode (set-user-ID, set-group-ID,
 * file capabilities) or a Go program (raw system calls) never does. Used by
 * `shunt run` to say so, and by the library before exec, to decide whether
 * the new image can take its connections over (handoff.c).
 */
#ifndef SHUNT_COMMON_REACH_H
#define SHUNT_COMMON_REACH_H

#include <stdbool.h>
#include <stddef.h>

enum { SHUNT_REACH_SHEBANG_LEN = 256 };	/* the kernel's BINPRM_BUF_SIZE */

/* What every reason ends with; each reason leads into it with its punctuation. */
#define SHUNT_REACH_TAIL "its sockets stay on the kernel"

/*
 * Why the ELF program at @path would not load the preload, as a phrase
 * ("is statically linked:"), or NULL: it would, or it is no ELF program of
 * this machine (a script), or it cannot be read (exec reports that).
 */
const char *shunt_reach_elf(const char *path);

/*
 * Whether @path is an ELF program of another class or byte order than this
 * library (a 32-bit one): the loader refuses to preload into it, and says so.
 */
bool shunt_reach_foreign(const char *path);

/* The interpreter a "#!" line at the start of @path names, in @interp (@n bytes). */
bool shunt_reach_shebang(const char *path, char *interp, size_t n);

/*
 * The file execvp(@prog) would run, in @out (@n bytes): @prog itself when
 * it has a slash, else the first executable regular file of that name
 * along @path, a $PATH value (glibc's default when NULL; an empty entry is
 * the current directory). False if there is none.
 */
bool shunt_reach_resolve(const char *prog, const char *path, char *out, size_t n);

/*
 * The file at @path (or, for a #! script, its interpreter) would not load
 * the preload: 1 with a one-line reason in @why ("/bin/busybox is
 * statically linked: its sockets stay on the kernel", truncated to @n).
 * 0 when it would, or when we cannot tell.
 */
int shunt_reach_why(const char *path, char *why, size_t n);

#endif
