// SPDX-License-Identifier: MIT
/*
 * shunt policy check: which rule of a policy file decides a connection, and
 * what happens to it. The same code as shuntd's (src/policy), so the answer
 * is the daemon's answer for that file.
 *
 *   shunt policy check [--config FILE] SRC [TENANT@]DST PORT
 *
 * SRC is the connecting process: a tenant name, uid:N, or pid:N (whose
 * uid, cgroup and network namespace are read from /proc as shuntd reads
 * them). DST is the address connected to; TENANT@ names the tenant of the
 * listener there (a name, uid:N or pid:N), else it is taken to be SRC's.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cli/cli.h"
#include "common/addr.h"
#include "policy/policy.h"

static const char DEFAULT_CONFIG[] = "/etc/shunt/shuntd.conf";

static void usage(FILE *f)
{
	fprintf(f, "usage: shunt policy check [--config FILE] SRC [TENANT@]DST PORT\n\n"
		   "Say which rule of the policy decides a connection from SRC to DST:PORT\n"
		   "and what shuntd does with it: shared memory, the kernel, or a refusal.\n\n"
		   "  SRC, TENANT   a tenant name, uid:N, or pid:N (a running process)\n"
		   "  DST           an IPv4 or IPv6 address\n"
		   "  TENANT@       the tenant of the listener at DST (default: SRC's)\n"
		   "  --config FILE the policy file (default $SHUNT_CONFIG, else %s;\n"
		   "                a missing default file means the built-in policy)\n",
		DEFAULT_CONFIG);
}

/* Who @spec is: its tenant name into @name, and a description into @why. */
static int who(const struct shunt_policy *p, const char *spec, char *name, char *why,
	       size_t whylen)
{
	struct shunt_facts f;
	char *end;

	if (!strncmp(spec, "pid:", 4) || !strncmp(spec, "uid:", 4)) {
		errno = 0;
		unsigned long v = strtoul(spec + 4, &end, 10);

		if (errno || end == spec + 4 || *end || v > INT32_MAX) {
			fprintf(stderr, "shunt policy: '%s' is not uid:N or pid:N\n", spec);
			return -1;
		}
		if (spec[0] == 'u') {
			memset(&f, 0, sizeof(f));
			f.uid = (uid_t)v;
			snprintf(why, whylen, "uid %lu, no cgroup or namespace facts", v);
		} else {
			char path[64], line[256];
			FILE *st;
			long uid = -1;

			snprintf(path, sizeof(path), "/proc/%lu/status", v);
			st = fopen(path, "re");
			if (!st) {
				fprintf(stderr, "shunt policy: no process %lu: %s\n", v, strerror(errno));
				return -1;
			}
			while (fgets(line, sizeof(line), st))
				if (sscanf(line, "Uid:\t%*d\t%ld", &uid) == 1)	/* effective, as SO_PEERCRED */
					break;
			fclose(st);
			shunt_facts_of((pid_t)v, (uid_t)uid, true, &f);
			snprintf(why, whylen, "pid %lu: uid %ld, cgroup %s, netns %" PRIu64, v, uid,
				 f.cgroup[0] ? f.cgroup : "?", f.netns);
		}
		char buf[SHUNT_NAME_MAX];

		snprintf(name, SHUNT_NAME_MAX, "%s", shunt_policy_tenant(p, &f, buf));
		return 0;
	}
	if (!shunt_policy_tenant_def(p, spec) && strncmp(spec, "uid:", 4)) {
		fprintf(stderr, "shunt policy: no tenant '%s' in the policy (tenants:", spec);
		for (unsigned i = 0; i < p->ntenants; i++)
			fprintf(stderr, " %s", p->tenants[i].name);
		fprintf(stderr, "%s)\n", p->ntenants ? "" : " none; processes are uid:N");
		return -1;
	}
	snprintf(name, SHUNT_NAME_MAX, "%s", spec);
	snprintf(why, whylen, "named");
	return 0;
}

