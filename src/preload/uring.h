/* SPDX-License-Identifier: MIT */
/*
 * io_uring rings the application makes through the C library's syscall()
 * (libuv does): the library maps each ring's submission queue next to the
 * application and, in io_uring_enter, looks at the entries the kernel is
 * about to consume. Those that address a descriptor the library manages are
 * performed by the library (EPOLL_CTL on a shunt epoll instance, CLOSE of a
 * shunt socket) and rewritten into entries that complete with exactly the
 * library's result; any other operation on a shunt socket first makes it a
 * plain kernel socket (docs/uring.md). A ring is an open file description
 * like a socket: it sits in the fd table, dup'ed and inherited with it.
 */
#ifndef SHUNT_URING_H
#define SHUNT_URING_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "preload/file.h"

/* The io_uring ABI the library reads: our own names, older headers lack many. */
enum shunt_iou_op {
	SHUNT_IOU_NOP = 0,
	SHUNT_IOU_POLL_ADD = 6,
	SHUNT_IOU_POLL_REMOVE = 7,
	SHUNT_IOU_TIMEOUT = 11,
	SHUNT_IOU_TIMEOUT_REMOVE = 12,
	SHUNT_IOU_ASYNC_CANCEL = 14,
	SHUNT_IOU_LINK_TIMEOUT = 15,
	SHUNT_IOU_OPENAT = 18,
	SHUNT_IOU_CLOSE = 19,
	SHUNT_IOU_FILES_UPDATE = 20,
	SHUNT_IOU_STATX = 21,
	SHUNT_IOU_MADVISE = 25,
	SHUNT_IOU_OPENAT2 = 28,
	SHUNT_IOU_EPOLL_CTL = 29,
	SHUNT_IOU_SPLICE = 30,
	SHUNT_IOU_PROVIDE_BUFFERS = 31,
	SHUNT_IOU_REMOVE_BUFFERS = 32,
	SHUNT_IOU_TEE = 33,
	SHUNT_IOU_RENAMEAT = 35,
	SHUNT_IOU_UNLINKAT = 36,
	SHUNT_IOU_MKDIRAT = 37,
	SHUNT_IOU_SYMLINKAT = 38,
	SHUNT_IOU_LINKAT = 39,
	SHUNT_IOU_MSG_RING = 40,
	SHUNT_IOU_SETXATTR = 42,
	SHUNT_IOU_GETXATTR = 44,
	SHUNT_IOU_SOCKET = 45,
	SHUNT_IOU_URING_CMD = 46,
	SHUNT_IOU_WAITID = 50,
	SHUNT_IOU_FUTEX_WAIT = 51,
	SHUNT_IOU_FUTEX_WAKE = 52,
	SHUNT_IOU_FUTEX_WAITV = 53,
	SHUNT_IOU_FIXED_FD_INSTALL = 54,
	SHUNT_IOU_EPOLL_WAIT = 59,
	SHUNT_IOU_PIPE = 62,
	SHUNT_IOU_NOP128 = 63,
};

enum shunt_iou_sqe_flag {
	SHUNT_IOSQE_FIXED_FILE = 1u << 0,
	SHUNT_IOSQE_IO_DRAIN = 1u << 1,
	SHUNT_IOSQE_IO_LINK = 1u << 2,
	SHUNT_IOSQE_IO_HARDLINK = 1u << 3,
	SHUNT_IOSQE_ASYNC = 1u << 4,
	SHUNT_IOSQE_BUFFER_SELECT = 1u << 5,
	SHUNT_IOSQE_CQE_SKIP_SUCCESS = 1u << 6,
	SHUNT_IOSQE_VALID = 0x7f,
};

enum shunt_iou_setup {
	SHUNT_IOU_SETUP_IOPOLL = 1u << 0,
	SHUNT_IOU_SETUP_SQPOLL = 1u << 1,
	SHUNT_IOU_SETUP_SQ_AFF = 1u << 2,
	SHUNT_IOU_SETUP_ATTACH_WQ = 1u << 5,
	SHUNT_IOU_SETUP_R_DISABLED = 1u << 6,
	SHUNT_IOU_SETUP_SUBMIT_ALL = 1u << 7,
	SHUNT_IOU_SETUP_SQE128 = 1u << 10,
	SHUNT_IOU_SETUP_NO_MMAP = 1u << 14,
	SHUNT_IOU_SETUP_REGISTERED_FD_ONLY = 1u << 15,
	SHUNT_IOU_SETUP_NO_SQARRAY = 1u << 16,
	/*
	 * The flags whose submission queue the library understands: up to
	 * CQE_MIXED (bit 18). SQE_MIXED and SQ_REWIND change how entries are
	 * laid out and found; their rings are left alone.
	 */
	SHUNT_IOU_SETUP_KNOWN = (1u << 19) - 1,
};

enum shunt_iou_enter {
	SHUNT_IOU_ENTER_GETEVENTS = 1u << 0,
	SHUNT_IOU_ENTER_REGISTERED_RING = 1u << 4,
};

enum shunt_iou_register {
	SHUNT_IOU_REGISTER_FILES = 2,
	SHUNT_IOU_REGISTER_FILES_UPDATE = 6,
	SHUNT_IOU_REGISTER_RESTRICTIONS = 11,
	SHUNT_IOU_REGISTER_ENABLE_RINGS = 12,
	SHUNT_IOU_REGISTER_FILES2 = 13,
	SHUNT_IOU_REGISTER_FILES_UPDATE2 = 14,
	SHUNT_IOU_REGISTER_RING_FDS = 20,
	SHUNT_IOU_UNREGISTER_RING_FDS = 21,
	SHUNT_IOU_REGISTER_RESIZE_RINGS = 33,
	SHUNT_IOU_REGISTER_USE_REGISTERED_RING = 1u << 31,
};

