// SPDX-License-Identifier: MIT
/*
 * Channels (include/shunt/chan.h, docs/connect.md): made the first time a
 * client may reach a listener over shared memory, handed to the client
 * and, on demand, to each process holding the listener, each time with the
 * channel's bell; the circuits in their slots become shuntd's own circuits
 * when the journals say so, and their slots are given back, emptied, when
 * both ends are done.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/sys.h"
#include "daemon/shuntd.h"

enum {
	ADOPT_MS = 100,		/* how long a channel's connection lasts before its companions */
};

static struct shunt_chan_entry *queue(struct channel *ch)
{
	return (struct shunt_chan_entry *)((char *)ch->hdr + shunt_chan_queue_offset());
}

/* Queued and not taken, from indices the client and the acceptors write (0 if nonsense). */
static uint32_t occupancy(struct channel *ch)
{
	uint64_t tail = atomic_load_explicit(&ch->hdr->tail, memory_order_acquire);
	uint64_t head = atomic_load_explicit(&ch->hdr->head, memory_order_acquire);

	return tail - head <= ch->slots ? (uint32_t)(tail - head) : 0;
}

uint32_t shuntd_chan_queued(struct listener *l)
{
	struct shunt_list *pos;
	uint32_t n = 0;

	shunt_list_for_each(pos, &l->channels)
		n += occupancy(shunt_container_of(pos, struct channel, listener_node));
	return n;
}

void shuntd_chan_settle(struct listener *l, uint32_t max)
{
	struct shunt_list *pos;

	shunt_list_for_each(pos, &l->channels) {
		struct channel *ch = shunt_container_of(pos, struct channel, listener_node);
		uint32_t taken = shuntd_efd_take_some(ch->bell, max);
		/*
		 * Its client counts an entry after queueing it: the count of
		 * one still queued was there before the entry was, so the
		 * queue, read after the counts, shows it.
		 */
		shuntd_efd_give_back(ch->bell, taken, occupancy(ch));
	}
}

/*
 * @ch's bell leaves its listener's bells: what its client rings from now on
 * wakes nobody (an acceptor still takes what is queued when it looks).
 */
static void unring(struct channel *ch)
{
	if (!ch->listener)
		return;
	epoll_ctl(ch->listener->bells, EPOLL_CTL_DEL, ch->bell, NULL);
}

/* Whether tenant @t has limits, which only shuntd can count, as connections are made. */
static bool limited(struct shuntd *d, const struct tenant *t)
{
	const struct shunt_tenant_def *def = t ? shunt_policy_tenant_def(d->policy, t->name) : NULL;

	return def && (def->max_connections || def->max_memory);
}

/* Whether a connect from @s to @l may go through a channel (docs/connect.md, "When"). */
static bool eligible(struct shuntd *d, struct session *s, struct listener *l)
{
	/* Accept queues of their own (shuntd's deferq and group spreading): ours. */
	if (l->defer_ms || l->reuseport || !d->cfg.chan_slots)
		return false;
	return !limited(d, s->tenant) && !limited(d, l->tenant);
}

static void chan_free(struct shuntd *d, struct channel *ch)
{
	shunt_map_del(&d->channels, ch->id);
	shuntd_chan_pages_forget(ch);
	munmap(ch->hdr, ch->size);
	close(ch->memfd);
	close(ch->bell);
	free(ch->circ);
	free(ch->gone_queued);
	free(ch->warm);
	free(ch);
}

/*
 * Seal every free slot of closed channel @ch, so that no client can take
 * one any more (its claim fails and it asks shuntd, as when every slot is
 * taken). Whether none is left in use: a client that saw the channel open
 * a moment ago may hold one it has not journaled yet (or one that died
 * before it could), which keeps the channel until that connection is done.
 */
static bool seal(struct channel *ch)
{
	_Atomic uint32_t *st = shuntd_chan_states(ch);
	bool idle = true;

	for (uint32_t i = 0; i < ch->slots; i++) {
		uint32_t w = atomic_load(&st[i]);

		/* Pairs with the client's CAS in claim_slot: one of the two takes the slot. */
		while (shunt_slot_state(w) == SHUNT_SLOT_FREE &&
		       !atomic_compare_exchange_weak(&st[i], &w,
						     shunt_slot_word(shunt_slot_gen(w),
								     SHUNT_SLOT_SEALED)))
			;
		idle = idle && shunt_slot_state(w) != SHUNT_SLOT_USED;
	}
	return idle;
}

