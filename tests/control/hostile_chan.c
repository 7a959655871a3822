// SPDX-License-Identifier: MIT
/*
 * The hostile peer's channel modes (tests/control/test_hostile.py): a
 * client with a channel to the victim's listener (include/shunt/chan.h)
 * spoils the channel's shared words, which the victim's accept() and
 * shuntd read, while honest clients of other processes connect to the
 * same listener through channels of their own:
 *
 *   chan-indices    the queue's head and tail: huge, backwards, crossed
 *   chan-entries    entries with slots out of range, wrong generations,
 *                   FREE slots, garbage addresses, and valid ones (slots
 *                   we claim by hand)
 *   chan-v6-peer    valid entries but for their well formed IPv6
 *                   addresses (client or destination), for an IPv4 listener
 *   chan-states     the slot state words of every slot, and entries that
 *                   agree with the lies, their circuits' headers random
 *   chan-header     magic, version, slot count, ring size, ids, state,
 *                   max_queued
 *   chan-kernel-bit valid connections whose acceptor end says KERNEL (only
 *                   shuntd may say that)
 *   chan-head       the queue's head moved back over and over while the
 *                   victim takes entries (which it does by a
 *                   compare-and-swap of head), so that what it takes is
 *                   taken again, or its swaps fail
 *   chan-doorbell   our channel's bell (every eventfd we hold) rung
 *                   without queueing anything; last, left at 2^40 counts
 *   chan-drain      our bell's counts read off as they come (until stop
 *                   24 every client held the listener's one doorbell)
 *   chan-uncounted  valid entries queued, oldest of all, never counted
 *   chan-block      our bell made blocking (its file's O_NONBLOCK, shared
 *                   by every holder), spoilt entries queued; last,
 *                   two spoilt entries with one count
 *
 * After MS ms the lies go on until we are killed; a line on stdin asks for
 * the last lie of the mode (told when no honest client runs).
 *
 * Every entry that the library would count is counted (one count on our
 * bell each) but in chan-uncounted, so that each mode tests what it
 * names. Every byte put in a slot's ring is ink (t_ink.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <sys/uio.h>

#include "hostile.h"
#include "shunt/chan.h"
#include "shunt/circuit.h"
#include "t_ink.h"
#include "t_loopback.h"

enum {
	MAX_CLAIMED = 200,	/* slots we take by hand over a run */
};


static struct shunt_circuit_hdr *slot_hdr(struct hostile_chan *c, uint32_t i)
{
	return (struct shunt_circuit_hdr *)((char *)c->hdr +
					    shunt_chan_slot_offset(c->slots, c->ring_size, i));
}

static void ring_bells(struct hostile_chan *c, uint64_t n)
{
	for (int i = 0; i < c->nbells; i++)
		(void)!write(c->bells[i], &n, sizeof(n));
}

/* Take counts off our bell without ever waiting (its O_NONBLOCK may be ours to clear). */
static void drain_bells(struct hostile_chan *c, int max)
{
	for (int i = 0; i < c->nbells; i++)
		for (int n = 0; n < max; n++) {
			uint64_t v;
			struct iovec io = { &v, sizeof(v) };

			if (preadv2(c->bells[i], &io, 1, -1, RWF_NOWAIT) != sizeof(v))
				break;
		}
}

static struct shunt_wire_addr loopback(uint16_t port)
{
	struct shunt_wire_addr a = { .family = AF_INET, .port = port };

	a.addr[0] = 127;
	a.addr[3] = 1;
	return a;
}

/* ---- setting up ---- */

int hostile_chan_connect(int port)
{
	for (int tries = 0; tries < 20; tries++) {
		int fd = t_loopback_connect(port);
		void *at;
		size_t size;

		if (find_mappings("shunt-channel", &at, &size, 1) == 1)
			return fd;
		/* shuntd was slow to answer, and the kernel took it: ask again. */
		close(fd);
		nap_us(100 * 1000);
	}
	die("no channel mapping after 20 connects");
}

