// SPDX-License-Identifier: MIT
/*
 * The byte ring: wrap-around copies, indices a hostile peer could publish,
 * and giving back the pages of a range.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/ring.h"

enum { RING = 4096 };

struct fixture {
	struct shunt_circuit_hdr *hdr;
	struct shunt_ring tx, rx;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	f->hdr = aligned_alloc(4096, shunt_circuit_size(RING));
	memset(f->hdr, 0, shunt_circuit_size(RING));
	shunt_ring_attach(&f->tx, f->hdr, 0, RING, 1);
	shunt_ring_attach(&f->rx, f->hdr, 0, RING, 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	free(f->hdr);
	free(f);
	return 0;
}

static void t_round_trip_across_wrap(void **state)
{
	struct fixture *f = *state;
	char in[3000], out[3000];

	for (int round = 0; round < 10; round++) {
		for (size_t i = 0; i < sizeof(in); i++)
			in[i] = (char)(round * 7 + i);
		assert_int_equal(shunt_ring_space(&f->tx), RING - 0);
		shunt_ring_put(&f->tx, 0, in, sizeof(in));
		shunt_ring_publish(&f->tx, sizeof(in));
		assert_int_equal(shunt_ring_avail(&f->rx), sizeof(in));
		shunt_ring_get(&f->rx, 0, out, sizeof(out));
		assert_memory_equal(in, out, sizeof(in));
		shunt_ring_consume(&f->rx, sizeof(in));
		assert_int_equal(shunt_ring_avail(&f->rx), 0);
	}
	/* 30000 bytes through a 4 KiB ring: the indices wrapped several times. */
	assert_int_equal(f->tx.pos, 30000);
}

static void t_space_counts_unconsumed(void **state)
{
	struct fixture *f = *state;
	char buf[1000] = { 0 };

	shunt_ring_put(&f->tx, 0, buf, sizeof(buf));
	shunt_ring_publish(&f->tx, sizeof(buf));
	assert_int_equal(shunt_ring_space(&f->tx), RING - 1000);
	shunt_ring_consume(&f->rx, 400);
	assert_int_equal(shunt_ring_space(&f->tx), RING - 600);
	assert_int_equal(shunt_ring_space_cached(&f->tx), RING - 600);
}

static void t_peek_at_offset(void **state)
{
	struct fixture *f = *state;
	char out[4];

	shunt_ring_put(&f->tx, 0, "abcdefgh", 8);
	shunt_ring_publish(&f->tx, 8);
	assert_int_equal(shunt_ring_avail(&f->rx), 8);
	shunt_ring_get(&f->rx, 4, out, 4);
	assert_memory_equal(out, "efgh", 4);
	/* Looking does not consume. */
	assert_int_equal(shunt_ring_avail(&f->rx), 8);
}

static void t_hostile_tail_beyond_ring(void **state)
{
	struct fixture *f = *state;

	/* The producer claims more bytes than the ring holds. */
	atomic_store(&f->hdr->ring[0].tail, RING + 1);
	assert_int_equal(shunt_ring_avail(&f->rx), -EPROTO);
	/* Or moves its tail behind our head: a huge unsigned difference. */
	f->rx.pos = 100;
	atomic_store(&f->hdr->ring[0].tail, 50);
	assert_int_equal(shunt_ring_avail(&f->rx), -EPROTO);
}

static void t_hostile_head_beyond_tail(void **state)
{
	struct fixture *f = *state;

	/* The consumer claims to have read bytes that were never written. */
	atomic_store(&f->hdr->ring[0].head, 10);
	assert_int_equal(shunt_ring_space(&f->tx), -EPROTO);
	/* Or leaves more than a ring's worth unread. */
	f->tx.pos = 3 * RING;
	atomic_store(&f->hdr->ring[0].head, RING - 1);
	assert_int_equal(shunt_ring_space(&f->tx), -EPROTO);
}

static void t_hostile_indices_never_address_outside(void **state)
{
	struct fixture *f = *state;
	char out[RING];

	/* Any index the peer publishes is masked: reads stay inside the ring. */
	f->rx.pos = UINT64_MAX - 10;
	atomic_store(&f->hdr->ring[0].tail, f->rx.pos + RING);
	assert_int_equal(shunt_ring_avail(&f->rx), RING);
	shunt_ring_get(&f->rx, 0, out, RING);
}

static void t_resync_takes_another_holders_index(void **state)
{
	struct fixture *f = *state;
	struct shunt_ring other;

	/* A second process holding the socket sends 100 bytes... */
	shunt_ring_attach(&other, f->hdr, 0, RING, 1);
	shunt_ring_put(&other, 0, "x", 1);
	shunt_ring_publish(&other, 100);
	/* ...and the reader consumes 40 of them. */
	shunt_ring_consume(&f->rx, 40);
	/* Our stale copy would overwrite its bytes: the lock's resync fixes it. */
	shunt_ring_resync(&f->tx, 1);
	assert_int_equal(f->tx.pos, 100);
	assert_int_equal(shunt_ring_space_cached(&f->tx), RING - 60);
	/* The same for a consumer whose head another holder moved. */
	other = f->rx;
	shunt_ring_consume(&other, 60);
	shunt_ring_resync(&f->rx, 0);
	assert_int_equal(f->rx.pos, 100);
	assert_int_equal(shunt_ring_avail(&f->rx), 0);
}

