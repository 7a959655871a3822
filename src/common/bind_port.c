// SPDX-License-Identifier: MIT
/*
 * Binding a socket as connect() would, for a connection shunt carries: the
 * library (a channel's connect) and shuntd (its own) both do. One case
 * needs more than a bind: IP_BIND_ADDRESS_NO_PORT leaves the port to
 * connect(), which is not the kernel's here, so the port is taken with a
 * second bind, which the kernel lets through while the socket has no port,
 * with the option off for that bind and on again after, as the program
 * left it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <sys/syscall.h>

#include "common/addr.h"
#include "common/bind_port.h"
#include "common/sys.h"

static int bind_mapped(int fd, const struct sockaddr *sa, socklen_t len)
{
	if (shunt_syscall(SYS_bind, fd, sa, len) < 0)
		return errno == EADDRINUSE ? -EADDRNOTAVAIL : -errno;	/* as connect() says */
	return 0;
}

static int bound_name(int fd, struct shunt_wire_addr *local)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (shunt_syscall(SYS_getsockname, fd, &ss, &len) < 0)
		return -errno;
	return shunt_addr_to_wire((struct sockaddr *)&ss, len, local);
}

static int take_port(int fd, const struct sockaddr *sa, socklen_t len)
{
	int off = 0, on = 1, r;

	if (shunt_syscall(SYS_setsockopt, fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &off,
			  sizeof(off)) < 0)
		return -errno;
	r = bind_mapped(fd, sa, len);
	shunt_syscall(SYS_setsockopt, fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof(on));
	return r;
}

int shunt_bind_as_connect(int fd, const struct sockaddr *sa, socklen_t len,
			  struct shunt_wire_addr *local)
{
	int r = bind_mapped(fd, sa, len);

	if (r == 0)
		r = bound_name(fd, local);
	if (r < 0 || local->port)
		return r;
	r = take_port(fd, sa, len);
	return r < 0 ? r : bound_name(fd, local);
}
