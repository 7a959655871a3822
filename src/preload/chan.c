// SPDX-License-Identifier: MIT
/*
 * Channels in this process: connecting through them as a client, taking
 * connections from them as an acceptor (docs/connect.md). Nothing read from
 * a channel is trusted: its other users can write all of it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <netinet/in.h>

#include "common/addr.h"
#include "common/bind_port.h"
#include "common/circuit.h"
#include "common/log.h"
#include "common/memfd.h"
#include "common/sys.h"
#include "preload/chan.h"
#include "preload/conn.h"
#include "preload/fdtable.h"
#include "preload/journal.h"
#include "preload/libc.h"
#include "preload/recycle.h"
#include "preload/sock.h"
#include "preload/spin.h"
#include "preload/util.h"
#include "preload/wait.h"
#include "shunt/chan.h"

enum {
	TAKE_TRIES = 16,	/* compare-and-swaps of a channel's head lost before take gives up */
	SKIP_MAX = 16,		/* channels that gave nothing good before an accept gives up */
	SETTLE_MAX = 64,	/* counts taken off a bell per settling, as shuntd takes */
};

struct shunt_chan {
	struct shunt_chan_hdr *hdr;	/* all of it, mapped */
	size_t size;
	uint32_t slots;
	uint32_t ring_size;
	uint64_t id;
	uint64_t id_base;
	uint64_t listener;
	_Atomic int refs;		/* the list's, and one per connection in a slot */
	/*
	 * Its bell (hidden): the client counts each connection it queued up,
	 * an acceptor counts each it took down. Every channel has its own, in
	 * its listener's bells (docs/connect.md, "The doorbell").
	 */
	int bell;
	/* A client's only. */
	struct shunt_wire_addr dst;	/* what connect() names to use it */
	struct shunt_wire_addr src;	/* the source address, when the socket is not bound */
	/* An acceptor's only, under list_lock: of a dead shuntd, nobody queues here any more. */
	bool orphan;
	struct shunt_chan *next;	/* under list_lock */
};

/* The channels kept: as a client by address, as an acceptor by listener. */
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_chan *clients;	/* under list_lock */
static struct shunt_chan *acceptors;	/* under list_lock */
/*
 * Acceptor channels whose clients left, to unmap when this process next
 * goes to sleep (shunt_chan_let_go): unmapping one costs the acceptor a
 * TLB shootdown and, as the last holder, the freeing of its pages, tens
 * of microseconds that would otherwise delay the new client's first
 * answer. At most DEPARTED_MAX wait: a process that never sleeps lets
 * go of them at the next install, as before.
 */
enum { DEPARTED_MAX = 16 };
static struct shunt_chan *departed;	/* under list_lock */
static unsigned ndeparted;		/* under list_lock */
static atomic_bool any_departed;	/* a hint for the sleeper: departed is not empty */
/*
 * Slot claims and the queues' tails. One for the process, not one per
 * mapping: two mappings of one channel (two threads that both asked shuntd
 * before either installed its answer, or two addresses of one listener)
 * must never write at one tail together, or one connection overwrites
 * another's entry and is never accepted.
 */
static pthread_mutex_t tx_lock = PTHREAD_MUTEX_INITIALIZER;

/*
 * Bells of acceptor channels dropped from the list while the listener's
 * EPOLLEXCLUSIVE registrations may still hold them (epoll.c): kept open
 * until those let go of them (shunt_chan_dropped_bells), so that a client
 * ringing a bell we no longer take counts off cannot keep them readable.
 * Under list_lock.
 */
struct dropped_bell {
	uint64_t listener;
	int bell;
};
static struct dropped_bell *dropped;
static size_t ndropped, dropped_cap;

/* @ch, an acceptor channel, leaves the list: its bell waits for epoll to let go. Under list_lock. */
static void drop_bell_locked(struct shunt_chan *ch)
{
	if (ch->bell < 0)
		return;
	if (ndropped == dropped_cap) {
		size_t cap = dropped_cap ? 2 * dropped_cap : 16;
		struct dropped_bell *more = realloc(dropped, cap * sizeof(*more));

		if (!more)
			return;		/* closed with the channel: a stale registration at worst */
		dropped = more;
		dropped_cap = cap;
	}
	dropped[ndropped++] = (struct dropped_bell){ ch->listener, ch->bell };
	ch->bell = -1;
}

static _Atomic uint32_t *slot_states(struct shunt_chan *ch)
{
	return (_Atomic uint32_t *)((char *)ch->hdr + shunt_chan_states_offset(ch->slots));
}