struct hostile_chan hostile_chan_map(int port)
{
	struct hostile_chan c = { .port = (uint16_t)port };
	void *at;
	size_t size;
	int64_t deadline;
	bool found = false;

	if (find_mappings("shunt-channel", &at, &size, 1) != 1)
		die("no channel mapping: the connection did not go through a channel");
	c.hdr = at;
	if (c.hdr->magic != SHUNT_CHAN_MAGIC || c.hdr->version != SHUNT_CHAN_VERSION)
		die("not a channel");
	c.slots = c.hdr->slots;
	c.id = c.hdr->channel;
	c.ring_size = c.hdr->ring_size;
	if (size < shunt_chan_size(c.slots, c.ring_size))
		die("channel smaller than its header says");
	c.states = (_Atomic uint32_t *)((char *)at + shunt_chan_states_offset(c.slots));
	c.queue = (struct shunt_chan_entry *)((char *)at + shunt_chan_queue_offset());
	for (uint32_t i = 0; i < c.slots; i++)
		if (shunt_slot_state(atomic_load(&c.states[i])) == SHUNT_SLOT_USED) {
			c.mine = i;
			found = true;
		}
	if (!found)
		die("no slot in use: the connection did not go through a channel");
	/* The victim took our connection: it has mapped the channel, and reads it from now on. */
	deadline = now_ms() + 5000;
	while (!atomic_load(&slot_hdr(&c, c.mine)->end[SHUNT_END_ACCEPTOR].holders))
		if (now_ms() > deadline)
			die("the victim never accepted our connection");
		else
			nap_us(1000);
	c.nbells = hostile_eventfds(c.bells, 8, true);
	c.nefds = hostile_eventfds(c.efds, 16, false);
	if (!c.nbells)
		die("no bell among our descriptors");
	event("{\"event\": \"mapped\", \"slots\": %u, \"slot\": %u, \"doorbells\": %d, "
	      "\"eventfds\": %d}", c.slots, c.mine, c.nbells, c.nefds);
	return c;
}

/* ---- entries ---- */

/* Whether @k more entries fit between the acceptors' head and our tail; if not, wait. */
static bool room(struct hostile_chan *c, uint32_t k)
{
	uint64_t head = atomic_load(&c->hdr->head), tail = atomic_load(&c->hdr->tail);

	/* Indices some round spoilt: start again where the acceptors are. */
	if (tail - head > c->slots) {
		atomic_store(&c->hdr->tail, head);
		tail = head;
	}
	return tail - head + k <= c->slots;
}

/* Queue @e at our tail, counted on our bell unless @uncounted. */
static void push(struct hostile_chan *c, struct shunt_chan_entry e, bool uncounted)
{
	uint64_t tail = atomic_load(&c->hdr->tail);

	c->queue[tail % c->slots] = e;
	atomic_store_explicit(&c->hdr->tail, tail + 1, memory_order_release);
	if (!uncounted)
		ring_bells(c, 1);
}

/*
 * A slot taken as the library takes one, its circuit started with ink
 * already on its way to the victim: a connection of ours, made by hand.
 * Returns its slot, or -1 (none free, or enough taken).
 */
