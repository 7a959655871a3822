// SPDX-License-Identifier: MIT
/* Policy: parsing the configuration (inih), finding a process's tenant, deciding. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/addr.h"
#include "policy/policy.h"

void shunt_policy_default(struct shunt_policy *p)
{
	memset(p, 0, sizeof(*p));
	p->def = SHUNT_ACTION_SAME_TENANT;
}

const char *shunt_action_name(enum shunt_action a)
{
	switch (a) {
	case SHUNT_ACTION_ALLOW: return "allow";
	case SHUNT_ACTION_KERNEL: return "kernel";
	case SHUNT_ACTION_REFUSE: return "refuse";
	case SHUNT_ACTION_SAME_TENANT: return "same-tenant";
	}
	return "?";
}

uint64_t shunt_netns_inode(const char *spec)
{
	char path[PATH_MAX];
	struct stat st;

	if (strchr(spec, '/'))
		snprintf(path, sizeof(path), "%s", spec);
	else
		snprintf(path, sizeof(path), "/run/netns/%s", spec);
	return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

bool shunt_policy_uses_cgroups(const struct shunt_policy *p)
{
	for (unsigned i = 0; i < p->ntenants; i++)
		if (p->tenants[i].ncgroups)
			return true;
	return false;
}

void shunt_facts_of(pid_t pid, uid_t uid, bool cgroup, struct shunt_facts *f)
{
	char path[64], line[sizeof(f->cgroup) + 3];
	FILE *fp;

	memset(f, 0, sizeof(*f));
	f->uid = uid;
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	f->netns = shunt_netns_inode(path);
	if (!cgroup)
		return;
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	fp = fopen(path, "re");
	if (!fp)
		return;
	/* The unified (v2) hierarchy's line: "0::/path". */
	while (fgets(line, sizeof(line), fp)) {
		if (strncmp(line, "0::", 3))
			continue;
		line[strcspn(line, "\n")] = 0;
		snprintf(f->cgroup, sizeof(f->cgroup), "%s", line + 3);
		break;
	}
	fclose(fp);
}

/* ---- parsing */

struct parse {
	struct shunt_policy *p;
	char section[96];		/* the current one, as inih names it */
	enum { SEC_NONE, SEC_POLICY, SEC_DAEMON, SEC_TENANT, SEC_RULE } kind;
	struct shunt_tenant_def *tenant;
	struct shunt_rule *rule;
	char seen[SHUNT_POLICY_TENANTS_MAX + SHUNT_POLICY_RULES_MAX + 2][96];
	unsigned nseen;
	char keys[16][24];		/* keys given in the current section */
	unsigned nkeys;
	FILE *file;
	int line;			/* of the file, the one inih parses now */
	int err_line;			/* where the first error is, 0 if none yet */
	char *err;
	size_t errlen;
};

static bool valid_name(const char *s)
{
	size_t n = strlen(s);

	if (!n || n >= SHUNT_NAME_MAX || !strncmp(s, "uid:", 4))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
			return false;
	return true;
}

/* Split @value at commas into trimmed items; calls @each for every one. */
static bool each_item(struct parse *ps, const char *value,
		      bool (*each)(struct parse *, const char *))
{
	char buf[1024], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", value);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		while (isspace((unsigned char)*t))
			t++;
		for (char *e = t + strlen(t); e > t && isspace((unsigned char)e[-1]); *--e = 0)
			;
		if (*t && !each(ps, t))
			return false;
	}
	return true;
}

/*
 * Note an error on the current line. inih goes on parsing after an error
 * and reports the first one's line: only the first message is kept, so
 * that it is the one printed with that line.
 */
static bool fail(struct parse *ps, const char *fmt, const char *what)
{
	if (!ps->err_line) {
		snprintf(ps->err, ps->errlen, fmt, what);
		ps->err_line = ps->line;
	}
	return false;
}

static bool parse_u64(const char *s, uint64_t *out, bool size)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return false;
	if (size && *end) {
		unsigned shift = 0;

		switch (toupper((unsigned char)*end)) {
		case 'K': shift = 10; break;
		case 'M': shift = 20; break;
		case 'G': shift = 30; break;
		default: return false;
		}
		if (v > (UINT64_MAX >> shift))
			return false;
		v <<= shift;
		end++;
	}
	if (*end)
		return false;
	*out = v;
	return true;
}

