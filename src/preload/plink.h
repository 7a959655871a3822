/* SPDX-License-Identifier: MIT */
/*
 * This process's links (see include/shunt/link.h): one per peer process,
 * mapped when the first circuit with that peer arrives and kept for the
 * life of the process. Threads waiting in poll() listen on their eventfds.
 */
#ifndef SHUNT_PLINK_H
#define SHUNT_PLINK_H

#include <stdbool.h>
#include <stdint.h>

#include "shunt/link.h"

struct shunt_conn;
struct shunt_grant;

enum {
	SHUNT_PLINK_CHUNK = 1024,	/* slot table entries allocated together */
	SHUNT_PLINK_CHUNKS = SHUNT_LINK_SLOTS / SHUNT_PLINK_CHUNK,
};

struct shunt_plink {
	uint64_t id;
	struct shunt_link_hdr *hdr;
	int efd[2];			/* side i sleeps on efd[i] (hidden descriptors) */
	_Atomic bool mine[2];		/* the sides this process is (only ever set) */
	/* Under shunt_notice_lock: the connection holding each slot of our sides. */
	struct shunt_conn **slots[2][SHUNT_PLINK_CHUNKS];
};

/*
 * The link a grant refers to: the known one with its id, or a new one made
 * from the descriptors that came with the grant (which it then owns, so the
 * grant's link descriptors are set to -1). NULL if the grant names an
 * unknown link without bringing it, or the mapping fails.
 */
struct shunt_plink *shunt_plink_attach(struct shunt_grant *g);

/*
 * Links are only ever added: @n links exist when shunt_plink_count() says
 * so, and shunt_plink_nth() returns them in the order they were added.
 */
unsigned shunt_plink_count(void);
struct shunt_plink *shunt_plink_nth(unsigned i);

#endif
