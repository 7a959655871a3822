// SPDX-License-Identifier: MIT
/*
 * Connection setup: CONNECT matches a client socket with a registered
 * listener and queues a new circuit on it (or says "use the kernel"), ACCEPT
 * hands the oldest queued circuit to a process that proves it holds the
 * listener, CLOSE lets go of one end.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/bind_port.h"
#include "common/log.h"
#include "common/proto.h"
#include "daemon/shuntd.h"

/*
 * The source address @src the kernel chose (shuntd_listener_match: the
 * destination itself, loopback, or the connecting namespace's route's
 * preferred source), as a @family socket reports it: v4-mapped on IPv6.
 */
static struct shunt_wire_addr source_for(const struct shunt_wire_addr *src_in, int family)
{
	struct shunt_wire_addr src = *src_in;

	if (family == AF_INET6)
		shunt_addr_map_v6(&src);
	src.port = 0;
	src.flowinfo = 0;
	return src;
}

/* Bind an unbound client socket as connect() would: source address, ephemeral port. */
static int bind_client(int fd, const struct sock_facts *f, const struct shunt_wire_addr *from,
		       struct shunt_wire_addr *local)
{
	struct shunt_wire_addr src = source_for(from, f->domain);
	struct sockaddr_storage ss;
	socklen_t len = shunt_addr_from_wire(&src, &ss);

	return shunt_bind_as_connect(fd, (struct sockaddr *)&ss, len, local);
}

/*
 * What the kernel's route lookup for this socket's connect would weigh
 * besides the destination: its bound address, device and mark.
 */
static void route_hints(int fd, const struct sock_facts *f, struct shuntd_route_hints *h)
{
	socklen_t len = sizeof(h->oif);

	memset(h, 0, sizeof(*h));
	h->src = f->local;
	shunt_addr_unmap(&h->src);
	h->has_src = !shunt_addr_is_any(&h->src);
	if (getsockopt(fd, SOL_SOCKET, SO_BINDTOIFINDEX, &h->oif, &len) < 0)
		h->oif = 0;
	len = sizeof(h->mark);
	if (getsockopt(fd, SOL_SOCKET, SO_MARK, &h->mark, &len) < 0)
		h->mark = 0;
}