static bool add_uid(struct parse *ps, const char *s)
{
	struct shunt_tenant_def *t = ps->tenant;
	uint64_t v;

	if (!parse_u64(s, &v, false) || v > UINT32_MAX - 1)
		return fail(ps, "uid %s is not a user id", s);
	if (t->nuids == SHUNT_POLICY_LIST_MAX)
		return fail(ps, "more than %s uids", "16");
	t->uids[t->nuids++] = (uid_t)v;
	return true;
}

static bool add_cgroup(struct parse *ps, const char *s)
{
	struct shunt_tenant_def *t = ps->tenant;

	if (s[0] != '/' || strlen(s) >= sizeof(t->cgroups[0]))
		return fail(ps, "cgroup %s must be an absolute cgroup path", s);
	if (t->ncgroups == SHUNT_POLICY_LIST_MAX)
		return fail(ps, "more than %s cgroups", "16");
	snprintf(t->cgroups[t->ncgroups++], sizeof(t->cgroups[0]), "%s", s);
	return true;
}

static bool add_netns(struct parse *ps, const char *s)
{
	struct shunt_tenant_def *t = ps->tenant;
	uint64_t ino = shunt_netns_inode(s);

	if (!ino)
		return fail(ps, "network namespace %s does not exist (a name under /run/netns "
			    "or a path like /proc/PID/ns/net)", s);
	if (t->nnetns == SHUNT_POLICY_LIST_MAX)
		return fail(ps, "more than %s network namespaces", "16");
	t->netns[t->nnetns++] = ino;
	return true;
}

static bool parse_action(const char *s, enum shunt_action *a, bool allow_same)
{
	if (!strcmp(s, "allow"))
		*a = SHUNT_ACTION_ALLOW;
	else if (!strcmp(s, "kernel"))
		*a = SHUNT_ACTION_KERNEL;
	else if (!strcmp(s, "refuse"))
		*a = SHUNT_ACTION_REFUSE;
	else if (allow_same && !strcmp(s, "same-tenant"))
		*a = SHUNT_ACTION_SAME_TENANT;
	else
		return false;
	return true;
}

static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

/* "10.0.0.0/8", "::1", "*". */
static bool parse_prefix(const char *s, struct shunt_rule *r)
{
	char buf[INET6_ADDRSTRLEN + 8], *slash;
	unsigned max;

	if (!strcmp(s, "*")) {
		r->family = 0;
		return true;
	}
	snprintf(buf, sizeof(buf), "%s", s);
	slash = strchr(buf, '/');
	if (slash)
		*slash++ = 0;
	if (inet_pton(AF_INET, buf, r->prefix) == 1) {
		r->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, buf, r->prefix) == 1) {
		r->family = AF_INET6;
		max = 128;
	} else {
		return false;
	}
	r->prefix_len = max;
	if (slash) {
		uint64_t len;

		if (!parse_u64(slash, &len, false) || len > max)
			return false;
		r->prefix_len = (unsigned)len;
	}
	/*
	 * A v4-mapped prefix (::ffff:10.0.0.0/104) names IPv4 addresses, and a
	 * connection to one is matched as IPv4 (prefix_has unmaps it): keep it
	 * as the IPv4 prefix it is, or it would never match anything (found by
	 * tests/fuzz/fuzz_policy).
	 */
	if (r->family == AF_INET6 && r->prefix_len >= 96 && !memcmp(r->prefix, v4mapped, 12)) {
		memmove(r->prefix, r->prefix + 12, 4);
		memset(r->prefix + 4, 0, 12);
		r->family = AF_INET;
		r->prefix_len -= 96;
	}
	return true;
}

/* "80", "8000-8999", "*". */
static bool parse_ports(const char *s, struct shunt_rule *r)
{
	char buf[32], *dash;
	uint64_t lo, hi;

	if (!strcmp(s, "*")) {
		r->port_lo = 0;
		r->port_hi = 65535;
		return true;
	}
	snprintf(buf, sizeof(buf), "%s", s);
	dash = strchr(buf, '-');
	if (dash)
		*dash++ = 0;
	if (!parse_u64(buf, &lo, false) || lo > 65535)
		return false;
	hi = lo;
	if (dash && (!parse_u64(dash, &hi, false) || hi > 65535 || hi < lo))
		return false;
	r->port_lo = (uint16_t)lo;
	r->port_hi = (uint16_t)hi;
	return true;
}

