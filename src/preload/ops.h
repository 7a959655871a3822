/* SPDX-License-Identifier: MIT */
/*
 * The library's implementation of each intercepted call, for a descriptor
 * that is a shunt socket. The exported wrappers in intercept.c look the
 * descriptor up, call these with the socket (a reference held), and turn the
 * result into errno once. All return >= 0 or -errno.
 */
#ifndef SHUNT_OPS_H
#define SHUNT_OPS_H

#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "shunt/proto.h"

struct shunt_sock;

/* Whether sockets are made shunt sockets at all (SHUNT_DISABLE unset). */
bool shunt_enabled(void);

/* sockops.c: connection setup and naming */
int shunt_op_socket(int domain, int type, int protocol);
int shunt_op_bind(struct shunt_sock *s, int fd, const struct sockaddr *addr, socklen_t len);
int shunt_op_listen(struct shunt_sock *s, int fd, int backlog);
int shunt_op_connect(struct shunt_sock *s, int fd, const struct sockaddr *addr, socklen_t len);
int shunt_op_accept(struct shunt_sock *s, int fd, struct sockaddr *addr, socklen_t *len,
		    int flags);
int shunt_op_getsockname(struct shunt_sock *s, int fd, struct sockaddr *addr, socklen_t *len);
int shunt_op_getpeername(struct shunt_sock *s, int fd, struct sockaddr *addr, socklen_t *len);
int shunt_op_shutdown(struct shunt_sock *s, int fd, int how);
int shunt_op_close(int fd);
/* close_range(2), which must not close the library's own descriptors. */
int shunt_op_close_range(unsigned first, unsigned last, int flags);
/*
 * A descriptor that came from outside the library (SCM_RIGHTS, exec): if it
 * is a TCP listening socket, make it a shunt listener, registered with
 * shuntd (as one more holder of an existing registration, if any).
 */
void shunt_op_adopt_listener(int fd);
/* After the C library duplicated @oldfd onto @newfd: share the socket. */
void shunt_op_dup(int oldfd, int newfd);

/*
 * Promote a socket whose circuit waited behind a full backlog once shuntd
 * has decided; returns the state afterwards.
 */
int shunt_sock_sync(struct shunt_sock *s);

/*
 * Descriptor @fd of @s is about to reach code the library does not run in
 * (exec, SCM_RIGHTS): move its connection onto the kernel socket, for every
 * holder. 0 or -errno; sockets without a connection need nothing.
 */
int shunt_sock_downgrade(struct shunt_sock *s, int fd);

/*
 * io.c: the byte stream (CONNECTED or CONNECTING sockets). The iovec arrays
 * of send and recv are the library's (shunt_iov_import), the buffers they
 * point to the program's; the msghdrs of sendmsg and recvmsg are the
 * program's. All of the program's memory is reached through fault.h.
 */
ssize_t shunt_op_send(struct shunt_sock *s, int fd, const struct iovec *iov, int iovcnt,
		      int flags);
ssize_t shunt_op_recv(struct shunt_sock *s, int fd, const struct iovec *iov, int iovcnt,
		      int flags);
ssize_t shunt_op_sendmsg(struct shunt_sock *s, int fd, const struct msghdr *msg, int flags);
ssize_t shunt_op_recvmsg(struct shunt_sock *s, int fd, struct msghdr *msg, int flags);
ssize_t shunt_op_sendfile(struct shunt_sock *s, int out_fd, int in_fd, off_t *offset,
			  size_t count);
/* splice(2) where @in and/or @out (the other being a pipe) is a circuit socket. */
ssize_t shunt_op_splice(struct shunt_sock *in, int fd_in, loff_t *off_in, struct shunt_sock *out,
			int fd_out, loff_t *off_out, size_t len, unsigned int flags);
/* Whether a socket in this state carries its bytes in a circuit. */
bool shunt_op_streams(struct shunt_sock *s);
/*
 * recvmmsg: the pending error of a circuit socket (cleared), -errno or 0,
 * as sock_error before the first message; and an error that came after
 * some messages, kept for the next call (@err > 0).
 */
int shunt_op_pending_error(struct shunt_sock *s);
void shunt_op_keep_error(struct shunt_sock *s, int err);

/* opts.c: options, fcntl, ioctl */
int shunt_op_setsockopt(struct shunt_sock *s, int fd, int level, int name, const void *val,
			socklen_t len);
int shunt_op_getsockopt(struct shunt_sock *s, int fd, int level, int name, void *val,
			socklen_t *len);
int shunt_op_fcntl(struct shunt_sock *s, int fd, int cmd, void *arg);
int shunt_op_ioctl(struct shunt_sock *s, int fd, unsigned long req, void *arg);
/*
 * The options of the inherited kind set on @s (s->inherit), read from
 * kernel socket @from and set on @to.
 */
void shunt_opts_copy(const struct shunt_sock *s, int from, int to);
/* Copy onto accepted socket @to (fd @nfd) the options listener @from (fd @lfd) had set. */
void shunt_opts_inherit(struct shunt_sock *from, int lfd, struct shunt_sock *to, int nfd);
/*
 * Put the options of mask @set (bits as s->inherit has them) of kernel
 * socket @fd back as a fresh socket of @domain has them: 0, or -1 if one
 * cannot be (a buffer size locks the kernel's autotuning for good, SO_MARK
 * needs a privilege, and the like), and the socket is no spare.
 */
int shunt_opts_reset(int domain, int fd, uint32_t set);

/*
 * poll.c: readiness across shunt sockets and kernel descriptors.
 * shunt_op_poll: @fds is the program's array, read in and its revents
 * written back as the kernel does; @timeout_ns < 0 waits forever; @mask,
 * as ppoll's, is the library's copy. shunt_op_select works on the
 * library's copies of the sets.
 */
int shunt_op_poll(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask);
int shunt_op_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, int64_t timeout_ns,
		    const sigset_t *mask, int64_t *left_ns);
/*
 * Whether any of the program's @n pollfds is a shunt socket (else plain
 * libc is exact); false too when the kernel would refuse the array, which
 * it then does itself.
 */
bool shunt_poll_has_ours(const struct pollfd *fds, nfds_t n);
/* The poll(2) mask of shunt socket @s open as @fd (kernel half asked if need be). */
unsigned shunt_sock_poll_mask(struct shunt_sock *s, int fd);

/* addresses handed back to the application, with the kernel's truncation rules */
int shunt_copy_addr(const struct shunt_wire_addr *w, struct sockaddr *out, socklen_t *outlen);

#endif
