// SPDX-License-Identifier: MIT
/*
 * A hostile peer for tests/control/test_hostile.py. Run under `shunt run`,
 * it connects to (or accepts from) a victim, finds the circuit its own
 * libshunt mapped (/memfd:shunt-circuit in /proc/self/maps, or its slot of
 * a /memfd:shunt-channel) and abuses it:
 *
 *   hostile connect PORT MODE VICTIM_PID MS [ID...]   connect to 127.0.0.1:PORT
 *   hostile listen - MODE VICTIM_PID MS               listen on 127.0.0.1:0 and accept once
 *
 * Modes that write shared memory do it for MS milliseconds, producing bytes
 * straight into the ring meanwhile, then keep up the lies that would stall
 * the victim most until they are killed (shuntd buries the end). Every byte
 * it ever puts in a ring is "ink" (t_ink.h), so a victim can tell ring bytes
 * from anything else:
 *
 *   indices       garbage, huge and backwards heads and tails of both rings
 *   own-index     the victim's own head and tail say there is data and room
 *   header        magic, version, ring_size, setup and the wait counters
 *   state         state bits (but KERNEL), flags and pending errors of both ends
 *   kernel-bit    the victim's KERNEL bit: "shuntd moved you onto your kernel socket"
 *   opts          the victim's option words (O_NONBLOCK, timeouts, lowat, linger);
 *                 then blocking, no timeouts and a huge SO_RCVLOWAT
 *   lock-dead     the victim's locks held by a process that does not exist
 *   lock-foreign  ... by live processes (this one, then init, which stays)
 *   lock-self     ... by the victim's own pid
 *   random        random bytes over the whole control page, random ink in the rings
 *   spam          every link bit and eventfd it can reach, garbage routes
 *   stall         send 1000 bytes (the t_ink stream), never read, wait to be killed
 *   exit-mid      start a 4 MiB send of the stream, SIGKILL itself 100 ms later
 *   chan-*        spoil the channel of our connection instead (hostile_chan.c)
 *   journal, kick-block, self-bell
 *                 lie to shuntd instead (hostile_journal.c; IDs: the victim's circuits)
 *
 * stdout: JSON lines ({"event": ...}); exit 2 on a setup failure.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <linux/futex.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "shunt/chan.h"
#include "shunt/circuit.h"
#include "shunt/link.h"
#include "hostile.h"
#include "t_ink.h"
#include "t_loopback.h"

struct target {
	struct shunt_circuit_hdr *hdr;
	struct shunt_chan_hdr *chan;	/* the channel the circuit is a slot of, or NULL */
	uint32_t ring_size;
	unsigned me, victim;		/* end indices */
	pid_t victim_pid;
};

void event(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
}

_Noreturn void die(const char *what)
{
	event("{\"event\": \"error\", \"what\": \"%s\", \"errno\": %d}", what, errno);
	_exit(2);
}

/* xorshift64*, seeded from getrandom: cheap enough to fill rings with. */
uint64_t rnd64(void)
{
	static uint64_t x;

	if (!x && getrandom(&x, sizeof(x), 0) != sizeof(x))
		die("getrandom");
	x |= !x;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	return x * 0x2545f4914f6cdd1dull;
}

uint32_t rnd32(void)
{
	return (uint32_t)rnd64();
}

int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void nap_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

/* ---- connecting, and finding what our libshunt mapped ---- */

static int accept_one(void)
{
	int port, lfd = t_loopback_listen(&port);

	event("{\"event\": \"listening\", \"port\": %d, \"pid\": %d}", port, (int)getpid());
	return t_loopback_accept(lfd);
}

/*
 * Mappings of memfds named @name ("shunt-circuit", "shunt-link"): up to
 * @max of them into @at/@size; returns how many.
 */
