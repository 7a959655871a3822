// SPDX-License-Identifier: MIT
/*
 * The byte stream of shunt sockets: send/recv and their many spellings
 * (read, write, *v, *msg, *mmsg, sendfile) reduced to one iovec-based send
 * and one receive, with SIGPIPE raised where the kernel would raise it.
 */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/cmsg.h"
#include "preload/conn.h"
#include "preload/epoll.h"
#include "preload/fault.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/sock.h"
#include "preload/wait.h"

bool shunt_op_streams(struct shunt_sock *s)
{
	int st = shunt_sock_sync(s);

	/* A socket whose circuit was refused or disconnected owes its error first. */
	return st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING ||
	       atomic_load(&s->so_error);
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
	int st = shunt_sock_sync(s), r;

	if (st == SHUNT_SOCK_FRESH) {
		r = atomic_exchange(&s->so_error, 0);
		/* Reported: from now on the kernel half answers, epoll included. */
		if (r)
			shunt_epoll_sock_moved(s);
		return r ? -r : -ENOTCONN;
	}
	if (st != SHUNT_SOCK_CONNECTING)
		return st == SHUNT_SOCK_CONNECTED ? 0 : -ENOTCONN;
	if (nonblock)
		return -EAGAIN;
	r = shunt_wait_end(s->conn->me, s->conn->peer, &s->conn->me->tx_waiters, established,
			   s->conn, shunt_deadline(timeout_us));
	if (r == -ETIMEDOUT)
		return -EAGAIN;
	if (r < 0)
		return r;
	return shunt_sock_sync(s) == SHUNT_SOCK_CONNECTED ? 0 : -ENOTCONN;
}

/* @iov without its first @skip bytes, into @out (IOV_MAX entries): the entries left. */
static int iov_skip(const struct iovec *iov, int cnt, size_t skip, struct iovec *out)
{
	int n = 0;

	for (int i = 0; i < cnt; i++) {
		if (skip >= iov[i].iov_len) {
			skip -= iov[i].iov_len;
			continue;
		}
		out[n].iov_base = (char *)iov[i].iov_base + skip;
		out[n++].iov_len = iov[i].iov_len - skip;
		skip = 0;
	}
	return n;
}

/*
 * The rest of a call whose connection moved onto the kernel half-way:
 * the kernel socket (holding every byte the ring had) carries it on.
 */
static ssize_t kernel_rest(int fd, const struct iovec *iov, int iovcnt, int flags, size_t done,
			   bool send)
{
	struct iovec rest[IOV_MAX];
	struct msghdr mh = { .msg_iov = rest };
	ssize_t r;

	mh.msg_iovlen = (size_t)iov_skip(iov, iovcnt, done, rest);
	r = send ? SHUNT_LIBC(sendmsg)(fd, &mh, flags) : SHUNT_LIBC(recvmsg)(fd, &mh, flags);
	if (r < 0)
		return done ? (ssize_t)done : -errno;
	return (ssize_t)done + r;
}

/*
 * The options a data call obeys. The circuit keeps copies of them that
 * every process holding the socket shares (opts.c), but the peer maps the
 * circuit too and may have rewritten them: a copy that differs from what
 * this process last knew is checked with the kernel socket, which has the
 * settings every holder made, and the kernel's answer is the one used (and
 * known from then on). A lying peer costs its victim a system call per
 * call, never a call that blocks when it must not, or never times out.
 */
static bool opt_nonblock(struct shunt_sock *s, int fd)
{
	bool v = shunt_sock_opt_nonblock(s);
	long fl;

	if (v == atomic_load(&s->nonblock))
		return v;
	fl = shunt_syscall(SYS_fcntl, fd, F_GETFL);
	if (fl < 0)
		return atomic_load(&s->nonblock);
	v = fl & O_NONBLOCK;
	atomic_store(&s->nonblock, v);
	return v;
}

