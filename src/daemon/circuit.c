// SPDX-License-Identifier: MIT
/*
 * Circuits as shuntd sees them: created as a sealed memfd, handed to both
 * ends, watched through their control page (setup state, end states,
 * counters), and buried when both ends are closed or their processes gone.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "common/proto.h"
#include "common/wake.h"
#include "daemon/shuntd.h"

struct circuit *shuntd_circuit_create(struct shuntd *d, uint32_t ring_size)
{
	struct circuit *c = calloc(1, sizeof(*c));
	size_t size = shunt_circuit_size(ring_size);

	if (!c)
		return NULL;
	c->memfd = shuntd_memfd_sealed("shunt-circuit", size);
	if (c->memfd < 0) {
		errno = -c->memfd;
		goto fail;
	}
	/* All of it: a downgrade moves the rings' bytes into the kernel (downgrade.c). */
	c->hdr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
	if (c->hdr == MAP_FAILED)
		goto fail;
	c->hdr->magic = SHUNT_CIRCUIT_MAGIC;
	c->hdr->version = SHUNT_CIRCUIT_VERSION;
	c->hdr->ring_size = ring_size;
	c->ring_size = ring_size;
	c->id = shuntd_new_id(d);
	for (unsigned i = 0; i < 2; i++) {
		c->end[i].circuit = c;
		shunt_list_init(&c->end[i].holds);
	}
	shunt_list_init(&c->queue_node);
	if (shunt_map_put(&d->circuits, c->id, c) < 0) {
		munmap(c->hdr, size);
		goto fail;
	}
	d->circuits_total++;
	return c;
fail:
	shunt_warn("cannot create a circuit of %zu bytes: %s", size, strerror(errno));
	if (c->memfd >= 0)
		close(c->memfd);
	free(c);
	return NULL;
}

void shuntd_circuit_unqueue(struct circuit *c)
{
	if (c->queue == CIRCUIT_ACCEPTQ)
		c->listener->queued--;
	if (c->queue == CIRCUIT_DEFERRED)
		c->listener->ndeferred--;
	if (c->queue != CIRCUIT_UNQUEUED)
		shunt_list_del(&c->queue_node);
	c->queue = CIRCUIT_UNQUEUED;
	c->listener = NULL;
}

void shuntd_circuit_wake(struct shuntd *d, struct circuit *c, unsigned end)
{
	struct shunt_circuit_end *e = &c->hdr->end[end];

	if (!shunt_wake_end(e, SHUNT_WAKE_ALL))
		return;
	/* Watchers: through the daemon link of each session a route names. */
	for (unsigned i = 0; i < SHUNT_ROUTES; i++) {
		uint64_t r = atomic_load_explicit(&e->route[i], memory_order_acquire);
		struct session *s = r ? shunt_map_get(&d->sessions, shunt_route_session(r)) : NULL;

		if (s && shunt_route_slot(r) != SHUNT_LINK_SLOT_PULL)
			shuntd_link_notify(s, shunt_route_slot(r));
	}
}

struct session *shuntd_circuit_holder(struct circuit *c, unsigned end)
{
	if (shunt_list_empty(&c->end[end].holds))
		return NULL;
	return shunt_list_first(&c->end[end].holds, struct hold, node)->session;
}

void shuntd_circuit_set_setup(struct shuntd *d, struct circuit *c, enum shunt_setup_state st)
{
	atomic_store(&c->hdr->setup, st);
	shuntd_circuit_wake(d, c, SHUNT_END_CONNECTOR);
}

void shuntd_circuit_destroy(struct shuntd *d, struct circuit *c)
{
	shuntd_circuit_unqueue(c);
	for (unsigned e = 0; e < 2; e++) {
		shuntd_tenant_release(c, e);
		d->bytes_closed += atomic_load(&c->hdr->ring[e].tail);
	}
	shuntd_tenant_free_memory(c);
	shunt_map_del(&d->circuits, c->id);
	/* A channel's slot goes back to its channel; a circuit of our own, unmapped. */
	if (c->chan) {
		if (c->adopt_at)
			shunt_list_del(&c->adopt_node);
		shuntd_chan_slot_done(d, c);
		free(c);
		return;
	}
	munmap(c->hdr, shunt_circuit_size(c->ring_size));
	if (c->memfd >= 0)
		close(c->memfd);
	free(c);
}

/*
 * Bytes the end held back (TCP_CORK, MSG_MORE) when its last holder died:
 * the kernel sends them with the FIN, so they join the ring. A count the
 * ring cannot hold (the peer can write it) is dropped.
 */
static void flush_held(struct circuit *c, unsigned end)
{
	struct shunt_ring_ctl *tx = &c->hdr->ring[shunt_tx_ring(end)];
	uint32_t h = atomic_load(&c->hdr->end[end].corked);
	uint64_t tail = atomic_load(&tx->tail), used = tail - atomic_load(&tx->head);

	if (h && used <= c->ring_size && h <= c->ring_size - used)
		atomic_store(&tx->tail, tail + h);
	atomic_store(&c->hdr->end[end].corked, 0);
}

/*
 * What the kernel does to a socket whose last holder dies: a FIN, or a RST
 * when data it never read is left behind. Ring indices are only read for
 * that choice; a lie there changes nothing but this connection.
 */
static void bury(struct circuit *c, unsigned end)
{
	struct shunt_ring_ctl *rx = &c->hdr->ring[shunt_rx_ring(end)];
	uint32_t st = SHUNT_END_WR_SHUT | SHUNT_END_CLOSED;

	/* Closed by the process itself before it went: it already said how. */
	if (atomic_load(&c->hdr->end[end].state) & SHUNT_END_CLOSED)
		return;
	/* A reset is not a FIN: the peer's next read reports the error, not EOF. */
	if (atomic_load(&rx->tail) != atomic_load(&rx->head))
		st = SHUNT_END_CLOSED | SHUNT_END_RESET;
	else
		flush_held(c, end);
	atomic_fetch_or(&c->hdr->end[end].state, st);
}

void shuntd_circuit_end_done(struct shuntd *d, struct circuit *c, unsigned end, bool died)
{
	struct circuit_end *e = &c->end[end];

	if (e->done)
		return;
	e->done = true;
	shuntd_tenant_release(c, end);
	/*
	 * A channel's circuit: its holders let go in their journals, after a
	 * shared close that each was told was not the last (the others had
	 * not let go yet); nobody said FIN then, so it is said now.
	 */
	if (died || c->chan)
		bury(c, end);
	if (!c->end[end ^ 1].done) {
		shuntd_circuit_wake(d, c, end ^ 1);
		return;
	}
	shuntd_circuit_destroy(d, c);
}

int shuntd_circuit_reply(struct shuntd *d, struct session *s, struct circuit *c, unsigned end,
			 uint16_t type, uint32_t seq, int kernel_half)
{
	struct shunt_msg_circuit r;
	int fds[2];
	unsigned nfds = 0;

	(void)d;
	shunt_proto_init(&r, type | SHUNT_MSG_REPLY, sizeof(r), seq);
	r.circuit = c->id;
	r.ring_size = c->ring_size;
	r.end = (uint8_t)end;
	r.local = c->local[end];
	r.peer = c->peer[end];
	if (c->queue != CIRCUIT_SYN)
		r.flags |= SHUNT_CIRCUIT_ESTABLISHED;
	if (kernel_half >= 0) {
		r.flags |= SHUNT_CIRCUIT_KERNEL_HALF;
		fds[nfds++] = kernel_half;
	}
	fds[nfds++] = c->memfd;
	return shuntd_session_reply(s, &r, fds, nfds);
}
