// SPDX-License-Identifier: MIT
// Threads hammering one connection: four sender threads at each end (eight
// in all) send checksummed, self-delimiting messages both ways, through send,
// write and sendmsg. One direction has one reader, which checks that every
// message arrived whole, checksummed and in each sender's order; the other
// has three concurrent readers (recv, read, recvmsg), and every byte must
// still arrive exactly once, in whole messages within each chunk.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1M shm_rx_bytes>=1M
// t-timeout: 120
//
// What the kernel guarantees, and so all this asserts: a blocking send that
// does not have to wait for buffer space is atomic, and each recv returns a
// contiguous piece of the stream. Senders therefore keep at most WINDOW
// bytes unread per direction (a credit the readers return), far below any
// socket buffer, so no send ever waits and no send may come back short.
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

enum {
	SENDERS = 4,	     // per end
	READERS_MULTI = 3,   // on the many-readers direction
	MSGS = 30000,	     // per sender
	MAX_WORDS = 32,	     // per message
	WINDOW = 16 << 10,   // unread bytes per direction, at most
	RECV_MAX = 4096,
	HASH_BITS = 29,
};

// A message is 1..MAX_WORDS 8-byte words; every word names its direction
// (in the checksum), sender thread, sequence number, index and the length
// of its message, so any whole word found anywhere is identified and checked.
// Little endian, checksum first: word prefixes look random.
static uint64_t word_make(unsigned dir, unsigned tid, unsigned seq, unsigned widx,
			  unsigned len)
{
	uint64_t id = (uint64_t)tid | (uint64_t)seq << 3 | (uint64_t)widx << 23 |
		      (uint64_t)len << 29;
	uint64_t h = t_mix64(id ^ (uint64_t)(dir + 1) << 40 ^ 0x5eedULL);

	return (h & ((1ULL << HASH_BITS) - 1)) | id << HASH_BITS;
}

static unsigned msg_words(unsigned dir, unsigned tid, unsigned seq)
{
	return 1 + (unsigned)(t_mix64((uint64_t)dir << 48 | (uint64_t)tid << 32 | seq) %
			      MAX_WORDS);
}

struct ident {
	unsigned tid, seq, widx, len;
};

// Decode and check one word of direction dir.
static bool word_parse(unsigned dir, uint64_t w, struct ident *id)
{
	uint64_t v = w >> HASH_BITS;

	id->tid = v & 7;
	id->seq = (v >> 3) & 0xfffff;
	id->widx = (v >> 23) & 63;
	id->len = (v >> 29) & 63;
	return id->tid < SENDERS && id->seq < MSGS && id->len == msg_words(dir, id->tid, id->seq) &&
	       id->widx < id->len &&
	       word_make(dir, id->tid, id->seq, id->widx, id->len) == w;
}

// One direction of the connection.
struct dir {
	unsigned no; // 0: a->b, 1: b->a
	int tx, rx;  // the sending and receiving ends
	atomic_uint_fast64_t reserved, consumed;
	atomic_uint short_sends, send_errors;
	uint64_t total; // bytes all senders send
	// Word coverage: word k of sender t's stream is bit (base[t] + k).
	uint32_t *first_word; // [tid * MSGS + seq]: index of its first word
	uint64_t nwords;
	_Atomic uint64_t *seen;
	atomic_uint dup_words, bad_words, torn, disorder;
	atomic_uint_fast64_t received;
	// Pieces of words at chunk edges, checked once all is in.
	pthread_mutex_t frag_lock;
	struct frag {
		int pos; // in-word offset of the first byte, -1 when unknown
		unsigned len;
		unsigned char b[16];
	} *frags;
	size_t nfrags, cap;
};

static void credit_take(struct dir *d, uint64_t n)
{
	unsigned spins = 0;

	for (;;) {
		uint64_t r = atomic_load(&d->reserved);

		if (r + n - atomic_load(&d->consumed) <= WINDOW) {
			if (atomic_compare_exchange_weak(&d->reserved, &r, r + n))
				return;
			continue;
		}
		if (++spins < 64) {
			sched_yield();
		} else {
			spins = 0;
			usleep(50);
		}
	}
}

struct sender {
	struct dir *d;
	unsigned tid;
	pthread_t th;
};

