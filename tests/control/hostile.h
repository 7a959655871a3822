/* SPDX-License-Identifier: MIT */
/*
 * The hostile peer of tests/control/test_hostile.py: helpers shared by its
 * circuit modes (hostile.c), its channel modes (hostile_chan.c) and its
 * journal modes (hostile_journal.c).
 */
#ifndef HOSTILE_H
#define HOSTILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shunt/chan.h"
#include "shunt/proto.h"

/* One JSON line on stdout. */
void event(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* {"event": "error"} and exit 2: the attack could not be set up. */
_Noreturn void die(const char *what);
uint64_t rnd64(void);
uint32_t rnd32(void);
int64_t now_ms(void);
void nap_us(long us);
/* Mappings of memfds named @name: up to @max into @at/@size; returns how many. */
int find_mappings(const char *name, void **at, size_t *size, int max);
/* A pid no process has (now). */
pid_t dead_pid(void);

/*
 * The eventfds this process holds (the library's hidden ones too): up to
 * @max into @fds; with @semaphore, only EFD_SEMAPHORE ones (a listener's
 * doorbell). Returns how many.
 */
int hostile_eventfds(int *fds, int max, bool semaphore);

/* An address a check must refuse, or one that passes them all (@plausible). */
struct shunt_wire_addr hostile_addr(bool plausible, uint16_t port);

/* Our channel to the victim's listener, as we mapped it (hostile_chan.c). */
struct hostile_chan {
	struct shunt_chan_hdr *hdr;
	uint32_t slots, ring_size;	/* as shuntd made it: the header's copy is ours to spoil */
	uint64_t id;			/* shuntd's id of it */
	_Atomic uint32_t *states;
	struct shunt_chan_entry *queue;
	uint32_t mine;			/* the slot of our own (honest) connection */
	uint16_t port;			/* the victim's */
	int bells[8], nbells;		/* the listener's doorbell */
	int efds[16], nefds;		/* every eventfd we hold */
	unsigned claimed;
};

/* A connection to 127.0.0.1:@port that went through a channel (we try again until one does). */
int hostile_chan_connect(int port);

/*
 * The channel of our connection to the victim's listener on @port, once
 * the victim has accepted that connection (so it maps the channel too).
 */
struct hostile_chan hostile_chan_map(int port);

/*
 * A connection of ours to the victim made by hand: a slot taken, its
 * circuit started, its entry queued and counted. Its slot (and *@gen), or
 * -1 if there is no room.
 */
int hostile_chan_forge(struct hostile_chan *c, uint32_t *gen);

/*
 * The channel modes (chan-*): @fd is our connection to the victim's
 * listener on @port, made through a channel. Never returns.
 */
_Noreturn void hostile_chan_run(int fd, int port, const char *mode, int64_t ms);

/*
 * The journal modes (journal, kick-block, self-bell): @fd as above, or
 * -1; @victim_pid the victim's (shuntd's for kick-block); @ids circuit ids
 * of the victim's (from `shunt status`) to name. Never returns.
 */
_Noreturn void hostile_journal_run(int fd, int port, const char *mode, pid_t victim_pid,
				   int64_t ms, const uint64_t *ids, int nids);

#endif