/*
 * Nobody can use it any more and nothing lives in it: gone. That is when
 * it is closed (its listener or its client went, or a policy reload), no
 * circuit lives in it, nothing waits in its queue for an acceptor, and no
 * client holds a slot of it. Its client and the listener's holders may
 * keep their mappings; what they write there no longer reaches anyone.
 */
static void chan_maybe_free(struct shuntd *d, struct channel *ch)
{
	if (ch->live || !ch->closed || ch->busy)
		return;
	if ((ch->listener && occupancy(ch)) || !seal(ch))
		return;
	if (ch->client)
		shunt_list_del(&ch->client_node);
	if (ch->listener) {
		unring(ch);
		shunt_list_del(&ch->listener_node);
	}
	chan_free(d, ch);
}

static void chan_close(struct channel *ch)
{
	ch->closed = true;
	atomic_store_explicit(&ch->hdr->state, SHUNT_CHAN_CLOSED, memory_order_release);
}

static struct channel *chan_new(struct shuntd *d, struct session *s, struct listener *l)
{
	struct shunt_list *pos;
	struct channel *ch = calloc(1, sizeof(*ch));
	uint32_t slots = d->cfg.chan_slots, ring = d->cfg.ring_size;
	struct epoll_event ev = { .events = EPOLLIN };

	if (!ch)
		return NULL;
	ch->bell = -1;
	ch->slots = slots;
	ch->ring_size = ring;
	ch->size = shunt_chan_size(slots, ring);
	ch->circ = calloc(slots, sizeof(*ch->circ));
	ch->warm = calloc(slots, sizeof(*ch->warm));	/* NULL: slots are emptied at once */
	ch->memfd = ch->circ ? shuntd_memfd_sealed("shunt-channel", ch->size) : -ENOMEM;
	if (ch->memfd < 0)
		goto fail;
	/* All of it (sparse): downgrades move the rings' bytes, freed slots are emptied. */
	ch->hdr = mmap(NULL, ch->size, PROT_READ | PROT_WRITE, MAP_SHARED, ch->memfd, 0);
	if (ch->hdr == MAP_FAILED) {
		ch->hdr = NULL;
		goto fail;
	}
	ch->id = shuntd_new_id(d);
	ch->id_base = shunt_chan_id_base(ch->id);
	ch->hdr->magic = SHUNT_CHAN_MAGIC;
	ch->hdr->version = SHUNT_CHAN_VERSION;
	ch->hdr->slots = slots;
	ch->hdr->ring_size = ring;
	ch->hdr->channel = ch->id;
	ch->hdr->id_base = ch->id_base;
	ch->hdr->listener = l->id;
	ch->hdr->client = s->id;
	atomic_store(&ch->hdr->max_queued, l->max_queued);
	atomic_store(&ch->hdr->state, SHUNT_CHAN_OPEN);
	ch->bell = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
	if (ch->bell < 0 || epoll_ctl(l->bells, EPOLL_CTL_ADD, ch->bell, &ev) < 0)
		goto fail;
	if (shunt_map_put(&d->channels, ch->id, ch) < 0)
		goto fail;
	ch->client = s;
	ch->listener = l;
	shunt_list_add_tail(&s->channels, &ch->client_node);
	shunt_list_add_tail(&l->channels, &ch->listener_node);
	/* The listener's acceptors learn of it even if its client never counts. */
	shuntd_directory_channel(d, l);
	/*
	 * And in each holder's process one that sleeps on the bells of the
	 * channels it has (an EPOLLEXCLUSIVE registration, which cannot hold
	 * the listener's bells) wakes to ask for it: counted on each listener
	 * hold's announce until that session is handed the channel.
	 */
	shunt_list_for_each(pos, &l->holds)
		shuntd_efd_ring(shunt_container_of(pos, struct hold, node)->announce);
	shunt_debug("channel %llu: session %llu (pid %d) to listener %llu, %u slots",
		    (unsigned long long)ch->id, (unsigned long long)s->id, (int)s->pid,
		    (unsigned long long)l->id, slots);
	return ch;
fail:
	shunt_warn("cannot make a channel of %zu bytes: %s", ch->size,
		   strerror(ch->memfd < 0 ? -ch->memfd : errno));
	if (ch->hdr)
		munmap(ch->hdr, ch->size);
	if (ch->memfd >= 0)
		close(ch->memfd);
	/* Closed, it leaves the bells too (nobody else has it yet). */
	if (ch->bell >= 0)
		close(ch->bell);
	free(ch->circ);
	free(ch);
	return NULL;
}

