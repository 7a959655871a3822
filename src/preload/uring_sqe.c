// SPDX-License-Identifier: MIT
/*
 * What the library does with each submission queue entry before the kernel
 * consumes it (see uring.h): EPOLL_CTL on a shunt epoll instance for a
 * shunt socket or instance, and CLOSE of a shunt socket or instance, are
 * performed here and completed with their result; any other operation
 * that reaches a shunt socket's kernel file makes that socket a plain
 * kernel socket first (its connection moved onto the kernel), so the kernel
 * operation is exact; entries the kernel would refuse before looking at
 * their descriptors are left to it.
 */
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/epoll.h"
#include "preload/fdtable.h"
#include "preload/fork.h"
#include "preload/ops.h"
#include "preload/recycle.h"
#include "preload/sock.h"
#include "preload/uring.h"

/* The entry at free-running queue position @pos; NULL for an index the kernel drops. */
static struct shunt_iou_sqe *sqe_at(struct shunt_uring *u, uint32_t pos)
{
	uint32_t idx = pos & u->mask;

	if (u->array) {
		/* Written before the tail's release store, which enter()'s acquire load ordered. */
		idx = __atomic_load_n(&u->array[idx], __ATOMIC_RELAXED);
		if (idx >= u->entries)
			return NULL;
	}
	return (struct shunt_iou_sqe *)(u->sqes + (size_t)idx * u->sqe_size);
}

/*
 * Whether the kernel fails the entry before its operation looks at any
 * descriptor (io_init_req's checks for EPOLL_CTL and CLOSE, which take no
 * buffer and no priority): then it is the kernel's to fail.
 */
static bool kernel_refuses(const struct shunt_iou_sqe *s)
{
	return (s->flags & ~SHUNT_IOSQE_VALID) || (s->flags & SHUNT_IOSQE_BUFFER_SELECT) ||
	       s->ioprio;
}

/*
 * @s (open as @fd) reaches code the library does not run in: the kernel
 * will use its file. Its connection moves onto the kernel (as for exec,
 * docs/sharing.md), a listener stops taking circuits, and the descriptor
 * is forgotten, as a connect() left to the kernel is. 0, or -EOPNOTSUPP
 * when the connection cannot move (no companions, or not accepted yet).
 */
static int sock_to_kernel(struct shunt_sock *s, int fd, unsigned op)
{
	int st = shunt_sock_sync(s), r = 0;
	struct shunt_file *t;

	/* A recycled half becomes the fresh socket it stands for (recycle.h). */
	if (shunt_recycle_fresh(s, fd) < 0)
		return -EOPNOTSUPP;
	if (st == SHUNT_SOCK_CONNECTING)
		r = -EINPROGRESS;
	else if (st == SHUNT_SOCK_CONNECTED)
		r = shunt_sock_downgrade(s, fd);
	if (r < 0) {
		shunt_warn("fd %d: io_uring operation %u on a shared-memory connection that cannot "
			   "move onto the kernel (%s): it fails with EOPNOTSUPP", fd, op, strerror(-r));
		return -EOPNOTSUPP;
	}
	shunt_info("fd %d: io_uring operation %u: it becomes a kernel socket", fd, op);
	shunt_fork_enter();
	pthread_mutex_lock(&s->lock);
	if (shunt_sock_state(s) == SHUNT_SOCK_LISTENING)
		shunt_sock_drop_listener(s, false);
	pthread_mutex_unlock(&s->lock);
	shunt_epoll_sock_forget(s);
	/* @fd may name another file by now (an epoll registration's number). */
	t = shunt_fdt_get_file(fd);
	if (t == &s->f) {
		struct shunt_file *taken = shunt_fdt_take(fd);

		if (taken)
			shunt_file_put(taken);
	}
	if (t)
		shunt_file_put(t);
	shunt_fork_leave();
	return 0;
}

/*
 * The kernel is to poll or wait on shunt epoll instance @ep: nobody in the
 * library would be awake to route its circuits' readiness, so every socket
 * it learns of in user space becomes a kernel socket and its kernel
 * instance tells the truth. 0, or -EOPNOTSUPP if one cannot.
 */
static int epoll_to_kernel(struct shunt_epoll *ep, unsigned op)
{
	enum { BATCH = 32 };
	struct shunt_sock *socks[BATCH];
	int fds[BATCH], n, r = 0;

	do {
		n = shunt_epoll_members(ep, socks, fds, BATCH);
		for (int i = 0; i < n; i++) {
			if (sock_to_kernel(socks[i], fds[i], op) < 0)
				r = -EOPNOTSUPP;
			shunt_sock_put(socks[i]);
		}
	} while (n == BATCH && !r);
	/* A bell rung for what was on the ready list must not make it look ready. */
	shunt_epoll_ready_now(ep);
	return r;
}

