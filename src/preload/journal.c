// SPDX-License-Identifier: MIT
/* This process's journal: entries for shuntd to read later, and a kick when it sleeps. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#include "common/memfd.h"
#include "common/sys.h"
#include "preload/journal.h"
#include "preload/util.h"

/*
 * Appends are serialised by one lock (threads append rarely: once per
 * connection made, taken or closed). The journal itself is replaced only
 * under it too, when a session begins or ends.
 */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct shunt_journal_hdr *journal;	/* under lock */
static int kick_fd = -1;			/* under lock: hidden */
static uint64_t epoch;				/* under lock: journals installed so far */
static uint64_t refusals;			/* under lock: appends refused as full, ever */

static void drop_locked(void)
{
	if (journal)
		shunt_syscall(SYS_munmap, journal, shunt_journal_size());
	journal = NULL;
	if (kick_fd >= 0)
		shunt_close_hidden(kick_fd);
	kick_fd = -1;
}

int shunt_journal_install(int memfd, int kick)
{
	struct shunt_journal_hdr *j;
	void *p;
	int r;

	pthread_mutex_lock(&lock);
	drop_locked();
	r = shunt_memfd_map(memfd, shunt_journal_size(), PROT_READ | PROT_WRITE, NULL, &p);
	if (r < 0)
		goto out;
	j = p;
	if (j->magic != SHUNT_JOURNAL_MAGIC || j->version != SHUNT_JOURNAL_VERSION ||
	    j->entries != SHUNT_JOURNAL_ENTRIES) {
		shunt_syscall(SYS_munmap, j, shunt_journal_size());
		r = -EPROTO;
		goto out;
	}
	epoch++;
	kick_fd = shunt_fd_hide(kick);
	kick = -1;
	if (kick_fd < 0) {
		kick_fd = -1;
		shunt_syscall(SYS_munmap, j, shunt_journal_size());
		r = -EMFILE;
		goto out;
	}
	journal = j;
out:
	pthread_mutex_unlock(&lock);
	shunt_close_reply(memfd);
	if (kick >= 0)
		shunt_close_reply(kick);
	return r;
}

void shunt_journal_drop(void)
{
	pthread_mutex_lock(&lock);
	drop_locked();
	pthread_mutex_unlock(&lock);
}

bool shunt_journal_ready(void)
{
	bool r;

	pthread_mutex_lock(&lock);
	r = journal != NULL;
	pthread_mutex_unlock(&lock);
	return r;
}

int shunt_journal_add(const struct shunt_journal_entry *e)
{
	uint64_t tail, head;
	uint32_t asleep = SHUNT_JOURNAL_ASLEEP;
	int r = 0;

	pthread_mutex_lock(&lock);
	if (!journal) {
		r = -ENOTCONN;
		goto out;
	}
	tail = atomic_load_explicit(&journal->tail, memory_order_relaxed);
	/* J2: pairs with shuntd's release of head: the slot was read. */
	head = atomic_load_explicit(&journal->head, memory_order_acquire);
	if (tail - head >= SHUNT_JOURNAL_ENTRIES) {
		refusals++;
		r = -ENOSPC;
		goto out;
	}
	memcpy(&journal->entry[tail % SHUNT_JOURNAL_ENTRIES], e, sizeof(*e));
	/*
	 * J1 (release: the entry is written before the tail says so) and K1
	 * (seq_cst: pairs with shuntd's seq_cst store of ASLEEP before it
	 * looks at the tail once more): either it sees this entry, or we
	 * see that it sleeps, and kick.
	 */
	atomic_store_explicit(&journal->tail, tail + 1, memory_order_seq_cst);
	if (atomic_load_explicit(&journal->kick, memory_order_seq_cst) == SHUNT_JOURNAL_ASLEEP &&
	    atomic_compare_exchange_strong(&journal->kick, &asleep, SHUNT_JOURNAL_AWAKE))
		shunt_eventfd_signal(kick_fd);
out:
	pthread_mutex_unlock(&lock);
	return r;
}

bool shunt_journal_mark(struct shunt_journal_mark *m)
{
	pthread_mutex_lock(&lock);
	m->epoch = epoch;
	m->tail = journal ? atomic_load_explicit(&journal->tail, memory_order_relaxed) : 0;
	pthread_mutex_unlock(&lock);
	return m->epoch && journal;
}

uint64_t shunt_journal_refusals(void)
{
	uint64_t r;

	pthread_mutex_lock(&lock);
	r = refusals;
	pthread_mutex_unlock(&lock);
	return r;
}

bool shunt_journal_replaced(const struct shunt_journal_mark *m)
{
	bool r;

	pthread_mutex_lock(&lock);
	r = m->epoch != epoch;
	pthread_mutex_unlock(&lock);
	return r;
}

bool shunt_journal_read_past(const struct shunt_journal_mark *m)
{
	bool r;

	pthread_mutex_lock(&lock);
	/* A new journal is a new shuntd, which never knew what the old one read. */
	r = journal && m->epoch == epoch &&
	    atomic_load_explicit(&journal->head, memory_order_acquire) >= m->tail;
	pthread_mutex_unlock(&lock);
	return r;
}

bool shunt_journal_claim_offer(uint32_t seq)
{
	bool r;

	pthread_mutex_lock(&lock);
	r = journal != NULL;
	if (r)
		atomic_store(&journal->claim, shunt_journal_claim(seq, SHUNT_CLAIM_PENDING));
	pthread_mutex_unlock(&lock);
	return r;
}

bool shunt_journal_claim_withdraw(uint32_t seq)
{
	uint64_t want = shunt_journal_claim(seq, SHUNT_CLAIM_PENDING);
	bool r;

	pthread_mutex_lock(&lock);
	r = journal && atomic_compare_exchange_strong(&journal->claim, &want,
						      shunt_journal_claim(seq, SHUNT_CLAIM_ABANDONED));
	pthread_mutex_unlock(&lock);
	return r;
}

void shunt_journal_fork_prepare(void)
{
	pthread_mutex_lock(&lock);
}

void shunt_journal_fork_parent(void)
{
	pthread_mutex_unlock(&lock);
}

void shunt_journal_fork_child(void)
{
	pthread_mutex_init(&lock, NULL);
	/* The parent's session's: the child writes only to its own, from its HELLO on. */
	drop_locked();
}
