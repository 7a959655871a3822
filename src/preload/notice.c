// SPDX-License-Identifier: MIT
/* Notices: slots and routes, draining link bits, routing them to sockets and their epolls. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/conn.h"
#include "preload/control.h"
#include "preload/epoll.h"
#include "preload/notice.h"
#include "preload/ops.h"
#include "preload/plink.h"
#include "preload/sock.h"
#include "preload/util.h"

enum {
	CHUNK = 1024,				/* slot table entries allocated together */
	SLOTS = SHUNT_LINK_SLOT_PULL,		/* the last slot is shuntd's */
	CHUNKS = (SLOTS + CHUNK - 1) / CHUNK,
};

pthread_mutex_t shunt_notice_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_mutex_t hub_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int hub = -1;	/* published once made; under hub_lock while making */

/* Under shunt_notice_lock: which connection each slot is, and the free ones. */
static struct shunt_conn **table[CHUNKS];
static uint32_t *free_slots;
static uint32_t nfree, next_fresh;
static bool warned_routes;

/*
 * Threads asleep in poll/select: each waits on its own eventfd next to the
 * hub. A drain that consumed hub edges or routed notices signals them all:
 * the edge it took may have been the only wake-up another sleeper would
 * get, since the kernel re-checks the hub, finds it empty and sleeps on.
 */
static pthread_mutex_t kick_lock = PTHREAD_MUTEX_INITIALIZER;
static int *kick_fds;				/* under kick_lock */
static size_t nkick, kick_cap;
static _Thread_local int kick_fd = -1;		/* this thread's, made on first sleep */
static pthread_key_t kick_key;			/* closes it when the thread exits */
static pthread_once_t kick_once = PTHREAD_ONCE_INIT;

static void kick_close(void *p)
{
	shunt_close_hidden((int)(intptr_t)p - 1);
}

static void kick_key_make(void)
{
	if (pthread_key_create(&kick_key, kick_close))
		kick_key = (pthread_key_t)-1;
}

int shunt_notice_kick_begin(void)
{
	int fd;

	if (kick_fd < 0) {
		pthread_once(&kick_once, kick_key_make);
		fd = (int)shunt_syscall(SYS_eventfd2, 0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (fd < 0 || (fd = shunt_fd_hide(fd)) < 0)
			return -1;
		kick_fd = fd;
		if (kick_key != (pthread_key_t)-1)
			pthread_setspecific(kick_key, (void *)(intptr_t)(fd + 1));
	}
	pthread_mutex_lock(&kick_lock);
	if (nkick == kick_cap) {
		size_t cap = kick_cap ? 2 * kick_cap : 16;
		int *k = realloc(kick_fds, cap * sizeof(*k));

		if (!k) {
			pthread_mutex_unlock(&kick_lock);
			return -1;
		}
		kick_fds = k;
		kick_cap = cap;
	}
	kick_fds[nkick++] = kick_fd;
	pthread_mutex_unlock(&kick_lock);
	return kick_fd;
}

void shunt_notice_kick_end(int fd)
{
	uint64_t v;

	pthread_mutex_lock(&kick_lock);
	for (size_t i = 0; i < nkick; i++)
		if (kick_fds[i] == fd) {
			kick_fds[i] = kick_fds[--nkick];
			break;
		}
	pthread_mutex_unlock(&kick_lock);
	(void)!shunt_syscall(SYS_read, fd, &v, sizeof(v));	/* reset; EAGAIN if never kicked */
}

static void kick_all(void)
{
	pthread_mutex_lock(&kick_lock);
	for (size_t i = 0; i < nkick; i++)
		shunt_eventfd_signal(kick_fds[i]);
	pthread_mutex_unlock(&kick_lock);
}

/* Set by a drain that saw shuntd's pull slot; the next drain asks for what it has. */
static _Atomic bool pull_pending;
static pthread_mutex_t pull_lock = PTHREAD_MUTEX_INITIALIZER;

int shunt_notice_hub(void)
{
	int h = atomic_load_explicit(&hub, memory_order_acquire);

	if (h >= 0)
		return h;
	pthread_mutex_lock(&hub_lock);
	h = atomic_load_explicit(&hub, memory_order_relaxed);
	if (h < 0) {
		h = (int)shunt_syscall(SYS_epoll_create1, EPOLL_CLOEXEC);
		if (h >= 0)
			h = shunt_fd_hide(h);
		else
			shunt_warn("cannot create the notice hub: %s", strerror(errno));
		atomic_store_explicit(&hub, h, memory_order_release);
	}
	pthread_mutex_unlock(&hub_lock);
	return h;
}

void shunt_notice_watch_efd(int efd, struct shunt_plink *l)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = l };
	int h = shunt_notice_hub();

	/* Edge-triggered: each write is one wake-up, and nobody ever resets it. */
	if (h >= 0 && shunt_syscall(SYS_epoll_ctl, h, EPOLL_CTL_ADD, efd, &ev) < 0 && errno != EEXIST)
		shunt_warn("cannot watch link %llu: %s", (unsigned long long)l->id, strerror(errno));
}