int find_mappings(const char *name, void **at, size_t *size, int max)
{
	char line[512], want[64];
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0;

	if (!f)
		die("/proc/self/maps");
	snprintf(want, sizeof(want), "/memfd:%s (deleted)", name);
	while (n < max && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (!strstr(line, want) || sscanf(line, "%lx-%lx", &lo, &hi) != 2)
			continue;
		at[n] = (void *)lo;
		size[n++] = hi - lo;
	}
	fclose(f);
	return n;
}

int hostile_eventfds(int *fds, int max, bool semaphore)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		die("/proc/self/fd");
	while (n < max && (de = readdir(d))) {
		char target[64], path[64], info[512];
		ssize_t len = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
		int fd = atoi(de->d_name);
		FILE *f;
		bool sem = false;

		if (len <= 0 || (target[len] = 0, strcmp(target, "anon_inode:[eventfd]")))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
		if ((f = fopen(path, "r"))) {
			while (fgets(info, sizeof(info), f))
				sem = sem || !strcmp(info, "eventfd-semaphore: 1\n");
			fclose(f);
		}
		if (!semaphore || sem)
			fds[n++] = fd;
	}
	closedir(d);
	return n;
}

struct shunt_wire_addr hostile_addr(bool plausible, uint16_t port)
{
	struct shunt_wire_addr a = { .family = AF_INET, .port = port };

	a.addr[0] = 127;
	a.addr[3] = (uint8_t)(1 + rnd32() % 254);
	if (plausible)
		return a;
	switch (rnd32() % 6) {
	case 0: a.family = 0; break;
	case 1: a.family = (uint16_t)rnd32(); break;
	case 2: a.addr[4 + rnd32() % 12] = 1; break;	/* IPv4 with bytes past its four */
	case 3: a.reserved = rnd32() | 1; break;
	case 4: a.scope_id = rnd32() | 1; break;
	default: a.family = AF_UNIX; break;
	}
	return a;
}

/*
 * Our connection's circuit in a channel (include/shunt/chan.h): the one
 * slot in use, our only connection through it; or NULL.
 */
static struct shunt_circuit_hdr *channel_slot(void *at, uint32_t *ring_size)
{
	struct shunt_chan_hdr *ch = at;
	_Atomic uint32_t *st;
	struct shunt_circuit_hdr *found = NULL;

	if (ch->magic != SHUNT_CHAN_MAGIC || ch->version != SHUNT_CHAN_VERSION)
		return NULL;
	st = (_Atomic uint32_t *)((char *)ch + shunt_chan_states_offset(ch->slots));
	for (uint32_t i = 0; i < ch->slots; i++)
		if (shunt_slot_state(atomic_load(&st[i])) == SHUNT_SLOT_USED)
			found = (struct shunt_circuit_hdr *)
				((char *)ch + shunt_chan_slot_offset(ch->slots, ch->ring_size, i));
	*ring_size = ch->ring_size;
	return found;
}

static struct target find_circuit(unsigned me, pid_t victim_pid)
{
	struct target t = { .me = me, .victim = me ^ 1, .victim_pid = victim_pid };
	void *at;
	size_t size;

	if (find_mappings("shunt-circuit", &at, &size, 1) == 1) {
		t.hdr = at;
		t.ring_size = (uint32_t)((size - SHUNT_CIRCUIT_HDR_SIZE) / 2);
	} else if (find_mappings("shunt-channel", &at, &size, 1) == 1) {
		t.hdr = channel_slot(at, &t.ring_size);
		t.chan = at;
	}
	if (!t.hdr)
		die("no circuit mapping: the connection is not over shunt");
	event("{\"event\": \"mapped\", \"end\": %u, \"ring_size\": %" PRIu32 "}", me, t.ring_size);
	return t;
}

/* ---- writing into the rings as their (bad) producer ---- */

static uint8_t *ring_data(struct target *t, unsigned r)
{
	return (uint8_t *)t->hdr + shunt_ring_offset(r, t->ring_size);
}

