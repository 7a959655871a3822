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
#include <stdlib.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "preload/conn.h"
#include "preload/fault.h"
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

/*
 * The shunt socket behind @fd if it carries a circuit (a reference held), or
 * NULL: always NULL while dormant (init.h), when no descriptor is ours.
 */
static struct shunt_sock *stream_of(int fd)
{
	struct shunt_sock *s;

	if (shunt_dormant())
		return NULL;
	shunt_ensure_init();
	s = shunt_fdt_get(fd);
	if (s && !shunt_op_streams(s)) {
		shunt_sock_put(s);
		s = NULL;
	}
	return s;
}

/* @iov is the library's; the buffers it points to are the program's. */
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

/*
 * import_ubuf: one buffer, cut to MAX_RW_COUNT; outside the user half of the
 * address space it is EFAULT before anything else (@s's reference dropped).
 */
static bool ubuf(struct shunt_sock *s, struct iovec *iov, const void *buf, size_t len)
{
	iov->iov_base = (void *)buf;
	iov->iov_len = len < SHUNT_MAX_RW ? len : SHUNT_MAX_RW;
	if (shunt_user_range_ok(iov->iov_base, iov->iov_len))
		return true;
	shunt_sock_put(s);
	errno = EFAULT;
	return false;
}

/* readv/writev: the program's iovec array, imported as the kernel does. */
static ssize_t do_vec(struct shunt_sock *s, int fd, const struct iovec *uiov, int cnt, bool send)
{
	struct iovec fast[SHUNT_FAST_IOV], *iov;
	int saved = errno;
	ssize_t r;

	if (cnt < 0 || cnt > IOV_MAX) {
		shunt_sock_put(s);
		errno = EINVAL;
		return -1;
	}
	r = shunt_iov_import(uiov, cnt, fast, &iov);
	if (r == 0) {
		r = send ? shunt_op_send(s, fd, iov, cnt, 0) : shunt_op_recv(s, fd, iov, cnt, 0);
		shunt_iov_free(iov, fast);
	}
	shunt_sock_put(s);
	return shunt_ret(r, saved);
}

/*
 * A msghdr of the program's, for the descriptor hand-over (handoff.c),
 * with its control data copied into @m->msg_control (free it): false when
 * either cannot be read, or has no control data (the kernel then answers
 * the call itself, EFAULT included).
 */
static bool msg_with_control(const struct msghdr *umsg, struct msghdr *m)
{
	void *ctl;

	if (!umsg || shunt_get_user(m, umsg, sizeof(*m)) || !m->msg_controllen ||
	    m->msg_controllen > INT_MAX)
		return false;
	ctl = malloc(m->msg_controllen);
	if (!ctl || shunt_get_user(ctl, m->msg_control, m->msg_controllen)) {
		free(ctl);
		return false;
	}
	m->msg_control = ctl;
	return true;
}

/* Passing descriptors (SCM_RIGHTS): shunt connections among them move first. */
static void handoff_scm(const struct msghdr *umsg)
{
	struct msghdr m;

	if (msg_with_control(umsg, &m)) {
		shunt_handoff_scm(&m);
		free(m.msg_control);
	}
}

/* Received descriptors (SCM_RIGHTS): a listening socket among them may be ours. */
static void handoff_received(const struct msghdr *umsg)
{
	struct msghdr m;

	if (msg_with_control(umsg, &m)) {
		shunt_handoff_received(&m);
		free(m.msg_control);
	}
}

SHUNT_EXPORT ssize_t send(int fd, const void *buf, size_t len, int flags)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov;

	if (!s)
		return SHUNT_LIBC(send)(fd, buf, len, flags);
	if (!ubuf(s, &iov, buf, len))
		return -1;
	return do_send(s, fd, &iov, 1, flags);
}

