// SPDX-License-Identifier: MIT
// A raw io_uring ring for the t_ev_uring_* programs, driven the way libuv
// drives its own: io_uring_setup, io_uring_enter and io_uring_register
// through the C library's syscall(), the queues mapped by hand. No liburing:
// it makes its system calls itself, past any preload.
#ifndef T_URING_H
#define T_URING_H

#include <errno.h>
#include <linux/io_uring.h>
#include <sys/epoll.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "t_harness.h"

#ifndef IORING_SETUP_NO_SQARRAY
#define IORING_SETUP_NO_SQARRAY (1U << 16)
#endif

struct t_ring {
	int fd;
	unsigned flags;			// as set up
	unsigned entries;
	_Atomic uint32_t *sq_head, *sq_tail, *sq_flags;
	uint32_t sq_mask, *sq_array;	// sq_array NULL with NO_SQARRAY
	struct io_uring_sqe *sqes;
	_Atomic uint32_t *cq_head, *cq_tail;
	uint32_t cq_mask;
	struct io_uring_cqe *cqes;
	uint32_t tail;			// ours: the entries filled, published or not
	void *ring;
	size_t ring_len, sqes_len;
};

static inline long t_uring_setup(unsigned entries, struct io_uring_params *p)
{
	return syscall(__NR_io_uring_setup, entries, p);
}

static inline long t_uring_enter(int fd, unsigned submit, unsigned wait, unsigned flags)
{
	return syscall(__NR_io_uring_enter, fd, submit, wait, flags, NULL, 0L);
}

static inline long t_uring_register(int fd, unsigned op, const void *arg, unsigned n)
{
	return syscall(__NR_io_uring_register, fd, op, arg, n);
}

// Set up and map a ring; 0, or -errno from io_uring_setup (fatal on other failures).
static inline int t_ring_open(struct t_ring *r, unsigned entries, struct io_uring_params *p)
{
	size_t sq_len, cq_len;
	uint8_t *ring;

	memset(r, 0, sizeof(*r));
	r->fd = (int)t_uring_setup(entries, p);
	if (r->fd < 0)
		return -errno;
	if (!(p->features & IORING_FEAT_SINGLE_MMAP))
		t_skip("io_uring without IORING_FEAT_SINGLE_MMAP (Linux < 5.4)");
	r->flags = p->flags;
	r->entries = p->sq_entries;
	sq_len = (p->flags & IORING_SETUP_NO_SQARRAY) ? p->sq_off.flags + 4
						      : p->sq_off.array + p->sq_entries * 4;
	cq_len = p->cq_off.cqes + p->cq_entries * sizeof(struct io_uring_cqe);
	r->ring_len = sq_len > cq_len ? sq_len : cq_len;
	ring = mmap(NULL, r->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
		    IORING_OFF_SQ_RING);
	r->sqes_len = p->sq_entries * sizeof(struct io_uring_sqe);
	r->sqes = mmap(NULL, r->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
		       IORING_OFF_SQES);
	if (ring == MAP_FAILED || r->sqes == MAP_FAILED)
		t_fatal("mmap io_uring");
	r->ring = ring;
	r->sq_head = (_Atomic uint32_t *)(ring + p->sq_off.head);
	r->sq_tail = (_Atomic uint32_t *)(ring + p->sq_off.tail);
	r->sq_flags = (_Atomic uint32_t *)(ring + p->sq_off.flags);
	r->sq_mask = *(uint32_t *)(ring + p->sq_off.ring_mask);
	r->sq_array = (p->flags & IORING_SETUP_NO_SQARRAY) ? NULL
							  : (uint32_t *)(ring + p->sq_off.array);
	r->cq_head = (_Atomic uint32_t *)(ring + p->cq_off.head);
	r->cq_tail = (_Atomic uint32_t *)(ring + p->cq_off.tail);
	r->cq_mask = *(uint32_t *)(ring + p->cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)(ring + p->cq_off.cqes);
	r->tail = atomic_load(r->sq_tail);
	return 0;
}

static inline void t_ring_close(struct t_ring *r)
{
	munmap(r->ring, r->ring_len);
	munmap(r->sqes, r->sqes_len);
	close(r->fd);
}

// The next entry, zeroed, with its user_data; published by t_ring_publish.
static inline struct io_uring_sqe *t_ring_sqe(struct t_ring *r, uint64_t user_data)
{
	uint32_t slot = r->tail & r->sq_mask;
	struct io_uring_sqe *sqe = &r->sqes[slot];

	if (r->tail - atomic_load_explicit(r->sq_head, memory_order_acquire) >= r->entries)
		t_fatal("io_uring submission queue full");
	memset(sqe, 0, sizeof(*sqe));
	sqe->user_data = user_data;
	if (r->sq_array)
		r->sq_array[slot] = slot;
	r->tail++;
	return sqe;
}

// Make every entry filled so far visible to the kernel.
static inline void t_ring_publish(struct t_ring *r)
{
	atomic_store_explicit(r->sq_tail, r->tail, memory_order_release);
}

static inline struct io_uring_sqe *t_ring_epoll_ctl(struct t_ring *r, uint64_t ud, int epfd,
						    int op, int fd, struct epoll_event *ev)
{
	struct io_uring_sqe *sqe = t_ring_sqe(r, ud);

	sqe->opcode = IORING_OP_EPOLL_CTL;
	sqe->fd = epfd;
	sqe->len = (uint32_t)op;
	sqe->off = (uint64_t)(int64_t)fd;
	sqe->addr = (uint64_t)(uintptr_t)ev;
	return sqe;
}

// Completions waiting in the queue, taken out into @out (at most @max).
static inline int t_ring_reap(struct t_ring *r, struct io_uring_cqe *out, int max)
{
	uint32_t head = atomic_load_explicit(r->cq_head, memory_order_relaxed);
	int n = 0;

	while (n < max && head != atomic_load_explicit(r->cq_tail, memory_order_acquire))
		out[n++] = r->cqes[head++ & r->cq_mask];
	atomic_store_explicit(r->cq_head, head, memory_order_release);
	return n;
}

static inline int t_cqe_cmp(const void *a, const void *b)
{
	const struct io_uring_cqe *x = a, *y = b;

	return x->user_data < y->user_data ? -1 : x->user_data > y->user_data;
}

// Print every completion waiting, by user_data: "  cqe <ud>: <res or ERRNAME>".
static inline int t_ring_print(struct t_ring *r)
{
	struct io_uring_cqe c[64];
	int n = t_ring_reap(r, c, 64);

	qsort(c, (size_t)n, sizeof(c[0]), t_cqe_cmp);
	for (int i = 0; i < n; i++) {
		if (c[i].res < 0)
			printf("  cqe %llu: -%s\n", (unsigned long long)c[i].user_data,
			       t_errname(-c[i].res));
		else
			printf("  cqe %llu: %d\n", (unsigned long long)c[i].user_data, c[i].res);
	}
	return n;
}

// Publish, submit every entry not consumed yet and wait for @wait
// completions; prints the call: "io_uring_enter(<n>, <wait>) = <ret>".
static inline long t_ring_submit(struct t_ring *r, unsigned wait)
{
	char label[64];
	unsigned n;

	t_ring_publish(r);
	n = r->tail - atomic_load_explicit(r->sq_head, memory_order_acquire);
	snprintf(label, sizeof(label), "io_uring_enter(%u, %u%s)", n, wait,
		 wait ? ", GETEVENTS" : "");
	return T_REPORT(label, t_uring_enter(r->fd, n, wait, wait ? IORING_ENTER_GETEVENTS : 0));
}

#endif
