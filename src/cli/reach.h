/* SPDX-License-Identifier: MIT */
/* Whether a program `shunt run` starts will load libshunt.so at all. */
#ifndef SHUNT_CLI_REACH_H
#define SHUNT_CLI_REACH_H

#include <stddef.h>

/*
 * Look at the file execvp(@prog) would run (and, for a #! script, at its
 * interpreter) for what keeps the preload out: a statically linked program,
 * one the loader runs in secure mode (set-user-ID, set-group-ID, file
 * capabilities), a Go program (raw system calls). Returns 1 with a one-line
 * reason in @why, like "/bin/busybox is statically linked: its sockets stay
 * on the kernel" (truncated to @n), or 0 when the
 * program will load the preload or we cannot tell: a missing, unreadable,
 * short or malformed file is never an error here (execvp reports it).
 */
int shunt_reach_check(const char *prog, char *why, size_t n);

#endif