static int claim(struct hostile_chan *c, uint32_t *gen)
{
	uint32_t start = rnd32() % c->slots;

	if (c->claimed >= MAX_CLAIMED)
		return -1;
	for (uint32_t n = 0; n < c->slots; n++) {
		uint32_t i = (start + n) % c->slots, w = atomic_load(&c->states[i]);
		struct shunt_circuit_hdr *h;
		struct shunt_ring_ctl *ring;
		uint8_t *data;
		uint32_t len = rnd32() % 600;

		if (shunt_slot_state(w) != SHUNT_SLOT_FREE)
			continue;
		*gen = (shunt_slot_gen(w) + 1) & 0xffffff;
		if (!atomic_compare_exchange_strong(&c->states[i], &w,
						    shunt_slot_word(*gen, SHUNT_SLOT_USED)))
			continue;
		h = slot_hdr(c, i);
		memset(h->end, 0, sizeof(h->end));
		memset(h->ring, 0, sizeof(h->ring));
		h->magic = SHUNT_CIRCUIT_MAGIC;
		h->version = SHUNT_CIRCUIT_VERSION;
		h->ring_size = c->ring_size;
		atomic_store(&h->end[SHUNT_END_CONNECTOR].holders, 1);
		ring = &h->ring[shunt_tx_ring(SHUNT_END_CONNECTOR)];
		data = (uint8_t *)h + shunt_ring_offset(shunt_tx_ring(SHUNT_END_CONNECTOR), c->ring_size);
		for (uint32_t k = 0; k < len; k++)
			data[k] = t_ink(rnd32());
		atomic_store(&ring->tail, len);
		/* Half of them already closed by us: the victim reads the ink, then EOF. */
		if (rnd32() % 2)
			atomic_store(&h->end[SHUNT_END_CONNECTOR].state, SHUNT_END_CLOSED);
		atomic_store(&h->setup, SHUNT_SETUP_ESTABLISHED);
		c->claimed++;
		return (int)i;
	}
	return -1;
}

enum entry_kind {
	E_SLOT_RANGE,		/* a slot past the channel's */
	E_GEN,			/* our slot, in a generation it is not in */
	E_FREE,			/* a FREE slot, in its generation */
	E_ADDR,			/* our slot, with addresses no socket has */
	E_VALID,		/* a slot of ours, all well formed */
	E_KINDS,		/* (any of the above) */
	E_V6_PEER,		/* a slot of ours, well formed IPv6 addresses for an IPv4 listener */
};

/* An entry of @kind; false if it cannot be made now (no slot left to claim). */
static bool make_entry(struct hostile_chan *c, enum entry_kind kind, struct shunt_chan_entry *e)
{
	uint32_t w = atomic_load(&c->states[c->mine]), gen;
	int slot;

	memset(e, 0, sizeof(*e));
	/* The oldest of all the listener's channels: taken first. */
	e->queued_ns = rnd32() % 2 ? INT64_MIN : 0;
	e->client = hostile_addr(true, (uint16_t)(30000 + rnd32() % 30000));
	e->dst = loopback(c->port);
	switch (kind) {
	case E_SLOT_RANGE:
		{
			const uint32_t far[] = { c->slots, c->slots + 1, 2 * c->slots, 1u << 16,
						 0x80000000u, UINT32_MAX };

			e->slot = far[rnd32() % 6];
		}
		e->gen = rnd32() % 2 ? rnd32() : 1;
		return true;
	case E_GEN:
		e->slot = c->mine;
		e->gen = rnd32() % 2 ? rnd32() : (shunt_slot_gen(w) + 1 + rnd32() % 7) & 0xffffff;
		if (e->gen == shunt_slot_gen(w))
			e->gen++;
		return true;
	case E_FREE:
		for (uint32_t n = 0; n < c->slots; n++) {
			uint32_t i = (rnd32() + n) % c->slots, v = atomic_load(&c->states[i]);

			if (shunt_slot_state(v) == SHUNT_SLOT_FREE) {
				e->slot = i;
				e->gen = shunt_slot_gen(v);
				return true;
			}
		}
		return false;
	case E_ADDR:
		e->slot = c->mine;
		e->gen = shunt_slot_gen(w);
		if (rnd32() % 2)
			e->client = hostile_addr(false, 1);
		else
			e->dst = hostile_addr(false, c->port);
		return true;
	case E_V6_PEER:
	case E_VALID:
		slot = claim(c, &gen);
		if (slot < 0)
			return false;
		e->slot = (uint32_t)slot;
		e->gen = gen;
		if (kind == E_V6_PEER) {
			struct shunt_wire_addr *a = rnd32() % 2 ? &e->client : &e->dst;

			memset(a, 0, sizeof(*a));
			a->family = AF_INET6;
			a->port = a == &e->dst ? c->port : 4242;
			a->addr[0] = 0x20;
			a->addr[1] = 0x01;
			a->addr[2] = 0x0d;
			a->addr[3] = 0xb8;
			a->addr[15] = 1;
		}
		return true;
	default:
		return false;
	}
}

