// SPDX-License-Identifier: MIT
/*
 * The sockets among the descriptors a process starts with (inherited.h).
 * Raw system calls throughout: this runs while the library starts, before
 * its own wrappers may be asked anything.
 */
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/fdtable.h"
#include "preload/inherited.h"

/* ppoll's descriptors at once; FDSize is at most this much in all but odd processes. */
#define CHUNK 1024u
#define POLLED_MAX (64u * CHUNK)

/* Add @fd to *@v if it is a socket not of ours; false when out of memory. */
static bool add_if_socket(int fd, struct shunt_inherited **v, size_t *n, size_t *cap)
{
	struct stat st;

	if (shunt_fdt_is_ours(fd) || shunt_fdt_is_hidden(fd) ||
	    shunt_syscall(SYS_fstat, fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return true;
	if (*n == *cap) {
		struct shunt_inherited *more = realloc(*v, (*cap ? 2 * *cap : 8) * sizeof(**v));

		if (!more)
			return false;
		*v = more;
		*cap = *cap ? 2 * *cap : 8;
	}
	(*v)[(*n)++] = (struct shunt_inherited){ fd, (uint64_t)st.st_ino };
	return true;
}

/*
 * By ppoll on every number below @fdsize: a closed one says POLLNVAL, so
 * one call finds the open ones (a listing of /proc/self/fd costs 20 µs and
 * more). -1 when ppoll refuses (more descriptors than RLIMIT_NOFILE).
 */
static int by_poll(unsigned fdsize, struct shunt_inherited **v, size_t *n, size_t *cap)
{
	static const struct timespec zero = { 0, 0 };
	struct pollfd p[CHUNK];

	for (unsigned base = 0; base < fdsize; base += CHUNK) {
		unsigned k = fdsize - base < CHUNK ? fdsize - base : CHUNK;

		for (unsigned i = 0; i < k; i++)
			p[i] = (struct pollfd){ (int)(base + i), 0, 0 };
		if (shunt_syscall(SYS_ppoll, p, k, &zero, NULL, 8) < 0)
			return -1;
		for (unsigned i = 0; i < k; i++)
			if (!(p[i].revents & POLLNVAL) && !add_if_socket(p[i].fd, v, n, cap))
				return 0;
	}
	return 0;
}

/* By a listing of /proc/self/fd, whatever the numbers. */
static void by_listing(struct shunt_inherited **v, size_t *n, size_t *cap)
{
	char buf[4096];
	int dir = (int)shunt_syscall(SYS_openat, AT_FDCWD, "/proc/self/fd",
				     O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	long got;

	if (dir < 0)
		return;
	while ((got = shunt_syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < got;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);
			char *end;
			long fd = strtol(e->d_name, &end, 10);

			off += e->d_reclen;
			if (*end || end == e->d_name || fd == dir)
				continue;
			if (!add_if_socket((int)fd, v, n, cap))
				break;
		}
	}
	shunt_syscall(SYS_close, dir);
}

size_t shunt_inherited_sockets(unsigned fdsize, struct shunt_inherited **out)
{
	struct shunt_inherited *v = NULL;
	size_t n = 0, cap = 0;

	if (!fdsize || fdsize > POLLED_MAX || by_poll(fdsize, &v, &n, &cap) < 0) {
		n = 0;
		by_listing(&v, &n, &cap);
	}
	*out = v;
	return n;
}
