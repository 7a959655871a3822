// SPDX-License-Identifier: MIT
/*
 * The byte stream of shunt sockets: send/recv and their many spellings
 * (read, write, *v, *msg, *mmsg, sendfile) reduced to one iovec-based send
 * and one receive, with SIGPIPE raised where the kernel would raise it.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/uio.h>

#include "preload/conn.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/sock.h"
#include "preload/wait.h"

bool shunt_op_streams(struct shunt_sock *s)
{
	int st = shunt_sock_sync(s);

	return st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING;
}

static bool established(void *arg)
{
	struct shunt_conn *c = arg;

	return atomic_load_explicit(&c->hdr->setup, memory_order_acquire) != SHUNT_SETUP_PENDING;
}

/*
 * Data calls on a socket still waiting for its backlog slot wait like the
 * kernel's sk_stream_wait_connect (or say EAGAIN), then go on.
 */
static int await_connected(struct shunt_sock *s, bool nonblock, int64_t timeout_us)
{
	int r;

	if (shunt_sock_sync(s) != SHUNT_SOCK_CONNECTING)
		return shunt_sock_state(s) == SHUNT_SOCK_CONNECTED ? 0 : -ENOTCONN;
	if (nonblock)
		return -EAGAIN;
	r = shunt_wait_end(s->conn->me, &s->conn->me->tx_waiters, established, s->conn,
			   shunt_deadline(timeout_us));
	if (r == -ETIMEDOUT)
		return -EAGAIN;
	if (r < 0)
		return r;
	return shunt_sock_sync(s) == SHUNT_SOCK_CONNECTED ? 0 : -ENOTCONN;
}

ssize_t shunt_op_send(struct shunt_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	bool nonblock = atomic_load(&s->nonblock) || (flags & MSG_DONTWAIT);
	int64_t timeout = atomic_load(&s->sndtimeo_us);
	ssize_t r = await_connected(s, nonblock, timeout);

	if (r == 0)
		r = shunt_conn_send(s->conn, iov, iovcnt, flags, nonblock, timeout);
	if (r == -ENOTCONN)
		r = -EPIPE;	/* a refused connection: the kernel says EPIPE too */
	/* The kernel signals the thread before returning EPIPE, unless asked not to. */
	if (r == -EPIPE && !(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return r;
}

ssize_t shunt_op_recv(struct shunt_sock *s, const struct iovec *iov, int iovcnt, int flags)
{
	bool nonblock = atomic_load(&s->nonblock) || (flags & MSG_DONTWAIT);
	int64_t timeout = atomic_load(&s->rcvtimeo_us);
	ssize_t r = await_connected(s, nonblock, timeout);

	if (r == 0)
		r = shunt_conn_recv(s->conn, iov, iovcnt, flags, nonblock, timeout);
	return r;
}

ssize_t shunt_op_sendmsg(struct shunt_sock *s, int fd, const struct msghdr *msg, int flags)
{
	(void)fd;
	if (!msg || msg->msg_iovlen > IOV_MAX)
		return msg ? -EMSGSIZE : -EFAULT;
	/* A connected stream socket ignores the destination and our control data. */
	return shunt_op_send(s, msg->msg_iov, (int)msg->msg_iovlen, flags);
}

ssize_t shunt_op_recvmsg(struct shunt_sock *s, int fd, struct msghdr *msg, int flags)
{
	ssize_t r;

	(void)fd;
	if (!msg || msg->msg_iovlen > IOV_MAX)
		return msg ? -EMSGSIZE : -EFAULT;
	r = shunt_op_recv(s, msg->msg_iov, (int)msg->msg_iovlen, flags);
	if (r >= 0) {
		/* What tcp_recvmsg leaves in them: no address, no control data. */
		msg->msg_namelen = 0;
		msg->msg_controllen = 0;
		msg->msg_flags = flags & MSG_CMSG_CLOEXEC;
	}
	return r;
}

/*
 * sendfile() into a circuit: read the file with pread at an explicit
 * offset and send; the file offset (or *@offset) advances by what was sent.
 */
ssize_t shunt_op_sendfile(struct shunt_sock *s, int in_fd, off_t *offset, size_t count)
{
	static _Thread_local char *buf;
	const size_t chunk = 1 << 16;
	off_t pos = offset ? *offset : lseek(in_fd, 0, SEEK_CUR);
	ssize_t sent = 0, r = 0;

	if (pos < 0)
		return -errno;
	if (!buf && !(buf = malloc(chunk)))
		return -ENOMEM;
	while ((size_t)sent < count) {
		size_t want = count - (size_t)sent < chunk ? count - (size_t)sent : chunk;
		ssize_t got = pread(in_fd, buf, want, pos);
		struct iovec iov;

		if (got < 0) {
			r = -errno;
			break;
		}
		if (got == 0)
			break;
		iov.iov_base = buf;
		iov.iov_len = (size_t)got;
		r = shunt_op_send(s, &iov, 1, 0);
		if (r <= 0)
			break;
		sent += r;
		pos += r;
		if (r < got)
			break;		/* a non-blocking socket filled up */
	}
	if (offset)
		*offset = pos;
	else
		lseek(in_fd, pos, SEEK_SET);
	return sent ? sent : r;
}