int hostile_chan_forge(struct hostile_chan *c, uint32_t *gen)
{
	struct shunt_chan_entry e;

	if (!room(c, 1) || !make_entry(c, E_VALID, &e))
		return -1;
	push(c, e, false);
	*gen = e.gen;
	return (int)e.slot;
}

/* Up to @k entries of random kinds (of @only, if not E_KINDS), counted unless @uncounted. */
static void push_entries(struct hostile_chan *c, unsigned k, enum entry_kind only, bool uncounted)
{
	struct shunt_chan_entry e;

	for (unsigned n = 0; n < k && room(c, 1); n++)
		if (make_entry(c, only == E_KINDS ? rnd32() % E_KINDS : only, &e))
			push(c, e, uncounted);
}

/* ---- the modes ---- */

static void fill_queue_garbage(struct hostile_chan *c)
{
	for (uint32_t i = 0; i < c->slots; i++) {
		c->queue[i].slot = rnd32() % 3 ? rnd32() : rnd32() % c->slots;
		c->queue[i].gen = rnd32();
		c->queue[i].queued_ns = INT64_MIN;
		c->queue[i].client = hostile_addr(rnd32() % 2, 1);
		c->queue[i].dst = hostile_addr(rnd32() % 2, c->port);
	}
}

static void round_indices(struct hostile_chan *c)
{
	_Atomic uint64_t *head = &c->hdr->head, *tail = &c->hdr->tail;
	uint64_t h = atomic_load(head), t = atomic_load(tail), exposed = 1;

	if (rnd32() % 8 == 0)
		fill_queue_garbage(c);
	switch (rnd32() % 8) {
	case 0: atomic_store(tail, h + (1ull << 40)); break;
	case 1: atomic_store(tail, h - 1 - rnd32() % c->slots); break;	/* backwards */
	case 2: atomic_store(head, t + 1 + rnd32() % 100); break;	/* the head past the tail */
	case 3: atomic_store(tail, UINT64_MAX); atomic_store(head, rnd64()); break;
	case 4:		/* stale entries, or the garbage above, look queued */
		exposed = 1 + rnd32() % 64;
		atomic_store(tail, h + exposed);
		break;
	case 5: atomic_store(tail, h + c->slots + 1); break;
	case 6: atomic_store(head, t - 3ull * c->slots); break;
	default: push_entries(c, 1 + rnd32() % 4, E_KINDS, false); exposed = 0; break;
	}
	/*
	 * One count per entry that now looks queued, as its client would
	 * have counted it (the acceptor may skip them all for one count:
	 * then counts are left over, as many as in chan-doorbell's rounds).
	 */
	if (exposed)
		ring_bells(c, exposed);
}

static void round_entries(struct hostile_chan *c)
{
	push_entries(c, 1 + rnd32() % 8, E_KINDS, false);
}

static uint32_t bad_word(void)
{
	switch (rnd32() % 6) {
	case 0: return shunt_slot_word(rnd32(), SHUNT_SLOT_FREE);
	case 1: return shunt_slot_word(rnd32(), SHUNT_SLOT_USED);
	case 2: return shunt_slot_word(rnd32(), 2 + rnd32() % 254);
	case 3: return UINT32_MAX;
	case 4: return 0;
	default: return rnd32();
	}
}

