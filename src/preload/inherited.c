// SPDX-License-Identifier: MIT
/* The sockets among the descriptors a process starts with (inherited.h). */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/fdtable.h"
#include "preload/inherited.h"

size_t shunt_inherited_sockets(struct shunt_inherited **out)
{
	char buf[4096];
	/* Raw calls: we are starting, and our own wrappers must not be asked yet. */
	int dir = (int)shunt_syscall(SYS_openat, AT_FDCWD, "/proc/self/fd",
				     O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct shunt_inherited *v = NULL;
	size_t n = 0, cap = 0;
	long got;

	*out = NULL;
	if (dir < 0)
		return 0;
	while ((got = shunt_syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < got;) {
			struct dirent64 *e = (struct dirent64 *)(buf + off);
			struct stat st;
			char *end;
			long fd = strtol(e->d_name, &end, 10);

			off += e->d_reclen;
			if (*end || end == e->d_name || fd == dir || shunt_fdt_is_ours((int)fd) ||
			    shunt_fdt_is_hidden((int)fd) ||
			    shunt_syscall(SYS_fstat, fd, &st) < 0 || !S_ISSOCK(st.st_mode))
				continue;
			if (n == cap) {
				struct shunt_inherited *more = realloc(v, (cap ? 2 * cap : 8) * sizeof(*v));

				if (!more)
					break;
				v = more;
				cap = cap ? 2 * cap : 8;
			}
			v[n++] = (struct shunt_inherited){ (int)fd, (uint64_t)st.st_ino };
		}
	}
	shunt_syscall(SYS_close, dir);
	*out = v;
	return n;
}
