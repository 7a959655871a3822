// SPDX-License-Identifier: MIT
/*
 * Fuzz target: the policy parser. Each input is written to a memfd and read
 * through shunt_policy_load (inih underneath), the entry point shuntd and
 * `shunt policy check` use; a policy that loads is then asked what shuntd
 * asks of it: the tenant of a process, what a connect between two tenants
 * gets.
 *
 * Oracles, beyond ASan/UBSan: a refused file comes with a message; a
 * loaded policy is well formed (names valid and unique, actions, ports and
 * prefixes in range, rules naming tenants that exist); a process with the
 * facts of a tenant's definition belongs to that tenant or an earlier one;
 * a connect that fits a rule is decided by that rule or an earlier one, the
 * same for an IPv4 address and its v4-mapped IPv6 form.
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "policy/policy.h"

static int memfd = -1;
static char path[64];

static void die(const char *what)
{
	fprintf(stderr, "fuzz_policy: %s\n", what);
	abort();
}

#define CHECK(cond, what) do { if (!(cond)) die(what); } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	memfd = memfd_create("shunt-fuzz-policy", MFD_CLOEXEC);
	CHECK(memfd >= 0, "memfd_create");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", memfd);
	return 0;
}

static bool name_ok(const char *s)
{
	size_t n = strnlen(s, SHUNT_NAME_MAX);

	if (!n || n == SHUNT_NAME_MAX || !strncmp(s, "uid:", 4))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
			return false;
	return true;
}

static int tenant_index(const struct shunt_policy *p, const char *name)
{
	for (unsigned i = 0; i < p->ntenants; i++)
		if (!strcmp(p->tenants[i].name, name))
			return (int)i;
	return -1;
}

static void check_shape(const struct shunt_policy *p)
{
	CHECK(p->def <= SHUNT_ACTION_SAME_TENANT, "default action");
	CHECK(p->ntenants <= SHUNT_POLICY_TENANTS_MAX && p->nrules <= SHUNT_POLICY_RULES_MAX,
	      "too many sections");
	CHECK(memchr(p->metrics, 0, sizeof(p->metrics)), "metrics not terminated");
	for (unsigned i = 0; i < p->ntenants; i++) {
		const struct shunt_tenant_def *t = &p->tenants[i];

		CHECK(name_ok(t->name), "tenant name");
		CHECK(tenant_index(p, t->name) == (int)i, "two tenants of one name");
		CHECK(t->nuids <= SHUNT_POLICY_LIST_MAX && t->ncgroups <= SHUNT_POLICY_LIST_MAX &&
		      t->nnetns <= SHUNT_POLICY_LIST_MAX, "list too long");
		for (unsigned k = 0; k < t->ncgroups; k++)
			CHECK(t->cgroups[k][0] == '/' &&
			      memchr(t->cgroups[k], 0, sizeof(t->cgroups[k])), "cgroup path");
		for (unsigned k = 0; k < t->nnetns; k++)
			CHECK(t->netns[k], "netns inode 0");
	}
	for (unsigned i = 0; i < p->nrules; i++) {
		const struct shunt_rule *r = &p->rules[i];

		CHECK(name_ok(r->name), "rule name");
		for (unsigned k = 0; k < i; k++)
			CHECK(strcmp(p->rules[k].name, r->name), "two rules of one name");
		CHECK(r->position == i + 1, "rule position");
		CHECK(r->action <= SHUNT_ACTION_REFUSE, "rule action");
		CHECK(r->port_lo <= r->port_hi, "port range");
		CHECK(r->family == 0 || (r->family == AF_INET && r->prefix_len <= 32) ||
		      (r->family == AF_INET6 && r->prefix_len <= 128), "prefix");
		for (int side = 0; side < 2; side++) {
			const char *t = side ? r->to : r->from;

			CHECK(memchr(t, 0, SHUNT_NAME_MAX), "tenant reference not terminated");
			CHECK(!strcmp(t, "*") || !strncmp(t, "uid:", 4) || tenant_index(p, t) >= 0,
			      "rule names an undefined tenant");
		}
	}
}

/* A process with the facts a tenant is defined by belongs to it, or to an earlier one. */
static void check_tenants(const struct shunt_policy *p)
{
	for (unsigned i = 0; i < p->ntenants; i++) {
		const struct shunt_tenant_def *t = &p->tenants[i];
		struct shunt_facts f = { .uid = t->nuids ? t->uids[t->nuids - 1] : 4242 };
		char buf[SHUNT_NAME_MAX];
		const char *got;
		int at;

		if (t->ncgroups)
			snprintf(f.cgroup, sizeof(f.cgroup), "%s", t->cgroups[t->ncgroups - 1]);
		if (t->nnetns)
			f.netns = t->netns[0];
		got = shunt_policy_tenant(p, &f, buf);
		at = tenant_index(p, got);
		if (!t->nuids && !t->ncgroups && !t->nnetns) {
			CHECK(at != (int)i, "a tenant defined by nothing holds someone");
			continue;
		}
		CHECK(at >= 0 && at <= (int)i, "facts of a tenant's definition do not match it");
		CHECK(shunt_policy_tenant_def(p, got) == &p->tenants[at], "tenant_def disagrees");
	}
}