enum {
	SHUNT_IOU_SQ_NEED_WAKEUP = 1u << 0,	/* sq_flags: the application must enter */
	SHUNT_IOU_NOP_INJECT_RESULT = 1u << 0,	/* nop_flags: complete with sqe->len */
	SHUNT_IOU_RINGFD_MAX = 16,		/* the kernel's IO_RINGFD_REG_MAX */
	SHUNT_IOU_SPLICE_F_FD_IN_FIXED = 1u << 31,
};

/* One submission queue entry, as struct io_uring_sqe lays out its first 64 bytes. */
struct shunt_iou_sqe {
	uint8_t opcode;
	uint8_t flags;
	uint16_t ioprio;
	int32_t fd;
	uint64_t off;
	uint64_t addr;
	uint32_t len;
	uint32_t op_flags;		/* rw_flags, nop_flags, splice_flags, ... */
	uint64_t user_data;
	uint16_t buf_index;
	uint16_t personality;
	int32_t splice_fd_in;		/* also file_index */
	uint64_t addr3;
	uint64_t pad2;
};
_Static_assert(sizeof(struct shunt_iou_sqe) == 64, "struct io_uring_sqe is 64 bytes");
_Static_assert(__builtin_offsetof(struct shunt_iou_sqe, user_data) == 32, "user_data at 32");
_Static_assert(__builtin_offsetof(struct shunt_iou_sqe, splice_fd_in) == 44, "file_index at 44");

/* struct io_uring_params: what io_uring_setup takes and fills in. */
struct shunt_iou_params {
	uint32_t sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd;
	uint32_t resv[3];
	uint32_t sq_head, sq_tail, sq_mask, sq_ring_entries, sq_flags, sq_dropped, sq_array,
		 sq_resv1;
	uint64_t sq_user_addr;		/* NO_MMAP: the application's memory for the entries */
	uint32_t cq_head, cq_tail, cq_mask, cq_ring_entries, cq_overflow, cq_cqes, cq_flags,
		 cq_resv1;
	uint64_t cq_user_addr;		/* NO_MMAP: the application's memory for the rings */
};
_Static_assert(sizeof(struct shunt_iou_params) == 120, "struct io_uring_params is 120 bytes");

/*
 * What the library knows of one ring: where its submission queue is. The
 * pointers are into our own mappings of the ring (or, with NO_MMAP, into
 * the application's memory that is the ring).
 */
struct shunt_uring {
	struct shunt_file f;		/* first: what the fd table holds */
	struct shunt_uring *next_free;	/* under the pool lock */
	struct shunt_uring *all_next;	/* under the pool lock: every object, for fork */
	/*
	 * Held from reading the queue's head to the kernel's consuming the
	 * entries looked at: nobody else may consume or rewrite them meanwhile.
	 * Never held while the kernel waits for completions.
	 */
	pthread_mutex_t lock;
	uint32_t setup;			/* the flags the kernel's ring has */
	bool emulated_sqpoll;		/* asked for SQPOLL: we submit at every enter instead */
	_Atomic bool disabled;		/* made R_DISABLED, not enabled yet: the kernel refuses it */
	uint32_t entries, mask, sqe_size;
	_Atomic uint32_t *head, *tail, *sq_flags;
	const uint32_t *array;		/* NULL with NO_SQARRAY */
	uint8_t *sqes;
	void *ring_map, *sqe_map;	/* our mappings (NULL when the memory is the application's) */
	size_t ring_len, sqe_len;
};

/*
 * The exported syscall()'s handling of io_uring_setup, io_uring_enter and
 * io_uring_register (@nr), arguments @a as syscall() read them. The
 * syscall(2) contract: the result, or -1 with errno set (errno untouched on
 * success).
 */
long shunt_uring_syscall(long nr, const long a[6]);

/* Called by shunt_file_put when the last reference is gone. */
void shunt_uring_release(struct shunt_uring *u);

/*
 * uring_sqe.c: look at the (at most @n) entries from @head the kernel is
 * about to consume and perform or rewrite those that address the library's
 * descriptors. Returns how many the kernel may be given: it stops where it
 * would stop submitting (an entry it refuses), so none after is acted on.
 * *@bounded says whether every one of them completes without waiting for
 * anything (so the kernel may wait for their completions while u->lock is
 * held). Under u->lock.
 */
uint32_t shunt_uring_scan(struct shunt_uring *u, uint32_t head, uint32_t n, bool *bounded);

/*
 * Descriptors the application registers as the ring's fixed files: each
 * shunt socket among them becomes a plain kernel socket (the kernel will
 * use its file directly), each shunt epoll instance is exposed.
 */
void shunt_uring_fixed_files(const int32_t *fds, uint32_t n);

/*
 * uring_result.c: make @sqe complete with @res, as the operation it was
 * would have, keeping its user_data, flags (link, drain, skip-success) and
 * personality. Without the kernel's NOP_INJECT_RESULT, errors are made by
 * operations that fail the same way on private descriptors.
 */
void shunt_uring_complete_with(struct shunt_iou_sqe *sqe, int res);

#endif
