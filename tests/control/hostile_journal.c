// SPDX-License-Identifier: MIT
/*
 * The hostile peer's journal modes (tests/control/test_hostile.py): lies
 * told to shuntd rather than to a peer, through what a process shares
 * with shuntd alone (include/shunt/journal.h) or with every holder of a
 * listener:
 *
 *   journal        garbage in our own journal, kicked: unknown types,
 *                  CONNECTED and ACCEPTED naming channels and slots that
 *                  are not ours or in wrong generations, CLOSED for the
 *                  victim's circuits (ids from the command line), tails far
 *                  ahead and behind, descriptors and inodes that are not
 *                  the connection's socket (another process's, a UDP, a
 *                  listening or no socket at all)
 *   kick-block     our journal's kick made blocking (its file's O_NONBLOCK
 *                  is shared with shuntd) and rung and emptied again and
 *                  again, so that shuntd, woken, reads an empty eventfd;
 *                  VICTIM_PID is shuntd's, whose wchan tells when it worked
 *   self-bell      a listener of our own and a connection to it, so that
 *                  we hold its channel's bell; the bell filled to the top,
 *                  made blocking and kept full by a thread blocked in
 *                  write(); then accept() with nothing queued, again and
 *                  again, so that shuntd settles the bell (it takes counts
 *                  off, and the writer fills it again at once)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>

#include "hostile.h"
#include "shunt/journal.h"

struct jrnl {
	struct shunt_journal_hdr *hdr;
	int kick;			/* its eventfd, or -1 if not found */
	int efds[16], nefds;		/* every eventfd we hold but the doorbell */
};

static struct jrnl map_journal(void)
{
	struct jrnl j = { .kick = -1 };
	void *at;
	size_t size;

	if (find_mappings("shunt-journal", &at, &size, 1) != 1)
		die("no journal mapping: not under shunt run?");
	j.hdr = at;
	if (size < sizeof(*j.hdr) || j.hdr->magic != SHUNT_JOURNAL_MAGIC)
		die("not a journal");
	{
		int all[16], sems[8], na = hostile_eventfds(all, 16, false);
		int ns = hostile_eventfds(sems, 8, true);

		for (int i = 0; i < na; i++) {
			bool sem = false;

			for (int k = 0; k < ns; k++)
				sem = sem || sems[k] == all[i];
			if (!sem)
				j.efds[j.nefds++] = all[i];
		}
	}
	/* Which is the kick: shuntd says AWAKE once it read the one we rang. */
	for (int i = 0; i < j.nefds && j.kick < 0; i++) {
		uint64_t one = 1;
		int64_t deadline = now_ms() + 200;

		atomic_store(&j.hdr->kick, SHUNT_JOURNAL_ASLEEP);
		(void)!write(j.efds[i], &one, sizeof(one));
		while (now_ms() < deadline && atomic_load(&j.hdr->kick) != SHUNT_JOURNAL_AWAKE)
			nap_us(1000);
		if (atomic_load(&j.hdr->kick) == SHUNT_JOURNAL_AWAKE)
			j.kick = j.efds[i];
	}
	event("{\"event\": \"journal\", \"eventfds\": %d, \"kick\": %d}", j.nefds, j.kick);
	return j;
}

static void kick(struct jrnl *j)
{
	uint64_t one = 1;

	for (int i = 0; i < j->nefds; i++)
		(void)!write(j->efds[i], &one, sizeof(one));
}

/* Append @e at our tail (we are the only writer now); false if shuntd left no room. */
static bool append(struct jrnl *j, const struct shunt_journal_entry *e)
{
	uint64_t tail = atomic_load(&j->hdr->tail), head = atomic_load(&j->hdr->head);

	if (tail - head >= SHUNT_JOURNAL_ENTRIES) {
		/* Indices we spoilt and shuntd has not set right yet, or a full ring. */
		if (tail - head > SHUNT_JOURNAL_ENTRIES)
			atomic_store(&j->hdr->tail, tail = head);
		else
			return false;
	}
	memcpy(&j->hdr->entry[tail % SHUNT_JOURNAL_ENTRIES], e, sizeof(*e));
	atomic_store_explicit(&j->hdr->tail, tail + 1, memory_order_release);
	return true;
}

/* ---- what we can name ---- */

struct names {
	const uint64_t *ids;		/* the victim's circuits */
	int nids;
	struct hostile_chan *chan;	/* ours */
	uint64_t foreign_ino;		/* a socket inode of the victim's */
	int odd_fd[4];			/* UDP, listening TCP, a pipe, a memfd-less file */
	uint64_t odd_ino[4];
};