static struct shunt_circuit_hdr *slot_hdr(struct shunt_chan *ch, uint32_t i)
{
	return (struct shunt_circuit_hdr *)((char *)ch->hdr +
					    shunt_chan_slot_offset(ch->slots, ch->ring_size, i));
}

static struct shunt_chan_entry *queue(struct shunt_chan *ch)
{
	return (struct shunt_chan_entry *)((char *)ch->hdr + shunt_chan_queue_offset());
}

uint32_t shunt_chan_ring_size(const struct shunt_chan *ch)
{
	return ch->ring_size;
}

void shunt_chan_put(struct shunt_chan *ch)
{
	if (atomic_fetch_sub_explicit(&ch->refs, 1, memory_order_acq_rel) != 1)
		return;
	shunt_syscall(SYS_munmap, ch->hdr, ch->size);
	if (ch->bell >= 0)
		shunt_close_hidden(ch->bell);
	free(ch);
}

/*
 * Map the channel of @g and keep its bell (both taken over) after checking
 * that it is one, and what the reply says it is. NULL with -errno in *@err.
 */
static struct shunt_chan *chan_map(struct shunt_grant *g, int *err)
{
	const struct shunt_msg_chan *m = &g->chan;
	struct shunt_chan *ch = NULL;
	struct shunt_chan_hdr *hdr = NULL;
	size_t size = 0;
	void *p;
	int seals, r;

	*err = -EPROTO;
	if (m->slots < SHUNT_CHAN_SLOTS_MIN || m->slots > SHUNT_CHAN_SLOTS_MAX ||
	    !shunt_circuit_ring_size_ok(m->ring_size))
		goto out;
	size = shunt_chan_size(m->slots, m->ring_size);
	/* A raw call, so that the seccomp gate judges it. */
	seals = (int)shunt_syscall(SYS_fcntl, g->memfd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		goto out;
	r = shunt_memfd_map(g->memfd, size, PROT_READ | PROT_WRITE, NULL, &p);
	if (r < 0) {
		*err = r;
		goto out;
	}
	hdr = p;
	if (hdr->magic != SHUNT_CHAN_MAGIC || hdr->version != SHUNT_CHAN_VERSION ||
	    hdr->slots != m->slots || hdr->ring_size != m->ring_size || hdr->channel != m->channel ||
	    hdr->id_base != shunt_chan_id_base(m->channel))
		goto out;
	ch = calloc(1, sizeof(*ch));
	if (!ch) {
		*err = -ENOMEM;
		goto out;
	}
	ch->hdr = hdr;
	ch->size = size;
	ch->slots = m->slots;
	ch->ring_size = m->ring_size;
	ch->id = m->channel;
	ch->id_base = hdr->id_base;
	ch->listener = hdr->listener;
	ch->bell = g->bell >= 0 ? shunt_fd_hide(g->bell) : -1;
	g->bell = -1;
	atomic_init(&ch->refs, 1);
	*err = 0;
	if (ch->bell < 0) {
		/* Nowhere to keep it (or none came): nobody would hear of its connections. */
		free(ch);
		ch = NULL;
		*err = -EMFILE;
	}
out:
	if (!ch && hdr)
		shunt_syscall(SYS_munmap, hdr, size);
	shunt_close_reply(g->memfd);
	g->memfd = -1;
	if (g->bell >= 0)
		shunt_close_reply(g->bell);
	g->bell = -1;
	return ch;
}

static bool same_dst(const struct shunt_wire_addr *a, const struct shunt_wire_addr *b)
{
	return a->family == b->family && a->port == b->port && shunt_addr_same_ip(a, b);
}

int shunt_chan_install_client(struct shunt_grant *g, const struct shunt_wire_addr *dst)
{
	struct shunt_chan *ch, **p, *old = NULL;
	int err;

	ch = chan_map(g, &err);
	if (!ch) {
		shunt_grant_discard(g);
		return err;
	}
	ch->dst = *dst;
	ch->src = g->chan.src;
	ch->src.port = 0;
	pthread_mutex_lock(&list_lock);
	/* One channel per address: a new one replaces one shuntd closed. */
	for (p = &clients; *p; p = &(*p)->next)
		if (same_dst(&(*p)->dst, dst)) {
			old = *p;
			*p = old->next;
			break;
		}
	ch->next = clients;
	clients = ch;
	pthread_mutex_unlock(&list_lock);
	if (old)
		shunt_chan_put(old);
	return 0;
}

/* The channel kept for @dst, with a reference, or NULL. */
static struct shunt_chan *find_client(const struct shunt_wire_addr *dst)
{
	struct shunt_chan *ch;

