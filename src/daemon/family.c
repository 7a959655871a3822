// SPDX-License-Identifier: MIT
/*
 * A listener's family closing (preload/family.h): holders that forked from
 * one another close it without waiting while others of them hold it; the
 * last one waits, and is answered once shuntd has read the closes its
 * family counted before it, so that a connect after its close is refused
 * as the kernel refuses it, whoever makes it.
 */
#include <stdlib.h>

#include "common/log.h"
#include "common/sys.h"
#include "daemon/shuntd.h"

/* Long enough for a holder between counting its close and sending it. */
enum { FAMILY_WAIT_MS = 1000 };

/* A last holder's close, not answered yet. */
struct waiter {
	struct shunt_list node;		/* listener.waiters */
	struct shunt_list time_node;	/* shuntd.family_waiting, by until */
	uint64_t session;		/* by id: it may end meanwhile */
	uint32_t seq;
	uint32_t after;
	int status;
	int64_t until;			/* answered anyway then (ms, monotonic) */
};

static void answer(struct shuntd *d, struct waiter *w)
{
	struct session *s = shunt_map_get(&d->sessions, w->session);

	if (s && s->fd >= 0)
		shuntd_session_reply_status(s, SHUNT_MSG_UNLISTEN, w->seq, w->status);
	shunt_list_del(&w->node);
	shunt_list_del(&w->time_node);
	free(w);
}

void shuntd_family_counted(struct shuntd *d, struct listener *l)
{
	struct shunt_list *pos, *tmp;

	l->closes++;
	shunt_list_for_each_safe(pos, tmp, &l->waiters) {
		struct waiter *w = shunt_container_of(pos, struct waiter, node);

		if (w->after <= l->closes)
			answer(d, w);
	}
}

bool shuntd_family_wait(struct shuntd *d, struct listener *l, struct session *s, uint32_t seq,
			uint32_t after, int status)
{
	struct waiter *w;

	if (after <= l->closes || !(w = malloc(sizeof(*w))))
		return false;
	*w = (struct waiter){ .session = s->id, .seq = seq, .after = after, .status = status,
			      .until = shunt_sys_now_ms() + FAMILY_WAIT_MS };
	shunt_list_add_tail(&l->waiters, &w->node);
	shunt_list_add_tail(&d->family_waiting, &w->time_node);
	return true;
}

void shuntd_family_listener_gone(struct shuntd *d, struct listener *l)
{
	while (!shunt_list_empty(&l->waiters))
		answer(d, shunt_list_first(&l->waiters, struct waiter, node));
}

int shuntd_family_next_tick(struct shuntd *d)
{
	int64_t left;

	if (shunt_list_empty(&d->family_waiting))
		return -1;
	left = shunt_list_first(&d->family_waiting, struct waiter, time_node)->until -
	       shunt_sys_now_ms();
	return left < 0 ? 0 : (int)left;
}

void shuntd_family_tick(struct shuntd *d)
{
	int64_t now = shunt_sys_now_ms();

	while (!shunt_list_empty(&d->family_waiting)) {
		struct waiter *w = shunt_list_first(&d->family_waiting, struct waiter, time_node);

		if (w->until > now)
			break;
		shunt_warn("a listener's last close waited %d ms for %u closes of its family "
			   "that never came: answered anyway", FAMILY_WAIT_MS, w->after);
		answer(d, w);
	}
}