/* Enter section @section (a new one: a repeated name is an error). */
static bool enter(struct parse *ps, const char *section)
{
	const char *name = strchr(section, ' ');
	char canon[sizeof(ps->seen[0])];

	snprintf(ps->section, sizeof(ps->section), "%s", section);
	ps->nkeys = 0;
	while (name && *name == ' ')
		name++;
	/* [tenant  a] is [tenant a]: compared by kind and name, however spaced. */
	if (name)
		snprintf(canon, sizeof(canon), "%.*s %s", (int)strcspn(section, " "), section, name);
	else
		snprintf(canon, sizeof(canon), "%s", section);
	for (unsigned i = 0; i < ps->nseen; i++)
		if (!strcmp(ps->seen[i], canon))
			return fail(ps, "section [%s] appears twice", canon);
	if (ps->nseen < sizeof(ps->seen) / sizeof(ps->seen[0]))
		snprintf(ps->seen[ps->nseen++], sizeof(ps->seen[0]), "%s", canon);
	if (!strcmp(section, "policy")) {
		ps->kind = SEC_POLICY;
	} else if (!strcmp(section, "daemon")) {
		ps->kind = SEC_DAEMON;
	} else if (!strncmp(section, "tenant ", 7) && name && valid_name(name)) {
		if (ps->p->ntenants == SHUNT_POLICY_TENANTS_MAX)
			return fail(ps, "more than %s tenants", "64");
		ps->kind = SEC_TENANT;
		ps->tenant = &ps->p->tenants[ps->p->ntenants++];
		memset(ps->tenant, 0, sizeof(*ps->tenant));
		snprintf(ps->tenant->name, sizeof(ps->tenant->name), "%s", name);
	} else if (!strncmp(section, "rule ", 5) && name && valid_name(name)) {
		if (ps->p->nrules == SHUNT_POLICY_RULES_MAX)
			return fail(ps, "more than %s rules", "256");
		ps->kind = SEC_RULE;
		ps->rule = &ps->p->rules[ps->p->nrules++];
		memset(ps->rule, 0, sizeof(*ps->rule));
		snprintf(ps->rule->name, sizeof(ps->rule->name), "%s", name);
		strcpy(ps->rule->from, "*");
		strcpy(ps->rule->to, "*");
		ps->rule->port_hi = 65535;
		ps->rule->action = (enum shunt_action)-1;	/* required */
		ps->rule->position = ps->p->nrules;
	} else {
		return fail(ps, "unknown section [%s] (policy, daemon, tenant NAME, rule NAME; "
			    "names of letters, digits, '.', '_', '-')", section);
	}
	return true;
}

static bool tenant_ref(struct parse *ps, const char *value, char *out)
{
	if (strcmp(value, "*") && !valid_name(value) && strncmp(value, "uid:", 4))
		return fail(ps, "tenant %s: not a tenant name, uid:N or *", value);
	snprintf(out, SHUNT_NAME_MAX, "%s", value);
	return true;
}

