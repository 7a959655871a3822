// SPDX-License-Identifier: MIT
/*
 * Links: the notice pages of a pair of sessions, created on their first
 * circuit and kept while either may still use them. Slots index circuits.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/shuntd.h"

static void link_free(struct link *l)
{
	munmap(l->hdr, shunt_link_size());
	close(l->memfd);
	close(l->efd[0]);
	close(l->efd[1]);
	free(l);
}

static struct link *link_create(struct shuntd *d, struct session *a, struct session *b)
{
	struct link *l = calloc(1, sizeof(*l));
	size_t size = shunt_link_size();

	if (!l)
		return NULL;
	l->memfd = shuntd_memfd_sealed("shunt-link", size);
	l->efd[0] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	l->efd[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l->memfd < 0 || l->efd[0] < 0 || l->efd[1] < 0) {
		if (l->memfd < 0)
			errno = -l->memfd;
		goto fail;
	}
	l->hdr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, l->memfd, 0);
	if (l->hdr == MAP_FAILED)
		goto fail;
	l->hdr->magic = SHUNT_LINK_MAGIC;
	l->hdr->version = SHUNT_LINK_VERSION;
	l->hdr->slots = SHUNT_LINK_SLOTS;
	l->id = shuntd_new_id(d);
	l->side[0] = a;
	l->side[1] = b;
	if (shunt_map_put(&a->links, b->id, l) < 0 ||
	    (a != b && shunt_map_put(&b->links, a->id, l) < 0)) {
		shunt_map_del(&a->links, b->id);
		munmap(l->hdr, size);
		goto fail;
	}
	return l;
fail:
	shunt_warn("cannot create a link for pids %d and %d: %s", (int)a->pid, (int)b->pid,
		   strerror(errno));
	if (l->memfd >= 0)
		close(l->memfd);
	if (l->efd[0] >= 0)
		close(l->efd[0]);
	if (l->efd[1] >= 0)
		close(l->efd[1]);
	free(l);
	return NULL;
}

struct link *shuntd_link_get(struct shuntd *d, struct session *a, struct session *b)
{
	struct link *l = shunt_map_get(&a->links, b->id);

	return l ? l : link_create(d, a, b);
}

unsigned shuntd_link_side_of(const struct link *l, const struct session *s)
{
	return l->side[0] == s ? 0 : 1;
}

int shuntd_link_slot(struct link *l, uint32_t *slot)
{
	for (uint32_t n = 0; n < SHUNT_LINK_SLOTS; n++) {
		uint32_t i = (l->next_slot + n) % SHUNT_LINK_SLOTS;

		if (l->used[i / 64] & (1ull << (i % 64)))
			continue;
		l->used[i / 64] |= 1ull << (i % 64);
		l->next_slot = i + 1;
		l->circuits++;
		*slot = i;
		return 0;
	}
	return -ENOSPC;
}

static bool link_orphaned(const struct link *l)
{
	return !l->circuits && (!l->side[0] || !l->side[1]);
}

void shuntd_link_release(struct shuntd *d, struct link *l, uint32_t slot)
{
	(void)d;
	l->used[slot / 64] &= ~(1ull << (slot % 64));
	l->circuits--;
	if (link_orphaned(l))
		link_free(l);
}

void shuntd_link_session_gone(struct shuntd *d, struct link *l, struct session *s)
{
	(void)d;
	for (unsigned i = 0; i < 2; i++) {
		struct session *other = l->side[i ^ 1];

		if (l->side[i] != s)
			continue;
		l->side[i] = NULL;
		/* No new circuit between these two will ever be made. */
		if (other && other != s)
			shunt_map_del(&other->links, s->id);
	}
	if (link_orphaned(l))
		link_free(l);
}
