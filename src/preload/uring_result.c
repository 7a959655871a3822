// SPDX-License-Identifier: MIT
/*
 * Completing a submission queue entry with a result the library chose: a
 * NOP for success; for an error, a NOP with IORING_NOP_INJECT_RESULT where
 * the kernel has it (6.10 and later, found out once with a ring of our
 * own), else an operation on private descriptors that fails with exactly
 * that error (EPOLL_CTL of a registered eventfd gives EEXIST, ...).
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/uring.h"
#include "preload/util.h"

enum { FEAT_SINGLE_MMAP = 1u << 0, OFF_SQES = 0x10000000 };

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static bool inject;		/* written once by probe() */

/*
 * Whether a NOP can be told its result: submit one with INJECT_RESULT and
 * -EXDEV on a ring of our own. Older kernels ignore nop_flags (success).
 */
static void probe(void)
{
	struct shunt_iou_params p = { 0 };
	int fd = (int)shunt_syscall(SYS_io_uring_setup, 1, &p);
	size_t len;
	uint8_t *ring, *sqes;

	if (fd < 0)
		return;
	len = p.sq_array + p.sq_entries * sizeof(uint32_t);
	if (p.cq_cqes + p.cq_entries * 16 > len)
		len = p.cq_cqes + p.cq_entries * 16;
	ring = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	sqes = mmap(NULL, p.sq_entries * sizeof(struct shunt_iou_sqe), PROT_READ | PROT_WRITE,
		    MAP_SHARED, fd, OFF_SQES);
	if ((p.features & FEAT_SINGLE_MMAP) && ring != MAP_FAILED && sqes != MAP_FAILED) {
		struct shunt_iou_sqe *sqe = (struct shunt_iou_sqe *)sqes;
		_Atomic uint32_t *tail = (_Atomic uint32_t *)(ring + p.sq_tail);
		const uint32_t *cq_tail = (const uint32_t *)(ring + p.cq_tail);

		memset(sqe, 0, sizeof(*sqe));
		sqe->opcode = SHUNT_IOU_NOP;
		sqe->op_flags = SHUNT_IOU_NOP_INJECT_RESULT;
		sqe->len = (uint32_t)-EXDEV;
		((uint32_t *)(ring + p.sq_array))[0] = 0;
		atomic_store_explicit(tail, 1, memory_order_release);
		if (shunt_syscall(SYS_io_uring_enter, fd, 1, 1, SHUNT_IOU_ENTER_GETEVENTS, NULL, 0) == 1 &&
		    __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE) == 1)
			inject = *(const int32_t *)(ring + p.cq_cqes + 8) == -EXDEV;
	}
	if (ring != MAP_FAILED)
		munmap(ring, len);
	if (sqes != MAP_FAILED)
		munmap(sqes, p.sq_entries * sizeof(struct shunt_iou_sqe));
	shunt_close_internal(fd);
	shunt_debug("io_uring: NOP_INJECT_RESULT %s", inject ? "available" : "absent");
}

/* Private descriptors whose epoll_ctl fails in known ways (kernels without injection). */
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int ep_a = -1, ep_b = -1;	/* ep_b is registered in ep_a */
static int ev_in = -1, ev_out = -1;	/* ev_in is registered in ep_a, ev_out nowhere */
static int regular = -1;		/* a memfd: a file epoll refuses */
static const struct epoll_event scratch_ev = { .events = EPOLLIN };

static int hidden(long fd)
{
	return fd < 0 ? -1 : shunt_fd_hide((int)fd);
}

static void scratch_open(void)
{
	ep_a = hidden(shunt_syscall(SYS_epoll_create1, EPOLL_CLOEXEC));
	ep_b = hidden(shunt_syscall(SYS_epoll_create1, EPOLL_CLOEXEC));
	ev_in = hidden(shunt_syscall(SYS_eventfd2, 0, EFD_CLOEXEC));
	ev_out = hidden(shunt_syscall(SYS_eventfd2, 0, EFD_CLOEXEC));
	regular = hidden(shunt_syscall(SYS_memfd_create, "shunt-uring", MFD_CLOEXEC));
	if (ep_a < 0 || ep_b < 0 || ev_in < 0 || ev_out < 0 || regular < 0 ||
	    shunt_syscall(SYS_epoll_ctl, ep_a, EPOLL_CTL_ADD, ev_in, &scratch_ev) < 0 ||
	    shunt_syscall(SYS_epoll_ctl, ep_a, EPOLL_CTL_ADD, ep_b, &scratch_ev) < 0)
		shunt_warn("io_uring: cannot set up the descriptors that reproduce errors: "
			   "operations shunt performs for a ring may report the wrong error");
}

/* An EPOLL_CTL on the private descriptors that fails with @err. */
static void ctl_failing(struct shunt_iou_sqe *s, int err)
{
	static _Atomic bool warned;
	int epfd = ep_a, op = EPOLL_CTL_DEL, fd = ep_a;	/* epfd == fd: EINVAL */

	switch (err) {
	case EBADF:
		epfd = -1;
		break;
	case EEXIST:
		op = EPOLL_CTL_ADD;
		fd = ev_in;
		break;
	case ENOENT:
		fd = ev_out;
		break;
	case EPERM:
		fd = regular;
		break;
	case ELOOP:
		epfd = ep_b;	/* ep_a holds ep_b: adding ep_a to ep_b makes a loop */
		op = EPOLL_CTL_ADD;
		fd = ep_a;
		break;
	case EINVAL:
		break;
	default:
		if (!atomic_exchange(&warned, true))
			shunt_warn("io_uring: this kernel cannot report %s for an operation shunt "
				   "performed; it reports EINVAL", strerror(err));
		break;
	}
	s->opcode = SHUNT_IOU_EPOLL_CTL;
	s->fd = epfd;
	s->len = (uint32_t)op;
	s->off = (uint64_t)fd;
	s->addr = (uint64_t)(uintptr_t)&scratch_ev;
}

void shunt_uring_complete_with(struct shunt_iou_sqe *sqe, int res)
{
	struct shunt_iou_sqe s = {
		.opcode = SHUNT_IOU_NOP,
		/* What a NOP or EPOLL_CTL does with them is what the original would. */
		.flags = sqe->flags & (uint8_t)~SHUNT_IOSQE_FIXED_FILE,
		.user_data = sqe->user_data,
		.personality = sqe->personality,
	};

	if (res < 0) {
		pthread_once(&probe_once, probe);
		if (inject) {
			s.op_flags = SHUNT_IOU_NOP_INJECT_RESULT;
			s.len = (uint32_t)res;
		} else if (res == -EOPNOTSUPP) {
			/* A command to a file without uring_cmd: the kernel says EOPNOTSUPP. */
			pthread_once(&scratch_once, scratch_open);
			s.opcode = SHUNT_IOU_URING_CMD;
			s.fd = ev_in;
		} else {
			pthread_once(&scratch_once, scratch_open);
			ctl_failing(&s, -res);
		}
	}
	/* The kernel reads the entry only once io_uring_enter runs: plain stores do. */
	memcpy(sqe, &s, sizeof(s));
}