static int parse_dst(const char *s, const char *port, struct shunt_wire_addr *w)
{
	char *end;
	unsigned long p;

	memset(w, 0, sizeof(*w));
	errno = 0;
	p = strtoul(port, &end, 10);
	if (errno || end == port || *end || p > 65535) {
		fprintf(stderr, "shunt policy: '%s' is not a port\n", port);
		return -1;
	}
	w->port = (uint16_t)p;
	if (inet_pton(AF_INET, s, w->addr) == 1) {
		w->family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, s, w->addr) == 1) {
		w->family = AF_INET6;
		shunt_addr_unmap(w);	/* as shuntd sees a v4-mapped destination */
		return 0;
	}
	fprintf(stderr, "shunt policy: '%s' is not an IPv4 or IPv6 address\n", s);
	return -1;
}

static void print_rule(const struct shunt_rule *r)
{
	char pfx[INET6_ADDRSTRLEN] = "*";

	if (r->family)
		inet_ntop(r->family, r->prefix, pfx, sizeof(pfx));
	printf("rule '%s' (rule %u of the file): from %s to %s, dst %s", r->name, r->position,
	       r->from, r->to, pfx);
	if (r->family)
		printf("/%u", r->prefix_len);
	if (r->port_lo == 0 && r->port_hi == 65535)
		printf(", any port");
	else if (r->port_lo == r->port_hi)
		printf(", port %u", r->port_lo);
	else
		printf(", ports %u-%u", r->port_lo, r->port_hi);
	printf(": %s\n", shunt_action_name(r->action));
}

static const char *meaning(enum shunt_action a)
{
	switch (a) {
	case SHUNT_ACTION_ALLOW:
		return "shared memory";
	case SHUNT_ACTION_KERNEL:
		return "left to the kernel's TCP (its own rules decide)";
	case SHUNT_ACTION_REFUSE:
		return "refused: connect() fails with ECONNREFUSED";
	default:
		return "?";
	}
}

static int check(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *config = getenv("SHUNT_CONFIG");
	bool explicit = config != NULL;
	static struct shunt_policy p;	/* large: not on the stack */
	char err[512], from[SHUNT_NAME_MAX], to[SHUNT_NAME_MAX];
	char fromwhy[512], towhy[512] = "the source's tenant (no TENANT@ given)";
	struct shunt_wire_addr dst;
	int c;

	while ((c = getopt_long(argc, argv, "c:h", opts, NULL)) != -1) {
		switch (c) {
		case 'c':
			config = optarg;
			explicit = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 3) {
		usage(stderr);
		return 2;
	}
	if (!config)
		config = DEFAULT_CONFIG;
	int rc = shunt_policy_load(config, &p, err, sizeof(err));

	if (rc == -ENOENT && !explicit) {
		shunt_policy_default(&p);
		printf("policy: built-in (no %s)\n", config);
	} else if (rc < 0) {
		fprintf(stderr, "shunt policy: %s\n", err);
		return 1;
	} else {
		printf("policy: %s\n", config);
	}

	char *dststr = argv[optind + 1], *at = strrchr(dststr, '@');

	if (who(&p, argv[optind], from, fromwhy, sizeof(fromwhy)) < 0)
		return 1;
	if (at) {
		*at = '\0';
		if (who(&p, dststr, to, towhy, sizeof(towhy)) < 0)
			return 1;
		dststr = at + 1;
	} else {
		snprintf(to, sizeof(to), "%s", from);
	}
	if (parse_dst(dststr, argv[optind + 2], &dst) < 0)
		return 1;

	char addr[SHUNT_ADDR_STRLEN];
	const struct shunt_rule *rule;
	enum shunt_action a = shunt_policy_decide(&p, from, to, &dst, &rule);

	printf("from:   tenant %s (%s)\n", from, fromwhy);
	printf("to:     tenant %s (%s) at %s\n", to, towhy,
	       shunt_addr_format(&dst, addr, sizeof(addr)));
	if (rule) {
		print_rule(rule);
	} else if (p.def == SHUNT_ACTION_SAME_TENANT) {
		printf("no rule matches: default same-tenant, and the tenants %s\n",
		       strcmp(from, to) ? "differ" : "are the same");
	} else {
		printf("no rule matches: default %s\n", shunt_action_name(p.def));
	}
	printf("=> %s: %s\n", shunt_action_name(a), meaning(a));
	return 0;
}

int shunt_cmd_policy(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "check"))
		return check(argc - 1, argv + 1);
	if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		usage(stdout);
		return 0;
	}
	usage(stderr);
	return 2;
}