/* Whether a slot of @ch is free now (from words its users write: a hint). */
static bool has_free_slot(struct channel *ch)
{
	for (uint32_t i = 0; i < ch->slots; i++)
		if (shunt_slot_state(atomic_load_explicit(&shuntd_chan_states(ch)[i],
							  memory_order_relaxed)) == SHUNT_SLOT_FREE)
			return true;
	return false;
}

struct channel *shuntd_chan_for(struct shuntd *d, struct session *s, struct listener *l,
				bool full, bool *made)
{
	struct shunt_list *pos;
	unsigned open = 0;

	*made = false;
	if (!s->journal || !eligible(d, s, l))
		return NULL;
	shunt_list_for_each(pos, &s->channels) {
		struct channel *ch = shunt_container_of(pos, struct channel, client_node);

		if (ch->listener != l || atomic_load(&ch->hdr->state) != SHUNT_CHAN_OPEN)
			continue;
		open++;
		if (!full || has_free_slot(ch))
			return ch;
	}
	/* As many connections as the kernel would let it have, within reason. */
	if (open >= SHUNTD_CHANS_PER_CLIENT)
		return NULL;
	*made = true;
	return chan_new(d, s, l);
}

struct channel *shuntd_chan_to_give(struct shuntd *d, struct session *s, struct listener *l,
				    bool *last)
{
	struct hold *h = shuntd_hold_find_listener(s, l);
	struct channel *give = NULL;
	struct shunt_list *pos;

	(void)d;
	*last = true;
	shunt_list_for_each(pos, &l->channels) {
		struct channel *ch = shunt_container_of(pos, struct channel, listener_node);

		if (shunt_map_get(&s->chans_given, ch->id))
			continue;
		if (give) {
			*last = false;
			break;
		}
		if (shunt_map_put(&s->chans_given, ch->id, ch) < 0)
			return NULL;
		give = ch;
	}
	/* What its announce counted for it: one channel, or all of them (its own to fill). */
	if (h && give)
		shuntd_efd_take(h->announce);
	else if (h)
		shuntd_efd_take_some(h->announce, SHUNTD_ANNOUNCE_SETTLE);
	return give;
}

int shuntd_chan_reply(struct session *s, struct channel *ch, uint16_t type, uint32_t seq,
		      const struct shunt_wire_addr *src, uint32_t flags, struct link *k)
{
	struct shunt_msg_chan r;
	int fds[SHUNT_MSG_MAX_FDS] = { ch->memfd, ch->bell }, e;
	unsigned n = 2;

	shunt_proto_init(&r, type | SHUNT_MSG_REPLY, sizeof(r), seq);
	r.h.status = SHUNT_USE_CHANNEL;
	r.channel = ch->id;
	r.slots = ch->slots;
	r.ring_size = ch->ring_size;
	r.flags = flags;
	if (src)
		r.src = *src;
	if (k)
		n += shuntd_link_attach(s, k, &r, fds + n);
	r.gone = shuntd_link_take_gone(s);
	e = shuntd_session_reply(s, &r, fds, n);
	if (k)
		shuntd_link_handed(s, k, e == 0);
	if (e == 0)
		shuntd_link_settle(s);
	else if (r.gone)
		s->ngone++;	/* still in its place: told some other time */
	return e;
}

/* The circuit living in slot @i of @ch, as a circuit of shuntd's, or NULL. */
static struct circuit *circuit_in_slot(struct shuntd *d, struct channel *ch, uint32_t i)
{
	struct circuit *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->id = ch->id_base + i;
	c->ring_size = ch->ring_size;
	c->memfd = -1;
	c->hdr = shuntd_chan_slot(ch, i);
	c->chan = ch;
	c->slot = i;
	c->jfd[0] = c->jfd[1] = -1;
	for (unsigned e = 0; e < 2; e++) {
		c->end[e].circuit = c;
		shunt_list_init(&c->end[e].holds);
	}
	shunt_list_init(&c->queue_node);
	if (shunt_map_put(&d->circuits, c->id, c) < 0) {
		free(c);
		return NULL;
	}
	ch->circ[i] = c;
	ch->live++;
	d->circuits_total++;
	return c;
}