void shunt_notice_unwatch_efd(int efd)
{
	int h = atomic_load_explicit(&hub, memory_order_acquire);

	if (h >= 0)
		shunt_syscall(SYS_epoll_ctl, h, EPOLL_CTL_DEL, efd, NULL);
}

static struct shunt_conn **slot_entry(uint32_t slot, bool make)
{
	struct shunt_conn ***chunk;

	if (slot >= SLOTS)
		return NULL;
	chunk = &table[slot / CHUNK];
	if (!*chunk && make)
		*chunk = calloc(CHUNK, sizeof(**chunk));
	return *chunk ? &(*chunk)[slot % CHUNK] : NULL;
}

/* A free slot, or SHUNT_NO_SLOT. Under the notice lock. */
static uint32_t slot_alloc(void)
{
	if (nfree)
		return free_slots[--nfree];
	if (next_fresh < SLOTS)
		return next_fresh++;
	return SHUNT_NO_SLOT;
}

static void slot_free(uint32_t slot)
{
	/* At most SLOTS entries are ever free: room for them all on first use. */
	if (!free_slots && !(free_slots = malloc(SLOTS * sizeof(*free_slots))))
		return;		/* the slot is lost, not misused */
	free_slots[nfree++] = slot;
}

/* Publish where this session wants notices for @c. Under the notice lock. */
static bool add_route(struct shunt_conn *c)
{
	uint64_t me = shunt_ctl_session(), r = shunt_route_make(me, c->slot);

	if (!me)
		return false;
	for (unsigned i = 0; i < SHUNT_ROUTES; i++) {
		uint64_t free_word = 0;

		if (atomic_compare_exchange_strong(&c->me->route[i], &free_word, r)) {
			c->route = (int)i;
			c->route_word = r;
			return true;
		}
	}
	if (!warned_routes)
		shunt_warn("circuit %llu: more than %d processes watch one socket; "
			   "this one is not told when it is ready", (unsigned long long)c->circuit,
			   SHUNT_ROUTES);
	warned_routes = true;
	return false;
}

static void drop_route(struct shunt_conn *c)
{
	uint64_t r = c->route_word;

	/* Only if it is still ours: the word is shared memory. */
	if (c->route >= 0)
		atomic_compare_exchange_strong(&c->me->route[c->route], &r, 0);
	c->route = -1;
}

bool shunt_notice_bind(struct shunt_conn *c, struct shunt_sock *owner)
{
	struct shunt_conn **e;
	bool routed = false;

	pthread_mutex_lock(&shunt_notice_lock);
	c->owner = owner;
	if (c->slot == SHUNT_NO_SLOT) {
		c->slot = slot_alloc();
		e = slot_entry(c->slot, true);
		if (e)
			*e = c;
		else
			c->slot = SHUNT_NO_SLOT;
	}
	if (c->slot != SHUNT_NO_SLOT)
		routed = c->route >= 0 || add_route(c);
	pthread_mutex_unlock(&shunt_notice_lock);
	return routed;
}

void shunt_notice_unbind(struct shunt_conn *c)
{
	struct shunt_conn **e;

	pthread_mutex_lock(&shunt_notice_lock);
	if (c->slot != SHUNT_NO_SLOT) {
		drop_route(c);
		e = slot_entry(c->slot, false);
		if (e && *e == c) {
			*e = NULL;
			slot_free(c->slot);
		}
		c->slot = SHUNT_NO_SLOT;
	}
	c->owner = NULL;
	pthread_mutex_unlock(&shunt_notice_lock);
}