/*
 * A timeout: 0 none, > 0 microseconds, < 0 "never wait" (a negative
 * SO_*TIMEO). The kernel reads "never wait" back as {0, 0}, like "none":
 * a copy saying "never wait" where the kernel says {0, 0} is taken as it
 * is. A peer that wrote it there makes calls on its own connection fail
 * with EAGAIN, no worse than the reset it could send instead.
 */
static int64_t opt_timeo(struct shunt_sock *s, int fd, bool rcv)
{
	_Atomic int64_t *known = rcv ? &s->rcvtimeo_us : &s->sndtimeo_us;
	int64_t v = rcv ? shunt_sock_opt_rcvtimeo(s) : shunt_sock_opt_sndtimeo(s);
	struct timeval tv;
	socklen_t len = sizeof(tv);

	if (v == atomic_load(known))
		return v;
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, rcv ? SO_RCVTIMEO_OLD : SO_SNDTIMEO_OLD, &tv,
				  &len) < 0)
		return atomic_load(known);
	/* Saturated: a deadline that far away is none (shunt_deadline). */
	if (tv.tv_sec == 0 && tv.tv_usec == 0)
		v = v < 0 ? -1 : 0;
	else
		v = tv.tv_sec < 0 ? 0 : tv.tv_sec >= INT64_MAX / 1000000 ? INT64_MAX
			: (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
	atomic_store(known, v);
	return v;
}

static int opt_rcvlowat(struct shunt_sock *s, int fd)
{
	int v = shunt_sock_opt_rcvlowat(s);
	socklen_t len = sizeof(v);

	if (v == atomic_load(&s->rcvlowat))
		return v;
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &len) < 0)
		return atomic_load(&s->rcvlowat);
	v = v > 0 ? v : 1;
	atomic_store(&s->rcvlowat, v);
	return v;
}

/*
 * Urgent data (MSG_OOB) has no place in a ring: the connection moves onto
 * its kernel socket first, for both ends, as before an exec, and the kernel
 * sends the byte, so that the peer sees it as urgent (POLLPRI, select's
 * exceptional set, SIOCATMARK, recv(MSG_OOB)). True when the kernel carries
 * the connection now; false leaves it on the circuit, where the byte goes
 * in line, said once.
 */
static bool urgent_to_kernel(struct shunt_sock *s, int fd)
{
	static _Atomic bool warned;
	int r = shunt_sock_downgrade(s, fd);

	if (r == 0 && shunt_sock_sync(s) == SHUNT_SOCK_KERNEL) {
		shunt_info("fd %d: urgent data: the connection moves onto the kernel", fd);
		return true;
	}
	if (!atomic_exchange(&warned, true))
		shunt_warn("fd %d: urgent data on a shared-memory connection that cannot move onto "
			   "the kernel (%s): the byte goes in line", fd, strerror(r < 0 ? -r : EIO));
	return false;
}

/* A send, and the verdict on its control data (sendmsg) to give once the state allows. */
static ssize_t send_iov(struct shunt_sock *s, int fd, const struct iovec *iov, int iovcnt,
			int flags, int cmsg_err)
{
	int64_t timeo = opt_timeo(s, fd, false);
	struct shunt_io io = {
		/* A negative SO_SNDTIMEO: the kernel's timeout of 0, which never waits. */
		.nonblock = (flags & MSG_DONTWAIT) || timeo < 0 || opt_nonblock(s, fd),
		.timeout_us = timeo > 0 ? timeo : 0,
		.lowat = 1,
		.cmsg_err = cmsg_err,
	};
	ssize_t r = await_connected(s, io.nonblock, io.timeout_us);
	struct shunt_conn *c = s->conn;

	if (r == 0 && c && (flags & MSG_OOB) && !cmsg_err && urgent_to_kernel(s, fd))
		return kernel_rest(fd, iov, iovcnt, flags, 0, true);
	if (r == 0)
		r = c ? shunt_conn_send(c, iov, iovcnt, flags, &io) : -EPIPE;
	if (io.moved && r >= 0) {
		/* Only a move shuntd really made hands the call on (sockops.c checks). */
		if (shunt_sock_sync(s) != SHUNT_SOCK_KERNEL)
			return r > 0 ? r : -ECONNRESET;
		/* A blocking send sends it all, as the kernel's would; a non-blocking one may stop. */
		if (r == 0 || !io.nonblock)
			return kernel_rest(fd, iov, iovcnt, flags, (size_t)r, true);
		return r;
	}
	if (r == -ENOTCONN)
		r = -EPIPE;	/* an unconnected stream socket: the kernel says EPIPE too */
	/* The kernel signals the thread before returning EPIPE, unless asked not to. */
	if (r == -EPIPE && !(flags & MSG_NOSIGNAL))
		raise(SIGPIPE);
	return r;
}

