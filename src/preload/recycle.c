// SPDX-License-Identifier: MIT
/*
 * Recycled sockets (recycle.h): a spare half still bound, presented as the
 * fresh socket socket() would have made until a connection uses its port.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/fdtable.h"
#include "preload/ops.h"
#include "preload/recycle.h"
#include "preload/sock.h"
#include "preload/spare.h"
#include "preload/stats.h"
#include "preload/util.h"

/* Serialises the swaps: two threads must not both give one socket a new half. */
static pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER;
/* Sockets with a recycled half: none, and a fork need not look for them. */
static _Atomic unsigned outstanding;

void shunt_recycle_note(struct shunt_sock *s)
{
	atomic_store_explicit(&s->recycled, true, memory_order_release);
	atomic_fetch_add_explicit(&outstanding, 1, memory_order_relaxed);
	shunt_stats.recycled++;
}

/* @s no longer recycled, counted once whoever clears it. */
static bool unmark(struct shunt_sock *s)
{
	if (!atomic_exchange_explicit(&s->recycled, false, memory_order_acq_rel))
		return false;
	atomic_fetch_sub_explicit(&outstanding, 1, memory_order_relaxed);
	return true;
}

void shunt_recycle_done(struct shunt_sock *s)
{
	unmark(s);
}

/*
 * A new kernel socket under @fd: the flags and the options the program
 * set on the recycled one (only the inherited kind: any other option gives
 * it a new half before it is set, opts.c) copied over, then put in its
 * place, which closes the old half and frees its port. Under fresh_lock.
 */
static int swap(struct shunt_sock *s, int fd)
{
	long fl = shunt_syscall(SYS_fcntl, fd, F_GETFL);
	long fdfl = shunt_syscall(SYS_fcntl, fd, F_GETFD);
	int nfd, r, e;

	if (fl < 0 || fdfl < 0)
		return -errno;
	nfd = (int)shunt_syscall(SYS_socket, s->domain,
				 SOCK_STREAM | SOCK_CLOEXEC | (fl & O_NONBLOCK ? SOCK_NONBLOCK : 0),
				 IPPROTO_TCP);
	if (nfd < 0)
		return -errno;
	shunt_opts_copy(s, fd, nfd);
	/* The old half's copy goes with it, or its port would stay taken. */
	shunt_spare_drop(s);
	r = (int)shunt_syscall(SYS_dup3, nfd, fd, fdfl & FD_CLOEXEC ? O_CLOEXEC : 0);
	e = errno;
	shunt_close_internal(nfd);
	if (r < 0)
		return -e;
	atomic_store_explicit(&s->f.ident, shunt_fdt_sock_ident(fd), memory_order_relaxed);
	/*
	 * Unbound, as socket() made it; and kept at close no more: what gave it
	 * a fresh half (an epoll registration on its file, say) is nothing the
	 * spares put back.
	 */
	atomic_store_explicit(&s->unbound, true, memory_order_relaxed);
	atomic_store_explicit(&s->spare, false, memory_order_relaxed);
	return 0;
}

int shunt_recycle_fresh(struct shunt_sock *s, int fd)
{
	int r = 0;

	if (!atomic_load_explicit(&s->recycled, memory_order_acquire))
		return 0;
	pthread_mutex_lock(&fresh_lock);
	if (atomic_load_explicit(&s->recycled, memory_order_acquire)) {
		r = swap(s, fd);
		if (r == 0 && unmark(s))
			shunt_stats.recycled_fresh++;
	}
	pthread_mutex_unlock(&fresh_lock);
	if (r < 0)
		shunt_warn("fd %d: a fresh socket could not be made (%s)", fd, strerror(-r));
	return r;
}

/* shunt_recycle_fresh for descriptor @fd, whatever it is (only a socket of ours can be recycled). */
static void fresh_fd(int fd)
{
	struct shunt_sock *s = shunt_fdt_get(fd);

	if (!s)
		return;
	shunt_recycle_fresh(s, fd);
	shunt_sock_put(s);
}

void shunt_recycle_fresh_all(void)
{
	if (!atomic_load_explicit(&outstanding, memory_order_relaxed))
		return;
	for (size_t fd = 0; fd < shunt_fdt_high(); fd++)
		fresh_fd((int)fd);
}

int shunt_recycle_getsockname(const struct shunt_sock *s, struct sockaddr *addr, socklen_t *len)
{
	struct shunt_wire_addr w = { .family = (uint16_t)s->domain };

	return shunt_copy_addr(&w, addr, len);
}