static void t_hostile_own_index_after_resync(void **state)
{
	struct fixture *f = *state;

	/* The peer rewrites our tail far ahead: the cached space is 0, not huge. */
	atomic_store(&f->hdr->ring[0].tail, 5 * RING);
	shunt_ring_resync(&f->tx, 1);
	f->tx.seen = 0;
	assert_int_equal(shunt_ring_space_cached(&f->tx), 0);
	assert_int_equal(shunt_ring_space(&f->tx), -EPROTO);
}

/*
 * Give back ranges of a ring in a real memfd mapping and look at which
 * pages read as zeros afterwards: exactly the whole pages inside the range
 * (counted modulo the ring), never a byte outside it, nor of the other
 * ring or the control page.
 */
enum { PAGES = 16 };

static void check_given_back(uint64_t from, uint64_t to, const char *want)
{
	long page = sysconf(_SC_PAGESIZE);
	uint32_t size = (uint32_t)(PAGES * page);
	size_t total = shunt_circuit_size(size);
	int fd = memfd_create("test-ring", 0);
	struct shunt_circuit_hdr *hdr;
	struct shunt_ring r;
	uint8_t *data;
	long n, given = 0;

	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, (off_t)total), 0);
	hdr = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	assert_true(hdr != MAP_FAILED);
	memset(hdr, 0xaa, total);
	shunt_ring_attach(&r, hdr, 0, size, 1);
	n = shunt_ring_give_back(&r, from, to);
	data = r.data;
	for (int i = 0; i < PAGES; i++) {
		uint8_t *p = data + (size_t)i * page;
		bool zero = p[0] == 0 && p[page - 1] == 0, kept = p[0] == 0xaa && p[page - 1] == 0xaa;

		assert_true(want[i] == '0' ? zero : kept);
		given += want[i] == '0' ? page : 0;
	}
	assert_int_equal(n, given);
	/* The control page and the other ring are untouched. */
	assert_int_equal(((uint8_t *)hdr)[0], 0xaa);
	assert_int_equal(((uint8_t *)hdr)[SHUNT_CIRCUIT_HDR_SIZE - 1], 0xaa);
	assert_int_equal(data[size], 0xaa);
	assert_int_equal(data[2 * (size_t)size - 1], 0xaa);
	munmap(hdr, total);
	close(fd);
}

static void t_give_back_whole_pages_only(void **state)
{
	long page = sysconf(_SC_PAGESIZE);
	uint64_t size = PAGES * (uint64_t)page;

	(void)state;
	/* Nothing: empty, or inside one page. */
	check_given_back(100, 100, "xxxxxxxxxxxxxxxx");
	check_given_back(100, (uint64_t)page - 1, "xxxxxxxxxxxxxxxx");
	/* Pages 1 and 2 only: 0 and 3 hold bytes outside the range. */
	check_given_back((uint64_t)page - 1, 3 * (uint64_t)page + 1, "x00xxxxxxxxxxxxx");
	/* Exactly pages 2..4, at positions three rings on. */
	check_given_back(3 * size + 2 * page, 3 * size + 5 * page, "xx000xxxxxxxxxxx");
	/* Wrapping: the last two pages and the first. */
	check_given_back(size + 14 * page, size + 17 * page, "0xxxxxxxxxxxxx00");
	/* Wrapping with partial pages at both ends. */
	check_given_back(15 * page + 1, 17 * page + 1, "0xxxxxxxxxxxxxxx");
	/* A whole ring from anywhere: every page, the one the wrap splits too. */
	check_given_back(5 * page + 123, 5 * page + 123 + size, "0000000000000000");
	check_given_back(7, 7 + 2 * size, "0000000000000000");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(t_round_trip_across_wrap, setup, teardown),
		cmocka_unit_test_setup_teardown(t_space_counts_unconsumed, setup, teardown),
		cmocka_unit_test_setup_teardown(t_peek_at_offset, setup, teardown),
		cmocka_unit_test_setup_teardown(t_hostile_tail_beyond_ring, setup, teardown),
		cmocka_unit_test_setup_teardown(t_hostile_head_beyond_tail, setup, teardown),
		cmocka_unit_test_setup_teardown(t_hostile_indices_never_address_outside, setup,
						teardown),
		cmocka_unit_test_setup_teardown(t_resync_takes_another_holders_index, setup,
						teardown),
		cmocka_unit_test_setup_teardown(t_hostile_own_index_after_resync, setup, teardown),
		cmocka_unit_test(t_give_back_whole_pages_only),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