ssize_t shunt_op_send(struct shunt_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	return send_iov(s, fd, iov, iovcnt, flags, 0);
}

ssize_t shunt_op_recv(struct shunt_sock *s, int fd, const struct iovec *iov, int iovcnt, int flags)
{
	int64_t timeo = opt_timeo(s, fd, true);
	struct shunt_io io = {
		/* A negative SO_RCVTIMEO: the kernel's timeout of 0, which never waits. */
		.nonblock = (flags & MSG_DONTWAIT) || timeo < 0 || opt_nonblock(s, fd),
		.timeout_us = timeo > 0 ? timeo : 0,
		.lowat = opt_rcvlowat(s, fd),
	};
	ssize_t r = await_connected(s, io.nonblock, io.timeout_us);
	struct shunt_conn *c = s->conn;

	if (r == 0)
		r = c ? shunt_conn_recv(c, iov, iovcnt, flags, &io) : -ENOTCONN;
	if (io.moved && r >= 0) {
		if (shunt_sock_sync(s) != SHUNT_SOCK_KERNEL)
			return r > 0 ? r : -ECONNRESET;
		/* Bytes already copied are a short read; only MSG_WAITALL wants the rest. */
		if (r == 0 || (flags & MSG_WAITALL))
			return kernel_rest(fd, iov, iovcnt, flags, (size_t)r, false);
	}
	return r;
}

/*
 * copy_msghdr_from_user: the program's msghdr @umsg into @m and its iovecs
 * into @fast or an allocation (*@iov; shunt_iov_free it), with the kernel's
 * checks in its order. A send reads the destination too (and ignores it).
 */
static int msg_import(const struct msghdr *umsg, struct msghdr *m, bool send,
		      struct iovec fast[SHUNT_FAST_IOV], struct iovec **iov)
{
	struct sockaddr_storage name;
	int namelen;

	if (shunt_get_user(m, umsg, sizeof(*m)))
		return -EFAULT;
	namelen = m->msg_name ? (int)m->msg_namelen : 0;
	if (namelen < 0)
		return -EINVAL;
	if (namelen > (int)sizeof(name))
		namelen = (int)sizeof(name);
	if (send && namelen && shunt_get_user(&name, m->msg_name, (size_t)namelen))
		return -EFAULT;
	if (m->msg_iovlen > IOV_MAX)
		return -EMSGSIZE;
	return shunt_iov_import(m->msg_iov, (int)m->msg_iovlen, fast, iov);
}

/* ____sys_sendmsg reads the control data before sending: a buffer it cannot read is EFAULT. */
static int control_readable(const void *ctl, size_t len)
{
	char chunk[256];

	if (len > INT_MAX)
		return -ENOBUFS;
	for (size_t at = 0; at < len; at += sizeof(chunk)) {
		size_t n = len - at < sizeof(chunk) ? len - at : sizeof(chunk);

		if (shunt_get_user(chunk, (const char *)ctl + at, n))
			return -EFAULT;
	}
	return 0;
}

