// SPDX-License-Identifier: MIT
/*
 * Holds: which sessions hold which circuit ends and listeners. A socket
 * shared by fork is held by both processes, as the kernel socket is, and
 * lives until the last of them lets go. For circuit ends the count of
 * holders is also published in the circuit (end.holders), written by shuntd
 * alone, so a process closing an end it alone holds can publish the FIN at
 * once, without asking (see shuntd_close).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/log.h"
#include "daemon/shuntd.h"

static struct hold *hold_new(struct session *s, struct shunt_list *list)
{
	struct hold *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->session = s;
	shunt_list_add_tail(&s->holds, &h->session_node);
	shunt_list_add_tail(list, &h->node);
	return h;
}

struct hold *shuntd_hold_end(struct circuit *c, unsigned end, struct session *s)
{
	struct hold *h = hold_new(s, &c->end[end].holds);

	if (h) {
		h->circuit = c;
		h->end = end;
	}
	return h;
}

struct hold *shuntd_hold_listener(struct shuntd *d, struct listener *l, struct session *s)
{
	int announce = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
	struct hold *h = announce >= 0 ? hold_new(s, &l->holds) : NULL;

	if (!h) {
		if (announce >= 0)
			close(announce);
		return NULL;
	}
	h->listener = l;
	h->announce = announce;
	shuntd_directory_holds(d, l);
	return h;
}

void shuntd_hold_free(struct hold *h)
{
	if (h->listener)
		close(h->announce);
	free(h);
}

struct hold *shuntd_hold_find_end(struct session *s, struct circuit *c, unsigned end)
{
	struct shunt_list *pos;

	shunt_list_for_each(pos, &c->end[end].holds) {
		struct hold *h = shunt_container_of(pos, struct hold, node);

		if (h->session == s)
			return h;
	}
	return NULL;
}

struct hold *shuntd_hold_find_listener(struct session *s, struct listener *l)
{
	struct shunt_list *pos;

	shunt_list_for_each(pos, &l->holds) {
		struct hold *h = shunt_container_of(pos, struct hold, node);

		if (h->session == s)
			return h;
	}
	return NULL;
}

/* A dead session's routes would only cost its peers useless notices: clear them. */
static void clear_routes(struct shunt_circuit_end *e, uint64_t session)
{
	for (unsigned i = 0; i < SHUNT_ROUTES; i++) {
		uint64_t r = atomic_load(&e->route[i]);

		if (r && shunt_route_session(r) == session)
			atomic_compare_exchange_strong(&e->route[i], &r, 0);
	}
}

void shuntd_hold_release(struct shuntd *d, struct hold *h, bool died)
{
	struct circuit *c = h->circuit;
	struct listener *l = h->listener;
	unsigned end = h->end;

	shunt_list_del(&h->session_node);
	shunt_list_del(&h->node);
	if (c) {
		struct shunt_circuit_end *e = &c->hdr->end[end];
		uint32_t n = atomic_load(&e->holders);

		/* Never below zero, whatever the shared word was made to say. */
		while (n && !atomic_compare_exchange_weak(&e->holders, &n, n - 1))
			;
		if (died)
			clear_routes(e, h->session->id);
	}
	shuntd_hold_free(h);
	if (c && shunt_list_empty(&c->end[end].holds))
		shuntd_circuit_end_done(d, c, end, died);
	if (l && shunt_list_empty(&l->holds))
		shuntd_listener_destroy(d, l);
	else if (l)
		shuntd_directory_holds(d, l);
}

bool shuntd_hold_share_circuit(struct session *a, struct session *b)
{
	struct shunt_list *pos;

	shunt_list_for_each(pos, &a->holds) {
		struct hold *h = shunt_container_of(pos, struct hold, session_node);

		if (!h->circuit)
			continue;
		for (unsigned e = 0; e < 2; e++)
			if (shuntd_hold_find_end(b, h->circuit, e))
				return true;
	}
	return false;
}
