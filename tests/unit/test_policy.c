// SPDX-License-Identifier: MIT
/* The policy: parsing (and refusing) configurations, tenants, first-match rules. */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "policy/policy.h"

static const char *write_conf(const char *text)
{
	static char path[64];
	int fd;

	strcpy(path, "/tmp/shunt-policy-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static int load(const char *text, struct shunt_policy *p, char *err)
{
	const char *path = write_conf(text);
	int r = shunt_policy_load(path, p, err, 256);

	unlink(path);
	return r;
}

static struct shunt_wire_addr addr(const char *ip, uint16_t port)
{
	struct shunt_wire_addr w = { .port = port };

	if (inet_pton(AF_INET, ip, w.addr) == 1) {
		w.family = AF_INET;
	} else {
		assert_int_equal(inet_pton(AF_INET6, ip, w.addr), 1);
		w.family = AF_INET6;
	}
	return w;
}

static const char example[] =
	"; comment\n"
	"[policy]\n"
	"default = kernel\n"
	"[daemon]\n"
	"metrics = 127.0.0.1:9477\n"
	"[tenant web]\n"
	"uid = 33, 1000\n"
	"max_connections = 100\n"
	"max_memory = 64M\n"
	"[tenant db]\n"
	"cgroup = /system.slice/postgresql.service\n"
	"[rule web-to-db]\n"
	"from = web\n"
	"to = db\n"
	"dst = 10.1.0.0/16\n"
	"port = 5432\n"
	"action = allow\n"
	"[rule no-ssh]\n"
	"port = 22\n"
	"action = refuse\n"
	"[rule same-web]\n"
	"from = web\n"
	"to = web\n"
	"action = allow\n";

static void t_example_parses(void **state)
{
	struct shunt_policy p;
	char err[256] = "";

	(void)state;
	assert_int_equal(load(example, &p, err), 0);
	assert_int_equal(p.def, SHUNT_ACTION_KERNEL);
	assert_string_equal(p.metrics, "127.0.0.1:9477");
	assert_int_equal(p.ntenants, 2);
	assert_int_equal(p.tenants[0].nuids, 2);
	assert_int_equal(p.tenants[0].max_memory, 64 << 20);
	assert_int_equal(p.nrules, 3);
	assert_int_equal(p.rules[0].prefix_len, 16);
}

static void t_tenants_from_facts(void **state)
{
	struct shunt_policy p;
	struct shunt_facts f = { .uid = 33 };
	char err[256], buf[SHUNT_NAME_MAX];

	(void)state;
	assert_int_equal(load(example, &p, err), 0);
	assert_string_equal(shunt_policy_tenant(&p, &f, buf), "web");
	f.uid = 5;
	strcpy(f.cgroup, "/system.slice/postgresql.service/main");
	assert_string_equal(shunt_policy_tenant(&p, &f, buf), "db");
	/* A prefix ends at a path component: not /system.slice/postgresql.serviceX. */
	strcpy(f.cgroup, "/system.slice/postgresql.serviceX");
	assert_string_equal(shunt_policy_tenant(&p, &f, buf), "uid:5");
}

static void t_first_match_wins(void **state)
{
	struct shunt_policy p;
	const struct shunt_rule *r;
	struct shunt_wire_addr a;
	char err[256];

	(void)state;
	assert_int_equal(load(example, &p, err), 0);
	a = addr("10.1.2.3", 5432);
	assert_int_equal(shunt_policy_decide(&p, "web", "db", &a, &r), SHUNT_ACTION_ALLOW);
	assert_string_equal(r->name, "web-to-db");
	/* Outside the prefix, another port: the default (kernel). */
	a = addr("10.2.0.1", 5432);
	assert_int_equal(shunt_policy_decide(&p, "web", "db", &a, &r), SHUNT_ACTION_KERNEL);
	assert_null(r);
	a = addr("10.1.0.9", 5433);
	assert_int_equal(shunt_policy_decide(&p, "web", "db", &a, &r), SHUNT_ACTION_KERNEL);
	/* Port 22 from anyone: refused, before the web-to-web rule. */
	a = addr("127.0.0.1", 22);
	assert_int_equal(shunt_policy_decide(&p, "web", "web", &a, &r), SHUNT_ACTION_REFUSE);
	assert_string_equal(r->name, "no-ssh");
	/* A v4-mapped destination is the IPv4 address. */
	a = addr("::ffff:10.1.0.1", 5432);
	assert_int_equal(shunt_policy_decide(&p, "web", "db", &a, &r), SHUNT_ACTION_ALLOW);
}

static void t_default_same_tenant(void **state)
{
	struct shunt_policy p;
	const struct shunt_rule *r;
	struct shunt_wire_addr a = addr("127.0.0.1", 80);

	(void)state;
	shunt_policy_default(&p);
	assert_int_equal(shunt_policy_decide(&p, "uid:0", "uid:0", &a, &r), SHUNT_ACTION_ALLOW);
	assert_int_equal(shunt_policy_decide(&p, "uid:0", "uid:1000", &a, &r),
			 SHUNT_ACTION_KERNEL);
}

static void t_bad_configs_refused(void **state)
{
	static const char *const bad[] = {
		"[policy]\ndefault = maybe\n",
		"[tenant web]\nuid = alice\n",
		"[tenant uid:3]\nuid = 3\n",
		"[rule r]\nport = 70000\naction = allow\n",
		"[rule r]\ndst = 10.0.0.0/33\naction = allow\n",
		"[rule r]\nfrom = nobody\naction = allow\n",
		"[rule r]\nport = 80\n",
		"[rule r]\naction = allow\n[rule r]\naction = kernel\n",
		/* Regression (tests/fuzz/fuzz_policy): the same section, spaced otherwise. */
		"[rule r]\naction = allow\n[rule  r]\naction = kernel\n",
		"[tenant t]\nuid = 1\n[tenant   t]\nuid = 2\n",
		"[tenant t]\ncolour = blue\n",
		"[somewhere]\nx = 1\n",
		"key = value\n",
		"[tenant t]\nnetns = /nonexistent/netns\n",
	};
	struct shunt_policy p;
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		if (load(bad[i], &p, err) >= 0)
			fail_msg("accepted: %s", bad[i]);
		assert_true(strlen(err) > 0);
	}
	assert_int_equal(shunt_policy_load("/nonexistent/shuntd.conf", &p, err, sizeof(err)),
			 -ENOENT);
}

/*
 * Regression (found by tests/fuzz/fuzz_policy): inih goes on after an
 * error and reports the first one's line, but the message printed with it
 * was the last error's, from another line.
 */
static void t_error_names_first_bad_line(void **state)
{
	static const struct { const char *text, *err; } cases[] = {
		{ "[policy]\nbogus = 1\n[daemon]\nnope = 2\n", ":2: [policy]: unknown key bogus" },
		{ "[policy]\ngarbage\n[tenant t]\nuid = x\n", ":2: not a [section] or a key = value" },
		{ "[tenant t]\nuid = x\n[rule r\n", ":2: uid x is not a user id" },
		/* A section is judged at its first key: inih calls us per key. */
		{ "[rule r]\naction = allow\n\n[rule  r]\naction = kernel\n",
		  ":5: section [rule r] appears twice" },
	};
	struct shunt_policy p;
	char err[256], text[512];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		assert_int_equal(load(cases[i].text, &p, err), -EINVAL);
		if (!strstr(err, cases[i].err))
			fail_msg("%s: wanted ...%s...", err, cases[i].err);
	}
	/* A line longer than the parser takes is an error, not cut into two lines. */
	snprintf(text, sizeof(text), "[tenant t]\ncgroup = /%0300d\n", 0);
	assert_int_equal(load(text, &p, err), -EINVAL);
	assert_non_null(strstr(err, ":2: line longer than"));
	snprintf(text, sizeof(text), "[tenant t]\ncgroup = /%0100d\nuid = 1\n", 0);
	assert_int_equal(load(text, &p, err), 0);
}

