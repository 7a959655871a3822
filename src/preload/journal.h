/* SPDX-License-Identifier: MIT */
/*
 * This process's journal (include/shunt/journal.h): what it tells shuntd
 * without asking (connections made and taken through channels, circuit
 * ends let go of), one journal per session. Appending makes no system call
 * unless shuntd sleeps; then one eventfd write kicks it.
 */
#ifndef SHUNT_PRELOAD_JOURNAL_H
#define SHUNT_PRELOAD_JOURNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "shunt/journal.h"

/*
 * Take over the journal of a new session: its memfd and kick eventfd from
 * the HELLO reply (both closed here, whatever happens). 0 or -errno; without
 * a journal the process asks shuntd for everything, as before.
 */
int shunt_journal_install(int memfd, int kick);

/* The session is over (shuntd gone, or a fork child's inherited one): no journal. */
void shunt_journal_drop(void);

/* Whether there is a journal now. */
bool shunt_journal_ready(void);

/*
 * Append @e. 0, -ENOTCONN without a journal, -ENOSPC when shuntd has not
 * read the last SHUNT_JOURNAL_ENTRIES yet (the caller asks it instead,
 * which reads the journal first).
 */
int shunt_journal_add(const struct shunt_journal_entry *e);

/*
 * The claim word (include/shunt/journal.h) of a request that may be given
 * up: _offer marks request @seq pending before it is sent (false without a
 * journal: then it cannot be given up); _withdraw gives it up, true if
 * shuntd had not taken it (and now never will).
 */
bool shunt_journal_claim_offer(uint32_t seq);
bool shunt_journal_claim_withdraw(uint32_t seq);

/* Where the journal stands: what shunt_journal_read_past compares with. */
struct shunt_journal_mark {
	uint64_t epoch;		/* which journal of this process */
	uint64_t tail;		/* entries written to it by then */
};

/* Mark where the journal stands now into @m: false without a journal. */
bool shunt_journal_mark(struct shunt_journal_mark *m);

/*
 * Whether shuntd has read every entry written before mark @m, in the same
 * journal (false for one a restart replaced).
 */
bool shunt_journal_read_past(const struct shunt_journal_mark *m);

/* Whether a later journal (a new session, a restarted shuntd) replaced @m's. */
bool shunt_journal_replaced(const struct shunt_journal_mark *m);

/*
 * How many appends this process's journals refused as full, ever: when it
 * changed between two looks, something went to shuntd by message meanwhile,
 * which no journal mark covers.
 */
uint64_t shunt_journal_refusals(void);

/* Around fork: no thread is half-way through an append. */
void shunt_journal_fork_prepare(void);
void shunt_journal_fork_parent(void);
void shunt_journal_fork_child(void);

#endif
