// SPDX-License-Identifier: MIT
/*
 * Exported wrappers of the socket calls that set up and name connections.
 * Each looks the descriptor up; one that is not a shunt socket goes to the C
 * library untouched. errno is set once, here, and only on failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/file.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/sock.h"
#include "preload/util.h"

SHUNT_EXPORT int socket(int domain, int type, int protocol)
{
	int saved = errno, r;

	shunt_ensure_init();
	r = shunt_op_socket(domain, type, protocol);
	/* sock_create's errors come first; the number only at the end, as __sys_socket does. */
	if (r >= 0 && shunt_fdlimit_note(r) < 0)
		r = shunt_fdlimit_refuse(r);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get_checked(fd);
	if (!s)
		return SHUNT_LIBC(bind)(fd, addr.__sockaddr__, len);
	r = shunt_op_bind(s, fd, addr.__sockaddr__, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int listen(int fd, int backlog)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get_checked(fd);
	if (!s)
		return SHUNT_LIBC(listen)(fd, backlog);
	r = shunt_op_listen(s, fd, backlog);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

/*
 * accept at the program's limit fails with EMFILE before it takes a
 * connection off the queue: in __sys_accept4_file, after the descriptor
 * (EBADF) and the flags (EINVAL), before it looks for a socket (ENOTSOCK,
 * since Linux 6.0; earlier kernels said ENOTSOCK first). 0 to go ahead,
 * else -EMFILE.
 */
static int accept_room(int fd, int flags)
{
	if (flags & ~(SOCK_NONBLOCK | SOCK_CLOEXEC))
		return 0;
	if (shunt_fdlimit_room(1) == 0)
		return 0;
	/* A bad descriptor: let the call itself say so. */
	if (shunt_syscall(SYS_fcntl, fd, F_GETFD) < 0)
		return 0;
	return -EMFILE;
}

static int do_accept(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	r = accept_room(fd, flags);
	if (r < 0)
		return (int)shunt_ret(r, saved);
	s = shunt_fdt_get_checked(fd);
	if (!s) {
		r = SHUNT_LIBC(accept4)(fd, addr, len, flags);
		if (r < 0)
			return r;
		r = shunt_fdlimit_admit(r) < 0 ? shunt_fdlimit_refuse(r) : r;
		return (int)shunt_ret(r, saved);
	}
	r = shunt_op_accept(s, fd, addr, len, flags);
	shunt_sock_put(s);
	/* The library put it in the table (or forgot what was there): only the limit is left. */
	if (r >= 0 && shunt_fdlimit_note(r) < 0)
		r = shunt_fdlimit_refuse(r);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
	return do_accept(fd, addr.__sockaddr__, len, flags);
}

SHUNT_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	return do_accept(fd, addr.__sockaddr__, len, 0);
}

SHUNT_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get_checked(fd);
	if (!s)
		return SHUNT_LIBC(connect)(fd, addr.__sockaddr__, len);
	r = shunt_op_connect(s, fd, addr.__sockaddr__, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	if (shunt_dormant())
		return SHUNT_LIBC(getsockname)(fd, addr.__sockaddr__, len);
	shunt_ensure_init();
	s = shunt_fdt_get_checked(fd);
	if (!s)
		return SHUNT_LIBC(getsockname)(fd, addr.__sockaddr__, len);
	r = shunt_op_getsockname(s, fd, addr.__sockaddr__, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	if (shunt_dormant())
		return SHUNT_LIBC(getpeername)(fd, addr.__sockaddr__, len);
	shunt_ensure_init();
	s = shunt_fdt_get_checked(fd);
	if (!s)
		return SHUNT_LIBC(getpeername)(fd, addr.__sockaddr__, len);
	r = shunt_op_getpeername(s, fd, addr.__sockaddr__, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	if (shunt_dormant())
		return SHUNT_LIBC(setsockopt)(fd, level, name, val, len);
	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return SHUNT_LIBC(setsockopt)(fd, level, name, val, len);
	r = shunt_op_setsockopt(s, fd, level, name, val, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	if (shunt_dormant())
		return SHUNT_LIBC(getsockopt)(fd, level, name, val, len);
	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return SHUNT_LIBC(getsockopt)(fd, level, name, val, len);
	r = shunt_op_getsockopt(s, fd, level, name, val, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int shutdown(int fd, int how)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	if (shunt_dormant())
		return SHUNT_LIBC(shutdown)(fd, how);
	shunt_ensure_init();
	s = shunt_fdt_get_checked(fd);
	if (!s)
		return SHUNT_LIBC(shutdown)(fd, how);
	r = shunt_op_shutdown(s, fd, how);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}
