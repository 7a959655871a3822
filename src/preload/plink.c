// SPDX-License-Identifier: MIT
/* This process's links: found by partner, reused in place when their partner is gone. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/log.h"
#include "common/memfd.h"
#include "common/proto.h"
#include "common/sys.h"
#include "common/wake.h"
#include "preload/control.h"
#include "preload/notice.h"
#include "preload/plink.h"
#include "preload/util.h"

enum { MAX_LINKS = 4096 };

/*
 * links_lock guards installing, retiring and the sleeper counts; readers
 * find links without it (the array only grows, entries are never freed).
 */
static pthread_mutex_t links_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_plink *links[MAX_LINKS];
static _Atomic unsigned nlinks;
static int sleeping;		/* under links_lock: threads announced by shunt_plink_sleepers */
static _Atomic(struct shunt_plink *) daemon_link;	/* written under links_lock */

unsigned shunt_plink_count(void)
{
	return atomic_load_explicit(&nlinks, memory_order_acquire);
}

struct shunt_plink *shunt_plink_nth(unsigned i)
{
	return links[i];
}

static struct shunt_plink *find(uint64_t partner)
{
	unsigned n = shunt_plink_count();

	for (unsigned i = 0; i < n; i++) {
		struct shunt_plink *l = links[i];

		if (atomic_load_explicit(&l->partner, memory_order_acquire) == partner &&
		    atomic_load_explicit(&l->live, memory_order_acquire))
			return l;
	}
	return NULL;
}

/* The sides of @l this process drains, as a bit mask. */
static unsigned drained_sides(const struct shunt_plink *l)
{
	return l->self ? 3u : 1u << l->side;
}

/*
 * Put descriptor @fd at @l->efd[@i]: in place of the old one, or hidden
 * anew. 0, or -errno with @fd closed: no room for it (then the link cannot
 * wake whoever sleeps on that side, and must not be used).
 */
static int set_efd(struct shunt_plink *l, unsigned i, int fd)
{
	/* Unused (the daemon link's other side): an old descriptor there stays as it is. */
	if (fd < 0)
		return 0;
	if (l->efd[i] >= 0 && shunt_syscall(SYS_dup3, fd, l->efd[i], O_CLOEXEC) >= 0) {
		shunt_close_reply(fd);
		return 0;
	}
	if (l->efd[i] >= 0)
		shunt_close_hidden(l->efd[i]);
	l->efd[i] = shunt_fd_hide(fd);
	if (l->efd[i] < 0) {
		l->efd[i] = -1;
		return -EMFILE;
	}
	return 0;
}

/* A slot for a new link: a dead one to reuse, or a new one. Under links_lock. */
static struct shunt_plink *slot_locked(void)
{
	unsigned n = atomic_load_explicit(&nlinks, memory_order_relaxed);
	struct shunt_plink *l;

	for (unsigned i = 0; i < n; i++)
		if (!atomic_load(&links[i]->live) && links[i]->hdr)
			return links[i];
	if (n == MAX_LINKS)
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	l->efd[0] = l->efd[1] = -1;
	links[n] = l;
	atomic_store_explicit(&nlinks, n + 1, memory_order_release);
	return l;
}

/*
 * Fill slot @l with a link and make it live: the mapping first (in place of
 * the old one), then the descriptors, then the fields, then the hub and the
 * sleeper counts, and only then is it found by partner. @fds: memfd, our
 * eventfd, the other side's (or -1); each one taken over is set to -1, so
 * that the caller closes only what is left after a failure. Under
 * links_lock.
 */
static int fill_locked(struct shunt_plink *l, uint64_t id, uint64_t partner, unsigned side,
		       bool self, bool daemon, int fds[3])
{
	struct shunt_link_hdr *hdr;
	void *p;
	int e;

	/* Any failure, mmap's too, says the same: this is not a link we can use. */
	if (shunt_memfd_map(fds[0], shunt_link_size(), PROT_READ | PROT_WRITE, l->hdr, &p) < 0)
		return -EPROTO;
	hdr = p;
	shunt_close_reply(fds[0]);
	fds[0] = -1;
	l->hdr = hdr;
	e = set_efd(l, side, fds[1]);
	fds[1] = -1;
	if (e == 0)
		e = set_efd(l, side ^ 1, fds[2]);
	fds[2] = -1;
	if (e < 0)
		return e;
	l->id = id;
	l->side = side;
	l->self = self;
	l->daemon = daemon;
	for (unsigned s = 0; s < 2; s++)
		if (drained_sides(l) & (1u << s)) {
			atomic_store(&hdr->side[s].sleepers, (uint32_t)sleeping);
			if (l->efd[s] >= 0)
				shunt_notice_watch_efd(l->efd[s], l);
		}
	atomic_store_explicit(&l->partner, partner, memory_order_release);
	atomic_store_explicit(&l->live, true, memory_order_release);
	return 0;
}

