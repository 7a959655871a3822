// SPDX-License-Identifier: MIT
/* STATUS: a stream of records describing sessions, listeners and circuits. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/proto.h"
#include "daemon/shuntd.h"

static void send_sessions(struct shuntd *d, struct session *to, uint32_t seq)
{
	struct session *s;
	uint64_t key;
	size_t it = 0;

	while ((s = shunt_map_next(&d->sessions, &it, &key))) {
		struct shunt_msg_status_session r;

		if (s->ticket)
			continue;

		shunt_proto_init(&r, SHUNT_MSG_STATUS_SESSION, sizeof(r), seq);
		r.session = s->id;
		r.pid = s->pid;
		r.uid = s->uid;
		memcpy(r.comm, s->comm, sizeof(r.comm));
		if (s->tenant)
			memcpy(r.tenant, s->tenant->name, sizeof(r.tenant));
		shuntd_session_reply(to, &r, NULL, 0);
	}
}

static void send_listeners(struct shuntd *d, struct session *to, uint32_t seq)
{
	struct listener *l;
	uint64_t key;
	size_t it = 0;

	while ((l = shunt_map_next(&d->listeners, &it, &key))) {
		struct shunt_msg_status_listener r;

		shunt_proto_init(&r, SHUNT_MSG_STATUS_LISTENER, sizeof(r), seq);
		r.listener = l->id;
		r.session = shuntd_listener_holder(l) ? shuntd_listener_holder(l)->id : 0;
		r.netns = l->netns;
		r.addr = l->addr;
		r.backlog = l->max_queued - 1;
		r.queued = l->queued;
		shuntd_session_reply(to, &r, NULL, 0);
	}
}

static void send_circuits(struct shuntd *d, struct session *to, uint32_t seq)
{
	struct circuit *c;
	uint64_t key;
	size_t it = 0;

	while ((c = shunt_map_next(&d->circuits, &it, &key))) {
		struct shunt_msg_status_conn r;

		shunt_proto_init(&r, SHUNT_MSG_STATUS_CONN, sizeof(r), seq);
		r.circuit = c->id;
		for (unsigned e = 0; e < 2; e++) {
			struct session *h = shuntd_circuit_holder(c, e);

			r.session[e] = h ? h->id : 0;
			r.addr[e] = c->local[e];
			/* Counters read from shared memory: shown, never believed. */
			r.bytes[e] = atomic_load(&c->hdr->ring[shunt_tx_ring(e)].tail);
			r.state[e] = atomic_load(&c->hdr->end[e].state);
		}
		r.setup = atomic_load(&c->hdr->setup);
		r.ring_size = c->ring_size;
		shuntd_session_reply(to, &r, NULL, 0);
	}
}

static void send_policy(struct shuntd *d, struct session *to, uint32_t seq)
{
	for (struct policy_pair *p = d->pairs; p; p = p->next) {
		struct shunt_msg_status_policy r;

		shunt_proto_init(&r, SHUNT_MSG_STATUS_POLICY, sizeof(r), seq);
		memcpy(r.from, p->from, sizeof(r.from));
		memcpy(r.to, p->to, sizeof(r.to));
		memcpy(r.rule, p->rule, sizeof(r.rule));
		if (!p->rule[0])
			snprintf(r.dflt, sizeof(r.dflt), "%s", shunt_action_name(d->policy->def));
		r.refused = p->refused;
		r.count = p->count;
		shuntd_session_reply(to, &r, NULL, 0);
	}
}

void shuntd_status(struct shuntd *d, struct session *s, const struct shunt_msg_status *m)
{
	struct shunt_msg_status_end end;

	/* Connections processes made or took without asking are shown too. */
	shuntd_journal_read_all(d);
	send_sessions(d, s, m->h.seq);
	send_listeners(d, s, m->h.seq);
	send_circuits(d, s, m->h.seq);
	send_policy(d, s, m->h.seq);
	shunt_proto_init(&end, SHUNT_MSG_STATUS_END, sizeof(end), m->h.seq);
	end.circuits_total = d->circuits_total;
	end.sessions_total = d->sessions_total;
	for (unsigned i = 0; i < SHUNT_FALLBACK_REASONS; i++)
		end.fallbacks[i] = d->fallbacks[i];
	shuntd_session_reply(s, &end, NULL, 0);
}