void shuntd_connect(struct shuntd *d, struct session *s, const struct shunt_msg_connect *m, int fd)
{
	struct shunt_wire_addr src;
	struct shuntd_route_hints hints;
	struct shunt_msg_connect_kernel why;
	struct sock_facts f;
	struct listener *l = NULL;
	struct netns *ns = NULL;
	struct channel *ch;
	struct circuit *c;
	struct hold *h;
	bool made;
	/*
	 * A request the library gave up on is answered and nothing more: the
	 * kernel is connecting the socket. Only what needs no change to it
	 * is worth sending back: a channel for the next connect.
	 */
	bool abandoned = (m->flags & SHUNT_CONNECT_DEADLINE) && !shuntd_journal_claim(s, m->h.seq);
	int r = shuntd_socket_facts(fd, &f);

	if (r < 0) {
		shunt_warn("session %llu (pid %d, %s): connecting socket refused: %s",
			   (unsigned long long)s->id, (int)s->pid, shuntd_session_comm(s), shuntd_socket_refusal(r));
		shuntd_tenant_fallback(d, s, SHUNT_FALLBACK_SOCKET);
	}
	if (r == 0 && f.listening)
		r = -EINVAL;
	if (r == 0)
		r = shunt_addr_check(&m->dst);
	if (r == 0 && (m->dst.family != f.domain && f.domain != AF_INET6))
		r = -EAFNOSUPPORT;
	if (r == 0) {
		/* The socket's namespace, which need not be its process's. */
		ns = shuntd_netns_of_socket(d, fd, f.netns);
		route_hints(fd, &f, &hints);
		l = shuntd_listener_match(d, ns, f.netns, &m->dst, &hints, &src);
		shuntd_netns_put(d, ns);
	}
	/* Bound only once a listener matched: remote connections keep the kernel's choice. */
	if (l && !abandoned && !f.local.port && bind_client(fd, &f, &src, &f.local) < 0)
		l = NULL;
	/* Bound to a wildcard address, a socket still reports a real source once connected. */
	if (l && shunt_addr_is_any(&f.local)) {
		uint16_t port = f.local.port;

		f.local = source_for(&src, f.domain);
		f.local.port = port;
	}
	if (abandoned && (r < 0 || !l)) {
		close(fd);
		shuntd_session_reply_status(s, SHUNT_MSG_CONNECT, m->h.seq, SHUNT_ABANDONED);
		return;
	}
	if (r < 0 || !l) {
		close(fd);
		if (r < 0) {
			shuntd_session_reply_status(s, SHUNT_MSG_CONNECT, m->h.seq, r);
			return;
		}
		shuntd_tenant_fallback(d, s, SHUNT_FALLBACK_NO_LISTENER);
		shuntd_session_reply_status(s, SHUNT_MSG_CONNECT, m->h.seq, SHUNT_USE_KERNEL);
		return;
	}
	/* Who may talk to whom, and within what limits (tenant.c). */
	r = shuntd_tenant_admit(d, s, l, &m->dst, &why);
	if (abandoned && r != SHUNT_OK) {
		close(fd);
		shuntd_session_reply_status(s, SHUNT_MSG_CONNECT, m->h.seq, SHUNT_ABANDONED);
		return;
	}
	if (r == SHUNT_KERNEL_POLICY) {
		/* The reply says who and what decided, for the program's log. */
		struct shunt_msg_connect_kernel reply;

		close(fd);
		shunt_proto_init(&reply, SHUNT_MSG_CONNECT | SHUNT_MSG_REPLY, sizeof(reply),
				 m->h.seq);
		reply.h.status = r;
		memcpy(reply.from, why.from, sizeof(reply.from));
		memcpy(reply.to, why.to, sizeof(reply.to));
		memcpy(reply.rule, why.rule, sizeof(reply.rule));
		memcpy(reply.dflt, why.dflt, sizeof(reply.dflt));
		shuntd_session_reply(s, &reply, NULL, 0);
		return;
	}
	if (r != SHUNT_OK) {
		close(fd);
		shuntd_session_reply_status(s, SHUNT_MSG_CONNECT, m->h.seq, r);
		return;
	}
	/*
	 * From now on this process connects to @l by itself, through a
	 * channel (chan.c): where the decision cannot change while it lasts,
	 * a loopback destination in the listener's own namespace.
	 */
	if (!(m->flags & SHUNT_CONNECT_NO_CHANNEL) && f.netns == l->netns &&
	    (shunt_addr_is_loopback(&m->dst) || shunt_addr_is_any(&m->dst)) &&
	    (ch = shuntd_chan_for(d, s, l, m->flags & SHUNT_CONNECT_CHANNEL_FULL, &made))) {
		struct shunt_wire_addr bind_to = source_for(&src, f.domain);
		struct link *k;

		close(fd);
		/* Links now, as for a circuit of ours: waking epoll waiters must not need us later. */
		shuntd_link_prepare(d, s, l, made, &k);
		/* The connection it makes now is journaled: read at the next tick, no kick. */
		shuntd_journal_expect(d, s);
		shuntd_chan_reply(s, ch, SHUNT_MSG_CONNECT, m->h.seq, &bind_to, 0, k);
		return;
	}
	if (abandoned) {
		close(fd);
		shuntd_session_reply_status(s, SHUNT_MSG_CONNECT, m->h.seq, SHUNT_ABANDONED);
		return;
	}
	c = shuntd_circuit_create(d, d->cfg.ring_size);
	h = c ? shuntd_hold_end(c, SHUNT_END_CONNECTOR, s) : NULL;
	if (!h) {
		/* Out of resources: this connection simply goes through the kernel. */
		if (c)
			shuntd_circuit_destroy(d, c);
		close(fd);
		shuntd_tenant_fallback(d, s, SHUNT_FALLBACK_RESOURCES);
		shuntd_session_reply_status(s, SHUNT_MSG_CONNECT, m->h.seq, SHUNT_KERNEL_RESOURCES);
		return;
	}
	shuntd_tenant_charge(c, SHUNT_END_CONNECTOR, s->tenant);
	atomic_store(&c->hdr->end[SHUNT_END_CONNECTOR].holders, 1);
	shunt_addr_ends(&f.local, &m->dst, &l->addr, c->local, c->peer);
	/*
	 * Both ends in shuntd's own namespace only: companions are made there
	 * (a connection between two namespaces has none; docs/containers.md).
	 */
	c->companion = f.netns == d->netns_self && l->netns == d->netns_self &&
		       shuntd_companion_seqs(c) == 0 && shuntd_companion_connector(c, fd) == 0;
	c->listener = l;
	if (l->queued + shuntd_chan_queued(l) < l->max_queued) {
		atomic_store(&c->hdr->setup, SHUNT_SETUP_ESTABLISHED);
		shuntd_listener_enqueue(d, l, c);
	} else {
		/* Like a SYN dropped on a full accept queue: it waits for room. */
		c->queue = CIRCUIT_SYN;
		shunt_list_add_tail(&l->synq, &c->queue_node);
	}
	close(fd);
	shuntd_link_prepare(d, s, l, false, NULL);
	if (shuntd_circuit_reply(d, s, c, SHUNT_END_CONNECTOR, SHUNT_MSG_CONNECT, m->h.seq, -1) < 0)
		shuntd_hold_release(d, h, true);
}

