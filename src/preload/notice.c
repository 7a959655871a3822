// SPDX-License-Identifier: MIT
/* Notices: draining link bits and routing them to sockets and their epolls. */
#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "preload/conn.h"
#include "preload/epoll.h"
#include "preload/notice.h"
#include "preload/plink.h"
#include "preload/util.h"

pthread_mutex_t shunt_notice_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_mutex_t hub_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int hub = -1;	/* published once made; under hub_lock while making */

int shunt_notice_hub(void)
{
	int h = atomic_load_explicit(&hub, memory_order_acquire);

	if (h >= 0)
		return h;
	pthread_mutex_lock(&hub_lock);
	h = atomic_load_explicit(&hub, memory_order_relaxed);
	if (h < 0) {
		h = (int)syscall(SYS_epoll_create1, EPOLL_CLOEXEC);
		if (h >= 0)
			h = shunt_fd_hide(h);
		else
			shunt_warn("cannot create the notice hub: %s", strerror(errno));
		atomic_store_explicit(&hub, h, memory_order_release);
	}
	pthread_mutex_unlock(&hub_lock);
	return h;
}

void shunt_notice_after_fork(void)
{
	/* The parent's hub is the same kernel object: the child makes its own. */
	pthread_mutex_init(&shunt_notice_lock, NULL);
	pthread_mutex_init(&hub_lock, NULL);
	atomic_store(&hub, -1);
}

void shunt_notice_add_link(struct shunt_plink *l, unsigned side)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = l };
	int h = shunt_notice_hub();

	/* Edge-triggered: each write is one wake-up, and nobody ever resets it. */
	if (h >= 0 && syscall(SYS_epoll_ctl, h, EPOLL_CTL_ADD, l->efd[side], &ev) < 0 &&
	    errno != EEXIST)
		shunt_warn("cannot watch link %llu: %s", (unsigned long long)l->id, strerror(errno));
}

static struct shunt_conn **slot_entry(struct shunt_plink *l, unsigned side, uint32_t slot,
				      bool make)
{
	struct shunt_conn ***chunk = &l->slots[side][slot / SHUNT_PLINK_CHUNK];

	if (!*chunk && make)
		*chunk = calloc(SHUNT_PLINK_CHUNK, sizeof(**chunk));
	return *chunk ? &(*chunk)[slot % SHUNT_PLINK_CHUNK] : NULL;
}

void shunt_notice_bind(struct shunt_conn *c, struct shunt_sock *owner)
{
	struct shunt_conn **e;

	pthread_mutex_lock(&shunt_notice_lock);
	c->owner = owner;
	e = slot_entry(c->link, c->link_side, c->slot, true);
	if (e)
		*e = c;
	pthread_mutex_unlock(&shunt_notice_lock);
}

void shunt_notice_unbind(struct shunt_conn *c)
{
	struct shunt_conn **e;

	pthread_mutex_lock(&shunt_notice_lock);
	e = slot_entry(c->link, c->link_side, c->slot, false);
	if (e && *e == c)
		*e = NULL;
	c->owner = NULL;
	pthread_mutex_unlock(&shunt_notice_lock);
}

/* Route one noticed slot. Under shunt_notice_lock. */
static void route(struct shunt_plink *l, unsigned side, uint32_t slot)
{
	/* The slot comes from shared memory: only our own table says what it is. */
	struct shunt_conn **e = slot_entry(l, side, slot, false);

	if (e && *e && (*e)->owner)
		shunt_epoll_sock_changed((*e)->owner);
}

/* Drain one side's bitmap: summary bits name the words that may hold bits. */
static int drain_side(struct shunt_plink *l, unsigned side)
{
	struct shunt_link_side *ls = &l->hdr->side[side];
	int n = 0;

	for (uint32_t w = 0; w < SHUNT_LINK_SUMMARY_WORDS; w++) {
		uint64_t sum;

		if (!atomic_load_explicit(&ls->summary[w], memory_order_relaxed))
			continue;
		/* Clear the summary before the words under it (see shunt_link_post). */
		sum = atomic_exchange_explicit(&ls->summary[w], 0, memory_order_acq_rel);
		while (sum) {
			uint32_t word = w * 64 + (uint32_t)__builtin_ctzll(sum);
			uint64_t bits = atomic_exchange_explicit(&ls->bits[word], 0,
								 memory_order_acq_rel);

			sum &= sum - 1;
			while (bits) {
				route(l, side, word * 64 + (uint32_t)__builtin_ctzll(bits));
				bits &= bits - 1;
				n++;
			}
		}
	}
	return n;
}

int shunt_notice_drain(bool hub_fired)
{
	unsigned nl = shunt_plink_count();
	int h = atomic_load_explicit(&hub, memory_order_acquire), n = 0;

	if (hub_fired && h >= 0) {
		struct epoll_event evs[32];

		/* Consume the edges first: a notice posted after this wakes us again. */
		while (syscall(SYS_epoll_wait, h, evs, 32, 0) == 32)
			;
	}
	pthread_mutex_lock(&shunt_notice_lock);
	for (unsigned i = 0; i < nl; i++) {
		struct shunt_plink *l = shunt_plink_nth(i);

		for (unsigned side = 0; side < 2; side++)
			if (atomic_load_explicit(&l->mine[side], memory_order_acquire))
				n += drain_side(l, side);
	}
	pthread_mutex_unlock(&shunt_notice_lock);
	return n;
}

void shunt_notice_sleepers(int delta)
{
	unsigned nl = shunt_plink_count();

	for (unsigned i = 0; i < nl; i++) {
		struct shunt_plink *l = shunt_plink_nth(i);

		for (unsigned side = 0; side < 2; side++)
			if (atomic_load_explicit(&l->mine[side], memory_order_acquire))
				atomic_fetch_add_explicit(&l->hdr->side[side].sleepers,
							  (uint32_t)delta, memory_order_seq_cst);
	}
}
