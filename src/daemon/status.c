// SPDX-License-Identifier: MIT
/* STATUS: a stream of records describing sessions, listeners and circuits. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/proto.h"
#include "daemon/shuntd.h"

/*
 * The reply is a stream of records, one per session, listener, circuit and
 * policy pair, then an end; with thousands of connections it is more than
 * a socket holds at once. So it is sent as the client takes it: where it
 * stopped is kept (s->status) and the loop calls back when there is room.
 * Between two calls the maps may change: a record may then be missed or
 * sent twice, as ss may show a socket twice while sockets come and go.
 */
enum status_phase {
	PHASE_SESSIONS,
	PHASE_LISTENERS,
	PHASE_CIRCUITS,
	PHASE_POLICY,
	PHASE_END,
	PHASE_DONE,
};

union status_record {
	struct shunt_msg_hdr h;
	struct shunt_msg_status_session session;
	struct shunt_msg_status_listener listener;
	struct shunt_msg_status_conn conn;
	struct shunt_msg_status_policy policy;
	struct shunt_msg_status_end end;
};

static void session_record(struct session *s, uint32_t seq, struct shunt_msg_status_session *r)
{
	shunt_proto_init(r, SHUNT_MSG_STATUS_SESSION, sizeof(*r), seq);
	r->session = s->id;
	r->pid = s->pid;
	r->uid = s->uid;
	snprintf(r->comm, sizeof(r->comm), "%s", shuntd_session_comm(s));
	if (s->tenant)
		memcpy(r->tenant, s->tenant->name, sizeof(r->tenant));
}

static void listener_record(struct listener *l, uint32_t seq, struct shunt_msg_status_listener *r)
{
	shunt_proto_init(r, SHUNT_MSG_STATUS_LISTENER, sizeof(*r), seq);
	r->listener = l->id;
	r->session = shuntd_listener_holder(l) ? shuntd_listener_holder(l)->id : 0;
	r->netns = l->netns;
	r->addr = l->addr;
	r->backlog = l->max_queued - 1;
	r->queued = l->queued;
}

static void circuit_record(struct circuit *c, uint32_t seq, struct shunt_msg_status_conn *r)
{
	shunt_proto_init(r, SHUNT_MSG_STATUS_CONN, sizeof(*r), seq);
	r->circuit = c->id;
	for (unsigned e = 0; e < 2; e++) {
		struct session *h = shuntd_circuit_holder(c, e);

		r->session[e] = h ? h->id : 0;
		r->addr[e] = c->local[e];
		/* Counters read from shared memory: shown, never believed. */
		r->bytes[e] = atomic_load(&c->hdr->ring[shunt_tx_ring(e)].tail);
		r->state[e] = atomic_load(&c->hdr->end[e].state);
	}
	r->setup = atomic_load(&c->hdr->setup);
	r->ring_size = c->ring_size;
}

static void policy_record(struct shuntd *d, struct policy_pair *p, uint32_t seq,
			  struct shunt_msg_status_policy *r)
{
	shunt_proto_init(r, SHUNT_MSG_STATUS_POLICY, sizeof(*r), seq);
	memcpy(r->from, p->from, sizeof(r->from));
	memcpy(r->to, p->to, sizeof(r->to));
	memcpy(r->rule, p->rule, sizeof(r->rule));
	if (!p->rule[0])
		snprintf(r->dflt, sizeof(r->dflt), "%s", shunt_action_name(d->policy->def));
	r->refused = p->refused;
	r->count = p->count;
}

static void end_record(struct shuntd *d, uint32_t seq, struct shunt_msg_status_end *r)
{
	shunt_proto_init(r, SHUNT_MSG_STATUS_END, sizeof(*r), seq);
	r->circuits_total = d->circuits_total;
	r->sessions_total = d->sessions_total;
	for (unsigned i = 0; i < SHUNT_FALLBACK_REASONS; i++)
		r->fallbacks[i] = d->fallbacks[i];
}

/* The record at @c into @r, and @c moved past it; false once all went. */
static bool next_record(struct shuntd *d, struct status_cursor *c, union status_record *r)
{
	uint64_t key;

	memset(r, 0, sizeof(*r));
	for (;;) {
		switch (c->phase) {
		case PHASE_SESSIONS: {
			struct session *s = shunt_map_next(&d->sessions, &c->pos, &key);

			if (s && s->ticket)
				continue;
			if (s) {
				session_record(s, c->seq, &r->session);
				return true;
			}
			break;
		}
		case PHASE_LISTENERS: {
			struct listener *l = shunt_map_next(&d->listeners, &c->pos, &key);

			if (l) {
				listener_record(l, c->seq, &r->listener);
				return true;
			}
			break;
		}
		case PHASE_CIRCUITS: {
			struct circuit *ci = shunt_map_next(&d->circuits, &c->pos, &key);

			if (ci) {
				circuit_record(ci, c->seq, &r->conn);
				return true;
			}
			break;
		}
		case PHASE_POLICY: {
			/* By count, not by pointer: a reload between two calls frees the pairs. */
			struct policy_pair *p = d->pairs;

			for (size_t i = 0; p && i < c->pos; i++)
				p = p->next;
			if (p) {
				c->pos++;
				policy_record(d, p, c->seq, &r->policy);
				return true;
			}
			break;
		}
		case PHASE_END:
			end_record(d, c->seq, &r->end);
			c->phase = PHASE_DONE;
			return true;
		default:
			return false;
		}
		c->phase++;
		c->pos = 0;
	}
}

void shuntd_status_continue(struct shuntd *d, struct session *s)
{
	for (;;) {
		struct status_cursor next = s->status;
		union status_record r;
		int err;

		if (!next_record(d, &next, &r))
			break;
		err = shuntd_session_reply(s, &r, NULL, 0);
		if (err == -EAGAIN) {
			/* Full: go on when the client has taken some (EPOLLOUT). */
			if (s->status.waiting || shuntd_loop_watch_out(d, s->fd, s, true) == 0) {
				s->status.waiting = true;
				return;
			}
			break;
		}
		s->status = next;
		/* The client is gone or broken: its input says so next. */
		if (err < 0)
			break;
	}
	if (s->status.waiting)
		shuntd_loop_watch_out(d, s->fd, s, false);
	s->status.active = s->status.waiting = false;
}

void shuntd_status(struct shuntd *d, struct session *s, const struct shunt_msg_status *m)
{
	/* Connections processes made or took without asking are shown too. */
	shuntd_journal_read_all(d);
	s->status = (struct status_cursor){ .active = true, .seq = m->h.seq };
	shuntd_status_continue(d, s);
}
