// SPDX-License-Identifier: MIT
/*
 * systemd's socket activation and readiness protocols, written here rather
 * than linked from libsystemd: both are small, documented as stable
 * interfaces (sd_listen_fds(3), sd_notify(3)), and shuntd also runs where
 * there is no systemd (containers, guests, an embedded daemon of `shunt
 * run`), where a dependency on libsystemd would only add a library to load.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/systemd.h"

/* The first passed descriptor (SD_LISTEN_FDS_START). */
enum { LISTEN_FDS_START = 3 };

static int parse_int(const char *s, long *v)
{
	char *end;

	if (!s || !*s)
		return -ENOENT;
	errno = 0;
	*v = strtol(s, &end, 10);
	return errno || *end ? -EINVAL : 0;
}

static int sockopt_int(int fd, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);

	return getsockopt(fd, SOL_SOCKET, name, &v, &len) < 0 ? -errno : v;
}

int shuntd_systemd_listen_fd(char *path, size_t n)
{
	struct sockaddr_un sun;
	socklen_t len = sizeof(sun);
	long pid, fds;
	int fd = LISTEN_FDS_START, r;

	r = parse_int(getenv("LISTEN_PID"), &pid);
	if (r == 0)
		r = parse_int(getenv("LISTEN_FDS"), &fds);
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	/* Only when the passing was meant for this very process, not a parent. */
	if (r < 0 || pid != (long)getpid() || fds == 0)
		return -ENOENT;
	if (fds != 1) {
		shunt_err("systemd passed %ld sockets; shuntd.socket must listen on exactly one", fds);
		return -EINVAL;
	}
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 || fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
		shunt_err("the socket systemd passed (fd %d): %s", fd, strerror(errno));
		return -errno;
	}
	if (getsockname(fd, (struct sockaddr *)&sun, &len) < 0 || sun.sun_family != AF_UNIX ||
	    len <= offsetof(struct sockaddr_un, sun_path) || sun.sun_path[0] == 0 ||
	    sockopt_int(fd, SO_TYPE) != SOCK_SEQPACKET || sockopt_int(fd, SO_ACCEPTCONN) != 1) {
		shunt_err("the socket systemd passed is not a listening SOCK_SEQPACKET unix socket "
			  "bound to a path: shuntd.socket needs ListenSequentialPacket=/run/shunt/shuntd.sock");
		return -EINVAL;
	}
	snprintf(path, n, "%.*s", (int)(len - offsetof(struct sockaddr_un, sun_path)), sun.sun_path);
	return fd;
}

int shuntd_systemd_notify(const char *state)
{
	const char *env = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	socklen_t len;
	size_t plen;
	int fd, r = 0;

	if (!env || !*env)
		return 0;
	plen = strlen(env);
	/* A path, or '@' for the abstract namespace (a leading NUL on the wire). */
	if ((env[0] != '/' && env[0] != '@') || plen >= sizeof(sun.sun_path))
		return -EINVAL;
	memcpy(sun.sun_path, env, plen);
	if (env[0] == '@')
		sun.sun_path[0] = 0;
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sun, len) < 0)
		r = -errno;
	close(fd);
	if (r < 0)
		shunt_warn("cannot tell systemd %s at %s: %s", state, env, strerror(-r));
	return r;
}
