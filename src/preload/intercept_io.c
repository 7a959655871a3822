// SPDX-License-Identifier: MIT
/*
 * Exported wrappers of the byte-stream calls. A descriptor that is not a
 * shunt socket carrying a circuit goes to the C library untouched, after one
 * table lookup; the others never enter the kernel in the common case.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/handoff.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/sock.h"
#include "preload/util.h"

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
		       __SOCKADDR_ARG addr, socklen_t *alen);
void __chk_fail(void) __attribute__((noreturn));

/* The shunt socket behind @fd if it carries a circuit (a reference held), or NULL. */
static struct shunt_sock *stream_of(int fd)
{
	struct shunt_sock *s;

	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (s && !shunt_op_streams(s)) {
		shunt_sock_put(s);
		s = NULL;
	}
	return s;
}

static ssize_t do_send(struct shunt_sock *s, int fd, const struct iovec *iov, int cnt, int flags)
{
	int saved = errno;
	ssize_t r = shunt_op_send(s, fd, iov, cnt, flags);

	shunt_sock_put(s);
	return shunt_ret(r, saved);
}

static ssize_t do_recv(struct shunt_sock *s, int fd, const struct iovec *iov, int cnt, int flags)
{
	int saved = errno;
	ssize_t r = shunt_op_recv(s, fd, iov, cnt, flags);

	shunt_sock_put(s);
	return shunt_ret(r, saved);
}

SHUNT_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov = { (void *)buf, len };

	if (!s)
		return shunt_libc.send(fd, buf, len, flags);
	return do_send(s, fd, &iov, 1, flags);
}

SHUNT_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			    __CONST_SOCKADDR_ARG addr, socklen_t alen)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov = { (void *)buf, len };

	if (!s)
		return shunt_libc.sendto(fd, buf, len, flags, addr.__sockaddr__, alen);
	/* A connected stream socket ignores the destination, as tcp_sendmsg does. */
	return do_send(s, fd, &iov, 1, flags);
}

SHUNT_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov = { (void *)buf, len };

	if (!s)
		return shunt_libc.write(fd, buf, len);
	return do_send(s, fd, &iov, 1, 0);
}

SHUNT_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	struct shunt_sock *s = stream_of(fd);

	if (!s)
		return shunt_libc.writev(fd, iov, cnt);
	if (cnt < 0 || cnt > IOV_MAX) {
		shunt_sock_put(s);
		errno = EINVAL;
		return -1;
	}
	return do_send(s, fd, iov, cnt, 0);
}

SHUNT_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct shunt_sock *s = stream_of(fd);
	int saved = errno;
	ssize_t r;

	if (!s) {
		/* Passing descriptors (SCM_RIGHTS): shunt connections among them move first. */
		if (msg && msg->msg_controllen)
			shunt_handoff_scm(msg);
		return shunt_libc.sendmsg(fd, msg, flags);
	}
	r = shunt_op_sendmsg(s, fd, msg, flags);
	shunt_sock_put(s);
	return shunt_ret(r, saved);
}

SHUNT_EXPORT int sendmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags)
{
	struct shunt_sock *s = stream_of(fd);
	int saved = errno;
	ssize_t r = 0;
	unsigned int i;

	if (!s) {
		for (i = 0; vec && i < n; i++)
			if (vec[i].msg_hdr.msg_controllen)
				shunt_handoff_scm(&vec[i].msg_hdr);
		return shunt_libc.sendmmsg(fd, vec, n, flags);
	}
	if (n > IOV_MAX)
		n = IOV_MAX;	/* the kernel's UIO_MAXIOV cap */
	for (i = 0; i < n; i++) {
		r = shunt_op_sendmsg(s, fd, &vec[i].msg_hdr, flags);
		if (r < 0)
			break;
		vec[i].msg_len = (unsigned int)r;
	}
	shunt_sock_put(s);
	return (int)shunt_ret(i ? (ssize_t)i : r, saved);
}

SHUNT_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov = { buf, len };

	if (!s)
		return shunt_libc.recv(fd, buf, len, flags);
	return do_recv(s, fd, &iov, 1, flags);
}

SHUNT_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, __SOCKADDR_ARG addr,
			      socklen_t *alen)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov = { buf, len };
	ssize_t r;

	if (!s)
		return shunt_libc.recvfrom(fd, buf, len, flags, addr.__sockaddr__, alen);
	r = do_recv(s, fd, &iov, 1, flags);
	/* A stream socket reports no source: the length becomes 0. */
	if (r >= 0 && addr.__sockaddr__ && alen)
		*alen = 0;
	return r;
}

SHUNT_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov = { buf, len };

	if (!s)
		return shunt_libc.read(fd, buf, len);
	return do_recv(s, fd, &iov, 1, 0);
}

SHUNT_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	struct shunt_sock *s = stream_of(fd);

	if (!s)
		return shunt_libc.readv(fd, iov, cnt);
	if (cnt < 0 || cnt > IOV_MAX) {
		shunt_sock_put(s);
		errno = EINVAL;
		return -1;
	}
	return do_recv(s, fd, iov, cnt, 0);
}