	pthread_mutex_lock(&list_lock);
	for (ch = clients; ch; ch = ch->next)
		if (same_dst(&ch->dst, dst)) {
			atomic_fetch_add_explicit(&ch->refs, 1, memory_order_relaxed);
			break;
		}
	pthread_mutex_unlock(&list_lock);
	return ch;
}

/* shuntd closed @ch: no more connections through it (the next connect asks shuntd). */
static void drop_client(struct shunt_chan *ch)
{
	struct shunt_chan **p;
	bool found = false;

	pthread_mutex_lock(&list_lock);
	for (p = &clients; *p; p = &(*p)->next)
		if (*p == ch) {
			*p = ch->next;
			found = true;
			break;
		}
	pthread_mutex_unlock(&list_lock);
	if (found)
		shunt_chan_put(ch);
}

void shunt_chan_port_past(struct shunt_conn *c, struct shunt_port_past *past)
{
	*past = (struct shunt_port_past){
		.local = c->local,
		.over = shunt_conn_peer_closed(c),
		.dst_port = c->remote.port,
	};
	if (c->chan && c->in_slot && c->circuit - c->chan->id_base < c->chan->slots) {
		past->chan = c->chan->id;
		past->slot = (uint32_t)(c->circuit - c->chan->id_base);
		past->gen = shunt_slot_gen(atomic_load_explicit(&slot_states(c->chan)[past->slot],
							       memory_order_relaxed));
	}
}

bool shunt_chan_port_free(struct shunt_chan *ch, const struct shunt_port_past *past)
{
	uint32_t w;

	if (past->over || past->dst_port != ch->dst.port)
		return true;
	if (!past->chan || past->chan != ch->id || past->slot >= ch->slots)
		return false;
	/* S1: shuntd frees a slot once both ends are done with it. */
	w = atomic_load_explicit(&slot_states(ch)[past->slot], memory_order_acquire);
	return shunt_slot_gen(w) != past->gen || shunt_slot_state(w) == SHUNT_SLOT_FREE;
}

/*
 * The address of socket @s (as @fd), bound to the channel's source address
 * first if it is not bound yet, as connect() binds it. 0 or -errno.
 */
static int bind_sock(struct shunt_sock *s, int fd, struct shunt_chan *ch,
		     struct shunt_wire_addr *local)
{
	bool unbound = s && atomic_load_explicit(&s->unbound, memory_order_relaxed);
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	struct shunt_wire_addr src;
	int r;

again:
	if (unbound) {
		/* What the kernel would say of it: the wildcard address, port 0. */
		memset(local, 0, sizeof(*local));
		local->family = (uint16_t)s->domain;
	} else if (s && atomic_load_explicit(&s->recycled, memory_order_acquire)) {
		/* Where the half's last connection left it, which nothing since could change. */
		*local = s->port_past.local;
	} else if (SHUNT_LIBC(getsockname)(fd, (struct sockaddr *)&ss, &len) < 0 ||
		   shunt_addr_to_wire((struct sockaddr *)&ss, len, local) < 0) {
		return -errno ? -errno : -EINVAL;
	}
	/* An IPv6-only socket cannot reach an IPv4 address: the kernel says how not. */
	if (local->family == AF_INET6 && shunt_addr_is_v4mapped(&ch->dst)) {
		int v6only = 0;

		len = sizeof(v6only);
		if (SHUNT_LIBC(getsockopt)(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &len) < 0 || v6only)
			return -ENETUNREACH;
	}
	/*
	 * A recycled half (recycle.h) is bound to its last connection's
	 * address and port: this connection takes them if it leaves from
	 * that address, as connect() would have bound it; else the socket
	 * gets the fresh half it stands for, and is bound as one.
	 */
	if (s && atomic_load_explicit(&s->recycled, memory_order_acquire)) {
		src = ch->src;
		if (local->family == AF_INET6)
			shunt_addr_map_v6(&src);
		if (local->port && shunt_addr_same_ip(&src, local) &&
		    src.scope_id == local->scope_id && shunt_chan_port_free(ch, &s->port_past))
			return 0;
		r = shunt_recycle_fresh(s, fd);
		if (r < 0)
			return r;
		unbound = true;
		goto again;
	}
	if (local->port)
		return 0;
	/* Bound to an address without a port: that address is the source. */
	src = shunt_addr_is_any(local) ? ch->src : *local;
	src.port = 0;
	if (local->family == AF_INET6)
		shunt_addr_map_v6(&src);
	len = shunt_addr_from_wire(&src, &ss);
	r = shunt_bind_as_connect(fd, (struct sockaddr *)&ss, len, local);
	/* Bound after all, where the library could not see: look. */
	if (r == -EINVAL && unbound) {
		unbound = false;
		len = sizeof(ss);
		goto again;
	}
	if (r == 0 && s)
		atomic_store_explicit(&s->unbound, false, memory_order_relaxed);
	return r;
}

/* bind_sock for the socket connect() holds as @fd (its table entry, which connect() checked). */
static int bind_as_connect(int fd, struct shunt_chan *ch, struct shunt_wire_addr *local)
{
	struct shunt_sock *s = shunt_fdt_get(fd);
	int r = bind_sock(s, fd, ch, local);

	if (s)
		shunt_sock_put(s);
	return r;
}

/*
 * The lowest free slot, taken (its generation moved on), or -1. Under
 * tx_lock. Lowest first, not round the channel: a connection per request
 * then keeps reusing the few slots shuntd has just given back, whose pages
 * are warm in every process that maps them, rather than faulting in three
 * pages of a cold slot on each side (docs/connect.md, "A slot's pages").
 */
static int claim_slot(struct shunt_chan *ch, uint32_t *gen)
{
	_Atomic uint32_t *st = slot_states(ch);

	for (uint32_t i = 0; i < ch->slots; i++) {
		uint32_t w = atomic_load_explicit(&st[i], memory_order_relaxed);

		if (shunt_slot_state(w) != SHUNT_SLOT_FREE)
			continue;
		*gen = (shunt_slot_gen(w) + 1) & 0xffffff;
		/* S1: pairs with shuntd's release when it gave the slot back, emptied. */
		if (atomic_compare_exchange_strong_explicit(&st[i], &w,
							     shunt_slot_word(*gen, SHUNT_SLOT_USED),
							     memory_order_acquire, memory_order_relaxed))
			return (int)i;
	}
	return -1;
}

/* A circuit's control page as a new connection starts it: established, both ends fresh. */
static void slot_start(struct shunt_chan *ch, struct shunt_circuit_hdr *hdr)
{
	memset(hdr->end, 0, sizeof(hdr->end));
	memset(hdr->ring, 0, sizeof(hdr->ring));
	hdr->magic = SHUNT_CIRCUIT_MAGIC;
	hdr->version = SHUNT_CIRCUIT_VERSION;
	hdr->ring_size = ch->ring_size;
	atomic_store_explicit(&hdr->end[SHUNT_END_CONNECTOR].holders, 1, memory_order_relaxed);
	atomic_store_explicit(&hdr->setup, SHUNT_SETUP_ESTABLISHED, memory_order_relaxed);
}

int shunt_chan_connect(int fd, const struct shunt_wire_addr *dst, struct shunt_conn **out)
{
	struct shunt_journal_entry je = { .type = SHUNT_J_CONNECTED, .fd = fd };
	struct shunt_wire_addr local, ends[2], peers[2];
	struct shunt_chan *ch = find_client(dst);
	struct shunt_chan_entry *q;
	uint64_t head, tail;
	uint32_t gen, room;
	int slot, r;

	if (!ch)
		return -ENOENT;
	/* A: pairs with shuntd's release of the state it closes the channel with. */
	if (atomic_load_explicit(&ch->hdr->state, memory_order_acquire) != SHUNT_CHAN_OPEN) {
		drop_client(ch);
		shunt_chan_put(ch);
		return -ENOENT;
	}
	/* A socket connect() would bind otherwise (or fail on): shuntd and the kernel decide. */
	r = bind_as_connect(fd, ch, &local);
	if (r < 0) {
		shunt_chan_put(ch);
		return -ENOENT;
	}
	pthread_mutex_lock(&tx_lock);
	tail = atomic_load_explicit(&ch->hdr->tail, memory_order_relaxed);
	/* Q1: pairs with the acceptor's release of head: the entry there was read. */
	head = atomic_load_explicit(&ch->hdr->head, memory_order_acquire);
	room = atomic_load_explicit(&ch->hdr->max_queued, memory_order_relaxed);
	if (room > ch->slots)
		room = ch->slots;
	/* A full accept queue (or indices someone spoilt): shuntd queues it (a SYN waits). */
	if (tail - head >= room) {
		pthread_mutex_unlock(&tx_lock);
		shunt_chan_put(ch);
		return -EAGAIN;
	}
	/* Every slot holds a connection: shuntd may give another channel. */
	slot = claim_slot(ch, &gen);
	if (slot < 0) {
		pthread_mutex_unlock(&tx_lock);
		shunt_chan_put(ch);
		return -ENOSPC;
	}
	slot_start(ch, slot_hdr(ch, (uint32_t)slot));
	q = &queue(ch)[tail % ch->slots];
	q->slot = (uint32_t)slot;
	q->gen = gen;
	q->queued_ns = shunt_now_ns();
	q->client = local;
	q->dst = *dst;
	/* Q2: pairs with the acceptor's acquire of tail: the entry and the slot are written. */
	atomic_store_explicit(&ch->hdr->tail, tail + 1, memory_order_release);
	pthread_mutex_unlock(&tx_lock);
	/*
	 * Counted on the bell once it can be taken, so that an acceptor woken
	 * by the count finds the entry (or finds it taken), and a count with
	 * no entry to see is one to spare (docs/connect.md, "The doorbell").
	 */
	shunt_eventfd_signal(ch->bell);

	je.channel = ch->id;
	je.slot = (uint32_t)slot;
	je.gen = gen;
	shunt_addr_ends(&local, dst, dst, ends, peers);
	je.addr[0] = local;
	je.addr[1] = peers[0];
	/*
	 * The socket connect() just found in the fd table, its identity
	 * checked there a moment ago: no fstat of our own.
	 */
	shunt_chan_journal(&je, fd, shunt_fdt_sock_inode(fd));
	*out = shunt_conn_attach(ch, slot_hdr(ch, (uint32_t)slot), SHUNT_END_CONNECTOR,
				 ch->id_base + (uint32_t)slot, &ends[0], &peers[0]);
	/* No memory left to follow it: a connection that ends at once, as after a crash. */
	if (!*out)
		return -ENOMEM;
	return 0;
}

/* How many are queued in @ch, from indices its users write (0 if they make no sense). */
static uint32_t queued(struct shunt_chan *ch, uint64_t *head_out)
{
	/* Q2 (acquire): the entries before tail are written. */
	uint64_t tail = atomic_load_explicit(&ch->hdr->tail, memory_order_acquire);
	uint64_t head = atomic_load_explicit(&ch->hdr->head, memory_order_acquire);

	*head_out = head;
	return tail - head <= ch->slots ? (uint32_t)(tail - head) : 0;
}

/*
 * Whether shuntd let go of acceptor channel @ch for good: closed, nothing
 * queued, every slot sealed (shuntd seals them when no client can queue
 * there any more and no connection lives there). Words anyone may write:
 * a liar only loses its own connections to this listener.
 */
static bool sealed(struct shunt_chan *ch)
{
	_Atomic uint32_t *st = slot_states(ch);
	uint64_t head;

	if (atomic_load_explicit(&ch->hdr->state, memory_order_acquire) != SHUNT_CHAN_CLOSED ||
	    queued(ch, &head))
		return false;
	for (uint32_t i = 0; i < ch->slots; i++)
		if (shunt_slot_state(atomic_load_explicit(&st[i], memory_order_relaxed)) !=
		    SHUNT_SLOT_SEALED)
			return false;
	return true;
}

/*
 * Drop this process's channels of @listener that shuntd let go of (their
 * clients exited), so that a server whose clients come and go keeps only
 * the channels of those that are there. Under list_lock; the dropped ones
 * are put on *@gone, and counted in *@n.
 */
static void prune_locked(uint64_t listener, struct shunt_chan **gone, unsigned *n)
{
	struct shunt_chan **p = &acceptors, *ch;

	while ((ch = *p)) {
		if (ch->listener == listener && sealed(ch)) {
			*p = ch->next;
			drop_bell_locked(ch);
			ch->next = *gone;
			*gone = ch;
			(*n)++;
		} else {
			p = &ch->next;
		}
	}
}

/* Put every channel of list @ch (linked by next). */
static void put_all(struct shunt_chan *ch)
{
	struct shunt_chan *next;

	for (; ch; ch = next) {
		next = ch->next;
		shunt_chan_put(ch);
	}
}

/* Every departed channel, the list left empty. Under list_lock. */
static struct shunt_chan *take_departed_locked(void)
{
	struct shunt_chan *gone = departed;