ssize_t shunt_op_sendmsg(struct shunt_sock *s, int fd, const struct msghdr *umsg, int flags)
{
	struct iovec fast[SHUNT_FAST_IOV], *iov;
	struct msghdr m;
	ssize_t r = msg_import(umsg, &m, true, fast, &iov);

	if (r < 0)
		return r;
	/* ____sys_sendmsg: the buffer's size is judged (ENOBUFS) before it is read. */
	r = shunt_cmsg_send_buffer(&m);
	if (r == 0)
		r = control_readable(m.msg_control, m.msg_controllen);
	/*
	 * A connected stream socket ignores the destination; of the control
	 * data it checks the SOL_SOCKET messages, whose values change nothing
	 * on a circuit.
	 */
	if (r == 0)
		r = send_iov(s, fd, iov, (int)m.msg_iovlen, flags,
			     m.msg_controllen ? shunt_cmsg_send_check(fd, &m) : 0);
	shunt_iov_free(iov, fast);
	return r;
}

ssize_t shunt_op_recvmsg(struct shunt_sock *s, int fd, struct msghdr *umsg, int flags)
{
	struct iovec fast[SHUNT_FAST_IOV], *iov;
	struct msghdr m;
	ssize_t r = msg_import(umsg, &m, false, fast, &iov);
	int out_flags = flags & MSG_CMSG_CLOEXEC, zero = 0;
	char ctl[CMSG_SPACE(sizeof(int))];
	size_t used = 0;

	if (r < 0)
		return r;
	r = shunt_op_recv(s, fd, iov, (int)m.msg_iovlen, flags);
	shunt_iov_free(iov, fast);
	if (r < 0)
		return r;
	/* TCP_INQ: the bytes left to read after this call (TCP_CM_INQ), built here, then copied. */
	if ((shunt_sock_opt_flags(s) & SHUNT_OPT_INQ) && shunt_sock_state(s) == SHUNT_SOCK_CONNECTED) {
		struct msghdr local = m;
		int inq = (int)shunt_conn_inq_hint(s->conn);

		local.msg_control = m.msg_control ? ctl : NULL;
		local.msg_controllen = m.msg_controllen < sizeof(ctl) ? m.msg_controllen : sizeof(ctl);
		local.msg_flags = out_flags;
		shunt_cmsg_put(&local, &used, SOL_TCP, TCP_CM_INQ, &inq, sizeof(inq));
		out_flags = local.msg_flags;
		if (used && shunt_put_user(m.msg_control, ctl, used))
			return -EFAULT;
	}
	/*
	 * What ____sys_recvmsg writes back after tcp_recvmsg: no address (the
	 * length only where one was asked for), control data as asked for. The
	 * bytes are taken even when these writes fail.
	 */
	if (m.msg_name && shunt_put_user(&umsg->msg_namelen, &zero, sizeof(zero)))
		return -EFAULT;
	if (shunt_put_user(&umsg->msg_flags, &out_flags, sizeof(out_flags)) ||
	    shunt_put_user(&umsg->msg_controllen, &used, sizeof(used)))
		return -EFAULT;
	return r;
}

int shunt_op_pending_error(struct shunt_sock *s)
{
	if (shunt_sock_state(s) != SHUNT_SOCK_CONNECTED)
		return 0;
	return -shunt_conn_take_error(s->conn);
}

void shunt_op_keep_error(struct shunt_sock *s, int err)
{
	if (shunt_sock_state(s) == SHUNT_SOCK_CONNECTED)
		shunt_conn_set_error(s->conn, err);
}

enum { BOUNCE_SIZE = 1 << 16 };

/* A per-thread buffer for the calls the kernel would do without one. */
static char *bounce(void)
{
	static _Thread_local char *buf;

	if (!buf)
		buf = malloc(BOUNCE_SIZE);
	return buf;
}

/*
 * sendfile() into a circuit: read the file with pread at an explicit
 * offset and send; the file offset (or *@offset) advances by what was sent.
 */
