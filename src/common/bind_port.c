// SPDX-License-Identifier: MIT
/*
 * A port for a socket bound with IP_BIND_ADDRESS_NO_PORT. That option
 * leaves the port to connect(); a connection carried by shunt is not made
 * by the kernel's connect, so the library (a channel's connect) and shuntd
 * (its own) take the port with a second bind, which the kernel lets through
 * while the socket has no port, with the option off for that bind and on
 * again after, as the program left it.
 */
#include <errno.h>
#include <netinet/in.h>
#include <sys/syscall.h>

#include "common/bind_port.h"
#include "common/sys.h"

int shunt_bind_port(int fd, const struct sockaddr *sa, socklen_t len)
{
	int off = 0, on = 1, r = 0;

	if (shunt_syscall(SYS_setsockopt, fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &off,
			  sizeof(off)) < 0)
		return -errno;
	if (shunt_syscall(SYS_bind, fd, sa, len) < 0)
		r = errno == EADDRINUSE ? -EADDRNOTAVAIL : -errno;
	shunt_syscall(SYS_setsockopt, fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &on, sizeof(on));
	return r;
}