/* Make the victim look: bump its futex word and the waiters' hints. */
static void poke_victim(struct target *t)
{
	struct shunt_circuit_end *v = &t->hdr->end[t->victim];

	atomic_fetch_add(&v->wake, 1);
	syscall(SYS_futex, &v->wake, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

/* Produce @n ink bytes at our tail, as a legitimate producer would. */
static void produce(struct target *t, size_t n)
{
	struct shunt_ring_ctl *ring = &t->hdr->ring[shunt_tx_ring(t->me)];
	uint64_t tail = atomic_load(&ring->tail);
	uint8_t *data = ring_data(t, shunt_tx_ring(t->me));

	for (size_t i = 0; i < n; i++)
		data[(tail + i) & (t->ring_size - 1)] = t_ink(rnd32());
	atomic_store(&ring->tail, tail + n);
	poke_victim(t);
}

/* Fill both rings' bytes with random ink. */
static void ink_rings(struct target *t)
{
	for (unsigned r = 0; r < 2; r++) {
		uint8_t *data = ring_data(t, r);

		for (uint32_t i = 0; i < t->ring_size; i += 8) {
			uint64_t v = rnd64();

			for (unsigned k = 0; k < 8; k++)
				data[i + k] = t_ink((uint32_t)(v >> (8 * k)));
		}
	}
}

/* An index near @base that no honest ring can have, or a random one. */
static uint64_t bad_index(uint64_t base, uint32_t size)
{
	switch (rnd32() % 7) {
	case 0: return rnd64();
	case 1: return base + size + 1;		/* more than the ring holds */
	case 2: return base - 1;		/* backwards */
	case 3: return base - (uint64_t)size * 3;
	case 4: return UINT64_MAX;
	case 5: return base + size;		/* exactly full: stale ink to read */
	default: return base + (rnd32() % (2 * size));
	}
}

/* ---- the modes ---- */

static void round_indices(struct target *t)
{
	struct shunt_ring_ctl *in = &t->hdr->ring[shunt_rx_ring(t->me)];	/* victim produces */
	struct shunt_ring_ctl *out = &t->hdr->ring[shunt_tx_ring(t->me)];	/* victim consumes */

	switch (rnd32() % 6) {
	case 0: atomic_store(&out->tail, bad_index(atomic_load(&out->head), t->ring_size)); break;
	case 1: atomic_store(&in->head, bad_index(atomic_load(&in->tail), t->ring_size)); break;
	/* The victim's own indices: it must not believe them either. */
	case 2: atomic_store(&out->head, bad_index(atomic_load(&out->tail), t->ring_size)); break;
	case 3: atomic_store(&in->tail, bad_index(atomic_load(&in->head), t->ring_size)); break;
	case 4: atomic_store(&in->head, atomic_load(&in->tail)); break;	/* honest credit */
	default: produce(t, 1 + rnd32() % 3000); break;
	}
	poke_victim(t);
}

/*
 * The victim's own indices, which only it writes: its rx head says a ring's
 * worth is unread, its tx tail that the ring is empty. Its private copies
 * know better, so it finds nothing to read and no room once the ring is full.
 */
static void round_own_index(struct target *t)
{
	struct shunt_ring_ctl *in = &t->hdr->ring[shunt_rx_ring(t->me)];	/* victim produces */
	struct shunt_ring_ctl *out = &t->hdr->ring[shunt_tx_ring(t->me)];	/* victim consumes */

	atomic_store(&out->head, atomic_load(&out->tail) - t->ring_size);
	atomic_store(&in->tail, atomic_load(&in->head));
	poke_victim(t);
}

static void scribble_end(struct shunt_circuit_end *e)
{
	atomic_store(&e->rx_waiters, rnd32() % 3 ? 0 : rnd32());
	atomic_store(&e->tx_waiters, rnd32() % 3 ? 0 : rnd32());
	atomic_store(&e->evented, rnd32());
	atomic_store(&e->wake, rnd32());
	atomic_store(&e->holders, rnd32() % 4);
}

static void round_header(struct target *t)
{
	static const uint32_t sizes[] = { 0, 1, 4095, UINT32_MAX, 1u << 31 };

	t->hdr->magic = rnd32();
	t->hdr->version = rnd32();
	t->hdr->ring_size = rnd32() % 2 ? rnd32() : sizes[rnd32() % 5];
	atomic_store(&t->hdr->setup, rnd32() % 2 ? rnd32() : rnd32() % 3);
	scribble_end(&t->hdr->end[0]);
	scribble_end(&t->hdr->end[1]);
	if (rnd32() % 4 == 0)
		produce(t, 1 + rnd32() % 500);
	poke_victim(t);
}

static uint32_t bad_errno(void)
{
	static const uint32_t errs[] = { 0, ECONNREFUSED, EPIPE, ETIMEDOUT, ENOMEM, 0x7fffffff };

	return rnd32() % 2 ? rnd32() : errs[rnd32() % 6];
}

static void round_state(struct target *t)
{
	for (unsigned e = 0; e < 2; e++) {
		struct shunt_circuit_end *end = &t->hdr->end[e];

		/*
		 * Set and clear: a flag the victim raised may vanish under it.
		 * KERNEL has a mode of its own (kernel-bit).
		 */
		atomic_store(&end->state, (rnd32() % 2 ? rnd32() : rnd32() & 0x1f) & ~SHUNT_END_KERNEL);
		atomic_store(&end->flags, rnd32() % 2 ? 0 : rnd32());
		atomic_store(&end->sk_err, bad_errno());
	}
	if (rnd32() % 4 == 0)
		produce(t, 1 + rnd32() % 500);
	poke_victim(t);
}

/* The bit only shuntd may set: "the connection moved onto the kernel". */
static void round_kernel_bit(struct target *t)
{
	atomic_fetch_or(&t->hdr->end[t->victim].state, SHUNT_END_KERNEL);
	produce(t, 1 + rnd32() % 500);
}

static int64_t bad_timeout(void)
{
	static const int64_t v[] = { 0, -1, INT64_MAX, INT64_MIN, 1, 3600000000LL };

	return v[rnd32() % 6];
}

static void round_opts(struct target *t)
{
	struct shunt_circuit_end *v = &t->hdr->end[t->victim];

	atomic_store(&v->nonblock, rnd32() % 2);
	atomic_store(&v->rcvtimeo_us, bad_timeout());
	atomic_store(&v->sndtimeo_us, bad_timeout());
	atomic_store(&v->rcvlowat, rnd32() % 2 ? UINT32_MAX : rnd32() % 3);
	atomic_store(&v->linger_abort, rnd32() % 2);
	if (rnd32() % 4 == 0)
		produce(t, 1 + rnd32() % 500);
}

/* A pid no process has (now). */
pid_t dead_pid(void)
{
	for (pid_t p = 4000000; p > 300; p -= 7919)
		if (kill(p, 0) < 0 && errno == ESRCH)
			return p;
	die("no free pid");
}

static void stamp_locks(struct target *t, uint32_t owner)
{
	struct shunt_circuit_end *v = &t->hdr->end[t->victim];
	uint32_t word = (owner & 0x3fffffffu) | (1u << 30) | (rnd32() % 2 ? 1u << 31 : 0);

	atomic_store(&v->tx_lock, word);
	atomic_store(&v->rx_lock, word);
}

static void round_lock(struct target *t, const char *mode, bool second_half)
{
	if (!strcmp(mode, "lock-dead"))
		stamp_locks(t, (uint32_t)dead_pid());
	else if (!strcmp(mode, "lock-self"))
		stamp_locks(t, (uint32_t)t->victim_pid);
	else	/* lock-foreign: ourselves while we live, then init, which never exits */
		stamp_locks(t, second_half ? 1u : (uint32_t)getpid());
	if (rnd32() % 4 == 0)
		produce(t, 1 + rnd32() % 500);
	poke_victim(t);
}

static void round_random(struct target *t)
{
	union {
		struct shunt_circuit_hdr hdr;
		uint64_t words[SHUNT_CIRCUIT_HDR_SIZE / 8];
	} page;

	for (size_t i = 0; i < sizeof(page.words) / 8; i++)
		page.words[i] = rnd64();
	/* All of it but the KERNEL bits, which kernel-bit covers. */
	for (unsigned e = 0; e < 2; e++)
		page.hdr.end[e].state &= ~(uint32_t)SHUNT_END_KERNEL;
	memcpy(t->hdr, &page, sizeof(page));
	if (rnd32() % 8 == 0)
		ink_rings(t);
	poke_victim(t);
}

/* Every link we map gets every bit set; every eventfd we hold gets written. */
static void round_spam(struct target *t)
{
	void *at[16];
	size_t size[16];
	int n = find_mappings("shunt-link", at, size, 16);
	DIR *d;
	struct dirent *de;

	for (int i = 0; i < n; i++) {
		struct shunt_link_hdr *l = at[i];

		for (unsigned s = 0; s < 2; s++) {
			atomic_store(&l->side[s].sleepers, rnd32() % 2 ? 1 : rnd32());
			for (unsigned w = 0; w < SHUNT_LINK_SUMMARY_WORDS; w++)
				atomic_store(&l->side[s].summary[w], rnd32() % 3 ? UINT64_MAX : 0);
			for (unsigned w = 0; w < SHUNT_LINK_SLOT_WORDS; w++)
				atomic_store(&l->side[s].bits[w], rnd32() % 3 ? UINT64_MAX : 0);
		}
	}
	d = opendir("/proc/self/fd");
	while (d && (de = readdir(d))) {
		char target[64];
		ssize_t len = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
		uint64_t one = 1;

		if (len > 0 && (target[len] = 0, !strcmp(target, "anon_inode:[eventfd]")))
			(void)!write(atoi(de->d_name), &one, sizeof(one));
	}
	if (d)
		closedir(d);
	for (unsigned e = 0; e < 2; e++)
		for (unsigned i = 0; i < SHUNT_ROUTES; i++)
			atomic_store(&t->hdr->end[e].route[i],
				     rnd32() % 2 ? rnd64() : shunt_route_make(rnd32() % 64, rnd32()));
	atomic_store(&t->hdr->end[t->victim].evented, rnd32());
	if (rnd32() % 4 == 0)
		produce(t, 1 + rnd32() % 500);
	poke_victim(t);
}

static void round_garbage(struct target *t, const char *mode, bool second_half)
{
	if (!strcmp(mode, "indices"))
		round_indices(t);
	else if (!strcmp(mode, "own-index"))
		round_own_index(t);
	else if (!strcmp(mode, "header"))
		round_header(t);
	else if (!strcmp(mode, "state"))
		round_state(t);
	else if (!strcmp(mode, "kernel-bit"))
		round_kernel_bit(t);
	else if (!strcmp(mode, "opts"))
		round_opts(t);
	else if (!strncmp(mode, "lock-", 5))
		round_lock(t, mode, second_half);
	else if (!strcmp(mode, "random"))
		round_random(t);
	else if (!strcmp(mode, "spam"))
		round_spam(t);
	else
		die("unknown mode");
}

/*
 * After the garbage: the lies that, if believed, leave the victim waiting
 * forever. Kept up while we live, since the victim's own setsockopt,
 * fcntl and unlock rewrite these words.
 */
static void keep_lying(struct target *t, const char *mode)
{
	struct shunt_circuit_end *v = &t->hdr->end[t->victim];

	if (!strcmp(mode, "opts")) {
		atomic_store(&v->nonblock, 0);
		atomic_store(&v->rcvtimeo_us, 0);
		atomic_store(&v->sndtimeo_us, 0);
		atomic_store(&v->rcvlowat, UINT32_MAX);
	} else if (!strcmp(mode, "own-index")) {
		round_own_index(t);
	} else if (!strcmp(mode, "lock-foreign")) {
		stamp_locks(t, 1);
	} else if (!strcmp(mode, "lock-self")) {
		stamp_locks(t, (uint32_t)t->victim_pid);
	}
}

/* Send @n bytes of the stream, blocking (through our libshunt, honestly). */
static void send_stream(int fd, size_t n)
{
	static uint8_t buf[64 << 10];
	size_t off = 0;

	while (off < n) {
		size_t len = n - off < sizeof(buf) ? n - off : sizeof(buf);
		ssize_t r;

		t_stream(buf, off, len);
		r = send(fd, buf, len, MSG_NOSIGNAL);
		if (r <= 0)
			die("send");
		off += (size_t)r;
	}
}

static void *killer(void *arg)
{
	(void)arg;
	nap_us(100 * 1000);
	raise(SIGKILL);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode;
	struct target t;
	int64_t ms, start;
	pid_t victim_pid;
	int fd;
	bool connector;

	if (argc < 6) {
		fprintf(stderr, "usage: %s connect PORT|listen - MODE VICTIM_PID MS [ID...]\n",
			argv[0]);
		return 2;
	}
	connector = !strcmp(argv[1], "connect");
	mode = argv[3];
	victim_pid = atoi(argv[4]);
	ms = atoll(argv[5]);
	if (!strcmp(mode, "self-bell") || !strcmp(mode, "kick-block")) {
		uint64_t none;

		hostile_journal_run(-1, 0, mode, victim_pid, ms, &none, 0);
	}
	if (!strncmp(mode, "chan-", 5) || !strcmp(mode, "journal"))
		fd = hostile_chan_connect(atoi(argv[2]));
	else
		fd = connector ? t_loopback_connect(atoi(argv[2])) : accept_one();
	if (!strncmp(mode, "chan-", 5))
		hostile_chan_run(fd, atoi(argv[2]), mode, ms);
	if (!strcmp(mode, "journal")) {
		uint64_t ids[64];
		int n = 0;

		for (int i = 6; i < argc && n < 64; i++)
			ids[n++] = strtoull(argv[i], NULL, 0);
		hostile_journal_run(fd, atoi(argv[2]), mode, victim_pid, ms, ids, n);
	}

	if (!strcmp(mode, "stall")) {
		send_stream(fd, 1000);
		event("{\"event\": \"sent\", \"bytes\": 1000}");
		for (;;)
			pause();
	}
	if (!strcmp(mode, "exit-mid")) {
		pthread_t th;

		event("{\"event\": \"sending\", \"bytes\": %d}", 4 << 20);
		if (pthread_create(&th, NULL, killer, NULL))
			die("pthread_create");
		send_stream(fd, 4 << 20);
		for (;;)
			pause();	/* the killer is on its way */
	}

	t = find_circuit(connector ? SHUNT_END_CONNECTOR : SHUNT_END_ACCEPTOR, victim_pid);
	ink_rings(&t);
	start = now_ms();
	while (now_ms() - start < ms) {
		round_garbage(&t, mode, now_ms() - start > ms / 2);
		/* The lock modes re-stamp after the victim took a dead owner's lock over. */
		nap_us(!strncmp(mode, "lock-", 5) ? 5000 : 200);
	}
	event("{\"event\": \"done\"}");
	/*
	 * Then keep up the lies that should stall the victim most, and produce
	 * nothing more, until killed (as a crash leaves: shuntd buries the end).
	 */
	for (;;) {
		keep_lying(&t, mode);
		nap_us(200);
	}
}