static void round_states(struct hostile_chan *c)
{
	unsigned k = 1 + rnd32() % 4;

	for (unsigned n = 0; n < 16; n++)
		atomic_store(&c->states[rnd32() % c->slots], bad_word());
	/* Entries that agree with the lies: the slots' circuits are whatever is there. */
	for (unsigned n = 0; n < k && room(c, 1); n++) {
		uint32_t i = rnd32() % c->slots, w = atomic_load(&c->states[i]);
		struct shunt_chan_entry e = {
			.slot = i, .gen = shunt_slot_gen(w), .queued_ns = INT64_MIN,
			.client = hostile_addr(true, 5555), .dst = loopback(c->port),
		};

		if (rnd32() % 2)
			atomic_store(&c->states[i], w = shunt_slot_word(shunt_slot_gen(w),
									 SHUNT_SLOT_USED));
		if (rnd32() % 3 == 0) {
			struct shunt_circuit_hdr *h = slot_hdr(c, i);
			uint64_t *p = (uint64_t *)h;

			for (size_t b = 0; b < SHUNT_CIRCUIT_HDR_SIZE / 8; b++)
				p[b] = rnd64();
			/* All of it but the KERNEL bits, which chan-kernel-bit covers. */
			for (unsigned end = 0; end < 2; end++)
				atomic_fetch_and(&h->end[end].state, ~(uint32_t)SHUNT_END_KERNEL);
		}
		push(c, e, false);
	}
}

static void round_header(struct hostile_chan *c)
{
	static const uint32_t counts[] = { 0, 1, UINT32_MAX, 1u << 16, SHUNT_CHAN_SLOTS_MAX + 1 };
	struct shunt_chan_hdr *h = c->hdr;

	h->magic = rnd32() % 2 ? rnd32() : 0;
	h->version = rnd32() % 2 ? rnd32() : SHUNT_CHAN_VERSION + 1;
	h->slots = rnd32() % 2 ? rnd32() : counts[rnd32() % 5];
	h->ring_size = rnd32() % 2 ? rnd32() : counts[rnd32() % 5];
	h->channel = rnd64();
	h->id_base = rnd64();
	h->listener = rnd32() % 2 ? rnd64() : h->listener + 1;
	h->client = rnd64();
	atomic_store(&h->state, rnd32() % 2 ? rnd32() : SHUNT_CHAN_CLOSED);
	atomic_store(&h->max_queued, rnd32() % 2 ? UINT32_MAX : 0);
	if (rnd32() % 2)
		push_entries(c, 1, rnd32() % 2 ? E_VALID : E_SLOT_RANGE, false);
}

/*
 * Connections of ours whose acceptor end (the victim's) says KERNEL, the
 * bit only shuntd sets once it moved a connection onto its kernel
 * sockets: the victim must find it a lie and reset that connection, and
 * nothing else.
 */
static void round_kernel_bit(struct hostile_chan *c)
{
	uint32_t gen;
	int slot = hostile_chan_forge(c, &gen);

	if (slot >= 0)
		atomic_fetch_or(&slot_hdr(c, (uint32_t)slot)->end[SHUNT_END_ACCEPTOR].state,
				SHUNT_END_KERNEL);
}

/* Head set a few entries behind the tail, many times: taken entries look queued again. */
static void move_head(struct hostile_chan *c, int times)
{
	for (int i = 0; i < times; i++) {
		atomic_store(&c->hdr->head, atomic_load(&c->hdr->tail) - 1 - rnd32() % 4);
		for (int spin = rnd32() % 64; spin > 0; spin--)
			__asm__ volatile("" ::: "memory");
	}
}

static void round_head(struct hostile_chan *c)
{
	/* Something to take, counted, so that the victim is at it as we move head. */
	push_entries(c, 1 + rnd32() % 3, rnd32() % 2 ? E_VALID : E_SLOT_RANGE, false);
	move_head(c, 2000);
}

static void round_doorbell(struct hostile_chan *c)
{
	for (int i = 0; i < c->nefds; i++) {
		uint64_t n = 1 + rnd32() % 1000;

		(void)!write(c->efds[i], &n, sizeof(n));
	}
}

