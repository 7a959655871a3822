// SPDX-License-Identifier: MIT
/* This process's links: mapped once, kept for the life of the process. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "common/log.h"
#include "preload/control.h"
#include "preload/notice.h"
#include "preload/plink.h"
#include "preload/util.h"

enum { MAX_LINKS = 4096 };

static pthread_mutex_t links_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_plink *links[MAX_LINKS];	/* append-only */
static _Atomic unsigned nlinks;			/* release-published count */

unsigned shunt_plink_count(void)
{
	return atomic_load_explicit(&nlinks, memory_order_acquire);
}

struct shunt_plink *shunt_plink_nth(unsigned i)
{
	return links[i];
}

static struct shunt_plink *find_locked(uint64_t id)
{
	unsigned n = atomic_load_explicit(&nlinks, memory_order_relaxed);

	for (unsigned i = 0; i < n; i++)
		if (links[i]->id == id)
			return links[i];
	return NULL;
}

static struct shunt_plink *install_locked(struct shunt_grant *g)
{
	size_t size = shunt_link_size();
	unsigned side = g->msg.link_side;
	struct shunt_plink *l;
	struct stat st;
	void *p;

	if (atomic_load_explicit(&nlinks, memory_order_relaxed) == MAX_LINKS)
		return NULL;
	if (fstat(g->link_memfd, &st) < 0 || (size_t)st.st_size != size)
		return NULL;
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, g->link_memfd, 0);
	if (p == MAP_FAILED)
		return NULL;
	l = calloc(1, sizeof(*l));
	if (!l) {
		munmap(p, size);
		return NULL;
	}
	shunt_close_internal(g->link_memfd);
	l->id = g->msg.link;
	l->hdr = p;
	l->efd[side] = shunt_fd_hide(g->link_efd_mine);
	l->efd[side ^ 1] = shunt_fd_hide(g->link_efd_peer);
	g->link_memfd = g->link_efd_mine = g->link_efd_peer = -1;
	links[atomic_load_explicit(&nlinks, memory_order_relaxed)] = l;
	atomic_fetch_add_explicit(&nlinks, 1, memory_order_release);
	return l;
}

struct shunt_plink *shunt_plink_attach(struct shunt_grant *g)
{
	struct shunt_plink *l;

	pthread_mutex_lock(&links_lock);
	l = find_locked(g->msg.link);
	if (!l && g->link_memfd >= 0)
		l = install_locked(g);
	/* New, or a link we know that comes with a circuit for our other side. */
	if (l && !atomic_load(&l->mine[g->msg.link_side])) {
		shunt_notice_add_link(l, g->msg.link_side);
		atomic_store(&l->mine[g->msg.link_side], true);
	}
	pthread_mutex_unlock(&links_lock);
	if (!l)
		shunt_warn("circuit %llu names link %llu that we cannot map",
			   (unsigned long long)g->msg.circuit, (unsigned long long)g->msg.link);
	return l;
}