/* Slot @slot of @ch in its generation @gen: in use, as the journal says it is. */
static bool slot_in_use(struct channel *ch, uint32_t slot, uint32_t gen)
{
	uint32_t w;

	if (slot >= ch->slots)
		return false;
	w = atomic_load(&shuntd_chan_states(ch)[slot]);
	return shunt_slot_state(w) == SHUNT_SLOT_USED && shunt_slot_gen(w) == gen;
}

/*
 * The acceptor's side of a circuit whose listener is gone before anyone
 * took it: the kernel resets such a connection.
 */
static void reset_unaccepted(struct shuntd *d, struct circuit *c)
{
	atomic_fetch_or(&c->hdr->end[SHUNT_END_ACCEPTOR].state,
			SHUNT_END_CLOSED | SHUNT_END_RESET);
	shuntd_circuit_end_done(d, c, SHUNT_END_ACCEPTOR, false);
}

void shuntd_chan_connected(struct shuntd *d, struct session *s,
			   const struct shunt_journal_entry *e)
{
	struct channel *ch = shunt_map_get(&d->channels, e->channel);
	struct circuit *c;
	bool accepted;

	/* Only the channel's own client queues in it. */
	if (!ch || ch->client != s || !slot_in_use(ch, e->slot, e->gen) ||
	    shunt_addr_check(&e->addr[0]) < 0 || shunt_addr_check(&e->addr[1]) < 0 ||
	    (ch->circ[e->slot] && (ch->circ[e->slot]->end[SHUNT_END_CONNECTOR].done ||
				   !shunt_list_empty(&ch->circ[e->slot]->end[SHUNT_END_CONNECTOR].holds)))) {
		shunt_info("session %llu (pid %d): journaled connection in channel %llu slot %u "
			   "ignored", (unsigned long long)s->id, (int)s->pid,
			   (unsigned long long)e->channel, e->slot);
		return;
	}
	/* Its acceptor may have journaled taking it first: the circuit is known then. */
	c = ch->circ[e->slot];
	accepted = c != NULL;
	if (!c)
		c = circuit_in_slot(d, ch, e->slot);
	if (!c || !shuntd_hold_end(c, SHUNT_END_CONNECTOR, s)) {
		/* No memory to keep track of it: as if its process had died. */
		if (c)
			shuntd_circuit_end_done(d, c, SHUNT_END_CONNECTOR, true);
		return;
	}
	atomic_store(&c->hdr->end[SHUNT_END_CONNECTOR].holders, 1);
	shuntd_tenant_charge(c, SHUNT_END_CONNECTOR, s->tenant);
	c->local[SHUNT_END_CONNECTOR] = e->addr[0];
	c->peer[SHUNT_END_CONNECTOR] = e->addr[1];
	c->jfd[SHUNT_END_CONNECTOR] = e->fd;
	c->jino[SHUNT_END_CONNECTOR] = e->inode;
	if (accepted)
		return;
	c->local[SHUNT_END_ACCEPTOR] = e->addr[1];
	c->peer[SHUNT_END_ACCEPTOR] = e->addr[0];
	/* Nobody will ever take it: its listener went before this entry was read. */
	if (!ch->listener || (ch->gone_queued && ch->gone_queued[e->slot] == e->gen + 1))
		reset_unaccepted(d, c);
}

