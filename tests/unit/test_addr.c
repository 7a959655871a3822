// SPDX-License-Identifier: MIT
/* Addresses: sockaddr <-> wire, v4-mapped forms, classification, checks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <cmocka.h>

#include "common/addr.h"

static void t_v4_round_trip(void **state)
{
	struct sockaddr_in in = { .sin_family = AF_INET, .sin_port = htons(8080) };
	struct shunt_wire_addr w;
	struct sockaddr_storage ss;
	char buf[SHUNT_ADDR_STRLEN];

	(void)state;
	inet_pton(AF_INET, "127.0.0.5", &in.sin_addr);
	assert_int_equal(shunt_addr_to_wire((struct sockaddr *)&in, sizeof(in), &w), 0);
	assert_int_equal(w.port, 8080);
	assert_true(shunt_addr_is_loopback(&w));
	assert_false(shunt_addr_is_any(&w));
	assert_string_equal(shunt_addr_format(&w, buf, sizeof(buf)), "127.0.0.5:8080");
	assert_int_equal(shunt_addr_from_wire(&w, &ss), sizeof(in));
	assert_memory_equal(&ss, &in, sizeof(in));
	/* Too short for its family. */
	assert_int_equal(shunt_addr_to_wire((struct sockaddr *)&in, sizeof(in) - 1, &w), -EINVAL);
}

static void t_v4_mapped(void **state)
{
	struct sockaddr_in6 in6 = { .sin6_family = AF_INET6, .sin6_port = htons(1) };
	struct shunt_wire_addr w, v;
	char buf[SHUNT_ADDR_STRLEN];

	(void)state;
	inet_pton(AF_INET6, "::ffff:127.0.0.1", &in6.sin6_addr);
	assert_int_equal(shunt_addr_to_wire((struct sockaddr *)&in6, sizeof(in6), &w), 0);
	assert_true(shunt_addr_is_v4mapped(&w));
	assert_true(shunt_addr_is_loopback(&w));
	v = w;
	shunt_addr_unmap(&v);
	assert_int_equal(v.family, AF_INET);
	assert_string_equal(shunt_addr_format(&v, buf, sizeof(buf)), "127.0.0.1:1");
	shunt_addr_map_v6(&v);
	assert_memory_equal(v.addr, w.addr, 16);
	assert_int_equal(v.family, AF_INET6);
}

static void t_classification(void **state)
{
	struct shunt_wire_addr w = { .family = AF_INET6 };

	(void)state;
	assert_true(shunt_addr_is_any(&w));
	w.addr[15] = 1;
	assert_true(shunt_addr_is_loopback(&w));
	assert_int_equal(shunt_addr_check(&w), 0);
	w.family = 99;
	assert_int_equal(shunt_addr_check(&w), -EINVAL);
	/* An IPv4 address with stray bytes past its 4 is not well formed. */
	memset(&w, 0, sizeof(w));
	w.family = AF_INET;
	w.addr[8] = 1;
	assert_int_equal(shunt_addr_check(&w), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_v4_round_trip),
		cmocka_unit_test(t_v4_mapped),
		cmocka_unit_test(t_classification),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
