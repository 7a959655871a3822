// SPDX-License-Identifier: MIT
/*
 * Facts about a socket a process handed over, read from the kernel: this is
 * how shuntd learns addresses and network namespaces without believing what
 * a library says.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "common/addr.h"
#include "daemon/shuntd.h"

static int getint(int fd, int level, int name, int *val)
{
	socklen_t len = sizeof(*val);

	return getsockopt(fd, level, name, val, &len) < 0 ? -errno : 0;
}

int shuntd_socket_facts(int fd, struct sock_facts *f)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct stat st;
	int type, proto, acc, ns, r;

	memset(f, 0, sizeof(*f));
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISSOCK(st.st_mode))
		return -ENOTSOCK;
	f->inode = st.st_ino;
	f->uid = st.st_uid;
	if ((r = getint(fd, SOL_SOCKET, SO_DOMAIN, &f->domain)) < 0 ||
	    (r = getint(fd, SOL_SOCKET, SO_TYPE, &type)) < 0 ||
	    (r = getint(fd, SOL_SOCKET, SO_PROTOCOL, &proto)) < 0 ||
	    (r = getint(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc)) < 0)
		return r;
	if ((f->domain != AF_INET && f->domain != AF_INET6) || type != SOCK_STREAM ||
	    proto != IPPROTO_TCP)
		return -EPROTONOSUPPORT;
	f->listening = acc != 0;
	if (f->domain == AF_INET6) {
		int v6only;

		if ((r = getint(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only)) < 0)
			return r;
		f->v6only = v6only != 0;
	}
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if ((r = shunt_addr_to_wire((struct sockaddr *)&ss, len, &f->local)) < 0)
		return r;
	if (f->listening) {
		struct tcp_info ti;
		socklen_t tl = sizeof(ti);

		/* For a listener the kernel reports its accept-queue limit here. */
		if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) < 0)
			return -errno;
		f->max_backlog = ti.tcpi_sacked;
		if ((r = getint(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &acc)) < 0)
			return r;
		f->defer_accept = acc > 0 ? (uint32_t)acc : 0;
	}
	if ((r = getint(fd, SOL_SOCKET, SO_REUSEPORT, &acc)) < 0)
		return r;
	f->reuseport = acc != 0;
	ns = ioctl(fd, SIOCGSKNS);
	if (ns < 0)
		return -errno;
	r = fstat(ns, &st) < 0 ? -errno : 0;
	close(ns);
	if (r < 0)
		return r;
	f->netns = st.st_ino;
	return 0;
}