static void *send_loop(void *arg)
{
	struct sender *s = arg;
	struct dir *d = s->d;
	uint64_t buf[MAX_WORDS];

	for (unsigned seq = 0; seq < MSGS; seq++) {
		unsigned len = msg_words(d->no, s->tid, seq);
		size_t n = len * sizeof(uint64_t);
		ssize_t w;

		for (unsigned i = 0; i < len; i++)
			buf[i] = word_make(d->no, s->tid, seq, i, len);
		credit_take(d, n);
		switch (seq % 3) {
		case 0:
			w = send(d->tx, buf, n, MSG_NOSIGNAL);
			break;
		case 1:
			w = write(d->tx, buf, n);
			break;
		default: {
			struct iovec iov[2] = { { buf, n / 2 }, { (char *)buf + n / 2, n - n / 2 } };
			struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };

			w = sendmsg(d->tx, &mh, MSG_NOSIGNAL);
		}
		}
		if (w < 0) {
			atomic_fetch_add(&d->send_errors, 1);
			return NULL;
		}
		if ((size_t)w != n) {
			// A torn send: the rest would interleave with others.
			atomic_fetch_add(&d->short_sends, 1);
			return NULL;
		}
	}
	return NULL;
}

static ssize_t recv_some(int fd, void *buf, size_t n, unsigned how)
{
	ssize_t r;

	do {
		switch (how % 3) {
		case 0:
			r = recv(fd, buf, n, 0);
			break;
		case 1:
			r = read(fd, buf, n);
			break;
		default: {
			struct iovec iov[2] = { { buf, n / 3 }, { (char *)buf + n / 3, n - n / 3 } };
			struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };

			r = recvmsg(fd, &mh, 0);
		}
		}
	} while (r < 0 && errno == EINTR);
	if (r < 0)
		t_fatal("receive");
	return r;
}

// Mostly whole words, now and then an odd size that splits one.
static size_t recv_size(uint64_t *rng)
{
	uint64_t r = t_rand(rng);

	if (r % 64 == 0)
		return 1 + (r >> 8) % RECV_MAX;
	return 8 * (1 + (r >> 8) % (RECV_MAX / 8));
}

static void cover(struct dir *d, const struct ident *id)
{
	uint64_t bit = d->first_word[id->tid * MSGS + id->seq] + id->widx;
	uint64_t mask = 1ULL << (bit % 64);

	if (atomic_fetch_or(&d->seen[bit / 64], mask) & mask)
		atomic_fetch_add(&d->dup_words, 1);
}

// ---- a->b: one reader, which sees the whole stream in order

static void *strict_reader(void *arg)
{
	struct dir *d = arg;
	unsigned char buf[RECV_MAX], part[8];
	unsigned npart = 0, next_seq[SENDERS] = { 0 };
	struct ident cur = { .len = 0 }; // len 0: between messages
	uint64_t rng = 0x51, got = 0;
	unsigned calls = 0;
	ssize_t r;

	while ((r = recv_some(d->rx, buf, recv_size(&rng), calls++)) > 0) {
		got += (uint64_t)r;
		atomic_fetch_add(&d->consumed, (uint64_t)r);
		for (ssize_t i = 0; i < r; i++) {
			struct ident id;
			uint64_t w;

			part[npart++] = buf[i];
			if (npart < 8)
				continue;
			npart = 0;
			memcpy(&w, part, 8);
			if (!word_parse(d->no, w, &id)) {
				atomic_fetch_add(&d->bad_words, 1);
				continue;
			}
			cover(d, &id);
			if (cur.len) {
				// Inside a message: the next word of it, nothing else.
				if (id.tid != cur.tid || id.seq != cur.seq || id.widx != cur.widx + 1)
					atomic_fetch_add(&d->torn, 1);
			} else if (id.widx != 0) {
				atomic_fetch_add(&d->torn, 1);
			} else {
				if (id.seq != next_seq[id.tid])
					atomic_fetch_add(&d->disorder, 1);
				next_seq[id.tid] = id.seq + 1;
			}
			cur = id;
			if (id.widx + 1 == id.len)
				cur.len = 0;
		}
	}
	if (npart)
		atomic_fetch_add(&d->bad_words, 1);
	atomic_fetch_add(&d->received, got);
	return NULL;
}

// ---- b->a: several readers at once; each chunk is checked on its own

static void frag_add(struct dir *d, int pos, const unsigned char *b, unsigned len)
{
	pthread_mutex_lock(&d->frag_lock);
	if (d->nfrags == d->cap) {
		d->cap = d->cap ? 2 * d->cap : 256;
		d->frags = realloc(d->frags, d->cap * sizeof(*d->frags));
		if (!d->frags)
			t_fatal("realloc");
	}
	d->frags[d->nfrags].pos = pos;
	d->frags[d->nfrags].len = len;
	memcpy(d->frags[d->nfrags].b, b, len);
	d->nfrags++;
	pthread_mutex_unlock(&d->frag_lock);
}

// The in-word offset of the chunk's first byte: the alignment at which all
// its whole words are valid; -1 when it holds no whole valid word.
static int chunk_align(struct dir *d, const unsigned char *b, size_t n)
{
	for (int k = 0; k < 8; k++) {
		size_t start = (size_t)((8 - k) % 8), words = 0;
		bool ok = true;

		for (size_t off = start; off + 8 <= n && ok; off += 8, words++) {
			struct ident id;
			uint64_t w;

			memcpy(&w, b + off, 8);
			ok = word_parse(d->no, w, &id);
		}
		if (ok && words)
			return k;
	}
	return -1;
}

