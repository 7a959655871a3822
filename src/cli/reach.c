// SPDX-License-Identifier: MIT
/*
 * Programs libshunt.so cannot reach: find the file execvp would run, then
 * ask common/reach.c what its headers say.
 */
#include <stdlib.h>

#include "cli/reach.h"
#include "common/reach.h"

enum { PATH_LEN = 4096 };

int shunt_reach_check(const char *prog, char *why, size_t n)
{
	char path[PATH_LEN];

	if (!shunt_reach_resolve(prog, getenv("PATH"), path, sizeof(path)))
		return 0;
	return shunt_reach_why(path, why, n);
}