SHUNT_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct shunt_sock *s = stream_of(fd);
	int saved = errno;
	ssize_t r;

	if (!s) {
		r = shunt_libc.recvmsg(fd, msg, flags);
		/* Received descriptors (SCM_RIGHTS): a listening socket among them may be ours. */
		if (r >= 0 && msg && msg->msg_controllen) {
			shunt_fdlimit_received(msg);
			shunt_handoff_received(msg);
			errno = saved;
		}
		return r;
	}
	r = shunt_op_recvmsg(s, fd, msg, flags);
	shunt_sock_put(s);
	return shunt_ret(r, saved);
}

/*
 * do_recvmmsg on a circuit socket: a pending error first; then one recvmsg
 * per entry (on a stream, each a piece of it; at EOF every entry gets 0);
 * the timeout, if any, is looked at only between messages, and what is
 * left of it is written back; an error after some messages waits for the
 * next call, unless it is EAGAIN.
 */
static int stream_recvmmsg(struct shunt_sock *s, int fd, struct mmsghdr *vec, unsigned int n,
			   int flags, struct timespec *timeout)
{
	int64_t end = 0, left;
	ssize_t r = shunt_op_pending_error(s);
	unsigned int i;

	if (timeout) {
		/* poll_select_set_timeout: a valid timespec, {0, 0} meaning "one, then stop" */
		if (timeout->tv_sec < 0 || timeout->tv_nsec < 0 || timeout->tv_nsec >= 1000000000L)
			return -EINVAL;
		if (timeout->tv_sec || timeout->tv_nsec)
			end = shunt_now_ns() +
			      (timeout->tv_sec >= INT64_MAX / 2000000000LL ? INT64_MAX / 2
				: timeout->tv_sec * 1000000000LL + timeout->tv_nsec);
	}
	if (r < 0)
		return (int)r;
	for (i = 0; i < n; i++) {
		r = shunt_op_recvmsg(s, fd, &vec[i].msg_hdr, flags & ~MSG_WAITFORONE);
		if (r < 0)
			break;
		vec[i].msg_len = (unsigned int)r;
		if (flags & MSG_WAITFORONE)
			flags |= MSG_DONTWAIT;
		if (timeout) {
			left = end ? end - shunt_now_ns() : 0;
			if (left <= 0) {
				*timeout = (struct timespec){ 0, 0 };
				i++;
				break;
			}
			timeout->tv_sec = left / 1000000000;
			timeout->tv_nsec = left % 1000000000;
		}
	}
	if (r >= 0 || !i)
		return i ? (int)i : (int)r;
	if (r != -EAGAIN)
		shunt_op_keep_error(s, (int)-r);
	return (int)i;
}

SHUNT_EXPORT int recvmmsg(int fd, struct mmsghdr *vec, unsigned int n, int flags,
			  struct timespec *timeout)
{
	struct shunt_sock *s = stream_of(fd);
	int saved = errno;
	ssize_t r;

	if (!s) {
		int got = shunt_libc.recvmmsg(fd, vec, n, flags, timeout);

		for (int k = 0; k < got; k++)
			if (vec[k].msg_hdr.msg_controllen) {
				shunt_fdlimit_received(&vec[k].msg_hdr);
				shunt_handoff_received(&vec[k].msg_hdr);
			}
		if (got >= 0)
			errno = saved;
		return got;
	}
	if (n > IOV_MAX)
		n = IOV_MAX;
	r = stream_recvmmsg(s, fd, vec, n, flags, timeout);
	shunt_sock_put(s);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
	if (n > buflen)
		__chk_fail();
	return read(fd, buf, n);
}

SHUNT_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
	if (n > buflen)
		__chk_fail();
	return recv(fd, buf, n, flags);
}

SHUNT_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
				    __SOCKADDR_ARG addr, socklen_t *alen)
{
	if (n > buflen)
		__chk_fail();
	return recvfrom(fd, buf, n, flags, addr, alen);
}

static ssize_t do_sendfile(int out_fd, int in_fd, off_t *offset, size_t count,
			   ssize_t (*libc_fn)(int, int, off_t *, size_t))
{
	struct shunt_sock *s = stream_of(out_fd);
	int saved = errno;
	ssize_t r;

	if (!s)
		return libc_fn(out_fd, in_fd, offset, count);
	r = shunt_op_sendfile(s, out_fd, in_fd, offset, count);
	shunt_sock_put(s);
	return shunt_ret(r, saved);
}

SHUNT_EXPORT ssize_t sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
	shunt_ensure_init();
	return do_sendfile(out_fd, in_fd, offset, count, shunt_libc.sendfile);
}

SHUNT_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off_t *offset, size_t count)
{
	shunt_ensure_init();
	return do_sendfile(out_fd, in_fd, offset, count, shunt_libc.sendfile64);
}

SHUNT_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			    unsigned int flags)
{
	struct shunt_sock *in = stream_of(fd_in), *out = stream_of(fd_out);
	int saved = errno;
	ssize_t r;

	if (!in && !out)
		return shunt_libc.splice(fd_in, off_in, fd_out, off_out, len, flags);
	r = shunt_op_splice(in, fd_in, off_in, out, fd_out, off_out, len, flags);
	if (in)
		shunt_sock_put(in);
	if (out)
		shunt_sock_put(out);
	return shunt_ret(r, saved);
}