static uint64_t inode_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* The inode of one of @pid's sockets, or a made-up one. */
static uint64_t socket_inode_of(pid_t pid)
{
	char path[64], target[64];
	DIR *d;
	struct dirent *de;
	uint64_t ino = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	while (d && !ino && (de = readdir(d))) {
		ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);

		if (n > 0 && (target[n] = 0, !strncmp(target, "socket:[", 8)))
			ino = strtoull(target + 8, NULL, 10);
	}
	if (d)
		closedir(d);
	return ino ? ino : 123456789;
}

static void odd_files(struct names *nm)
{
	int p[2];
	struct sockaddr_in a = { .sin_family = AF_INET };

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	nm->odd_fd[0] = socket(AF_INET, SOCK_DGRAM, 0);
	nm->odd_fd[1] = socket(AF_INET, SOCK_STREAM, 0);
	if (nm->odd_fd[1] < 0 || bind(nm->odd_fd[1], (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(nm->odd_fd[1], 1) < 0)
		die("listen");
	if (pipe(p) < 0)
		die("pipe");
	nm->odd_fd[2] = p[0];
	nm->odd_fd[3] = open("/proc/self/stat", O_RDONLY);
	for (int i = 0; i < 4; i++)
		nm->odd_ino[i] = inode_of(nm->odd_fd[i]);
}

/* The channel of a channel's circuit id (shunt_chan_id_base), or a guess. */
static uint64_t channel_of(uint64_t id)
{
	return id >> 63 ? (id >> 16) & ((1ull << 47) - 1) : id;
}

static uint64_t some_channel(struct names *nm)
{
	switch (rnd32() % 5) {
	case 0: return nm->nids ? channel_of(nm->ids[rnd32() % nm->nids]) : rnd64();
	case 1: return nm->chan->id + 1 + rnd32() % 3;
	case 2: return nm->chan->id - 1;
	case 3: return rnd32() % 2 ? 0 : UINT64_MAX;
	default: return nm->chan->id;
	}
}

static uint64_t some_circuit(struct names *nm)
{
	uint64_t base = shunt_chan_id_base(nm->chan->id);

	switch (rnd32() % 5) {
	case 0:
	case 1: return nm->nids ? nm->ids[rnd32() % nm->nids] : rnd64();
	case 2: return base + nm->chan->mine;	/* ours, but the end named may not be */
	case 3: return nm->nids ? (nm->ids[rnd32() % nm->nids] & ~0xffffull) | (rnd32() % 1024)
				: base + rnd32() % nm->chan->slots;
	default: return rnd32() % 2 ? rnd64() : rnd32() % 4096;
	}
}

/* One entry that shuntd must ignore, or that concerns only us. */
static void make_lie(struct names *nm, struct shunt_journal_entry *e)
{
	static const uint16_t types[] = { 0, 4, 5, 0x7fff, 0xffff };
	struct hostile_chan *c = nm->chan;
	uint32_t w = atomic_load(&c->states[c->mine]);
	int k;

	memset(e, 0, sizeof(*e));
	e->fd = rnd32() % 2 ? (int32_t)rnd32() : (int32_t)(rnd32() % 64);
	e->inode = rnd32() % 2 ? rnd64() : nm->foreign_ino;
	e->addr[0] = hostile_addr(rnd32() % 4 != 0, (uint16_t)rnd32());
	e->addr[1] = hostile_addr(rnd32() % 4 != 0, c->port);
	switch (rnd32() % 7) {
	case 0:		/* of no type shuntd knows */
		e->type = rnd32() % 2 ? types[rnd32() % 5] : (uint16_t)rnd32();
		if (e->type >= SHUNT_J_CONNECTED && e->type <= SHUNT_J_CLOSED)
			e->type = 0;
		e->channel = rnd64();
		e->circuit = rnd64();
		e->slot = rnd32();
		break;
	case 1:		/* a channel that is not ours, or ours out of range, or in another generation */
		e->type = SHUNT_J_CONNECTED;
		e->channel = some_channel(nm);
		k = (int)(rnd32() % 3);
		e->slot = k == 0 ? c->slots + rnd32() % 3 : k == 1 ? UINT32_MAX : rnd32() % c->slots;
		e->gen = rnd32() % 2 ? rnd32() % 4 : rnd32();
		break;
	case 2:		/* our own slot again, in its generation or another */
		e->type = SHUNT_J_CONNECTED;
		e->channel = c->id;
		e->slot = c->mine;
		e->gen = shunt_slot_gen(w) + (rnd32() % 2);
		break;
	case 3:		/* taking a connection of a listener we do not hold */
		e->type = SHUNT_J_ACCEPTED;
		e->channel = some_channel(nm);
		e->slot = rnd32() % 2 ? c->mine : rnd32() % (c->slots + 2);
		e->gen = rnd32() % 2 ? shunt_slot_gen(w) : rnd32() % 4;
		break;
	default:	/* letting go of circuits we do not hold, or ends that do not exist */
		e->type = SHUNT_J_CLOSED;
		e->circuit = some_circuit(nm);
		e->end = rnd32() % 3 ? (uint16_t)(rnd32() % 2) : (rnd32() % 2 ? 2 : 0xffff);
		/* Never our own connector end: that one we do hold, and would lose. */
		if (e->circuit == shunt_chan_id_base(c->id) + c->mine && e->end == SHUNT_END_CONNECTOR)
			e->end = SHUNT_END_ACCEPTOR;
		break;
	}
}

/*
 * A connection of ours, made by hand and queued for the victim, journaled
 * with a descriptor and inode that are not its socket: shuntd, making its
 * companions, must fetch nothing that is not that socket.
 */
static bool forge_with_odd_socket(struct names *nm, struct shunt_journal_entry *e)
{
	uint32_t gen;
	int slot = hostile_chan_forge(nm->chan, &gen), k = (int)(rnd32() % 5);

	if (slot < 0)
		return false;
	memset(e, 0, sizeof(*e));
	e->type = SHUNT_J_CONNECTED;
	e->channel = nm->chan->id;
	e->slot = (uint32_t)slot;
	e->gen = gen;
	e->addr[0] = hostile_addr(true, (uint16_t)(20000 + rnd32() % 20000));
	e->addr[1] = hostile_addr(true, nm->chan->port);
	e->addr[1].addr[3] = 1;
	if (k < 4) {
		e->fd = nm->odd_fd[k];
		e->inode = nm->odd_ino[k];
	} else {
		e->fd = nm->odd_fd[rnd32() % 4];
		e->inode = nm->foreign_ino;
	}
	return true;
}

static void round_indices(struct jrnl *j, struct names *nm)
{
	_Atomic uint64_t *head = &j->hdr->head, *tail = &j->hdr->tail;
	uint64_t h = atomic_load(head);

	switch (rnd32() % 5) {
	case 0: atomic_store(tail, h + (1ull << 40)); break;
	case 1: atomic_store(tail, h - 1); break;
	case 2:		/* the whole ring, all of it lies */
		for (uint32_t i = 0; i < SHUNT_JOURNAL_ENTRIES; i++)
			make_lie(nm, &j->hdr->entry[i]);
		atomic_store(tail, h + SHUNT_JOURNAL_ENTRIES);
		break;
	case 3: atomic_store(head, atomic_load(tail) + 7); break;	/* shuntd's own word */
	default:
		atomic_store(&j->hdr->kick, rnd32());
		atomic_store(&j->hdr->claim, rnd64());
		break;
	}
}

static _Noreturn void run_journal(int port, pid_t victim_pid, int64_t ms, const uint64_t *ids,
				  int nids)
{
	struct hostile_chan c = hostile_chan_map(port);
	struct names nm = { .ids = ids, .nids = nids, .chan = &c };
	struct jrnl j = map_journal();
	int64_t start = now_ms();
	unsigned long lies = 0, forged = 0, rounds = 0;

	nm.foreign_ino = socket_inode_of(victim_pid);
	odd_files(&nm);
	while (now_ms() - start < ms) {
		struct shunt_journal_entry e;

		for (int n = 0; n < 64; n++) {
			make_lie(&nm, &e);
			lies += append(&j, &e);
		}
		if (rounds % 8 == 0 && forge_with_odd_socket(&nm, &e))
			forged += append(&j, &e);
		if (rounds % 2)
			round_indices(&j, &nm);
		kick(&j);
		rounds++;
		nap_us(300);
	}
	event("{\"event\": \"done\", \"lies\": %lu, \"forged\": %lu, \"rounds\": %lu}", lies, forged,
	      rounds);
	for (;;)
		pause();
}

/* ---- eventfds shuntd reads and writes ---- */

static void make_blocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

/* Whether @pid sleeps in an eventfd read (its wchan), as far as we may know. */
static bool stuck_in_read(pid_t pid)
{
	char path[64], what[64] = "";
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/wchan", (int)pid);
	f = fopen(path, "r");
	if (f) {
		if (!fgets(what, sizeof(what), f))
			what[0] = 0;
		fclose(f);
	}
	return strstr(what, "wait_intr") || strstr(what, "eventfd");
}

/* A listener of our own: the library says HELLO to shuntd for it, and maps our journal. */
static int listen_here(bool reuseport, struct sockaddr_in *a)
{
	socklen_t len = sizeof(*a);
	int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);

	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || (reuseport && setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
	    bind(lfd, (struct sockaddr *)a, sizeof(*a)) < 0 || listen(lfd, 16) < 0 ||
	    getsockname(lfd, (struct sockaddr *)a, &len) < 0)
		die("listen");
	return lfd;
}

static _Noreturn void run_kick_block(pid_t shuntd, int64_t ms)
{
	struct sockaddr_in a;
	int lfd = listen_here(false, &a);
	struct jrnl j = map_journal();
	int64_t start = now_ms();
	unsigned long rounds = 0;
	bool stuck = false;

	if (j.kick < 0)
		die("no journal kick among our eventfds");
	make_blocking(j.kick);
	while (!stuck && now_ms() - start < ms) {
		uint64_t v = 1;
		struct iovec io = { &v, sizeof(v) };
		struct timespec t0, t;
		long spin_ns = (long)(rnd32() % 50000);

		atomic_store(&j.hdr->kick, SHUNT_JOURNAL_ASLEEP);
		(void)!write(j.kick, &v, sizeof(v));
		clock_gettime(CLOCK_MONOTONIC, &t0);
		do
			clock_gettime(CLOCK_MONOTONIC, &t);
		while ((t.tv_sec - t0.tv_sec) * 1000000000L + t.tv_nsec - t0.tv_nsec < spin_ns);
		/* Taken back before shuntd reads it: shuntd's read finds nothing. */
		(void)!preadv2(j.kick, &io, 1, -1, RWF_NOWAIT);
		nap_us(1000);
		stuck = stuck_in_read(shuntd);
		rounds++;
	}
	event("{\"event\": \"done\", \"rounds\": %lu, \"stuck\": %s}", rounds,
	      stuck ? "true" : "false");
	(void)lfd;
	for (;;)
		pause();
}

/* Keep bell @arg full: each count taken off is put back at once (a blocking write). */
static void *refill(void *arg)
{
	int bell = (int)(intptr_t)arg;
	uint64_t one = 1;

	for (;;)
		if (write(bell, &one, sizeof(one)) < 0 && errno != EINTR)
			return NULL;
}

static _Noreturn void run_self_bell(int64_t ms)
{
	struct sockaddr_in a;
	int lfd = listen_here(false, &a), bells[8], n, fd, afd;
	unsigned long asks = 0;
	int64_t start;
	pthread_t t;

	/* A connection to ourselves: a channel, whose bell we hold as its client. */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		die("connect to ourselves");
	n = hostile_eventfds(bells, 8, true);
	if (!n)
		die("no channel bell among our eventfds: not under shunt run?");
	for (int i = 0; i < n; i++) {
		uint64_t v;

		/* To the top whatever it counts now (a write past it would wait). */
		while (read(bells[i], &v, sizeof(v)) == sizeof(v))
			;
		v = UINT64_MAX - 1;
		(void)!write(bells[i], &v, sizeof(v));
		make_blocking(bells[i]);
		if (pthread_create(&t, NULL, refill, (void *)(intptr_t)bells[i]))
			die("pthread_create");
	}
	event("{\"event\": \"filled\", \"port\": %d, \"bells\": %d}", ntohs(a.sin_port), n);
	afd = accept(lfd, NULL, NULL);
	if (fcntl(lfd, F_SETFL, O_NONBLOCK) < 0)
		die("O_NONBLOCK");
	/* Nothing queued now: each accept() finds the bell ringing and asks shuntd. */
	for (start = now_ms(); now_ms() - start < ms; asks++) {
		int r = accept(lfd, NULL, NULL);

		if (r >= 0)
			close(r);
		nap_us(500);
	}
	event("{\"event\": \"done\", \"accepted\": %s, \"rounds\": %lu}",
	      afd >= 0 ? "true" : "false", asks);
	for (;;)
		pause();
}

_Noreturn void hostile_journal_run(int fd, int port, const char *mode, pid_t victim_pid,
				   int64_t ms, const uint64_t *ids, int nids)
{
	(void)fd;	/* kept open: our own connection stays */
	if (!strcmp(mode, "journal"))
		run_journal(port, victim_pid, ms, ids, nids);
	if (!strcmp(mode, "kick-block"))
		run_kick_block(victim_pid, ms);
	if (!strcmp(mode, "self-bell"))
		run_self_bell(ms);
	die("unknown mode");
}
