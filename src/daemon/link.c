// SPDX-License-Identifier: MIT
/*
 * Links: the notice pages shared by two sessions, made when one of them
 * first needs to wake the other (LINK) and handed to the other through its
 * daemon link (shuntd posts SHUNT_LINK_SLOT_PULL there; it answers with
 * LINK_NEXT). A link dies with either session: the survivor is told, so it
 * can reuse what it mapped. Each session also has a daemon link, through
 * which shuntd itself posts notices.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proto.h"
#include "common/sys.h"
#include "common/wake.h"
#include "daemon/shuntd.h"

static void link_free(struct link *l)
{
	munmap(l->hdr, shunt_link_size());
	close(l->memfd);
	for (unsigned i = 0; i < 2; i++)
		if (l->efd[i] >= 0)
			close(l->efd[i]);
	free(l);
}

static struct link *link_alloc(struct shuntd *d, bool daemon)
{
	struct link *l = calloc(1, sizeof(*l));
	size_t size = shunt_link_size();

	if (!l)
		return NULL;
	l->efd[1] = -1;
	l->memfd = shuntd_memfd_sealed("shunt-link", size);
	l->efd[0] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!daemon)
		l->efd[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (l->memfd < 0 || l->efd[0] < 0 || (!daemon && l->efd[1] < 0)) {
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
	l->daemon = daemon;
	return l;
fail:
	shunt_warn("cannot create a link: %s", strerror(errno));
	if (l->memfd >= 0)
		close(l->memfd);
	for (unsigned i = 0; i < 2; i++)
		if (l->efd[i] >= 0)
			close(l->efd[i]);
	free(l);
	return NULL;
}

int shuntd_link_daemon(struct shuntd *d, struct session *s)
{
	struct link *l = link_alloc(d, true);

	if (!l)
		return -ENOMEM;
	l->side[0] = s;
	s->dlink = l;
	return 0;
}

struct link *shuntd_link_get(struct shuntd *d, struct session *a, struct session *b)
{
	struct link *l = shunt_map_get(&a->links, b->id);

	if (l)
		return l;
	l = link_alloc(d, false);
	if (!l)
		return NULL;
	l->side[0] = a;
	l->side[1] = b;
	if (shunt_map_put(&a->links, b->id, l) < 0 ||
	    (a != b && shunt_map_put(&b->links, a->id, l) < 0)) {
		shunt_map_del(&a->links, b->id);
		link_free(l);
		return NULL;
	}
	a->links_waiting++;
	if (a != b)
		b->links_waiting++;
	return l;
}

/* The side of @l that @s drains. */
static unsigned side_of(const struct link *l, const struct session *s)
{
	return l->side[0] == s ? 0 : 1;
}

static bool undelivered(const struct session *s, const struct link *l)
{
	return !l->delivered[side_of(l, s)];
}

/* @l's descriptors for @s, in @fds: its memfd, the eventfd of @s's side, the other; that side. */
static unsigned hand(const struct session *s, const struct link *l, int fds[3])
{
	unsigned side = side_of(l, s);

	fds[0] = l->memfd;
	fds[1] = l->efd[side];
	fds[2] = l->efd[side ^ 1];
	return side;
}

/* @s has been handed @l (both sides, for a self link). */
static void mark_delivered(struct session *s, struct link *l)
{
	unsigned side = side_of(l, s);

	if (l->delivered[side])
		return;
	l->delivered[side] = true;
	if (l->side[0] == l->side[1])
		l->delivered[side ^ 1] = true;
	s->links_waiting--;
}

void shuntd_link_prepare(struct shuntd *d, struct session *s, struct listener *l, bool fresh,
			 struct link **give)
{
	struct shunt_list *pos;

	if (give)
		*give = NULL;
	shunt_list_for_each(pos, &l->holds) {
		struct session *p = shunt_container_of(pos, struct hold, node)->session;
		struct link *k;

		if (p->ticket)
			continue;
		k = shuntd_link_get(d, s, p);
		if (!k)
			continue;	/* made later, on demand, while we live */
		for (unsigned side = 0; side < 2; side++) {
			struct session *x = k->side[side];

			if (k->delivered[side])
				continue;
			/* One link goes with the reply (both sides of a self link). */
			if (x == s && give && (!*give || *give == k)) {
				*give = k;
				continue;
			}
			/* Nobody maps a new channel but through ACCEPT, which hands this over. */
			if (x != s && fresh)
				continue;
			shuntd_link_notify(x, SHUNT_LINK_SLOT_PULL);
		}
	}
}

struct link *shuntd_link_undelivered(struct session *s, struct session *partner)
{
	struct link *k = partner ? shunt_map_get(&s->links, partner->id) : NULL;

	return k && undelivered(s, k) ? k : NULL;
}

unsigned shuntd_link_attach(struct session *s, struct link *k, struct shunt_msg_chan *r,
			    int fds[3])
{
	unsigned side = hand(s, k, fds);

	r->flags |= SHUNT_CHAN_LINK;
	r->link = k->id;
	r->partner = k->side[side ^ 1]->id;
	r->side = (uint8_t)side;
	return 3;
}

void shuntd_link_handed(struct session *s, struct link *k, bool sent)
{
	if (!sent) {
		/* It asks for it the usual way. */
		shuntd_link_notify(s, SHUNT_LINK_SLOT_PULL);
		return;
	}
	mark_delivered(s, k);
}

uint64_t shuntd_link_take_gone(struct session *s)
{
	return s->ngone ? s->gone[--s->ngone] : 0;
}