struct shunt_plink *shunt_plink_install(const struct shunt_msg_link_reply *r, int fds[3])
{
	uint64_t me = shunt_ctl_session();
	struct shunt_plink *l;
	bool self = r->partner == me;
	int e = -ENOMEM;

	pthread_mutex_lock(&links_lock);
	l = find(r->partner);
	/* Known already (asked for and handed over at once): keep the one we drain. */
	if (!l && r->side <= 1 && (l = slot_locked()))
		e = fill_locked(l, r->link, r->partner, r->side, self, false, fds);
	else if (l)
		e = 0, shunt_close_replies(fds, 3);
	pthread_mutex_unlock(&links_lock);
	if (e < 0) {
		shunt_close_replies(fds, 3);
		shunt_warn("cannot map link %llu: %s", (unsigned long long)r->link, strerror(-e));
		return NULL;
	}
	return l;
}

int shunt_plink_install_daemon(uint64_t id, int fds[2])
{
	struct shunt_plink *l;
	int e = -ENOMEM;

	pthread_mutex_lock(&links_lock);
	/* A new session (after fork, or a new daemon): the old daemon link is dead. */
	for (unsigned i = 0; i < shunt_plink_count(); i++)
		if (links[i]->daemon && atomic_load(&links[i]->live)) {
			atomic_store(&links[i]->live, false);
			shunt_notice_unwatch_efd(links[i]->efd[0]);
		}
	atomic_store(&daemon_link, NULL);
	int three[3] = { fds[0], fds[1], -1 };

	l = slot_locked();
	if (l)
		e = fill_locked(l, id, 0, 0, false, true, three);
	if (e == 0)
		atomic_store(&daemon_link, l);
	pthread_mutex_unlock(&links_lock);
	if (e < 0)
		shunt_close_replies(three, 2);
	return e;
}

struct shunt_plink *shunt_plink_daemon(void)
{
	return atomic_load_explicit(&daemon_link, memory_order_acquire);
}

struct shunt_plink *shunt_plink_get(uint64_t partner)
{
	struct shunt_msg_link_reply r;
	struct shunt_plink *l = find(partner);
	int fds[3];

	if (l || !partner)
		return l;
	if (shunt_ctl_link(partner, &r, fds) < 0)
		return NULL;
	return shunt_plink_install(&r, fds);
}

void shunt_plink_gone(uint64_t id)
{
	pthread_mutex_lock(&links_lock);
	for (unsigned i = 0; i < shunt_plink_count(); i++) {
		struct shunt_plink *l = links[i];

		if (l->id != id || l->daemon || !atomic_load(&l->live))
			continue;
		atomic_store(&l->partner, 0);
		atomic_store(&l->live, false);
		for (unsigned s = 0; s < 2; s++)
			if ((drained_sides(l) & (1u << s)) && l->efd[s] >= 0)
				shunt_notice_unwatch_efd(l->efd[s]);
	}
	pthread_mutex_unlock(&links_lock);
}

void shunt_plink_post(struct shunt_plink *l, uint32_t slot)
{
	/* A self link is drained on both sides; we post on side 0. */
	unsigned to = l->self ? 0 : l->side ^ 1;

	if (shunt_link_post(&l->hdr->side[to], slot) && l->efd[to] >= 0)
		shunt_eventfd_signal(l->efd[to]);
}

void shunt_plink_sleepers(int delta)
{
	pthread_mutex_lock(&links_lock);
	sleeping += delta;
	for (unsigned i = 0; i < shunt_plink_count(); i++) {
		struct shunt_plink *l = links[i];

		if (!atomic_load_explicit(&l->live, memory_order_relaxed))
			continue;
		for (unsigned s = 0; s < 2; s++)
			if (drained_sides(l) & (1u << s))
				atomic_fetch_add_explicit(&l->hdr->side[s].sleepers, (uint32_t)delta,
							  memory_order_seq_cst);
	}
	pthread_mutex_unlock(&links_lock);
}

void shunt_plink_fork_prepare(void)
{
	pthread_mutex_lock(&links_lock);
}

void shunt_plink_fork_parent(void)
{
	pthread_mutex_unlock(&links_lock);
}

void shunt_plink_after_fork(void)
{
	pthread_mutex_init(&links_lock, NULL);
	sleeping = 0;
	atomic_store(&daemon_link, NULL);
	for (unsigned i = 0; i < shunt_plink_count(); i++) {
		struct shunt_plink *l = links[i];

		/* The parent drains these: we must neither drain nor wake through them. */
		atomic_store(&l->partner, 0);
		atomic_store(&l->live, false);
		for (unsigned s = 0; s < 2; s++)
			if (l->efd[s] >= 0) {
				shunt_close_hidden(l->efd[s]);
				l->efd[s] = -1;
			}
	}
}