void shunt_notice_reroute(void)
{
	pthread_mutex_lock(&shunt_notice_lock);
	for (uint32_t ch = 0; ch < CHUNKS; ch++) {
		if (!table[ch])
			continue;
		for (uint32_t i = 0; i < CHUNK; i++) {
			struct shunt_conn *c = table[ch][i];

			if (!c)
				continue;
			/* Routed already: bound since the fork, with our session. */
			if (c->route < 0)
				add_route(c);
			/* What changed before the route existed reached nobody here: look now. */
			if (c->owner)
				shunt_epoll_sock_changed(c->owner);
		}
	}
	pthread_mutex_unlock(&shunt_notice_lock);
}

/*
 * Sockets whose connection moved onto the kernel, to switch over once the
 * notice lock is released (the switch moves their epoll registrations,
 * which takes it). Under the notice lock; a reference held on each.
 */
static struct shunt_sock **moved;
static _Atomic size_t nmoved;
static size_t moved_cap;

static void note_moved(struct shunt_sock *s)
{
	if (nmoved == moved_cap) {
		size_t cap = moved_cap ? 2 * moved_cap : 16;
		struct shunt_sock **m = realloc(moved, cap * sizeof(*m));

		if (!m)
			return;		/* its next call switches it over */
		moved = m;
		moved_cap = cap;
	}
	if (shunt_file_tryget(&s->f))
		moved[nmoved++] = s;
}

/* Route one noticed slot. Under shunt_notice_lock. */
static void route(uint32_t slot)
{
	/* The slot comes from shared memory: only our own table says what it is. */
	struct shunt_conn **e = slot_entry(slot, false);

	if (!e || !*e || !(*e)->owner)
		return;
	if (shunt_conn_moved(*e))
		note_moved((*e)->owner);
	else
		shunt_epoll_sock_changed((*e)->owner);
}

/* Switch over the sockets whose connection moved (see note_moved). */
static void switch_moved(void)
{
	struct shunt_sock *batch[16];
	size_t n;

	do {
		pthread_mutex_lock(&shunt_notice_lock);
		n = nmoved < 16 ? nmoved : 16;
		nmoved -= n;
		memcpy(batch, moved + nmoved, n * sizeof(*batch));
		pthread_mutex_unlock(&shunt_notice_lock);
		for (size_t i = 0; i < n; i++) {
			shunt_sock_sync(batch[i]);
			shunt_sock_put(batch[i]);
		}
	} while (n);
}

/* Drain one side's bitmap: summary bits name the words that may hold bits. */
static int drain_side(struct shunt_link_side *ls)
{
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
				uint32_t slot = word * 64 + (uint32_t)__builtin_ctzll(bits);

				bits &= bits - 1;
				if (slot == SHUNT_LINK_SLOT_PULL) {
					atomic_store(&pull_pending, true);
					continue;
				}
				route(slot);
				n++;
			}
		}
	}
	return n;
}

/* Take the links shuntd made for us (and forget the dead ones) until it has no more. */
static void pull_links(void)
{
	if (pthread_mutex_trylock(&pull_lock))
		return;		/* another thread is at it */
	while (atomic_exchange(&pull_pending, false)) {
		for (int i = 0; i < 1024; i++) {
			struct shunt_msg_link_reply r;
			int fds[3], e = shunt_ctl_link_next(&r, fds);

			if (e != SHUNT_OK)
				break;
			if (r.flags & SHUNT_LINK_GONE)
				shunt_plink_gone(r.link);
			else
				shunt_plink_install(&r, fds);
			if (!(r.flags & SHUNT_LINK_GONE) && r.gone)
				shunt_plink_gone(r.gone);
			if (r.flags & SHUNT_LINK_LAST)
				break;
		}
	}
	pthread_mutex_unlock(&pull_lock);
}