static enum shunt_action decide(const struct shunt_policy *p, const char *from, const char *to,
				const struct shunt_wire_addr *dst, const struct shunt_rule **rule)
{
	enum shunt_action a = shunt_policy_decide(p, from, to, dst, rule);

	if (*rule)
		CHECK(a == (*rule)->action, "decided otherwise than the rule that matched");
	else
		CHECK(a == (p->def == SHUNT_ACTION_SAME_TENANT ?
			    (strcmp(from, to) ? SHUNT_ACTION_KERNEL : SHUNT_ACTION_ALLOW) : p->def),
		      "decided otherwise than the default");
	return a;
}

/* A connect that fits a rule is decided by it or an earlier rule, v4 or v4-mapped. */
static void check_rules(const struct shunt_policy *p)
{
	for (unsigned i = 0; i < p->nrules; i++) {
		const struct shunt_rule *r = &p->rules[i], *got, *got6;
		const char *from = strcmp(r->from, "*") ? r->from : "uid:7";
		const char *to = strcmp(r->to, "*") ? r->to : "uid:8";
		struct shunt_wire_addr dst = { .family = (uint16_t)(r->family ? r->family : AF_INET) };
		enum shunt_action a;

		memcpy(dst.addr, r->prefix, sizeof(dst.addr));
		if (dst.family == AF_INET)
			memset(dst.addr + 4, 0, sizeof(dst.addr) - 4);
		/*
		 * A v4-mapped address is an IPv4 connection, which IPv6 rules do
		 * not match: step out of ::ffff:0:0/96 (a prefix this short leaves
		 * its last bit free; a longer one the parser made IPv4).
		 */
		if (dst.family == AF_INET6 && !memcmp(dst.addr, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12)) {
			CHECK(r->prefix_len < 96, "a v4-mapped prefix left IPv6");
			dst.addr[11] ^= 1;
		}
		for (int end = 0; end < 2; end++) {
			dst.port = end ? r->port_hi : r->port_lo;
			a = decide(p, from, to, &dst, &got);
			CHECK(got && got->position <= r->position, "a rule that fits did not match");
			if (dst.family != AF_INET)
				continue;
			struct shunt_wire_addr m = dst;

			m.family = AF_INET6;
			memset(m.addr, 0, 10);
			memset(m.addr + 10, 0xff, 2);
			memcpy(m.addr + 12, dst.addr, 4);
			CHECK(decide(p, from, to, &m, &got6) == a && got6 == got,
			      "v4-mapped address decided otherwise");
		}
	}
}

static int load(const uint8_t *data, size_t size, struct shunt_policy *p, char *err, size_t errlen)
{
	if (ftruncate(memfd, 0) < 0 || pwrite(memfd, data, size, 0) != (ssize_t)size)
		die("cannot write the memfd");
	memset(err, 0x7f, errlen);
	return shunt_policy_load(path, p, err, errlen);
}

/*
 * The error names the first bad line: the file cut after that line is
 * refused with the very same message (the parser reads in order, so
 * nothing after a line changes what is wrong up to it).
 */
static void check_error_line(const uint8_t *data, size_t size, const char *err)
{
	static struct shunt_policy cut;
	char again[512];
	size_t plen = strlen(path), at = 0;
	unsigned long line;
	char *end;

	if (strncmp(err, path, plen) || err[plen] != ':' || !isdigit((unsigned char)err[plen + 1]))
		return;		/* about the whole file (a rule without action...), no line */
	line = strtoul(err + plen + 1, &end, 10);
	CHECK(*end == ':' && line >= 1, "error line");
	for (unsigned long n = 0; n < line; n++) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);

		CHECK(nl || n == line - 1, "error names a line past the end of the file");
		at = nl ? (size_t)(nl - data) + 1 : size;
	}
	if (at == size)
		return;
	CHECK(load(data, at, &cut, again, sizeof(again)) < 0, "refused, but not up to its bad line");
	if (strcmp(again, err)) {
		fprintf(stderr, "fuzz_policy: whole file: %s\nfuzz_policy: up to line %lu: %s\n", err,
			line, again);
		die("the error names another line than the first bad one");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct shunt_policy p;
	char err[512];
	int r;

	r = load(data, size, &p, err, sizeof(err));
	if (r < 0) {
		CHECK(r == -EINVAL, "a readable file reported unreadable");
		CHECK(memchr(err, 0, sizeof(err)) && err[0], "refused without a message");
		check_error_line(data, size, err);
		return 0;
	}
	check_shape(&p);
	check_tenants(&p);
	check_rules(&p);
	return 0;
}
