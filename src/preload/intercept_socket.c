// SPDX-License-Identifier: MIT
/*
 * Exported wrappers of the socket calls that set up and name connections.
 * Each looks the descriptor up; one that is not a shunt socket goes to the C
 * library untouched. errno is set once, here, and only on failure.
 */
#include <errno.h>
#include <sys/socket.h>

#include "preload/fdtable.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/sock.h"
#include "preload/util.h"

SHUNT_EXPORT int socket(int domain, int type, int protocol)
{
	int saved = errno;

	shunt_ensure_init();
	return (int)shunt_ret(shunt_op_socket(domain, type, protocol), saved);
}

SHUNT_EXPORT int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.bind(fd, addr.__sockaddr__, len);
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
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.listen(fd, backlog);
	r = shunt_op_listen(s, fd, backlog);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.accept4(fd, addr.__sockaddr__, len, flags);
	r = shunt_op_accept(s, fd, addr.__sockaddr__, len, flags);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.accept(fd, addr.__sockaddr__, len);
	r = shunt_op_accept(s, fd, addr.__sockaddr__, len, 0);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.connect(fd, addr.__sockaddr__, len);
	r = shunt_op_connect(s, fd, addr.__sockaddr__, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.getsockname(fd, addr.__sockaddr__, len);
	r = shunt_op_getsockname(s, fd, addr.__sockaddr__, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.getpeername(fd, addr.__sockaddr__, len);
	r = shunt_op_getpeername(s, fd, addr.__sockaddr__, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.setsockopt(fd, level, name, val, len);
	r = shunt_op_setsockopt(s, fd, level, name, val, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.getsockopt(fd, level, name, val, len);
	r = shunt_op_getsockopt(s, fd, level, name, val, len);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int shutdown(int fd, int how)
{
	int saved = errno;
	struct shunt_sock *s;
	int r;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (!s)
		return shunt_libc.shutdown(fd, how);
	r = shunt_op_shutdown(s, fd, how);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}
