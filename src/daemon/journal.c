// SPDX-License-Identifier: MIT
/*
 * Sessions' journals (include/shunt/journal.h): what a process did without
 * asking shuntd, read in batches. A process kicks shuntd only when shuntd
 * said it sleeps; once kicked, shuntd reads the journal on every tick for
 * as long as entries keep coming, and goes back to sleep after QUIET_MS
 * without any. Entries are also read before any request of the session
 * and when its process is gone.
 *
 * A tick comes TICK_MS after the last, or FAST_TICK_MS while entries come
 * quickly: a channel's slot (chan.c) is given back only when its CLOSED
 * entries are read, so a process making a connection per request uses a
 * new slot, whose pages each of its peers faults in, for every connection
 * made within one tick (docs/connect.md, "A slot's pages").
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sys.h"
#include "daemon/shuntd.h"

enum {
	TICK_MS = 10,
	FAST_TICK_MS = 2,
	/* Entries read in one tick, all journals together, that make the next one come fast. */
	FAST_ENTRIES = 16,
	QUIET_MS = 10,
};

static int64_t tick_at = -1;	/* when awake journals are read next (ms), -1: none awake */

int shuntd_journal_make(struct shuntd *d, struct session *s)
{
	struct journal *j = calloc(1, sizeof(*j));
	size_t size = shunt_journal_size();
	int r = -ENOMEM;

	if (!j)
		return -ENOMEM;
	j->watch = SHUNTD_WATCH_JOURNAL;
	j->session = s;
	j->kick = -1;
	j->memfd = shuntd_memfd_sealed("shunt-journal", size);
	if (j->memfd < 0) {
		r = j->memfd;
		goto fail;
	}
	j->hdr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, j->memfd, 0);
	if (j->hdr == MAP_FAILED) {
		r = -errno;
		j->hdr = NULL;
		goto fail;
	}
	j->hdr->magic = SHUNT_JOURNAL_MAGIC;
	j->hdr->version = SHUNT_JOURNAL_VERSION;
	j->hdr->entries = SHUNT_JOURNAL_ENTRIES;
	atomic_store(&j->hdr->kick, SHUNT_JOURNAL_ASLEEP);
	j->kick = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (j->kick < 0) {
		r = -errno;
		goto fail;
	}
	r = shuntd_loop_watch(d, j->kick, j);
	if (r < 0)
		goto fail;
	shunt_list_init(&j->awake_node);
	s->journal = j;
	return 0;
fail:
	if (j->kick >= 0)
		close(j->kick);
	if (j->hdr)
		munmap(j->hdr, size);
	if (j->memfd >= 0)
		close(j->memfd);
	free(j);
	return r;
}

void shuntd_journal_free(struct shuntd *d, struct session *s)
{
	struct journal *j = s->journal;

	if (!j)
		return;
	if (j->awake)
		shunt_list_del(&j->awake_node);
	shuntd_loop_unwatch(d, j->kick);
	close(j->kick);
	munmap(j->hdr, shunt_journal_size());
	close(j->memfd);
	j->watch = SHUNTD_WATCH_GONE;
	shuntd_loop_bury(d, j);
	s->journal = NULL;
}

static void apply(struct shuntd *d, struct session *s, const struct shunt_journal_entry *e)
{
	struct shunt_msg_close m;

	switch (e->type) {
	case SHUNT_J_CONNECTED:
		shuntd_chan_connected(d, s, e);
		break;
	case SHUNT_J_ACCEPTED:
		shuntd_chan_accepted(d, s, e);
		break;
	case SHUNT_J_CLOSED:
		memset(&m, 0, sizeof(m));
		m.circuit = e->circuit;
		m.end = e->end;
		shuntd_close(d, s, &m);
		break;
	default:
		shunt_info("session %llu (pid %d): journal entry of type %u ignored",
			   (unsigned long long)s->id, (int)s->pid, e->type);
	}
}

void shuntd_journal_read(struct shuntd *d, struct session *s)
{
	struct journal *j = s->journal;
	uint64_t stop;

	/* Never again while it is being read, further up the stack: see below. */
	if (!j || j->reading)
		return;
	/* J1: pairs with the library's release of tail: entries before it are written. */
	stop = atomic_load_explicit(&j->hdr->tail, memory_order_acquire);
	/*
	 * A tail the process moved backwards or too far: what lies between is
	 * garbage. Said the 1st, 2nd, 4th, 8th... time: a process that does it
	 * on purpose, as fast as it can, must not fill the disk with our log.
	 */
	if (stop - j->head > SHUNT_JOURNAL_ENTRIES) {
		j->nonsense++;
		if (!(j->nonsense & (j->nonsense - 1)))
			shunt_warn("session %llu (pid %d): journal indices make no sense (%llu, %llu); "
				   "skipped (%llu times so far)", (unsigned long long)s->id, (int)s->pid,
				   (unsigned long long)j->head, (unsigned long long)stop,
				   (unsigned long long)j->nonsense);
		j->head = stop;
		atomic_store_explicit(&j->hdr->head, stop, memory_order_release);
		return;
	}
	/*
	 * Entries may read other journals: an acceptor's entry read before
	 * its client's reads the client's journal first. Never this one again
	 * while it is being read, further up the stack (its client is a
	 * thread of the same process, or its client's journal led back here):
	 * a nested read would apply the entries after the one being applied
	 * before it is done, and a CLOSED entry for the end that entry is
	 * about to take found nothing to close, leaving the connection held
	 * for ever. The caller copes with the entries not read yet.
	 */
	j->reading = true;
	while (s->journal == j && (int64_t)(stop - j->head) > 0) {
		struct shunt_journal_entry e;

		/* A copy: the process may write the slot again as soon as head moves. */
		memcpy(&e, &j->hdr->entry[j->head % SHUNT_JOURNAL_ENTRIES], sizeof(e));
		j->head++;
		/* J2: pairs with the library's acquire of head before it reuses a slot. */
		atomic_store_explicit(&j->hdr->head, j->head, memory_order_release);
		apply(d, s, &e);
	}
	/* Freed meanwhile (its session closed), it is buried: still ours to write. */
	j->reading = false;
}