/* Our bell's file made blocking: every holder's read and write with it. */
static void make_blocking(struct hostile_chan *c)
{
	for (int i = 0; i < c->nbells; i++) {
		int fl = fcntl(c->bells[i], F_GETFL);

		if (fl >= 0)
			fcntl(c->bells[i], F_SETFL, fl & ~O_NONBLOCK);
	}
}

static void round_block(struct hostile_chan *c)
{
	make_blocking(c);
	/* Counted, spoilt: the victim reads our bell once per entry, blocking now. */
	push_entries(c, 1 + rnd32() % 3, rnd32() % 2 ? E_SLOT_RANGE : E_GEN, false);
}

static void one_round(struct hostile_chan *c, const char *mode)
{
	if (!strcmp(mode, "chan-indices"))
		round_indices(c);
	else if (!strcmp(mode, "chan-entries"))
		round_entries(c);
	else if (!strcmp(mode, "chan-v6-peer"))
		push_entries(c, 1, E_V6_PEER, false);
	else if (!strcmp(mode, "chan-states"))
		round_states(c);
	else if (!strcmp(mode, "chan-header"))
		round_header(c);
	else if (!strcmp(mode, "chan-kernel-bit"))
		round_kernel_bit(c);
	else if (!strcmp(mode, "chan-head"))
		round_head(c);
	else if (!strcmp(mode, "chan-doorbell"))
		round_doorbell(c);
	else if (!strcmp(mode, "chan-drain"))
		drain_bells(c, 1000);
	else if (!strcmp(mode, "chan-uncounted"))
		push_entries(c, 1 + rnd32() % 4, E_VALID, true);
	else if (!strcmp(mode, "chan-block"))
		round_block(c);
	else
		die("unknown mode");
}

/* After the garbage, until killed: the lies that would stall the victim most. */
static void keep_lying(struct hostile_chan *c, const char *mode)
{
	if (!strcmp(mode, "chan-head")) {
		/*
		 * Counted, so that the victim comes to take it, and then head
		 * moved without a pause worth the name: an acceptor that never
		 * gives up on this channel does not return while we live.
		 */
		push_entries(c, 1, E_SLOT_RANGE, false);
		move_head(c, 200000);
	} else if (!strcmp(mode, "chan-drain")) {
		drain_bells(c, 1000);
	}
}

/*
 * The last lie, told once when the test says so (a line on stdin), when no
 * honest client runs: the one that would leave the victim stuck or
 * spinning after we are gone.
 */
static void last_lie(struct hostile_chan *c, const char *mode)
{
	if (!strcmp(mode, "chan-doorbell")) {
		/* Counts nobody queued anything for, left for good. */
		ring_bells(c, 1ull << 40);
	} else if (!strcmp(mode, "chan-block")) {
		/*
		 * Two spoilt entries, one count: the victim takes the count and
		 * the first, and reads our bell again for the second, which
		 * has none; O_NONBLOCK cleared, that read waits.
		 */
		make_blocking(c);
		drain_bells(c, 1000);
		push_entries(c, 2, E_SLOT_RANGE, true);
		ring_bells(c, 1);
	}
}

static bool told_last(void)
{
	struct pollfd p = { 0, POLLIN, 0 };
	char line[16];

	return poll(&p, 1, 0) == 1 && read(0, line, sizeof(line)) > 0;
}

_Noreturn void hostile_chan_run(int fd, int port, const char *mode, int64_t ms)
{
	struct hostile_chan c = hostile_chan_map(port);
	int64_t start = now_ms();

	(void)fd;	/* kept open: our own connection stays */
	while (now_ms() - start < ms) {
		one_round(&c, mode);
		nap_us(300);
	}
	event("{\"event\": \"done\", \"claimed\": %u}", c.claimed);
	for (;;) {
		keep_lying(&c, mode);
		if (told_last()) {
			last_lie(&c, mode);
			event("{\"event\": \"last\"}");
		}
		nap_us(500);
	}
}
