// SPDX-License-Identifier: MIT
/* Mapping a memfd shuntd sent: the size it must have, a mapping in place of another. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/memfd.h"

enum { PAGE = 4096 };

/* A memfd of @size bytes, each @fill. */
static int t_memfd(size_t size, char fill)
{
	char page[PAGE];
	int fd = memfd_create("t_memfd", MFD_CLOEXEC);

	assert_true(fd >= 0);
	memset(page, fill, sizeof(page));
	for (size_t done = 0; done < size; done += PAGE)
		assert_int_equal(write(fd, page, PAGE), PAGE);
	return fd;
}

static void t_exact_size_only(void **state)
{
	int fd = t_memfd(2 * PAGE, 'a');
	void *p = NULL;

	(void)state;
	assert_int_equal(shunt_memfd_map(fd, PAGE, PROT_READ, NULL, &p), -EPROTO);
	assert_int_equal(shunt_memfd_map(fd, 4 * PAGE, PROT_READ, NULL, &p), -EPROTO);
	assert_null(p);
	assert_int_equal(shunt_memfd_map(fd, 2 * PAGE, PROT_READ, NULL, &p), 0);
	assert_int_equal(((char *)p)[2 * PAGE - 1], 'a');
	munmap(p, 2 * PAGE);
	close(fd);
	/* What cannot be measured is not what shuntd promised. */
	assert_int_equal(shunt_memfd_map(fd, 2 * PAGE, PROT_READ, NULL, &p), -EPROTO);
}

static void t_replaces_in_place(void **state)
{
	int a = t_memfd(PAGE, 'a'), b = t_memfd(PAGE, 'b');
	void *p, *q;

	(void)state;
	assert_int_equal(shunt_memfd_map(a, PAGE, PROT_READ, NULL, &p), 0);
	assert_int_equal(shunt_memfd_map(b, PAGE, PROT_READ, p, &q), 0);
	assert_ptr_equal(q, p);
	assert_int_equal(*(char *)p, 'b');
	munmap(p, PAGE);
	close(a);
	close(b);
}

static void t_range_from_offset(void **state)
{
	int fd = t_memfd(PAGE, 'a');
	void *p;

	(void)state;
	assert_int_equal(pwrite(fd, "z", 1, PAGE), 1);
	assert_int_equal(shunt_memfd_map_range(fd, PAGE, PAGE, PROT_READ | PROT_WRITE, NULL, &p), 0);
	assert_int_equal(*(char *)p, 'z');
	munmap(p, PAGE);
	/* mmap's own errno: the offset is not page aligned. */
	assert_int_equal(shunt_memfd_map_range(fd, 1, PAGE, PROT_READ, NULL, &p), -EINVAL);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_exact_size_only),
		cmocka_unit_test(t_replaces_in_place),
		cmocka_unit_test(t_range_from_offset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
