// SPDX-License-Identifier: MIT
/*
 * Options, fcntl and ioctl on shunt sockets. Options are set on the kernel
 * socket every shunt socket keeps, so they are accepted, refused and read
 * back exactly as the kernel does (XWAY's companion socket); the library
 * only remembers the few that change how it moves bytes, and answers the
 * few whose value depends on the connection the kernel half does not have.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>

#include "preload/conn.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/sock.h"

static int64_t timeout_us(int fd, int name)
{
	struct timeval tv;
	socklen_t len = sizeof(tv);

	/* Read back what the kernel stored: it normalises the value it was given. */
	if (shunt_libc.getsockopt(fd, SOL_SOCKET, name, &tv, &len) < 0)
		return 0;
	return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

int shunt_op_setsockopt(struct shunt_sock *s, int fd, int level, int name, const void *val,
			socklen_t len)
{
	if (shunt_libc.setsockopt(fd, level, name, val, len) < 0)
		return -errno;
	if (level != SOL_SOCKET)
		return 0;
	switch (name) {
	case SO_RCVTIMEO_OLD:
	case SO_RCVTIMEO_NEW:
		atomic_store(&s->rcvtimeo_us, timeout_us(fd, SO_RCVTIMEO_OLD));
		break;
	case SO_SNDTIMEO_OLD:
	case SO_SNDTIMEO_NEW:
		atomic_store(&s->sndtimeo_us, timeout_us(fd, SO_SNDTIMEO_OLD));
		break;
	case SO_LINGER: {
		struct linger l;

		memcpy(&l, val, sizeof(l));
		atomic_store(&s->linger_abort, l.l_onoff && !l.l_linger);
		break;
	}
	}
	return 0;
}

/* Copy an int option out the way sock_getsockopt does. */
static int put_int(int v, void *val, socklen_t *len)
{
	socklen_t n;

	if ((int)*len < 0)
		return -EINVAL;
	n = *len < sizeof(v) ? *len : sizeof(v);
	memcpy(val, &v, n);
	*len = n;
	return 0;
}

int shunt_op_getsockopt(struct shunt_sock *s, int fd, int level, int name, void *val,
			socklen_t *len)
{
	int st = shunt_sock_sync(s);
	bool circuit = st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING;

	if (level == SOL_SOCKET && name == SO_ERROR) {
		int err = atomic_exchange(&s->so_error, 0);

		if (!err && st == SHUNT_SOCK_CONNECTED)
			err = shunt_conn_take_error(s->conn);
		if (err || circuit)
			return put_int(err, val, len);
	}
	if (shunt_libc.getsockopt(fd, level, name, val, len) < 0)
		return -errno;
	if (level == IPPROTO_TCP && name == TCP_INFO && st == SHUNT_SOCK_CONNECTED && *len >= 1) {
		/* The kernel half is unconnected; the connection is established. */
		((struct tcp_info *)val)->tcpi_state = TCP_ESTABLISHED;
	}
	return 0;
}

int shunt_op_fcntl(struct shunt_sock *s, int fd, int cmd, void *arg)
{
	int r = shunt_libc.fcntl(fd, cmd, arg);

	if (r < 0)
		return -errno;
	switch (cmd) {
	case F_SETFL:
		atomic_store(&s->nonblock, ((long)arg & O_NONBLOCK) != 0);
		break;
	case F_DUPFD:
	case F_DUPFD_CLOEXEC:
		shunt_op_dup(fd, r);
		break;
	}
	return r;
}

int shunt_op_ioctl(struct shunt_sock *s, int fd, unsigned long req, void *arg)
{
	int st = shunt_sock_sync(s);
	int v;

	if (st == SHUNT_SOCK_CONNECTED) {
		switch (req) {
		case SIOCINQ:
			v = (int)shunt_conn_inq(s->conn);
			break;
		case SIOCOUTQ:
			v = (int)shunt_conn_outq(s->conn);
			break;
		case SIOCOUTQNSD:
			v = 0;		/* nothing waits to be sent: it is in the ring */
			break;
		case SIOCATMARK:
			v = 0;
			break;
		default:
			goto kernel;
		}
		memcpy(arg, &v, sizeof(v));
		return 0;
	}
kernel:
	if (shunt_libc.ioctl(fd, req, arg) < 0)
		return -errno;
	if (req == FIONBIO)
		atomic_store(&s->nonblock, *(int *)arg != 0);
	return 0;
}