SHUNT_EXPORT ssize_t sendto(int fd, const void *buf, size_t len, int flags,
			    __CONST_SOCKADDR_ARG addr, socklen_t alen)
{
	struct shunt_sock *s = stream_of(fd);
	struct sockaddr_storage to;
	struct iovec iov;

	if (!s)
		return SHUNT_LIBC(sendto)(fd, buf, len, flags, addr.__sockaddr__, alen);
	if (!ubuf(s, &iov, buf, len))
		return -1;
	/*
	 * move_addr_to_kernel reads the destination; then a connected stream
	 * socket ignores it, as tcp_sendmsg does.
	 */
	if (addr.__sockaddr__ && ((int)alen < 0 || alen > sizeof(to) ||
				  shunt_get_user(&to, addr.__sockaddr__, alen))) {
		shunt_sock_put(s);
		errno = (int)alen < 0 || alen > sizeof(to) ? EINVAL : EFAULT;
		return -1;
	}
	return do_send(s, fd, &iov, 1, flags);
}

SHUNT_EXPORT ssize_t write(int fd, const void *buf, size_t len)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov;

	if (!s)
		return SHUNT_LIBC(write)(fd, buf, len);
	if (!ubuf(s, &iov, buf, len))
		return -1;
	return do_send(s, fd, &iov, 1, 0);
}

SHUNT_EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
	struct shunt_sock *s = stream_of(fd);

	if (!s)
		return SHUNT_LIBC(writev)(fd, iov, cnt);
	return do_vec(s, fd, iov, cnt, true);
}

SHUNT_EXPORT ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	struct shunt_sock *s = stream_of(fd);
	int saved = errno;
	ssize_t r;

	if (!s) {
		if (!shunt_dormant())
			handoff_scm(msg);
		return SHUNT_LIBC(sendmsg)(fd, msg, flags);
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

	if (n > IOV_MAX)
		n = IOV_MAX;	/* the kernel's UIO_MAXIOV cap */
	if (!s) {
		for (i = 0; vec && i < n && !shunt_dormant(); i++)
			handoff_scm(&vec[i].msg_hdr);
		return SHUNT_LIBC(sendmmsg)(fd, vec, n, flags);
	}
	for (i = 0; i < n; i++) {
		unsigned int len;

		r = shunt_op_sendmsg(s, fd, &vec[i].msg_hdr, flags);
		if (r < 0)
			break;
		/* A length it cannot store ends the call; that message was sent all the same. */
		len = (unsigned int)r;
		if (shunt_put_user(&vec[i].msg_len, &len, sizeof(len))) {
			r = -EFAULT;
			break;
		}
	}
	shunt_sock_put(s);
	return (int)shunt_ret(i ? (ssize_t)i : r, saved);
}

SHUNT_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov;

	if (!s)
		return SHUNT_LIBC(recv)(fd, buf, len, flags);
	if (!ubuf(s, &iov, buf, len))
		return -1;
	return do_recv(s, fd, &iov, 1, flags);
}

SHUNT_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, __SOCKADDR_ARG addr,
			      socklen_t *alen)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov;
	ssize_t r;
	int have;

	if (!s)
		return SHUNT_LIBC(recvfrom)(fd, buf, len, flags, addr.__sockaddr__, alen);
	if (!ubuf(s, &iov, buf, len))
		return -1;
	r = do_recv(s, fd, &iov, 1, flags);
	if (r < 0 || !addr.__sockaddr__)
		return r;
	/*
	 * move_addr_to_user for a stream socket, which reports no source: the
	 * length becomes 0. The bytes are taken even when that fails.
	 */
	if (shunt_get_user(&have, alen, sizeof(have))) {
		errno = EFAULT;
		return -1;
	}
	if (have < 0) {
		errno = EINVAL;
		return -1;
	}
	have = 0;
	if (shunt_put_user(alen, &have, sizeof(have))) {
		errno = EFAULT;
		return -1;
	}
	return r;
}

SHUNT_EXPORT ssize_t read(int fd, void *buf, size_t len)
{
	struct shunt_sock *s = stream_of(fd);
	struct iovec iov;

	if (!s)
		return SHUNT_LIBC(read)(fd, buf, len);
	if (!ubuf(s, &iov, buf, len))
		return -1;
	return do_recv(s, fd, &iov, 1, 0);
}

SHUNT_EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
	struct shunt_sock *s = stream_of(fd);

	if (!s)
		return SHUNT_LIBC(readv)(fd, iov, cnt);
	return do_vec(s, fd, iov, cnt, false);
}