struct multi_reader {
	struct dir *d;
	unsigned no;
	pthread_t th;
};

static void *multi_reader(void *arg)
{
	struct multi_reader *m = arg;
	struct dir *d = m->d;
	unsigned char buf[RECV_MAX];
	// Per sender, the last word this reader saw: a later recv by the same
	// thread gets later bytes, so each sender's words only go forward here.
	int64_t last[SENDERS];
	uint64_t rng = 0x77 + m->no, got = 0;
	unsigned calls = m->no;
	ssize_t r;

	for (int t = 0; t < SENDERS; t++)
		last[t] = -1;
	while ((r = recv_some(d->rx, buf, recv_size(&rng), calls++)) > 0) {
		size_t n = (size_t)r, off;
		int k = chunk_align(d, buf, n);
		struct ident prev = { .len = 0 };

		got += n;
		if (k < 0) {
			if (n >= 15)
				atomic_fetch_add(&d->bad_words, 1);
			else
				frag_add(d, -1, buf, (unsigned)n);
			atomic_fetch_add(&d->consumed, n);
			continue;
		}
		off = (size_t)((8 - k) % 8);
		if (off)
			frag_add(d, k, buf, (unsigned)off);
		for (; off + 8 <= n; off += 8) {
			struct ident id;
			uint64_t w;
			int64_t pos;

			memcpy(&w, buf + off, 8);
			word_parse(d->no, w, &id);
			cover(d, &id);
			// Within a chunk a message is whole: its words follow
			// each other, and a new one starts only after the last.
			if (prev.len && prev.widx + 1 < prev.len &&
			    (id.tid != prev.tid || id.seq != prev.seq || id.widx != prev.widx + 1))
				atomic_fetch_add(&d->torn, 1);
			if (prev.len && prev.widx + 1 == prev.len && id.widx != 0)
				atomic_fetch_add(&d->torn, 1);
			pos = (int64_t)d->first_word[id.tid * MSGS + id.seq] + id.widx;
			if (pos <= last[id.tid])
				atomic_fetch_add(&d->disorder, 1);
			last[id.tid] = pos;
			prev = id;
		}
		if (off < n)
			frag_add(d, 0, buf + off, (unsigned)(n - off));
		atomic_fetch_add(&d->consumed, n);
	}
	atomic_fetch_add(&d->received, got);
	return NULL;
}

// Content of word `bit` (its identity comes from the coverage layout).
static uint64_t word_at(struct dir *d, uint64_t bit)
{
	for (unsigned t = 0; t < SENDERS; t++) {
		uint32_t lo = d->first_word[t * MSGS], hi_seq = MSGS - 1;
		uint32_t hi = d->first_word[t * MSGS + hi_seq] + msg_words(d->no, t, hi_seq);

		if (bit < lo || bit >= hi)
			continue;
		// Binary search for the message holding it.
		unsigned a = 0, b = MSGS - 1;

		while (a < b) {
			unsigned mid = (a + b + 1) / 2;

			if (d->first_word[t * MSGS + mid] <= bit)
				a = mid;
			else
				b = mid - 1;
		}
		return word_make(d->no, t, a, (unsigned)(bit - d->first_word[t * MSGS + a]),
				 msg_words(d->no, t, a));
	}
	t_fatal("word %llu outside every stream", (unsigned long long)bit);
}

static bool piece_matches(const uint64_t *words, size_t n, int pos, const unsigned char *b,
			  unsigned len)
{
	for (size_t i = 0; i < n; i++)
		if (!memcmp((const unsigned char *)&words[i] + pos, b, len))
			return true;
	return false;
}

// Every word not seen whole must be made of the pieces at chunk edges: as
// many bytes, and each piece part of such words at its place.
static bool frags_fit(struct dir *d)
{
	uint64_t *missing = NULL, nmiss = 0, frag_bytes = 0;
	bool ok = true;

	for (uint64_t bit = 0; bit < d->nwords; bit++) {
		if (atomic_load(&d->seen[bit / 64]) & (1ULL << (bit % 64)))
			continue;
		missing = realloc(missing, (nmiss + 1) * sizeof(*missing));
		if (!missing)
			t_fatal("realloc");
		missing[nmiss++] = word_at(d, bit);
	}
	for (size_t i = 0; i < d->nfrags && ok; i++) {
		struct frag *f = &d->frags[i];

		frag_bytes += f->len;
		if (f->pos == 0) {
			ok = piece_matches(missing, nmiss, 0, f->b, f->len);
		} else if (f->pos > 0) {
			ok = piece_matches(missing, nmiss, f->pos, f->b, f->len);
		} else {
			// A short chunk: the end of one word, maybe the start of another.
			ok = false;
			for (int p = 0; p < 8 && !ok; p++) {
				unsigned head = f->len < 8u - p ? f->len : 8u - p;

				ok = piece_matches(missing, nmiss, p, f->b, head) &&
				     (head == f->len ||
				      piece_matches(missing, nmiss, 0, f->b + head, f->len - head));
			}
		}
	}
	ok = ok && frag_bytes == nmiss * 8;
	free(missing);
	return ok;
}

