// SPDX-License-Identifier: MIT
/*
 * stdio on shunt sockets: streams made with fopencookie whose reads and
 * writes call read() and write(), which this library answers, for stdin,
 * stdout and stderr on adopted circuits and for fdopen(). Buffering is what
 * glibc gives a socket (full; stderr none), and fileno() still says the
 * descriptor.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sys.h"

#include "common/log.h"
#include "preload/fdtable.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/sock.h"
#include "preload/stdstream.h"

static ssize_t cookie_read(void *cookie, char *buf, size_t n)
{
	return read((int)(intptr_t)cookie, buf, n);
}

/* All of it, as glibc's own file write does; a short count only on an error. */
static ssize_t cookie_write(void *cookie, const char *buf, size_t n)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = write((int)(intptr_t)cookie, buf + done, n - done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return done ? (ssize_t)done : -1;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

static int cookie_close(void *cookie)
{
	return close((int)(intptr_t)cookie);
}

static FILE *made[3];	/* written once, at start, before main() */

/* A stream on @fd like the one glibc makes for a socket, or NULL. */
static FILE *stream(int fd, const char *mode, bool unbuffered)
{
	cookie_io_functions_t io = { cookie_read, cookie_write, NULL, cookie_close };
	FILE *f = fopencookie((void *)(intptr_t)fd, mode, io);

	if (!f)
		return NULL;
	/* fileno() reads it (and reports EBADF for a cookie stream otherwise). */
	f->_fileno = fd;
	if (unbuffered)
		setvbuf(f, NULL, _IONBF, 0);
	return f;
}

/* At exit, before the stats report (registered after it): the last buffered bytes out. */
static void flush_made(void)
{
	for (int i = 0; i < 3; i++)
		if (made[i])
			fflush(made[i]);
}

static bool on_circuit(int fd)
{
	struct shunt_sock *s = shunt_fdt_get(fd);
	bool r = false;

	if (s) {
		int st = shunt_sock_state(s);

		r = st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING;
		shunt_sock_put(s);
	}
	return r;
}

void shunt_stdio_adopt(void)
{
	static const char *const modes[3] = { "r", "w", "w" };
	bool any = false;

	for (int fd = 0; fd < 3; fd++) {
		if (!on_circuit(fd) || !(made[fd] = stream(fd, modes[fd], fd == STDERR_FILENO)))
			continue;
		any = true;
		if (fd == STDIN_FILENO)
			stdin = made[fd];
		else if (fd == STDOUT_FILENO)
			stdout = made[fd];
		else
			stderr = made[fd];
	}
	if (any) {
		atexit(flush_made);
		shunt_debug("standard streams on shared-memory connections go through the library");
	}
}

FILE *shunt_stdio_fdopen(int fd, const char *mode)
{
	long fl = shunt_syscall(SYS_fcntl, fd, F_GETFL);
	char m[3] = { 0 };

	if (fl < 0)
		return NULL;	/* errno: EBADF */
	if (!mode || (mode[0] != 'r' && mode[0] != 'w' && mode[0] != 'a')) {
		errno = EINVAL;
		return NULL;
	}
	m[0] = mode[0];
	if (strchr(mode + 1, '+'))
		m[1] = '+';
	/* What glibc's fdopen does to the descriptor: close-on-exec for "e", O_APPEND for "a". */
	if (strchr(mode + 1, 'e'))
		shunt_syscall(SYS_fcntl, fd, F_SETFD, FD_CLOEXEC);
	if (mode[0] == 'a' && !(fl & O_APPEND))
		shunt_syscall(SYS_fcntl, fd, F_SETFL, fl | O_APPEND);
	return stream(fd, m, false);
}

SHUNT_EXPORT FILE *fdopen(int fd, const char *mode)
{
	if (shunt_dormant())
		return SHUNT_LIBC(fdopen)(fd, mode);
	shunt_ensure_init();
	if (!shunt_fdt_is_ours(fd))
		return SHUNT_LIBC(fdopen)(fd, mode);
	return shunt_stdio_fdopen(fd, mode);
}