SHUNT_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	struct shunt_sock *s = stream_of(fd);
	int saved = errno;
	ssize_t r;

	if (!s) {
		r = SHUNT_LIBC(recvmsg)(fd, msg, flags);
		/*
		 * Received descriptors (SCM_RIGHTS): stale entries forgotten,
		 * those past the limit cut (fdlimit.c), a listening socket among
		 * them made ours. The kernel wrote @msg: it is readable.
		 */
		if (r >= 0 && msg && msg->msg_controllen && !shunt_dormant()) {
			shunt_fdlimit_received(msg);
			handoff_received(msg);
			errno = saved;
		}
		return r;
	}
	r = shunt_op_recvmsg(s, fd, msg, flags);
	shunt_sock_put(s);
	return shunt_ret(r, saved);
}

/*
 * do_recvmmsg on a circuit socket: the timeout read and checked first (a
 * bad pointer is EFAULT), then a pending error; then one recvmsg per entry
 * (on a stream, each a piece of it; at EOF every entry gets 0); the
 * timeout, if any, is looked at only between messages, and what is left
 * of it is written back; an error after some messages waits for the next
 * call, unless it is EAGAIN.
 */
static int stream_recvmmsg(struct shunt_sock *s, int fd, struct mmsghdr *vec, unsigned int n,
			   int flags, struct timespec *timeout)
{
	struct timespec ts;
	int64_t end = 0, left;
	ssize_t r;
	unsigned int i;

	if (timeout) {
		if (shunt_get_user(&ts, timeout, sizeof(ts)))
			return -EFAULT;
		/* poll_select_set_timeout: a valid timespec, {0, 0} meaning "one, then stop" */
		if (ts.tv_sec < 0 || ts.tv_nsec < 0 || ts.tv_nsec >= 1000000000L)
			return -EINVAL;
		if (ts.tv_sec || ts.tv_nsec)
			end = shunt_now_ns() +
			      (ts.tv_sec >= INT64_MAX / 2000000000LL ? INT64_MAX / 2
				: ts.tv_sec * 1000000000LL + ts.tv_nsec);
	}
	r = shunt_op_pending_error(s);
	if (r < 0)
		return (int)r;
	for (i = 0; i < n; i++) {
		unsigned int len;

		r = shunt_op_recvmsg(s, fd, &vec[i].msg_hdr, flags & ~MSG_WAITFORONE);
		if (r < 0)
			break;
		len = (unsigned int)r;
		if (shunt_put_user(&vec[i].msg_len, &len, sizeof(len))) {
			r = -EFAULT;
			break;
		}
		if (flags & MSG_WAITFORONE)
			flags |= MSG_DONTWAIT;
		if (timeout) {
			left = end ? end - shunt_now_ns() : 0;
			if (left <= 0) {
				ts = (struct timespec){ 0, 0 };
				i++;
				break;
			}
			ts.tv_sec = left / 1000000000;
			ts.tv_nsec = left % 1000000000;
		}
	}
	/* What is left of the timeout goes back. */
	if (timeout && i && shunt_put_user(timeout, &ts, sizeof(ts)))
		return -EFAULT;
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
		int got = SHUNT_LIBC(recvmmsg)(fd, vec, n, flags, timeout);

		for (int k = 0; k < got && !shunt_dormant(); k++)
			if (vec[k].msg_hdr.msg_controllen) {
				shunt_fdlimit_received(&vec[k].msg_hdr);
				handoff_received(&vec[k].msg_hdr);
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
	return do_sendfile(out_fd, in_fd, offset, count, SHUNT_LIBC(sendfile));
}

SHUNT_EXPORT ssize_t sendfile64(int out_fd, int in_fd, off_t *offset, size_t count)
{
	return do_sendfile(out_fd, in_fd, offset, count, SHUNT_LIBC(sendfile64));
}

SHUNT_EXPORT ssize_t splice(int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len,
			    unsigned int flags)
{
	struct shunt_sock *in = stream_of(fd_in), *out = stream_of(fd_out);
	int saved = errno;
	ssize_t r;

	if (!in && !out)
		return SHUNT_LIBC(splice)(fd_in, off_in, fd_out, off_out, len, flags);
	r = shunt_op_splice(in, fd_in, off_in, out, fd_out, off_out, len, flags);
	if (in)
		shunt_sock_put(in);
	if (out)
		shunt_sock_put(out);
	return shunt_ret(r, saved);
}