void shunt_notice_pull_asked(void)
{
	struct shunt_plink *l = shunt_plink_daemon();
	const uint64_t bit = 1ull << (SHUNT_LINK_SLOT_PULL % 64);
	_Atomic uint64_t *w;

	if (!l || !atomic_load_explicit(&l->live, memory_order_acquire))
		return;
	w = &l->hdr->side[0].bits[SHUNT_LINK_SLOT_PULL / 64];
	/* Only this bit: the word's summary bit stays, and a drain finds it empty. */
	if (!(atomic_load_explicit(w, memory_order_relaxed) & bit) ||
	    !(atomic_fetch_and_explicit(w, ~bit, memory_order_acq_rel) & bit))
		return;
	atomic_store(&pull_pending, true);
	pull_links();
}

static int drain_links(void)
{
	unsigned nl = shunt_plink_count();
	int n = 0;

	pthread_mutex_lock(&shunt_notice_lock);
	for (unsigned i = 0; i < nl; i++) {
		struct shunt_plink *l = shunt_plink_nth(i);

		if (!atomic_load_explicit(&l->live, memory_order_acquire))
			continue;
		for (unsigned side = 0; side < 2; side++)
			if (l->self || l->side == side)
				n += drain_side(&l->hdr->side[side]);
	}
	pthread_mutex_unlock(&shunt_notice_lock);
	return n;
}

int shunt_notice_drain(bool hub_fired)
{
	int h = atomic_load_explicit(&hub, memory_order_acquire), n;
	long took = 0, r;

	if (hub_fired && h >= 0) {
		struct epoll_event evs[32];

		/* Consume the edges first: a notice posted after this wakes us again. */
		do {
			r = shunt_syscall(SYS_epoll_wait, h, evs, 32, 0);
			took += r > 0 ? r : 0;
		} while (r == 32);
	}
	n = drain_links();
	if (atomic_load_explicit(&pull_pending, memory_order_relaxed)) {
		pull_links();
		/* New links may already carry notices. */
		n += drain_links();
	}
	if (nmoved)
		switch_moved();
	/* Hand on what we took to the poll sleepers: theirs may be among it. */
	if (took || n)
		kick_all();
	return n;
}

void shunt_notice_post(struct shunt_circuit_end *end, struct shunt_plink *_Atomic *cache)
{
	for (unsigned i = 0; i < SHUNT_ROUTES; i++) {
		uint64_t r = atomic_load_explicit(&end->route[i], memory_order_acquire);
		uint64_t to = shunt_route_session(r);
		struct shunt_plink *l;

		if (!r)
			continue;
		l = atomic_load_explicit(&cache[i], memory_order_relaxed);
		/* A cached link is only good while it still joins us to that session. */
		if (!l || atomic_load_explicit(&l->partner, memory_order_acquire) != to ||
		    !atomic_load_explicit(&l->live, memory_order_acquire)) {
			l = shunt_plink_get(to);
			atomic_store_explicit(&cache[i], l, memory_order_relaxed);
			if (!l)
				continue;
		}
		shunt_plink_post(l, shunt_route_slot(r));
	}
}

void shunt_notice_sleepers(int delta)
{
	shunt_plink_sleepers(delta);
}

void shunt_notice_fork_prepare(void)
{
	pthread_mutex_lock(&shunt_notice_lock);
}

void shunt_notice_fork_parent(void)
{
	pthread_mutex_unlock(&shunt_notice_lock);
}

void shunt_notice_after_fork(void)
{
	int h = atomic_load(&hub);

	/* The parent's hub is the same kernel object: the child makes its own. */
	pthread_mutex_init(&shunt_notice_lock, NULL);
	pthread_mutex_init(&hub_lock, NULL);
	pthread_mutex_init(&pull_lock, NULL);
	pthread_mutex_init(&kick_lock, NULL);
	nkick = 0;		/* the sleepers were the parent's threads */
	if (kick_fd >= 0) {	/* shared with the parent's thread: make our own */
		shunt_close_hidden(kick_fd);
		kick_fd = -1;
		if (kick_key != (pthread_key_t)-1)
			pthread_setspecific(kick_key, NULL);
	}
	if (h >= 0)
		shunt_close_hidden(h);
	atomic_store(&hub, -1);
	atomic_store(&pull_pending, false);
	shunt_plink_after_fork();
	/* The routes in the circuits are the parent's; ours come with our session. */
	for (uint32_t ch = 0; ch < CHUNKS; ch++) {
		if (!table[ch])
			continue;
		for (uint32_t i = 0; i < CHUNK; i++)
			if (table[ch][i])
				table[ch][i]->route = -1;
	}
}