ssize_t shunt_op_sendfile(struct shunt_sock *s, int out_fd, int in_fd, off_t *offset, size_t count)
{
	char *buf = bounce();
	const size_t chunk = BOUNCE_SIZE;
	off_t pos;
	ssize_t sent = 0, r = 0;

	/* sendfile64 reads *offset before anything, and writes it back after. */
	if (offset && shunt_get_user(&pos, offset, sizeof(pos)))
		return -EFAULT;
	if (!offset)
		pos = lseek(in_fd, 0, SEEK_CUR);
	if (pos < 0)
		return -errno;
	if (!buf)
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
		r = shunt_op_send(s, out_fd, &iov, 1, 0);
		if (r <= 0)
			break;
		sent += r;
		pos += r;
		if (r < got)
			break;		/* a non-blocking socket filled up */
	}
	if (!offset)
		lseek(in_fd, pos, SEEK_SET);
	else if (shunt_put_user(offset, &pos, sizeof(pos)))
		return -EFAULT;
	return sent ? sent : r;
}

/* Room left in pipe @fd, or -errno. */
static long pipe_room(int fd)
{
	int size = (int)shunt_syscall(SYS_fcntl, fd, F_GETPIPE_SZ), used = 0;

	if (size < 0)
		return -errno;
	if (shunt_syscall(SYS_ioctl, fd, FIONREAD, &used) < 0)
		return -errno;
	return size - used;
}

/*
 * splice() with a circuit socket on one side and a pipe on the other,
 * through a bounce buffer: never take more from the source than the
 * destination can take now, so no byte is read and then dropped.
 */
ssize_t shunt_op_splice(struct shunt_sock *in, int fd_in, loff_t *off_in, struct shunt_sock *out,
			int fd_out, loff_t *off_out, size_t len, unsigned int flags)
{
	int msg = flags & SPLICE_F_NONBLOCK ? MSG_DONTWAIT : 0;
	char *buf = bounce();
	struct iovec iov;
	ssize_t r;
	long room;

	if (!buf)
		return -ENOMEM;
	if ((in && off_in) || (out && off_out))
		return -ESPIPE;		/* sockets have no offset */
	if (len > BOUNCE_SIZE)
		len = BOUNCE_SIZE;
	if (in) {
		/* Socket to pipe: as much as the pipe has room for. */
		room = out ? (long)len : pipe_room(fd_out);
		if (room < 0)
			return room;
		if (room == 0) {
			struct pollfd p = { fd_out, POLLOUT, 0 };

			if (msg)
				return -EAGAIN;
			if (shunt_syscall(SYS_ppoll, &p, 1, NULL, NULL, 0) < 0)
				return -errno;
			room = pipe_room(fd_out);
			if (room <= 0)
				return room < 0 ? room : -EAGAIN;
		}
		iov = (struct iovec){ buf, len < (size_t)room ? len : (size_t)room };
		r = shunt_op_recv(in, fd_in, &iov, 1, msg);
		if (r <= 0)
			return r;
		iov.iov_len = (size_t)r;
		if (out)
			return shunt_op_send(out, fd_out, &iov, 1, msg);
		r = shunt_syscall(SYS_write, fd_out, buf, (size_t)r);
		return r < 0 ? -errno : r;
	}
	/* Pipe to socket: no more than the ring takes now when we must not block. */
	if (msg || opt_nonblock(out, fd_out)) {
		size_t free_now = out->conn ? out->conn->ring_size - shunt_conn_outq(out->conn) : 0;

		if (!free_now)
			return -EAGAIN;
		if (len > free_now)
			len = free_now;
	}
	r = shunt_syscall(SYS_read, fd_in, buf, len);
	if (r <= 0)
		return r < 0 ? -errno : 0;
	iov = (struct iovec){ buf, (size_t)r };
	return shunt_op_send(out, fd_out, &iov, 1, msg);
}
