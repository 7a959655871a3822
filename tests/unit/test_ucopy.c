// SPDX-License-Identifier: MIT
/* The preload's copies of program memory (ucopy.S): every size and alignment, without faults. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "preload/fault.h"

enum { SIZE = 9000, MAX_N = 5000 };

static void check(size_t (*copy)(void *, const void *, size_t))
{
	static unsigned char src[SIZE], got[SIZE], want[SIZE];

	for (size_t i = 0; i < SIZE; i++)
		src[i] = (unsigned char)(i * 131 + 7);
	for (size_t n = 0; n < MAX_N; n++) {
		for (size_t so = 0; so < 3; so++) {
			for (size_t d = 0; d < 3; d++) {
				/* Bytes around the destination must stay as they were. */
				memset(got, 0xee, sizeof(got));
				memset(want, 0xee, sizeof(want));
				memcpy(want + d * 7, src + so * 5, n);
				assert_int_equal(copy(got + d * 7, src + so * 5, n), 0);
				assert_memory_equal(got, want, sizeof(got));
			}
		}
	}
}

static void plain(void **state)
{
	(void)state;
	check(shunt_ucopy);
}

static void streaming(void **state)
{
	(void)state;
	check(shunt_ucopy_nt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(plain),
		cmocka_unit_test(streaming),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
