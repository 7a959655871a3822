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

/* The network namespace cookie of @fd (SO_NETNS_COOKIE, no privilege needed), or 0. */
static uint64_t netns_cookie(int fd)
{
	uint64_t cookie = 0;
	socklen_t len = sizeof(cookie);

	return getsockopt(fd, SOL_SOCKET, SO_NETNS_COOKIE, &cookie, &len) < 0 ? 0 : cookie;
}

static uint64_t own_cookie;	/* shuntd's own namespace, set once by shuntd_socket_init */
static uint64_t own_inode;

void shuntd_socket_init(uint64_t netns_self)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	own_inode = netns_self;
	if (fd >= 0) {
		own_cookie = netns_cookie(fd);
		close(fd);
	}
}

/*
 * The inode of @fd's network namespace. SIOCGSKNS needs CAP_NET_ADMIN over
 * that namespace; without it (shuntd run by an ordinary user for their own
 * programs) a socket is still known to be in shuntd's own namespace by its
 * namespace cookie, which anyone may read. Any other namespace cannot be
 * verified: -EPERM.
 */
static int netns_of(int fd, uint64_t *inode)
{
	struct stat st;
	int ns = ioctl(fd, SIOCGSKNS), r;

	if (ns < 0) {
		r = -errno;
		if (r == -EPERM && own_cookie && netns_cookie(fd) == own_cookie) {
			*inode = own_inode;
			return 0;
		}
		return r;
	}
	r = fstat(ns, &st) < 0 ? -errno : 0;
	close(ns);
	if (r == 0)
		*inode = st.st_ino;
	return r;
}

const char *shuntd_socket_refusal(int err)
{
	switch (err) {
	case -EPERM:
		return "its network namespace is not shuntd's, and without CAP_NET_ADMIN "
		       "shuntd cannot tell which it is";
	case -ENOTSOCK:
	case -EPROTONOSUPPORT:
		return "not a TCP socket";
	default:
		return strerror(-err);
	}
}

int shuntd_socket_identity(int fd, struct sock_facts *f)
{
	struct stat st;
	int acc, r;

	memset(f, 0, sizeof(*f));
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISSOCK(st.st_mode))
		return -ENOTSOCK;
	f->inode = st.st_ino;
	f->uid = st.st_uid;
	if ((r = getint(fd, SOL_SOCKET, SO_DOMAIN, &f->domain)) < 0 ||
	    (r = getint(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc)) < 0)
		return r;
	f->listening = acc != 0;
	return 0;
}

int shuntd_socket_facts(int fd, struct sock_facts *f)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int type, proto, acc, r = shuntd_socket_identity(fd, f);

	if (r < 0 || (r = getint(fd, SOL_SOCKET, SO_TYPE, &type)) < 0 ||
	    (r = getint(fd, SOL_SOCKET, SO_PROTOCOL, &proto)) < 0)
		return r;
	if ((f->domain != AF_INET && f->domain != AF_INET6) || type != SOCK_STREAM ||
	    proto != IPPROTO_TCP)
		return -EPROTONOSUPPORT;
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
	return netns_of(fd, &f->netns);
}