void shuntd_link_settle(struct session *s)
{
	const uint64_t bit = 1ull << (SHUNT_LINK_SLOT_PULL % 64);

	/* Only the slot's bit: a drain that finds its word empty does nothing. */
	if (s->dlink && !s->links_waiting && !s->ngone)
		atomic_fetch_and(&s->dlink->hdr->side[0].bits[SHUNT_LINK_SLOT_PULL / 64], ~bit);
}

void shuntd_link_notify(struct session *s, uint32_t slot)
{
	struct link *l = s->dlink;

	if (l && shunt_link_post(&l->hdr->side[0], slot))
		shuntd_efd_ring(l->efd[0]);
}

/*
 * Hand @l to @s: its memfd, the eventfd of the side @s drains, the other
 * one; @flags enum shunt_link_flags.
 */
static void reply_link(struct session *s, uint16_t type, uint32_t seq, struct link *l,
		       uint16_t flags, uint64_t gone)
{
	struct shunt_msg_link_reply r;
	int fds[3];
	unsigned side = hand(s, l, fds);

	shunt_proto_init(&r, type | SHUNT_MSG_REPLY, sizeof(r), seq);
	r.flags = flags;
	r.gone = gone;
	r.link = l->id;
	r.partner = l->side[side ^ 1]->id;
	r.side = (uint8_t)side;
	if (shuntd_session_reply(s, &r, fds, 3) == 0)
		mark_delivered(s, l);
}

void shuntd_link_request(struct shuntd *d, struct session *s, const struct shunt_msg_link *m)
{
	struct session *p = shunt_map_get(&d->sessions, m->partner);
	bool allowed = p && !p->ticket;
	struct link *l;

	/*
	 * Only a process it shares a circuit with may make us wake it (or
	 * itself). The partner may not have asked us anything since it
	 * journaled the circuit they share (a connect through a channel is
	 * journaled only): read that first, or the link is refused and the
	 * notice that needed it lost (a fork child answering a client).
	 */
	if (allowed && p != s && !shuntd_hold_share_circuit(s, p)) {
		shuntd_journal_read(d, p);
		allowed = shuntd_hold_share_circuit(s, p);
	}
	if (!allowed) {
		shuntd_session_reply_status(s, SHUNT_MSG_LINK, m->h.seq, -EPERM);
		return;
	}
	l = shuntd_link_get(d, s, p);
	if (!l) {
		shuntd_session_reply_status(s, SHUNT_MSG_LINK, m->h.seq, -ENOMEM);
		return;
	}
	reply_link(s, SHUNT_MSG_LINK, m->h.seq, l, 0, 0);
	/* The partner must drain its side before our first notice there counts. */
	if (p != s && undelivered(p, l))
		shuntd_link_notify(p, SHUNT_LINK_SLOT_PULL);
}

/*
 * The next link made for @s, with a dead one to forget (or a dead one
 * alone when no link waits); flagged the last when nothing else waits,
 * which spares the library asking again.
 */
void shuntd_link_next(struct shuntd *d, struct session *s, const struct shunt_msg_link *m)
{
	struct link *l, *more;
	uint64_t key, gone;
	size_t it = 0;

	(void)d;
	while ((l = shunt_map_next(&s->links, &it, &key)) && !undelivered(s, l))
		;
	if (!l && !s->ngone) {
		shuntd_session_reply_status(s, SHUNT_MSG_LINK_NEXT, m->h.seq, SHUNT_NONE);
		return;
	}
	gone = shuntd_link_take_gone(s);
	if (!l) {
		struct shunt_msg_link_reply r;

		shunt_proto_init(&r, SHUNT_MSG_LINK_NEXT | SHUNT_MSG_REPLY, sizeof(r), m->h.seq);
		r.link = gone;
		r.flags = SHUNT_LINK_GONE | (!s->ngone ? SHUNT_LINK_LAST : 0);
		shuntd_session_reply(s, &r, NULL, 0);
		return;
	}
	while ((more = shunt_map_next(&s->links, &it, &key)) && !undelivered(s, more))
		;
	reply_link(s, SHUNT_MSG_LINK_NEXT, m->h.seq, l,
		   more || s->ngone ? 0 : SHUNT_LINK_LAST, gone);
}

/* Remember to tell @s that link @id died, so it can reuse what it mapped. */
static void tell_gone(struct session *s, uint64_t id)
{
	if (s->ngone == s->gone_cap) {
		size_t cap = s->gone_cap ? 2 * s->gone_cap : 8;
		uint64_t *g = realloc(s->gone, cap * sizeof(*g));

		if (!g)
			return;		/* it keeps the dead link mapped: no harm */
		s->gone = g;
		s->gone_cap = cap;
	}
	s->gone[s->ngone++] = id;
	shuntd_link_notify(s, SHUNT_LINK_SLOT_PULL);
}

void shuntd_link_session_gone(struct shuntd *d, struct session *s)
{
	struct link *l;
	uint64_t key;
	size_t it = 0;

	(void)d;
	while ((l = shunt_map_next(&s->links, &it, &key))) {
		unsigned side = side_of(l, s);
		struct session *other = l->side[side ^ 1];

		if (other != s) {
			shunt_map_del(&other->links, s->id);
			if (l->delivered[side ^ 1])
				tell_gone(other, l->id);
			else
				other->links_waiting--;
		}
		link_free(l);
	}
	shunt_map_free(&s->links);
	if (s->dlink)
		link_free(s->dlink);
	s->dlink = NULL;
	free(s->gone);
	s->gone = NULL;
	s->ngone = s->gone_cap = 0;
}
