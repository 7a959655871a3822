// SPDX-License-Identifier: MIT
/* The daemon's hash map: growth, deletion inside probe clusters, iteration. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/map.h"

static void t_put_get_delete_many(void **state)
{
	struct shunt_map m;
	enum { N = 5000 };

	(void)state;
	shunt_map_init(&m);
	for (uintptr_t k = 1; k <= N; k++)
		assert_int_equal(shunt_map_put(&m, k, (void *)(k * 3)), 0);
	assert_int_equal(m.len, N);
	/* Delete every third key: later keys of each probe cluster must move back. */
	for (uintptr_t k = 1; k <= N; k += 3)
		assert_ptr_equal(shunt_map_del(&m, k), (void *)(k * 3));
	for (uintptr_t k = 1; k <= N; k++) {
		void *want = (k - 1) % 3 == 0 ? NULL : (void *)(k * 3);

		assert_ptr_equal(shunt_map_get(&m, k), want);
	}
	assert_null(shunt_map_del(&m, 1));
	shunt_map_free(&m);
}

static void t_replace_and_zero_key(void **state)
{
	struct shunt_map m;

	(void)state;
	shunt_map_init(&m);
	assert_int_equal(shunt_map_put(&m, 7, (void *)1), 0);
	assert_int_equal(shunt_map_put(&m, 7, (void *)2), 0);
	assert_int_equal(m.len, 1);
	assert_ptr_equal(shunt_map_get(&m, 7), (void *)2);
	assert_int_equal(shunt_map_put(&m, 0, (void *)1), -EINVAL);
	assert_null(shunt_map_get(&m, 0));
	shunt_map_free(&m);
}

static void t_iteration_visits_each_once(void **state)
{
	struct shunt_map m;
	uint64_t key, sum = 0;
	size_t it = 0, seen = 0;

	(void)state;
	shunt_map_init(&m);
	for (uint64_t k = 100; k < 200; k++)
		shunt_map_put(&m, k, &m);
	while (shunt_map_next(&m, &it, &key)) {
		sum += key;
		seen++;
	}
	assert_int_equal(seen, 100);
	assert_int_equal(sum, (100 + 199) * 100 / 2);
	shunt_map_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_put_get_delete_many),
		cmocka_unit_test(t_replace_and_zero_key),
		cmocka_unit_test(t_iteration_visits_each_once),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