bool shuntd_journal_claim(struct session *s, uint32_t seq)
{
	uint64_t want = shunt_journal_claim(seq, SHUNT_CLAIM_PENDING);

	if (!s->journal)
		return false;
	return atomic_compare_exchange_strong(&s->journal->hdr->claim, &want,
					      shunt_journal_claim(seq, SHUNT_CLAIM_TAKEN));
}

struct circuit *shuntd_journal_read_holders(struct shuntd *d, struct circuit *c,
					    struct session *skip)
{
	uint64_t id = c->id;

	for (unsigned e = 0; e < 2 && c; e++) {
		struct session *h = shuntd_circuit_holder(c, e);

		if (h && h != skip) {
			shuntd_journal_read(d, h);
			c = shunt_map_get(&d->circuits, id);
		}
	}
	return c;
}

void shuntd_journal_read_all(struct shuntd *d)
{
	struct session *s;
	uint64_t key;
	size_t it = 0;

	/* Reading a journal never ends a session: the map stays as it is meanwhile. */
	while ((s = shunt_map_next(&d->sessions, &it, &key)))
		shuntd_journal_read(d, s);
}

static void wake_up(struct journal *j, struct shuntd *d)
{
	int64_t now;

	if (j->awake)
		return;
	now = shunt_sys_now_ms();
	j->awake = true;
	j->busy_ms = now;
	j->read_at_tick = j->head;
	shunt_list_add_tail(&d->journals_awake, &j->awake_node);
	if (tick_at < 0)
		tick_at = now + TICK_MS;
}

void shuntd_journal_kicked(struct shuntd *d, struct journal *j)
{
	shuntd_efd_take(j->kick);
	/* The process set AWAKE before it kicked; we stay so until a quiet tick. */
	atomic_store(&j->hdr->kick, SHUNT_JOURNAL_AWAKE);
	shuntd_journal_read(d, j->session);
	wake_up(j, d);
}

void shuntd_journal_expect(struct shuntd *d, struct session *s)
{
	struct journal *j = s->journal;

	if (!j || j->awake)
		return;
	/* Before the reply that leads to the entry: the library sees it and does not kick. */
	atomic_store(&j->hdr->kick, SHUNT_JOURNAL_AWAKE);
	wake_up(j, d);
}

int shuntd_journal_next_tick(struct shuntd *d)
{
	int64_t left;

	if (shunt_list_empty(&d->journals_awake))
		return -1;
	left = tick_at - shunt_sys_now_ms();
	return left < 0 ? 0 : (int)left;
}

void shuntd_journal_tick(struct shuntd *d)
{
	struct shunt_list *pos, *tmp;
	int64_t now = shunt_sys_now_ms();
	uint64_t read = 0;

	if (shunt_list_empty(&d->journals_awake) || now < tick_at)
		return;
	shunt_list_for_each_safe(pos, tmp, &d->journals_awake) {
		struct journal *j = shunt_container_of(pos, struct journal, awake_node);
		struct session *s = j->session;
		uint64_t head;

		shuntd_journal_read(d, s);
		if (s->journal != j)
			continue;	/* freed meanwhile (its session closed) */
		head = j->head;
		read += head - j->read_at_tick;
		if (head != j->read_at_tick)
			j->busy_ms = now;
		j->read_at_tick = head;
		if (now - j->busy_ms < QUIET_MS)
			continue;
		/*
		 * Nothing came for QUIET_MS: sleep, and be kicked for the
		 * next entry. K1: the seq_cst store pairs with the library's
		 * seq_cst load of kick after it publishes an entry; either it
		 * sees ASLEEP and kicks, or we see its entry here.
		 */
		atomic_store_explicit(&j->hdr->kick, SHUNT_JOURNAL_ASLEEP, memory_order_seq_cst);
		if (atomic_load_explicit(&j->hdr->tail, memory_order_seq_cst) != j->head) {
			atomic_store(&j->hdr->kick, SHUNT_JOURNAL_AWAKE);
			j->busy_ms = now;
			shuntd_journal_read(d, s);
			continue;
		}
		j->awake = false;
		shunt_list_del(&j->awake_node);
	}
	if (shunt_list_empty(&d->journals_awake))
		tick_at = -1;
	else
		tick_at = now + (read >= FAST_ENTRIES ? FAST_TICK_MS : TICK_MS);
}
