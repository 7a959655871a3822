/* SPDX-License-Identifier: MIT */
/*
 * This process's links (see include/shunt/link.h): one per session it
 * exchanges notices with, found by that session's id, plus its daemon link.
 * A link is mapped when first needed — asked for (LINK) by the side that
 * wants to post, handed to the other side by shuntd (LINK_NEXT) — and when
 * its partner goes away its memory and descriptors are reused in place for
 * the next link, never unmapped or closed: a thread that still posts
 * through a stale pointer then only posts a harmless hint.
 */
#ifndef SHUNT_PLINK_H
#define SHUNT_PLINK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shunt/link.h"
#include "shunt/proto.h"

struct shunt_plink {
	uint64_t id;			/* shuntd's id */
	_Atomic uint64_t partner;	/* the other session; 0 while dead or for the daemon link */
	struct shunt_link_hdr *hdr;	/* never unmapped */
	int efd[2];			/* side i sleeps on efd[i] (hidden descriptors), or -1 */
	unsigned side;			/* the side this process drains */
	bool self;			/* both sides are this process: it drains both */
	bool daemon;			/* shuntd posts, we drain side 0 */
	_Atomic bool live;		/* drained, in the hub, counted as slept on */
};

/* The link with session @partner: known, or asked for from shuntd; NULL if none can be had. */
struct shunt_plink *shunt_plink_get(uint64_t partner);

/* Install a link from a LINK or LINK_NEXT reply with its three descriptors (taken over). */
struct shunt_plink *shunt_plink_install(const struct shunt_msg_link_reply *r, int fds[3]);

/* Install the session's daemon link from the HELLO reply (@fds: memfd, eventfd; taken over). */
int shunt_plink_install_daemon(uint64_t id, int fds[2]);

/* The daemon link of the current (or last) session, or NULL before the first. */
struct shunt_plink *shunt_plink_daemon(void);

/* shuntd said link @id died: stop draining it and keep its slot for reuse. */
void shunt_plink_gone(uint64_t id);

/* Post @slot to the partner of @l (or to ourselves on a self link), waking it if it sleeps. */
void shunt_plink_post(struct shunt_plink *l, uint32_t slot);

/*
 * Links are only ever added: @n exist when shunt_plink_count() says so,
 * and shunt_plink_nth() returns them in the order they were added. A dead
 * one (live false) is skipped by whoever iterates.
 */
unsigned shunt_plink_count(void);
struct shunt_plink *shunt_plink_nth(unsigned i);

/*
 * Announce (+1) or withdraw (-1) a thread about to sleep in a kernel wait
 * that includes the hub, on every live link side this process drains, so
 * that posters write the eventfds. seq_cst, pairing with shunt_link_post's
 * read of the sleeper count: drain once more after announcing, then sleep.
 */
void shunt_plink_sleepers(int delta);

/* Around fork: no thread may be installing a link. */
void shunt_plink_fork_prepare(void);
void shunt_plink_fork_parent(void);

/* In a fork child: every link belongs to the parent's session; retire them all. */
void shunt_plink_after_fork(void);

#endif