/*
 * Whether @fd, which the table says is a shunt socket, is no socket at all:
 * it was closed behind the library's back (a raw close system call) and
 * its number reused. Then the entry is stale and the kernel's file is used.
 */
static bool not_a_socket(int fd)
{
	socklen_t len = sizeof(int);
	int type;

	return shunt_syscall(SYS_getsockopt, fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 &&
	       errno == ENOTSOCK;
}

/* Operation @op will use descriptor @fd's file: 0 to let it, or the error it fails with. */
static int target(unsigned op, int fd)
{
	struct shunt_file *f = shunt_fdt_get_file(fd);
	struct shunt_epoll *ep;
	int r = 0;

	if (!f)
		return 0;
	switch (f->kind) {
	case SHUNT_FILE_SOCK:
		if (not_a_socket(fd)) {
			struct shunt_file *stale = shunt_fdt_take(fd);

			if (stale)
				shunt_file_put(stale);
			break;
		}
		r = sock_to_kernel((struct shunt_sock *)f, fd, op);
		break;
	case SHUNT_FILE_EPOLL:
		ep = (struct shunt_epoll *)f;
		if (!shunt_epoll_kernel_only(ep))
			r = epoll_to_kernel(ep, op);
		/* Instances nested in it are still ours: their kernel data is not the application's. */
		if (!r && op == SHUNT_IOU_EPOLL_WAIT && !shunt_epoll_kernel_only(ep)) {
			shunt_warn("fd %d: IORING_OP_EPOLL_WAIT on an epoll instance holding another "
				   "shunt epoll instance fails with EOPNOTSUPP", fd);
			r = -EOPNOTSUPP;
		}
		break;
	default:
		break;
	}
	shunt_file_put(f);
	return r;
}

void shunt_uring_fixed_files(const int32_t *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			target(SHUNT_IOU_FILES_UPDATE, fds[i]);
}

/*
 * EPOLL_CTL: performed by the library when epoll_ctl() would be. Returns
 * whether the kernel fails it while preparing it (and so stops submitting).
 */
static bool epoll_ctl_sqe(struct shunt_iou_sqe *s)
{
	int epfd = s->fd, op = (int)s->len, fd = (int)s->off, r;
	struct shunt_epoll *ep;
	struct shunt_file *f;

	/*
	 * io_epoll_ctl_prep refuses these, and copies the event in for any
	 * op but DEL (ep_op_has_event) before anything else.
	 */
	if (s->buf_index || s->splice_fd_in || (op != EPOLL_CTL_DEL && !s->addr))
		return true;
	ep = shunt_fdt_get_epoll(epfd);
	if (!ep)
		return false;	/* not our instance: the kernel's, as epoll_ctl() leaves it */
	f = fd == epfd ? NULL : shunt_fdt_get_file(fd);
	if (!f || f->kind == SHUNT_FILE_URING) {
		/* A kernel descriptor: shunt_epoll_ctl would give it to the kernel as is. */
		if (f)
			shunt_file_put(f);
		shunt_file_put(&ep->f);
		return false;
	}
	shunt_file_put(f);
	r = shunt_epoll_ctl(ep, epfd, op, fd,
			    op == EPOLL_CTL_DEL ? NULL : (struct epoll_event *)(uintptr_t)s->addr);
	shunt_file_put(&ep->f);
	shunt_debug("io_uring: epoll_ctl(%d, %d, %d) by the library: %d", epfd, op, fd, r);
	shunt_uring_complete_with(s, r);
	return false;
}

/* CLOSE of a descriptor the library manages: as close() does it. As epoll_ctl_sqe. */
static bool close_sqe(struct shunt_iou_sqe *s)
{
	struct shunt_file *f;
	int fd = s->fd;

	/* io_close_prep's refusals. */
	if (s->off || s->addr || s->len || s->op_flags || s->buf_index ||
	    (s->flags & SHUNT_IOSQE_FIXED_FILE) || (s->splice_fd_in && fd))
		return true;
	if (s->splice_fd_in)
		return false;	/* the close of a fixed file (file_index) */
	if (shunt_fdt_is_hidden(fd)) {
		shunt_uring_complete_with(s, -EBADF);	/* the library's own, as close() says */
		return false;
	}
	f = shunt_fdt_get_file(fd);
	if (!f)
		return false;
	/* The kernel refuses to close a ring with io_uring (EBADF): leave it that. */
	if (f->kind == SHUNT_FILE_URING) {
		shunt_file_put(f);
		return false;
	}
	shunt_file_put(f);
	shunt_uring_complete_with(s, shunt_op_close(fd));
	return false;
}

/* FILES_UPDATE: the descriptors it makes fixed files, as io_uring_register's. */
static void files_update_sqe(struct shunt_iou_sqe *s)
{
	if (s->flags & SHUNT_IOSQE_FIXED_FILE || !s->addr)
		return;
	shunt_uring_fixed_files((const int32_t *)(uintptr_t)s->addr, s->len);
}

/* Whether operation @op uses sqe->fd as a file that may be a socket it acts on. */
static bool acts_on_fd(unsigned op)
{
	switch (op) {
	/* No file, a directory, a ring, a fixed slot, or a file operation sockets refuse. */
	case SHUNT_IOU_NOP:
	case SHUNT_IOU_NOP128:
	case SHUNT_IOU_TIMEOUT:
	case SHUNT_IOU_TIMEOUT_REMOVE:
	case SHUNT_IOU_LINK_TIMEOUT:
	case SHUNT_IOU_ASYNC_CANCEL:
	case SHUNT_IOU_POLL_REMOVE:
	case SHUNT_IOU_OPENAT:
	case SHUNT_IOU_OPENAT2:
	case SHUNT_IOU_STATX:
	case SHUNT_IOU_MADVISE:
	case SHUNT_IOU_RENAMEAT:
	case SHUNT_IOU_UNLINKAT:
	case SHUNT_IOU_MKDIRAT:
	case SHUNT_IOU_SYMLINKAT:
	case SHUNT_IOU_LINKAT:
	case SHUNT_IOU_SETXATTR:
	case SHUNT_IOU_GETXATTR:
	case SHUNT_IOU_SOCKET:
	case SHUNT_IOU_PROVIDE_BUFFERS:
	case SHUNT_IOU_REMOVE_BUFFERS:
	case SHUNT_IOU_MSG_RING:
	case SHUNT_IOU_WAITID:
	case SHUNT_IOU_FUTEX_WAIT:
	case SHUNT_IOU_FUTEX_WAKE:
	case SHUNT_IOU_FUTEX_WAITV:
	case SHUNT_IOU_FIXED_FD_INSTALL:
	case SHUNT_IOU_PIPE:
		return false;
	default:
		/* Every other one, and any opcode newer than this list, may. */
		return true;
	}
}

/*
 * One entry. Returns whether the kernel fails it before issuing it (then
 * it stops submitting there); *@bounded is cleared unless the entry
 * completes without waiting for anything.
 */
static bool one(struct shunt_iou_sqe *s, bool *bounded)
{
	bool refused = false;
	int r;

	if (kernel_refuses(s)) {
		refused = true;
	} else if (s->opcode == SHUNT_IOU_EPOLL_CTL) {
		refused = epoll_ctl_sqe(s);
	} else if (s->opcode == SHUNT_IOU_CLOSE) {
		refused = close_sqe(s);
	} else if (s->opcode == SHUNT_IOU_FILES_UPDATE) {
		files_update_sqe(s);
	} else if (acts_on_fd(s->opcode)) {
		r = 0;
		/* SPLICE and TEE read from a second descriptor. */
		if ((s->opcode == SHUNT_IOU_SPLICE || s->opcode == SHUNT_IOU_TEE) &&
		    !(s->op_flags & SHUNT_IOU_SPLICE_F_FD_IN_FIXED))
			r = target(s->opcode, s->splice_fd_in);
		if (!r && !(s->flags & SHUNT_IOSQE_FIXED_FILE))
			r = target(s->opcode, s->fd);
		if (r < 0)
			shunt_uring_complete_with(s, r);
	}
	/* A NOP (ours) or an epoll_ctl completes at once; draining or skipping needs others. */
	if (!(s->opcode == SHUNT_IOU_NOP || s->opcode == SHUNT_IOU_EPOLL_CTL) ||
	    (s->flags & (SHUNT_IOSQE_IO_DRAIN | SHUNT_IOSQE_CQE_SKIP_SUCCESS)))
		*bounded = false;
	return refused;
}

uint32_t shunt_uring_scan(struct shunt_uring *u, uint32_t head, uint32_t n, bool *bounded)
{
	const uint8_t links = SHUNT_IOSQE_IO_LINK | SHUNT_IOSQE_IO_HARDLINK;
	bool in_chain = false;

	*bounded = true;
	for (uint32_t i = 0; i < n; i++) {
		struct shunt_iou_sqe *s = sqe_at(u, head + i);

		/* The kernel drops an entry with a bad index and stops there. */
		if (!s) {
			*bounded = false;
			return i + 1;
		}
		/*
		 * An entry the kernel refuses ends its submission (io_submit_sqe),
		 * unless SUBMIT_ALL, or it links on inside a chain: the entries
		 * after it must not be acted on now.
		 */
		if (one(s, bounded) && !(u->setup & SHUNT_IOU_SETUP_SUBMIT_ALL) &&
		    !(in_chain && (s->flags & links)))
			return i + 1;
		in_chain = s->flags & links;
	}
	return n;
}
