// SPDX-License-Identifier: MIT
/*
 * uring_enter: what one io_uring_enter costs, as libuv makes it to flush
 * its epoll_ctl queue (a NO_SQARRAY ring, a batch of EPOLL_CTL MODs,
 * io_uring_enter(n, n, GETEVENTS), then the completions reaped). Three
 * kinds of entries: NOPs and MODs of eventfds (which the library leaves to
 * the kernel: its cost is the look at the queue) and MODs of connected TCP
 * sockets (under shunt, circuit sockets: performed by the library and
 * rewritten into NOPs). Run it plain and as `shunt run -- uring_enter`;
 * prints one JSON line per (kind, batch): nanoseconds per io_uring_enter.
 *
 *     build/bench/uring_enter [--iterations N]
 */
#include <arpa/inet.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef IORING_SETUP_NO_SQARRAY
#define IORING_SETUP_NO_SQARRAY (1U << 16)
#endif

enum { PAIRS = 16, ENTRIES = 256 };

struct ring {
	int fd;
	_Atomic uint32_t *head, *tail, *cq_head, *cq_tail;
	uint32_t mask, cq_mask, *array;
	struct io_uring_sqe *sqes;
	struct io_uring_cqe *cqes;
};

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void ring_open(struct ring *r)
{
	struct io_uring_params p = { .flags = IORING_SETUP_NO_SQARRAY };
	size_t len;
	uint8_t *m;

	r->fd = (int)syscall(__NR_io_uring_setup, ENTRIES, &p);
	if (r->fd < 0) {
		p.flags = 0;	/* a kernel before 6.6 */
		r->fd = (int)syscall(__NR_io_uring_setup, ENTRIES, &p);
	}
	if (r->fd < 0)
		die("io_uring_setup");
	len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	if (!(p.flags & IORING_SETUP_NO_SQARRAY) && p.sq_off.array + p.sq_entries * 4 > len)
		len = p.sq_off.array + p.sq_entries * 4;
	m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
		 IORING_OFF_SQ_RING);
	r->sqes = mmap(NULL, p.sq_entries * sizeof(*r->sqes), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_POPULATE, r->fd, IORING_OFF_SQES);
	if (m == MAP_FAILED || r->sqes == MAP_FAILED)
		die("mmap");
	r->head = (_Atomic uint32_t *)(m + p.sq_off.head);
	r->tail = (_Atomic uint32_t *)(m + p.sq_off.tail);
	r->mask = *(uint32_t *)(m + p.sq_off.ring_mask);
	r->array = p.flags & IORING_SETUP_NO_SQARRAY ? NULL : (uint32_t *)(m + p.sq_off.array);
	r->cq_head = (_Atomic uint32_t *)(m + p.cq_off.head);
	r->cq_tail = (_Atomic uint32_t *)(m + p.cq_off.tail);
	r->cq_mask = *(uint32_t *)(m + p.cq_off.ring_mask);
	r->cqes = (struct io_uring_cqe *)(m + p.cq_off.cqes);
}

static void pair(int *a, int *b)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) || listen(l, 1) ||
	    getsockname(l, (struct sockaddr *)&sa, &len))
		die("listen");
	*a = socket(AF_INET, SOCK_STREAM, 0);
	if (*a < 0 || connect(*a, (struct sockaddr *)&sa, sizeof(sa)))
		die("connect");
	*b = accept(l, NULL, NULL);
	if (*b < 0)
		die("accept");
	close(l);
}

/* One flush of @n entries: @op NOP or EPOLL_CTL MOD of fds[i]. */
static void flush(struct ring *r, int ep, const int *fds, unsigned n, int op,
		  struct epoll_event *evs)
{
	uint32_t tail = atomic_load_explicit(r->tail, memory_order_relaxed);

	for (unsigned i = 0; i < n; i++, tail++) {
		uint32_t slot = tail & r->mask;
		struct io_uring_sqe *sqe = &r->sqes[slot];

		memset(sqe, 0, sizeof(*sqe));
		if (r->array)
			r->array[slot] = slot;
		sqe->opcode = (uint8_t)op;
		if (op == IORING_OP_EPOLL_CTL) {
			sqe->fd = ep;
			sqe->len = EPOLL_CTL_MOD;
			sqe->off = (uint64_t)fds[i];
			sqe->addr = (uint64_t)(uintptr_t)&evs[i];
		}
	}
	atomic_store_explicit(r->tail, tail, memory_order_release);
	if (syscall(__NR_io_uring_enter, r->fd, n, n, IORING_ENTER_GETEVENTS, NULL, 0L) != n)
		die("io_uring_enter");
	/* Every completion is there (all complete at once); libuv checks res, so do we. */
	for (uint32_t h = atomic_load_explicit(r->cq_head, memory_order_relaxed);
	     h != atomic_load_explicit(r->cq_tail, memory_order_acquire); h++) {
		if (r->cqes[h & r->cq_mask].res < 0) {
			fprintf(stderr, "completion: %d\n", r->cqes[h & r->cq_mask].res);
			exit(1);
		}
		atomic_store_explicit(r->cq_head, h + 1, memory_order_release);
	}
}

int main(int argc, char **argv)
{
	static const char *kinds[] = { "nop", "ctl-eventfd", "ctl-tcp" };
	struct epoll_event evs[PAIRS];
	int sock[PAIRS], peer[PAIRS], efd[PAIRS], ep = epoll_create1(EPOLL_CLOEXEC);
	unsigned iterations = 200000, batches[] = { 1, 16 };
	struct ring r;

	if (argc == 3 && !strcmp(argv[1], "--iterations"))
		iterations = (unsigned)strtoul(argv[2], NULL, 10);
	if (ep < 0)
		die("epoll_create1");
	ring_open(&r);
	for (int i = 0; i < PAIRS; i++) {
		evs[i] = (struct epoll_event){ .events = EPOLLIN, .data.u64 = (uint64_t)i };
		pair(&sock[i], &peer[i]);
		efd[i] = eventfd(0, EFD_CLOEXEC);
		if (efd[i] < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sock[i], &evs[i]) ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, efd[i], &evs[i]))
			die("epoll_ctl");
	}
	for (unsigned k = 0; k < 3; k++) {
		for (unsigned b = 0; b < 2; b++) {
			const int *fds = k == 2 ? sock : efd;
			int op = k == 0 ? IORING_OP_NOP : IORING_OP_EPOLL_CTL;
			uint64_t t0;

			for (unsigned i = 0; i < iterations / 10; i++)	/* warm-up */
				flush(&r, ep, fds, batches[b], op, evs);
			t0 = now_ns();
			for (unsigned i = 0; i < iterations; i++)
				flush(&r, ep, fds, batches[b], op, evs);
			printf("{\"kind\":\"%s\",\"batch\":%u,\"ns_per_enter\":%.0f}\n", kinds[k],
			       batches[b], (double)(now_ns() - t0) / iterations);
		}
	}
	return 0;
}