void shuntd_chan_accepted(struct shuntd *d, struct session *s,
			  const struct shunt_journal_entry *e)
{
	struct channel *ch = shunt_map_get(&d->channels, e->channel);
	struct circuit *c;
	struct listener *l;

	if (!ch || !(l = ch->listener) || !shuntd_hold_find_listener(s, l) ||
	    !slot_in_use(ch, e->slot, e->gen)) {
		shunt_info("session %llu (pid %d): journaled accept in channel %llu slot %u "
			   "ignored", (unsigned long long)s->id, (int)s->pid,
			   (unsigned long long)e->channel, e->slot);
		return;
	}
	/*
	 * Its client's journal may not have been read yet: read it first.
	 * Unless it is being read (journal.c): then the client's entry comes
	 * later in it and takes the connector's end, as below.
	 */
	if (!ch->circ[e->slot] && ch->client)
		shuntd_journal_read(d, ch->client);
	c = ch->circ[e->slot];
	if (!c) {
		/*
		 * Its client queued it and has not journaled it yet (it does
		 * right after queuing; its entry takes the connector's end
		 * then), or is gone without doing so: then a connection that
		 * ends at once.
		 */
		c = circuit_in_slot(d, ch, e->slot);
		if (!c)
			return;
		if (!ch->client) {
			c->end[SHUNT_END_CONNECTOR].done = true;
			atomic_fetch_or(&c->hdr->end[SHUNT_END_CONNECTOR].state,
					SHUNT_END_CLOSED | SHUNT_END_RESET);
		}
	}
	if (!shunt_list_empty(&c->end[SHUNT_END_ACCEPTOR].holds) || c->end[SHUNT_END_ACCEPTOR].done)
		return;
	if (!shuntd_hold_end(c, SHUNT_END_ACCEPTOR, s)) {
		shuntd_circuit_end_done(d, c, SHUNT_END_ACCEPTOR, true);
		return;
	}
	atomic_store(&c->hdr->end[SHUNT_END_ACCEPTOR].holders, 1);
	shuntd_tenant_charge(c, SHUNT_END_ACCEPTOR, s->tenant);
	c->jfd[SHUNT_END_ACCEPTOR] = e->fd;
	c->jino[SHUNT_END_ACCEPTOR] = e->inode;
	if (shunt_addr_check(&e->addr[0]) == 0)
		c->local[SHUNT_END_ACCEPTOR] = e->addr[0];
	if (shunt_addr_check(&e->addr[1]) == 0)
		c->peer[SHUNT_END_ACCEPTOR] = e->addr[1];
	/*
	 * Its companions (ss lists it, the listener's port stays taken)
	 * once it has lasted ADOPT_MS: a connection per request ends before,
	 * and never costs shuntd the sixty system calls they take.
	 */
	c->adopt_at = shunt_sys_now_ms() + ADOPT_MS;
	shunt_list_add_tail(&d->adopt_pending, &c->adopt_node);
	/* Room in the accept queue: a connect waiting for it may come in. */
	shuntd_listener_admit(d, l);
}

int shuntd_chan_next_tick(struct shuntd *d)
{
	int64_t left;

	if (shunt_list_empty(&d->adopt_pending))
		return -1;
	left = shunt_list_first(&d->adopt_pending, struct circuit, adopt_node)->adopt_at - shunt_sys_now_ms();
	return left < 0 ? 0 : (int)left;
}

void shuntd_chan_tick(struct shuntd *d)
{
	int64_t now = shunt_sys_now_ms();

	while (!shunt_list_empty(&d->adopt_pending)) {
		struct circuit *c = shunt_list_first(&d->adopt_pending, struct circuit, adopt_node);

		if (c->adopt_at > now)
			break;
		shunt_list_del(&c->adopt_node);
		c->adopt_at = 0;
		/*
		 * The journals of its ends' processes say where their sockets
		 * are now, and whether they let go of them: a socket let go of
		 * may be kept for another connection (preload/spare.c).
		 */
		c = shuntd_journal_read_holders(d, c, NULL);
		if (c && !c->end[0].done && !c->end[1].done)
			shuntd_companion_adopt(c, -1);
	}
}

void shuntd_chan_slot_done(struct shuntd *d, struct circuit *c)
{
	struct channel *ch = c->chan;
	uint32_t i = c->slot;
	uint32_t w = atomic_load(&shuntd_chan_states(ch)[i]);

	ch->circ[i] = NULL;
	ch->live--;
	/* Its pages kept a while for the next connection, or given back now. */
	shuntd_chan_pages_freed(d, ch, i);
	/* S1: pairs with the client's acquire CAS when it takes the slot again. */
	atomic_store_explicit(&shuntd_chan_states(ch)[i],
			      shunt_slot_word(shunt_slot_gen(w), SHUNT_SLOT_FREE), memory_order_release);
	chan_maybe_free(d, ch);
}

void shuntd_chan_relisten(struct listener *l)
{
	struct shunt_list *pos;

	shunt_list_for_each(pos, &l->channels) {
		struct channel *ch = shunt_container_of(pos, struct channel, listener_node);

		atomic_store(&ch->hdr->max_queued, l->max_queued);
		/* TCP_DEFER_ACCEPT now: its accept queue is shuntd's alone from here on. */
		if (l->defer_ms || l->reuseport)
			chan_close(ch);
	}
}