static int handler(void *user, const char *section, const char *key, const char *value)
{
	struct parse *ps = user;
	bool ok = true;

	if (strcmp(section, ps->section) && !enter(ps, section))
		return 0;
	/* A key twice (or a section repeated right after itself) would silently override. */
	for (unsigned i = 0; i < ps->nkeys; i++)
		if (!strcmp(ps->keys[i], key))
			return fail(ps, "%s given twice in one section", key);
	if (ps->nkeys < sizeof(ps->keys) / sizeof(ps->keys[0]))
		snprintf(ps->keys[ps->nkeys++], sizeof(ps->keys[0]), "%s", key);
	switch (ps->kind) {
	case SEC_POLICY:
		if (strcmp(key, "default"))
			ok = fail(ps, "[policy]: unknown key %s (default)", key);
		else if (!parse_action(value, &ps->p->def, true))
			ok = fail(ps, "default = %s: allow, kernel, refuse or same-tenant", value);
		break;
	case SEC_DAEMON:
		if (strcmp(key, "metrics") || strlen(value) >= sizeof(ps->p->metrics))
			ok = fail(ps, "[daemon]: unknown or too long key %s (metrics)", key);
		else
			snprintf(ps->p->metrics, sizeof(ps->p->metrics), "%s", value);
		break;
	case SEC_TENANT:
		if (!strcmp(key, "uid"))
			ok = each_item(ps, value, add_uid);
		else if (!strcmp(key, "cgroup"))
			ok = each_item(ps, value, add_cgroup);
		else if (!strcmp(key, "netns"))
			ok = each_item(ps, value, add_netns);
		else if (!strcmp(key, "max_connections"))
			ok = parse_u64(value, &ps->tenant->max_connections, false) ||
			     fail(ps, "max_connections = %s: a number", value);
		else if (!strcmp(key, "max_memory"))
			ok = parse_u64(value, &ps->tenant->max_memory, true) ||
			     fail(ps, "max_memory = %s: bytes, with K, M or G", value);
		else
			ok = fail(ps, "[tenant]: unknown key %s (uid, cgroup, netns, max_connections, "
				  "max_memory)", key);
		break;
	case SEC_RULE:
		if (!strcmp(key, "from"))
			ok = tenant_ref(ps, value, ps->rule->from);
		else if (!strcmp(key, "to"))
			ok = tenant_ref(ps, value, ps->rule->to);
		else if (!strcmp(key, "dst"))
			ok = parse_prefix(value, ps->rule) ||
			     fail(ps, "dst = %s: an address, a prefix like 10.0.0.0/8, or *", value);
		else if (!strcmp(key, "port"))
			ok = parse_ports(value, ps->rule) ||
			     fail(ps, "port = %s: a port, a range like 8000-8999, or *", value);
		else if (!strcmp(key, "action"))
			ok = parse_action(value, &ps->rule->action, false) ||
			     fail(ps, "action = %s: allow, kernel or refuse", value);
		else
			ok = fail(ps, "[rule]: unknown key %s (from, to, dst, port, action)", key);
		break;
	case SEC_NONE:
		ok = fail(ps, "key %s outside any section", key);
		break;
	}
	return ok;
}

/*
 * inih's reader: one line of the file, counted, so that errors name the
 * line they are on. Read byte by byte, not with fgets: a NUL in a line must
 * not hide where it ends. A line longer than inih takes is an error (inih
 * would read the rest of it as another line), not silently cut.
 */
static char *read_line(char *buf, int size, void *user)
{
	struct parse *ps = user;
	bool cut = false;
	int c, n = 0;

	while ((c = getc(ps->file)) != EOF) {
		if (n < size - 1)
			buf[n++] = (char)c;
		else if (c != '\n')
			cut = true;
		if (c == '\n')
			break;
	}
	if (!n)
		return NULL;
	buf[n] = 0;
	ps->line++;
	if (cut) {
		char max[16];

		snprintf(max, sizeof(max), "%d", size - 1);
		fail(ps, "line longer than %s characters", max);
	}
	return buf;
}