/*
 * Regression (found by tests/fuzz/fuzz_policy): a v4-mapped dst prefix
 * stayed IPv6, while connections to v4-mapped addresses are matched as
 * IPv4: the rule never matched anything.
 */
static void t_v4mapped_prefix_matches_ipv4(void **state)
{
	struct shunt_policy p;
	const struct shunt_rule *rule;
	struct shunt_wire_addr in = addr("10.1.2.3", 80), mapped = addr("::ffff:10.1.2.3", 80);
	char err[256];

	(void)state;
	assert_int_equal(load("[policy]\ndefault = kernel\n"
			      "[rule mapped]\ndst = ::ffff:10.0.0.0/104\naction = allow\n", &p, err), 0);
	assert_int_equal(p.rules[0].family, AF_INET);
	assert_int_equal(p.rules[0].prefix_len, 8);
	assert_int_equal(shunt_policy_decide(&p, "a", "b", &in, &rule), SHUNT_ACTION_ALLOW);
	assert_int_equal(shunt_policy_decide(&p, "a", "b", &mapped, &rule), SHUNT_ACTION_ALLOW);
	in = addr("11.1.2.3", 80);
	assert_int_equal(shunt_policy_decide(&p, "a", "b", &in, &rule), SHUNT_ACTION_KERNEL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_example_parses),
		cmocka_unit_test(t_tenants_from_facts),
		cmocka_unit_test(t_first_match_wins),
		cmocka_unit_test(t_default_same_tenant),
		cmocka_unit_test(t_bad_configs_refused),
		cmocka_unit_test(t_error_names_first_bad_line),
		cmocka_unit_test(t_v4mapped_prefix_matches_ipv4),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