/*
 * The accepted connections of @l's channels get their companions now: once
 * the listener is gone they alone hold its port, as the kernel's accepted
 * sockets do (a bind to it fails with EADDRINUSE).
 */
static void adopt_accepted(struct channel *ch)
{
	for (uint32_t i = 0; i < ch->slots; i++) {
		struct circuit *c = ch->circ[i];

		if (c && !c->companion && !c->end[SHUNT_END_ACCEPTOR].done &&
		    !shunt_list_empty(&c->end[SHUNT_END_ACCEPTOR].holds))
			shuntd_companion_adopt(c, -1);
	}
}

void shuntd_chan_listener_gone(struct shuntd *d, struct listener *l)
{
	struct shunt_list *pos, *tmp;

	/* What its holders journaled: the connections they took are known then. */
	shunt_list_for_each(pos, &l->holds)
		shuntd_journal_read(d, shunt_container_of(pos, struct hold, node)->session);

	/*
	 * Circuits ended below (and by the journals read) give their slots
	 * back: no channel of @l goes while we walk them.
	 */
	shunt_list_for_each(pos, &l->channels)
		shunt_container_of(pos, struct channel, listener_node)->busy = true;
	shunt_list_for_each_safe(pos, tmp, &l->channels) {
		struct channel *ch = shunt_container_of(pos, struct channel, listener_node);
		struct shunt_chan_entry *q = queue(ch);
		uint64_t head, tail;

		chan_close(ch);
		/* What the client journaled so far, so that its queued circuits are known. */
		if (ch->client)
			shuntd_journal_read(d, ch->client);
		adopt_accepted(ch);
		head = atomic_load(&ch->hdr->head);
		tail = atomic_load(&ch->hdr->tail);
		if (tail - head > ch->slots)
			head = tail;
		/* Queued, never taken: reset, as the kernel resets its accept queue. */
		for (; head != tail; head++) {
			struct shunt_chan_entry en = q[head % ch->slots];
			struct circuit *c;

			if (!slot_in_use(ch, en.slot, en.gen))
				continue;
			c = ch->circ[en.slot];
			if (c && shunt_list_empty(&c->end[SHUNT_END_ACCEPTOR].holds))
				reset_unaccepted(d, c);
			else if (!c && (ch->gone_queued ||
					(ch->gone_queued = calloc(ch->slots, sizeof(uint32_t)))))
				/* Not journaled yet: its entry will find it was never to be taken. */
				ch->gone_queued[en.slot] = en.gen + 1;
		}
		atomic_store(&ch->hdr->head, tail);
		unring(ch);
		shunt_list_del(&ch->listener_node);
		ch->listener = NULL;
		ch->busy = false;
		chan_maybe_free(d, ch);
	}
}

void shuntd_chan_client_gone(struct shuntd *d, struct session *s)
{
	struct shunt_list *pos, *tmp;
	struct channel *ch;

	shunt_list_for_each_safe(pos, tmp, &s->channels) {
		ch = shunt_container_of(pos, struct channel, client_node);
		/* Circuits ended below give their slots back: the channel stays until we are done. */
		ch->busy = true;
		chan_close(ch);
		shunt_list_del(&ch->client_node);
		ch->client = NULL;
		/* Taken by an acceptor before this client journaled them: it never will now. */
		for (uint32_t i = 0; i < ch->slots && ch->live; i++) {
			struct circuit *c = ch->circ[i];

			if (c && !c->end[SHUNT_END_CONNECTOR].done &&
			    shunt_list_empty(&c->end[SHUNT_END_CONNECTOR].holds))
				shuntd_circuit_end_done(d, c, SHUNT_END_CONNECTOR, true);
		}
		ch->busy = false;
		chan_maybe_free(d, ch);
	}
	/* Only ids: a channel given to it may be gone already. */
	shunt_map_free(&s->chans_given);
}

void shuntd_chan_close_all(struct shuntd *d)
{
	struct channel *ch;
	uint64_t key;
	size_t it = 0;

	while ((ch = shunt_map_next(&d->channels, &it, &key)))
		chan_close(ch);
}