void shuntd_accept(struct shuntd *d, struct session *s, const struct shunt_msg_accept *m, int fd)
{
	struct listener *l = shunt_map_get(&d->listeners, m->listener);
	struct sock_facts f;
	struct circuit *c;
	struct hold *h;
	/* Which socket it is, no more: only the listener we know is accepted on. */
	int r = shuntd_socket_identity(fd, &f), half;

	close(fd);
	/* Given up on before we took it: nothing is handed out, nothing is lost. */
	if ((m->flags & SHUNT_ACCEPT_DEADLINE) && !shuntd_journal_claim(s, m->h.seq)) {
		shuntd_session_reply_status(s, SHUNT_MSG_ACCEPT, m->h.seq, SHUNT_ABANDONED);
		return;
	}
	/* Whoever holds the listening socket may accept on it, and no one else. */
	if (r == 0 && (!l || !f.listening || f.inode != l->inode))
		r = -ENOENT;
	if (r == 0 && shunt_list_empty(&l->acceptq)) {
		/* Connections of its channels: one it does not have yet may hold some. */
		bool last;
		struct channel *ch = shuntd_chan_to_give(d, s, l, &last);

		if (ch) {
			/* As for its client: what it takes from the channel is journaled. */
			shuntd_journal_expect(d, s);
			shuntd_chan_reply(s, ch, SHUNT_MSG_ACCEPT, m->h.seq, NULL,
					  last ? SHUNT_CHAN_LAST : 0,
					  shuntd_link_undelivered(s, ch->client));
			return;
		}
		/* Nothing for it anywhere: what rang is to spare. */
		shuntd_listener_settle(l);
		r = -EAGAIN;
	}
	if (r < 0) {
		shuntd_session_reply_status(s, SHUNT_MSG_ACCEPT, m->h.seq, r);
		return;
	}
	c = shunt_list_first(&l->acceptq, struct circuit, queue_node);
	shuntd_circuit_unqueue(c);
	shuntd_efd_take(l->doorbell);
	shuntd_listener_admit(d, l);
	h = shuntd_hold_end(c, SHUNT_END_ACCEPTOR, s);
	if (!h) {
		/* Accepted and lost at once: what the kernel does to a connection it cannot keep. */
		atomic_fetch_or(&c->hdr->end[SHUNT_END_ACCEPTOR].state,
				SHUNT_END_CLOSED | SHUNT_END_RESET);
		shuntd_circuit_end_done(d, c, SHUNT_END_ACCEPTOR, false);
		shuntd_session_reply_status(s, SHUNT_MSG_ACCEPT, m->h.seq, -ECONNABORTED);
		return;
	}
	atomic_store(&c->hdr->end[SHUNT_END_ACCEPTOR].holders, 1);
	shuntd_tenant_charge(c, SHUNT_END_ACCEPTOR, s->tenant);
	/* Its kernel socket, ESTABLISHED on the listener's port as accept()'s would be. */
	half = c->companion ? shuntd_companion_acceptor(c, f.domain) : -1;
	r = shuntd_circuit_reply(d, s, c, SHUNT_END_ACCEPTOR, SHUNT_MSG_ACCEPT, m->h.seq, half);
	if (half >= 0)
		close(half);
	if (r < 0)
		shuntd_hold_release(d, h, true);
}

