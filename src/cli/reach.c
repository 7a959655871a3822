// SPDX-License-Identifier: MIT
/*
 * Programs libshunt.so cannot reach: find the file execvp would run, then
 * ask common/reach.c what its headers say.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/reach.h"
#include "common/reach.h"

enum { PATH_LEN = 4096 };

/*
 * The file execvp(@prog) would run: @prog itself when it has a slash, else
 * the first executable regular file of that name along $PATH (glibc's
 * default when unset; an empty entry is the current directory).
 */
static bool resolve(const char *prog, char *out, size_t n)
{
	const char *path = getenv("PATH"), *p;

	if (!*prog)
		return false;
	if (strchr(prog, '/'))
		return (size_t)snprintf(out, n, "%s", prog) < n;
	if (!path)
		path = "/bin:/usr/bin";
	for (p = path;; p++) {
		const char *end = strchrnul(p, ':');
		int dirlen = (int)(end - p);
		struct stat st;

		if ((size_t)snprintf(out, n, "%.*s%s%s", dirlen, p, dirlen ? "/" : "", prog) < n &&
		    stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0)
			return true;
		if (!*end)
			return false;
		p = end;
	}
}

int shunt_reach_check(const char *prog, char *why, size_t n)
{
	char path[PATH_LEN];

	if (!resolve(prog, path, sizeof(path)))
		return 0;
	return shunt_reach_why(path, why, n);
}