	departed = NULL;
	ndeparted = 0;
	atomic_store_explicit(&any_departed, false, memory_order_relaxed);
	return gone;
}

int shunt_chan_install_listener(struct shunt_grant *g, uint64_t listener)
{
	struct shunt_chan *ch, *c, *gone = NULL;
	int err;

	ch = chan_map(g, &err);
	if (!ch)
		return err;
	if (ch->listener != listener) {
		shunt_chan_put(ch);
		return -EPROTO;
	}
	pthread_mutex_lock(&list_lock);
	for (c = acceptors; c && c->id != ch->id; c = c->next)
		;
	if (!c) {
		/* A new client's: a good time to drop those that left, unmapped once we sleep. */
		prune_locked(listener, &departed, &ndeparted);
		if (ndeparted > DEPARTED_MAX)
			gone = take_departed_locked();
		else
			atomic_store_explicit(&any_departed, departed != NULL, memory_order_relaxed);
		ch->next = acceptors;
		acceptors = ch;
		ch = NULL;
	}
	pthread_mutex_unlock(&list_lock);
	if (ch)
		shunt_chan_put(ch);	/* had it already */
	put_all(gone);
	return 0;
}

void shunt_chan_let_go(void)
{
	struct shunt_chan *gone;

	/*
	 * Only if nobody holds the lock: a poll() in a signal handler that
	 * interrupted this process's channel code must not wait for it, and
	 * the next sleep will do as well.
	 */
	if (!atomic_load_explicit(&any_departed, memory_order_relaxed) ||
	    pthread_mutex_trylock(&list_lock))
		return;
	gone = take_departed_locked();
	pthread_mutex_unlock(&list_lock);
	put_all(gone);
}

bool shunt_chan_pending(uint64_t listener)
{
	struct shunt_chan *ch;
	uint64_t head;
	bool any = false;

	pthread_mutex_lock(&list_lock);
	for (ch = acceptors; ch && !any; ch = ch->next)
		any = ch->listener == listener && queued(ch, &head);
	pthread_mutex_unlock(&list_lock);
	return any;
}

/* Whether this process has a channel of @listener at all. */
static bool has_channel(uint64_t listener)
{
	struct shunt_chan *ch;

	pthread_mutex_lock(&list_lock);
	for (ch = acceptors; ch && ch->listener != listener; ch = ch->next)
		;
	pthread_mutex_unlock(&list_lock);
	return ch != NULL;
}

bool shunt_chan_spin_pending(uint64_t listener, int64_t deadline)
{
	struct shunt_spin sp;
	bool ok;

	if (!has_channel(listener))
		return false;
	/* Many clients, none of whose CPUs we know: the learned budget decides alone. */
	shunt_spin_begin(&sp, shunt_now_ns(), NULL);
	for (;;) {
		for (int i = 0; i < 16; i++) {
			if (shunt_chan_pending(listener)) {
				ok = true;
				goto out;
			}
			shunt_cpu_relax();
		}
		if (!shunt_spin_go_on(&sp) || (deadline && sp.last >= deadline))
			break;
	}
	ok = shunt_chan_pending(listener);
out:
	shunt_spin_end(&sp, ok);
	return ok;
}

/* Whether @id is one of the @n in @ids. */
static bool among(uint64_t id, const uint64_t *ids, int n)
{
	for (int i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/*
 * The channel of @listener whose oldest queued connection is the oldest,
 * with a reference; none of the @nskip channels @skip.
 */
static struct shunt_chan *oldest(uint64_t listener, const uint64_t *skip, int nskip)
{
	struct shunt_chan *ch, *best = NULL;
	int64_t best_ns = 0;
	uint64_t head;

	pthread_mutex_lock(&list_lock);
	for (ch = acceptors; ch; ch = ch->next) {
		int64_t ns;

		if (ch->listener != listener || !queued(ch, &head) || among(ch->id, skip, nskip))
			continue;
		ns = queue(ch)[head % ch->slots].queued_ns;
		if (!best || ns < best_ns) {
			best = ch;
			best_ns = ns;
		}
	}
	if (best)
		atomic_fetch_add_explicit(&best->refs, 1, memory_order_relaxed);
	pthread_mutex_unlock(&list_lock);
	return best;
}

/*
 * Take the entry at @ch's head: the acceptor whose compare-and-swap moves
 * head past it owns it. No lock, so nothing a client (which can write
 * every word of the channel) does can make an acceptor wait; a head it
 * keeps moving makes us give up after TAKE_TRIES. 0, or -EAGAIN.
 */
static int take(struct shunt_chan *ch, struct shunt_chan_entry *en)
{
	_Atomic uint64_t *headp = &ch->hdr->head;

	for (int i = 0; i < TAKE_TRIES; i++) {
		uint64_t head = atomic_load_explicit(headp, memory_order_acquire);
		/* Q2 (acquire): the entries before tail are written. */
		uint64_t tail = atomic_load_explicit(&ch->hdr->tail, memory_order_acquire);

		if (tail == head)
			return -EAGAIN;
		if (tail - head > ch->slots) {
			/* Indices a client spoilt: what lies between is not to be trusted. */
			atomic_compare_exchange_strong(headp, &head, tail);
			return -EAGAIN;
		}
		/*
		 * Copied before it is ours: a client writes this entry again
		 * only once head moved past it, and then our swap fails.
		 */
		memcpy(en, &queue(ch)[head % ch->slots], sizeof(*en));
		/* Q1: pairs with the client's acquire of head before it writes this entry again. */
		if (!atomic_compare_exchange_strong_explicit(headp, &head, head + 1,
							     memory_order_acq_rel,
							     memory_order_acquire))
			continue;
		return 0;
	}
	return -EAGAIN;
}

void shunt_chan_journal(struct shunt_journal_entry *je, int fd, uint64_t inode)
{
	je->fd = fd;
	/* The inode proves it is still that socket when shuntd fetches it (companions). */
	je->inode = fd >= 0 ? inode : 0;
	/* shuntd has not read the last few thousand: a request makes it read them first. */
	if (shunt_journal_add(je) == -ENOSPC) {
		shunt_ctl_barrier();
		shunt_journal_add(je);
	}
}

/* @ch, an orphan, was emptied: it goes from the list (its connections keep it mapped). */
static void drop_orphan(struct shunt_chan *ch)
{
	struct shunt_chan **p;
	uint64_t head;
	bool found = false;

	pthread_mutex_lock(&list_lock);
	for (p = &acceptors; *p; p = &(*p)->next)
		if (*p == ch) {
			found = ch->orphan && !queued(ch, &head);
			if (found) {
				*p = ch->next;
				drop_bell_locked(ch);
			}
			break;
		}
	pthread_mutex_unlock(&list_lock);
	if (found)
		shunt_chan_put(ch);
}

/* Whether address @a (from a client's entry) can be one of a listener bound to @laddr. */
static bool fits(const struct shunt_wire_addr *laddr, const struct shunt_wire_addr *a)
{
	return laddr->family != AF_INET || a->family == AF_INET || shunt_addr_is_v4mapped(a);
}

/*
 * Whether entry @en, taken from @ch (its client wrote it), names a
 * connection to accept on a listener bound to @laddr: a slot in use in the
 * generation it names, with addresses such a listener's connection has.
 */
static bool entry_good(struct shunt_chan *ch, const struct shunt_chan_entry *en,
		       const struct shunt_wire_addr *laddr)
{
	uint32_t w;

	if (en->slot >= ch->slots)
		return false;
	w = atomic_load(&slot_states(ch)[en->slot]);
	return shunt_slot_state(w) == SHUNT_SLOT_USED && shunt_slot_gen(w) == en->gen &&
	       shunt_addr_check(&en->client) == 0 && shunt_addr_check(&en->dst) == 0 &&
	       fits(laddr, &en->client) && fits(laddr, &en->dst);
}

int shunt_chan_accept(uint64_t listener, const struct shunt_wire_addr *laddr,
		      struct shunt_conn **out, struct shunt_journal_entry *je)
{
	struct shunt_wire_addr ends[2], peers[2];
	struct shunt_chan_entry en;
	struct shunt_chan *ch;

	/*
	 * A channel that gave nothing good is left for the next call: a client
	 * that keeps queueing garbage (or moving head) in its own channel
	 * cannot hold up the connections of the others.
	 */
	uint64_t skip[SKIP_MAX];
	int nskip = 0;

	while (nskip < SKIP_MAX && (ch = oldest(listener, skip, nskip))) {
		bool taken = take(ch, &en) == 0;

		/*
		 * Its count, which its client made just after queueing it: it
		 * may not be there yet (the read finds none, and the count comes
		 * to spare: shuntd_listener_settle). The channel's own bell, good
		 * entry or spoilt: a client that left its entries uncounted, or
		 * took its counts back, or moved head back over taken entries,
		 * costs its own connections their wake-ups, nobody else's.
		 * Another acceptor that finds the queue empty while this count
		 * is still there yields once and looks again before it asks
		 * shuntd.
		 */
		if (taken)
			shunt_eventfd_take(ch->bell);
		if (taken && ch->orphan)
			drop_orphan(ch);
		if (!taken || !entry_good(ch, &en, laddr)) {
			skip[nskip++] = ch->id;
			shunt_chan_put(ch);
			continue;
		}
		shunt_addr_ends(&en.client, &en.dst, laddr, ends, peers);
		atomic_store(&slot_hdr(ch, en.slot)->end[SHUNT_END_ACCEPTOR].holders, 1);
		memset(je, 0, sizeof(*je));
		je->type = SHUNT_J_ACCEPTED;
		je->channel = ch->id;
		je->slot = en.slot;
		je->gen = en.gen;
		je->addr[0] = ends[1];
		je->addr[1] = peers[1];
		*out = shunt_conn_attach(ch, slot_hdr(ch, en.slot), SHUNT_END_ACCEPTOR,
					 ch->id_base + en.slot, &ends[1], &peers[1]);
		return *out ? 0 : -ENOMEM;
	}
	return -EAGAIN;
}

void shunt_chan_forget_listener(uint64_t listener)
{
	struct shunt_chan **p = &acceptors, *gone = NULL, *ch;

	/* Its epoll registrations let go of its channels' bells first (shunt_epoll_sock_moved). */
	shunt_chan_dropped_bells(listener, NULL, NULL);
	pthread_mutex_lock(&list_lock);
	while (*p) {
		ch = *p;
		if (ch->listener == listener) {
			*p = ch->next;
			ch->next = gone;
			gone = ch;
		} else {
			p = &ch->next;
		}
	}
	pthread_mutex_unlock(&list_lock);
	while ((ch = gone)) {
		gone = ch->next;
		shunt_chan_put(ch);
	}
}

void shunt_chan_drop_clients(void)
{
	struct shunt_chan *gone, *ch;

	pthread_mutex_lock(&list_lock);
	gone = clients;
	clients = NULL;
	pthread_mutex_unlock(&list_lock);
	/* Connections in their slots keep them mapped as long as they live. */
	while ((ch = gone)) {
		gone = ch->next;
		shunt_chan_put(ch);
	}
}

void shunt_chan_dropped_bells(uint64_t listener, void (*let_go)(int bell, void *arg), void *arg)
{
	size_t i = 0;

	pthread_mutex_lock(&list_lock);
	while (i < ndropped) {
		if (dropped[i].listener != listener) {
			i++;
			continue;
		}
		if (let_go)
			let_go(dropped[i].bell, arg);
		shunt_close_hidden(dropped[i].bell);
		dropped[i] = dropped[--ndropped];
	}
	pthread_mutex_unlock(&list_lock);
}

void shunt_chan_each_bell(uint64_t listener, void (*fn)(int bell, void *arg), void *arg)
{
	struct shunt_chan *ch;

	pthread_mutex_lock(&list_lock);
	for (ch = acceptors; ch; ch = ch->next)
		if (ch->listener == listener && ch->bell >= 0)
			fn(ch->bell, arg);
	pthread_mutex_unlock(&list_lock);
}

void shunt_chan_settle(uint64_t listener)
{
	struct shunt_chan *ch;
	uint64_t head;

	pthread_mutex_lock(&list_lock);
	for (ch = acceptors; ch; ch = ch->next) {
		uint32_t taken = 0, owed;

		if (ch->listener != listener)
			continue;
		while (taken < SETTLE_MAX && shunt_eventfd_take(ch->bell))
			taken++;
		/* Read after the counts: the entry of any count taken is there. */
		owed = queued(ch, &head);
		for (uint32_t i = 0; i < taken && i < owed; i++)
			shunt_eventfd_signal(ch->bell);
	}
	pthread_mutex_unlock(&list_lock);
}

void shunt_chan_move_listener(uint64_t from, uint64_t to, int bells)
{
	struct shunt_chan **p = &acceptors, *gone = NULL, *ch;
	uint64_t head;

	pthread_mutex_lock(&list_lock);
	while (*p) {
		ch = *p;
		if (ch->listener != from) {
			p = &ch->next;
		} else if (queued(ch, &head)) {
			struct epoll_event ev = { .events = EPOLLIN };

			ch->listener = to;
			ch->orphan = true;
			/* Still counted on its bell: the new bells hear it. */
			(void)!shunt_syscall(SYS_epoll_ctl, bells, EPOLL_CTL_ADD, ch->bell, &ev);
			p = &ch->next;
		} else {
			*p = ch->next;
			ch->next = gone;
			gone = ch;
		}
	}
	pthread_mutex_unlock(&list_lock);
	while ((ch = gone)) {
		gone = ch->next;
		shunt_chan_put(ch);
	}
}

void shunt_chan_fork_prepare(void)
{
	pthread_mutex_lock(&list_lock);
}

void shunt_chan_fork_parent(void)
{
	pthread_mutex_unlock(&list_lock);
}

void shunt_chan_fork_child(void)
{
	struct shunt_chan *ch;

	pthread_mutex_init(&list_lock, NULL);
	pthread_mutex_init(&tx_lock, NULL);
	/* The connections in them stay (with their references); only the parent connects through them. */
	while ((ch = clients)) {
		clients = ch->next;
		shunt_chan_put(ch);
	}
}