void shuntd_close(struct shuntd *d, struct session *s, const struct shunt_msg_close *m)
{
	struct circuit *c = shunt_map_get(&d->circuits, m->circuit);
	bool shared = m->flags & SHUNT_CLOSE_SHARED;
	struct hold *h = c && m->end <= 1 ? shuntd_hold_find_end(s, c, m->end) : NULL;
	struct shunt_list *pos;
	bool last;

	if (!h) {
		if (shared)
			shuntd_session_reply_status(s, SHUNT_MSG_CLOSE, m->h.seq, -ENOENT);
		return;
	}
	/* A client that gives up while its SYN waits: the server never sees it. */
	if (m->end == SHUNT_END_CONNECTOR && c->queue == CIRCUIT_SYN) {
		shuntd_circuit_unqueue(c);
		shuntd_circuit_end_done(d, c, SHUNT_END_ACCEPTOR, false);
	}
	if (m->end == SHUNT_END_CONNECTOR && c->queue == CIRCUIT_DEFERRED)
		shuntd_listener_deferred_closed(d, c);
	last = c->end[m->end].holds.next == &h->node && c->end[m->end].holds.prev == &h->node;
	/*
	 * A channel's circuit: a shared close only asks whether it is the
	 * last; the holder lets go when it says so in its journal, once it
	 * cannot touch the slot any more (the slot may then be used again).
	 */
	if (c->chan && shared) {
		/*
		 * The other holders may have let go in their journals: read
		 * them first (ids, as reading releases holds; our own hold
		 * keeps the end, and so the circuit, alive meanwhile).
		 */
		uint64_t others[16];
		unsigned n = 0;

		shunt_list_for_each(pos, &c->end[m->end].holds) {
			struct session *o = shunt_container_of(pos, struct hold, node)->session;

			if (o != s && n < 16)
				others[n++] = o->id;
		}
		for (unsigned i = 0; i < n; i++) {
			struct session *o = shunt_map_get(&d->sessions, others[i]);

			if (o)
				shuntd_journal_read(d, o);
		}
		h = shuntd_hold_find_end(s, c, m->end);
		if (!h) {
			shuntd_session_reply_status(s, SHUNT_MSG_CLOSE, m->h.seq, -ENOENT);
			return;
		}
		last = !h->closing;
		h->closing = true;
		shunt_list_for_each(pos, &c->end[m->end].holds)
			if (!shunt_container_of(pos, struct hold, node)->closing)
				last = false;
		shuntd_session_reply_status(s, SHUNT_MSG_CLOSE, m->h.seq, last ? SHUNT_LAST : SHUNT_OK);
		return;
	}
	shuntd_hold_release(d, h, false);
	/* Only the last holder's close ends the connection: it publishes the FIN. */
	if (shared)
		shuntd_session_reply_status(s, SHUNT_MSG_CLOSE, m->h.seq, last ? SHUNT_LAST : SHUNT_OK);
}

void shuntd_withdraw(struct shuntd *d, struct session *s, const struct shunt_msg_withdraw *m,
		     int fd)
{
	struct circuit *c = shunt_map_get(&d->circuits, m->circuit);
	struct hold *h = c && m->end <= 1 ? shuntd_hold_find_end(s, c, m->end) : NULL;
	struct listener *l;

	if (!h) {
		close(fd);
		return;
	}
	/* The client's socket back as the kernel's connect needs it, accepted or not. */
	if (m->end == SHUNT_END_CONNECTOR && c->companion &&
	    shuntd_companion_undo_connector(c, fd) < 0)
		shunt_info("session %llu: circuit %llu: the client's socket could not be put back",
			   (unsigned long long)s->id, (unsigned long long)c->id);
	close(fd);
	l = c->listener;
	if (m->end == SHUNT_END_CONNECTOR && c->queue != CIRCUIT_UNQUEUED) {
		/* Nobody accepted it yet: as if it had never been made. */
		if (c->queue == CIRCUIT_ACCEPTQ) {
			shuntd_circuit_unqueue(c);
			shuntd_efd_take(l->doorbell);
			shuntd_listener_admit(d, l);
		} else {
			shuntd_circuit_unqueue(c);
		}
		shuntd_circuit_end_done(d, c, SHUNT_END_ACCEPTOR, false);
		shuntd_hold_release(d, h, false);
	} else {
		/* Taken already, or an acceptor's end: its peer sees it go, as after a crash. */
		shuntd_hold_release(d, h, true);
	}
}