int shunt_policy_load(const char *path, struct shunt_policy *p, char *err, size_t errlen)
{
	struct parse *ps = calloc(1, sizeof(*ps));
	char msg[256] = "";
	int line;

	if (!ps) {
		snprintf(err, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	shunt_policy_default(p);
	ps->p = p;
	ps->err = msg;
	ps->errlen = sizeof(msg);
	ps->file = fopen(path, "re");
	if (!ps->file) {
		int e = errno;

		snprintf(err, errlen, "%s: cannot read it: %s", path, strerror(e));
		free(ps);
		return -e;
	}
	line = ini_parse_stream(read_line, ps, handler, ps);
	fclose(ps->file);
	if (line < 0) {
		snprintf(err, errlen, "%s: out of memory", path);
		free(ps);
		return -ENOMEM;
	}
	/* inih reports the first bad line; the message is ours if the error was. */
	if (line > 0 || ps->err_line) {
		if (ps->err_line && (!line || ps->err_line <= line))
			snprintf(err, errlen, "%s:%d: %s", path, ps->err_line, msg);
		else
			snprintf(err, errlen, "%s:%d: not a [section] or a key = value line", path, line);
		free(ps);
		return -EINVAL;
	}
	for (unsigned i = 0; i < p->nrules; i++) {
		struct shunt_rule *r = &p->rules[i];

		if ((int)r->action == -1) {
			snprintf(err, errlen, "%s: [rule %s] has no action", path, r->name);
			free(ps);
			return -EINVAL;
		}
		for (int side = 0; side < 2; side++) {
			const char *t = side ? r->to : r->from;

			if (strcmp(t, "*") && strncmp(t, "uid:", 4) && !shunt_policy_tenant_def(p, t)) {
				snprintf(err, errlen, "%s: [rule %s] names tenant %s, which no [tenant] "
					 "section defines", path, r->name, t);
				free(ps);
				return -EINVAL;
			}
		}
	}
	free(ps);
	return 0;
}

/* ---- deciding */

static bool cgroup_under(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);

	if (strncmp(path, prefix, n))
		return false;
	/* A prefix ends at a '/' boundary: /a matches /a and /a/b, not /ab. */
	return path[n] == 0 || path[n] == '/' || (n && prefix[n - 1] == '/');
}

static bool matches(const struct shunt_tenant_def *t, const struct shunt_facts *f)
{
	bool ok;

	if (!t->nuids && !t->ncgroups && !t->nnetns)
		return false;	/* a tenant defined by nothing holds nobody */
	if (t->nuids) {
		ok = false;
		for (unsigned i = 0; i < t->nuids && !ok; i++)
			ok = t->uids[i] == f->uid;
		if (!ok)
			return false;
	}
	if (t->ncgroups) {
		ok = false;
		for (unsigned i = 0; i < t->ncgroups && !ok; i++)
			ok = f->cgroup[0] && cgroup_under(f->cgroup, t->cgroups[i]);
		if (!ok)
			return false;
	}
	if (t->nnetns) {
		ok = false;
		for (unsigned i = 0; i < t->nnetns && !ok; i++)
			ok = t->netns[i] == f->netns;
		if (!ok)
			return false;
	}
	return true;
}

const char *shunt_policy_tenant(const struct shunt_policy *p, const struct shunt_facts *facts,
				char *buf)
{
	for (unsigned i = 0; i < p->ntenants; i++)
		if (matches(&p->tenants[i], facts))
			return p->tenants[i].name;
	snprintf(buf, SHUNT_NAME_MAX, "uid:%u", (unsigned)facts->uid);
	return buf;
}

const struct shunt_tenant_def *shunt_policy_tenant_def(const struct shunt_policy *p,
						       const char *name)
{
	for (unsigned i = 0; i < p->ntenants; i++)
		if (!strcmp(p->tenants[i].name, name))
			return &p->tenants[i];
	return NULL;
}

static bool prefix_has(const struct shunt_rule *r, const struct shunt_wire_addr *dst)
{
	struct shunt_wire_addr a = *dst;
	unsigned bits = r->prefix_len, bytes = bits / 8;

	if (!r->family)
		return true;
	shunt_addr_unmap(&a);
	if (a.family != r->family)
		return false;
	if (memcmp(a.addr, r->prefix, bytes))
		return false;
	if (bits % 8) {
		uint8_t mask = (uint8_t)(0xff << (8 - bits % 8));

		return (a.addr[bytes] & mask) == (r->prefix[bytes] & mask);
	}
	return true;
}

enum shunt_action shunt_policy_decide(const struct shunt_policy *p, const char *from,
				      const char *to, const struct shunt_wire_addr *dst,
				      const struct shunt_rule **rule)
{
	for (unsigned i = 0; i < p->nrules; i++) {
		const struct shunt_rule *r = &p->rules[i];

		if ((strcmp(r->from, "*") && strcmp(r->from, from)) ||
		    (strcmp(r->to, "*") && strcmp(r->to, to)) || !prefix_has(r, dst) ||
		    dst->port < r->port_lo || dst->port > r->port_hi)
			continue;
		*rule = r;
		return r->action;
	}
	*rule = NULL;
	if (p->def == SHUNT_ACTION_SAME_TENANT)
		return strcmp(from, to) ? SHUNT_ACTION_KERNEL : SHUNT_ACTION_ALLOW;
	return p->def;
}
