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
	c->hdr = mmap(NULL, SHUNT_CIRCUIT_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
	if (c->hdr == MAP_FAILED)
		goto fail;
	c->hdr->magic = SHUNT_CIRCUIT_MAGIC;
	c->hdr->version = SHUNT_CIRCUIT_VERSION;
	c->hdr->ring_size = ring_size;
	c->ring_size = ring_size;
	c->id = shuntd_new_id(d);
	for (unsigned i = 0; i < 2; i++) {
		/* The process it is granted to; fork adds more. */
		atomic_store(&c->hdr->end[i].holders, 1);
		c->end[i].circuit = c;
		shunt_list_init(&c->end[i].session_node);
	}
	shunt_list_init(&c->queue_node);
	if (shunt_map_put(&d->circuits, c->id, c) < 0) {
		munmap(c->hdr, SHUNT_CIRCUIT_HDR_SIZE);
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

void shuntd_circuit_hold(struct circuit *c, unsigned end, struct session *s)
{
	c->end[end].session = s;
	shunt_list_add_tail(&s->ends, &c->end[end].session_node);
}

void shuntd_circuit_unqueue(struct circuit *c)
{
	if (c->queue == CIRCUIT_ACCEPTQ)
		c->listener->queued--;
	if (c->queue != CIRCUIT_UNQUEUED)
		shunt_list_del(&c->queue_node);
	c->queue = CIRCUIT_UNQUEUED;
	c->listener = NULL;
}

void shuntd_circuit_wake(struct circuit *c, unsigned end)
{
	struct shunt_wake_target t = { .end = &c->hdr->end[end], .efd = -1 };

	if (c->link) {
		t.link = &c->link->hdr->side[c->side[end]];
		t.slot = c->slot;
		t.efd = c->link->efd[c->side[end]];
	}
	shunt_wake(&t, SHUNT_WAKE_ALL);
}

void shuntd_circuit_set_setup(struct shuntd *d, struct circuit *c, enum shunt_setup_state st)
{
	(void)d;
	atomic_store(&c->hdr->setup, st);
	shuntd_circuit_wake(c, SHUNT_END_CONNECTOR);
}

void shuntd_circuit_destroy(struct shuntd *d, struct circuit *c)
{
	shuntd_circuit_unqueue(c);
	if (c->link)
		shuntd_link_release(d, c->link, c->slot);
	munmap(c->hdr, SHUNT_CIRCUIT_HDR_SIZE);
	if (c->memfd >= 0)
		close(c->memfd);
	shunt_map_del(&d->circuits, c->id);
	free(c);
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

	if (atomic_load(&rx->tail) != atomic_load(&rx->head))
		st |= SHUNT_END_RESET;
	atomic_fetch_or(&c->hdr->end[end].state, st);
}

void shuntd_circuit_end_done(struct shuntd *d, struct circuit *c, unsigned end, bool died)
{
	struct circuit_end *e = &c->end[end];

	if (e->done)
		return;
	e->done = true;
	if (e->session) {
		shunt_list_del(&e->session_node);
		e->session = NULL;
	}
	if (died)
		bury(c, end);
	if (!c->end[end ^ 1].done) {
		shuntd_circuit_wake(c, end ^ 1);
		return;
	}
	shuntd_circuit_destroy(d, c);
}

int shuntd_circuit_reply(struct shuntd *d, struct session *s, struct circuit *c, unsigned end,
			 uint16_t type, uint32_t seq, int kernel_half)
{
	struct shunt_msg_circuit r;
	struct link *l = c->link;
	unsigned side = c->side[end];
	int fds[SHUNT_MSG_MAX_FDS];
	unsigned nfds = 0;

	(void)d;
	shunt_proto_init(&r, type | SHUNT_MSG_REPLY, sizeof(r), seq);
	r.circuit = c->id;
	r.link = l->id;
	r.ring_size = c->ring_size;
	r.slot = c->slot;
	r.end = (uint8_t)end;
	r.link_side = (uint8_t)side;
	r.local = c->local[end];
	r.peer = c->peer[end];
	if (kernel_half >= 0) {
		r.flags |= SHUNT_CIRCUIT_KERNEL_HALF;
		fds[nfds++] = kernel_half;
	}
	fds[nfds++] = c->memfd;
	if (!l->delivered[side]) {
		r.flags |= SHUNT_CIRCUIT_NEW_LINK;
		fds[nfds++] = l->memfd;
		fds[nfds++] = l->efd[side];
		fds[nfds++] = l->efd[side ^ 1];
	}
	int ret = shuntd_session_reply(s, &r, fds, nfds);

	if (ret == 0 && !l->delivered[side]) {
		l->delivered[side] = true;
		/* A process linked with itself holds both sides at once. */
		if (l->side[0] == l->side[1])
			l->delivered[side ^ 1] = true;
	}
	return ret;
}
