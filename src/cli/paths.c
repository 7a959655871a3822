// SPDX-License-Identifier: MIT
/* Where the library, the daemon and the control socket are. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "cli/cli.h"

/* The first of @candidates (relative to this executable's directory) that exists. */
static int find_near_exe(const char *env, const char *const *candidates, char *buf, size_t n)
{
	char exe[4096], dir[4096];
	ssize_t len;

	if (getenv(env) && *getenv(env)) {
		snprintf(buf, n, "%s", getenv(env));
		return access(buf, R_OK) == 0 ? 0 : -errno;
	}
	len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len < 0)
		return -errno;
	exe[len] = 0;
	snprintf(dir, sizeof(dir), "%s", dirname(exe));
	for (; *candidates; candidates++) {
		snprintf(buf, n, "%s/%s", dir, *candidates);
		if (access(buf, R_OK) == 0) {
			char *real = realpath(buf, NULL);

			if (real) {
				snprintf(buf, n, "%s", real);
				free(real);
			}
			return 0;
		}
	}
	return -ENOENT;
}

int shunt_path_lib(char *buf, size_t n)
{
	static const char *const c[] = {
		"../preload/libshunt.so",		/* build tree */
		"../lib/shunt/libshunt.so",		/* installed */
		"../lib/x86_64-linux-gnu/shunt/libshunt.so",
		NULL,
	};

	return find_near_exe("SHUNT_LIB", c, buf, n);
}

int shunt_path_daemon(char *buf, size_t n)
{
	static const char *const c[] = { "../daemon/shuntd", "shuntd", "../sbin/shuntd", NULL };

	return find_near_exe("SHUNT_DAEMON", c, buf, n);
}

void shunt_path_socket(char *buf, size_t n)
{
	const char *env = getenv("SHUNT_SOCKET");
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	if (env && *env)
		snprintf(buf, n, "%s", env);
	else if (geteuid() == 0)
		snprintf(buf, n, "/run/shunt/shuntd.sock");
	else if (xdg && *xdg)
		snprintf(buf, n, "%s/shunt/shuntd.sock", xdg);
	else
		snprintf(buf, n, "/tmp/shunt-%u/shuntd.sock", (unsigned)geteuid());
}

int shunt_daemon_connect(const char *path)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	int fd, r;

	if (strlen(path) >= sizeof(sun.sun_path))
		return -ENAMETOOLONG;
	strcpy(sun.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}