static void dir_init(struct dir *d, unsigned no, int tx, int rx)
{
	uint64_t w = 0;

	memset(d, 0, sizeof(*d));
	d->no = no;
	d->tx = tx;
	d->rx = rx;
	pthread_mutex_init(&d->frag_lock, NULL);
	d->first_word = calloc(SENDERS * MSGS, sizeof(*d->first_word));
	if (!d->first_word)
		t_fatal("calloc");
	for (unsigned t = 0; t < SENDERS; t++)
		for (unsigned s = 0; s < MSGS; s++) {
			d->first_word[t * MSGS + s] = (uint32_t)w;
			w += msg_words(no, t, s);
		}
	d->nwords = w;
	d->total = w * 8;
	d->seen = calloc((w + 63) / 64, sizeof(*d->seen));
	if (!d->seen)
		t_fatal("calloc");
}

static void dir_report(struct dir *d, const char *name, unsigned readers)
{
	uint64_t missing = 0;

	for (uint64_t bit = 0; bit < d->nwords; bit++)
		if (!(atomic_load(&d->seen[bit / 64]) & (1ULL << (bit % 64))))
			missing++;
	printf("%s: %d sender threads x %d messages, %u reader thread%s:\n", name, SENDERS,
	       MSGS, readers, readers > 1 ? "s" : "");
	t_expect(atomic_load(&d->send_errors) == 0 && atomic_load(&d->short_sends) == 0,
		 "  every send took its whole message");
	t_expect(atomic_load(&d->received) == d->total, "  bytes received: %llu",
		 (unsigned long long)d->total);
	t_expect(atomic_load(&d->bad_words) == 0, "  every whole word checksummed and valid");
	t_expect(atomic_load(&d->dup_words) == 0, "  no word received twice");
	t_expect(atomic_load(&d->torn) == 0,
		 readers > 1 ? "  within each chunk, messages whole and not interleaved"
			     : "  every message whole, none interleaved with another");
	t_expect(atomic_load(&d->disorder) == 0,
		 readers > 1 ? "  each reader sees each sender's words in order"
			     : "  each sender's messages in order");
	if (readers == 1)
		t_expect(missing == 0, "  every word of every message received");
	else
		t_expect(frags_fit(d),
			 "  words not seen whole are made up exactly by the pieces at chunk edges");
}

int main(void)
{
	struct dir ab, ba;
	struct sender sa[SENDERS], sb[SENDERS];
	struct multi_reader mr[READERS_MULTI];
	pthread_t strict;
	int a, b;

	t_start(110);
	t_pair(AF_INET, &a, &b);
	dir_init(&ab, 0, a, b);
	dir_init(&ba, 1, b, a);

	if (pthread_create(&strict, NULL, strict_reader, &ab))
		t_fatal("pthread_create");
	for (unsigned i = 0; i < READERS_MULTI; i++) {
		mr[i] = (struct multi_reader){ .d = &ba, .no = i };
		if (pthread_create(&mr[i].th, NULL, multi_reader, &mr[i]))
			t_fatal("pthread_create");
	}
	for (unsigned t = 0; t < SENDERS; t++) {
		sa[t] = (struct sender){ .d = &ab, .tid = t };
		sb[t] = (struct sender){ .d = &ba, .tid = t };
		if (pthread_create(&sa[t].th, NULL, send_loop, &sa[t]) ||
		    pthread_create(&sb[t].th, NULL, send_loop, &sb[t]))
			t_fatal("pthread_create");
	}
	// Each direction ends with EOF once its senders are done, which also
	// returns every reader still blocked in a receive call.
	for (unsigned t = 0; t < SENDERS; t++)
		pthread_join(sa[t].th, NULL);
	if (shutdown(a, SHUT_WR) < 0)
		t_fatal("shutdown(a)");
	for (unsigned t = 0; t < SENDERS; t++)
		pthread_join(sb[t].th, NULL);
	if (shutdown(b, SHUT_WR) < 0)
		t_fatal("shutdown(b)");
	pthread_join(strict, NULL);
	for (unsigned i = 0; i < READERS_MULTI; i++)
		pthread_join(mr[i].th, NULL);

	dir_report(&ab, "a->b", 1);
	dir_report(&ba, "b->a", READERS_MULTI);
	close(a);
	close(b);
	return t_finish();
}
