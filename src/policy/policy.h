/* SPDX-License-Identifier: MIT */
/*
 * Policy: who may talk to whom over shared memory. shuntd reads it from a
 * configuration file (INI, parsed by inih): tenants, defined by facts
 * shuntd can check about a process (uid, cgroup, network namespace), never
 * by anything the library says; per-tenant limits; and rules, first match
 * wins, that say what happens to a connection from one tenant to another,
 * by destination address and port: allow it on shared memory, leave it to
 * the kernel (whose own rules then decide), or refuse it. See docs/policy.md.
 */
#ifndef SHUNT_POLICY_H
#define SHUNT_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shunt/proto.h"

enum {
	SHUNT_NAME_MAX = SHUNT_TENANT_LEN,	/* tenant and rule names, with their NUL */
	SHUNT_POLICY_LIST_MAX = 16,	/* values of one list key */
	SHUNT_POLICY_TENANTS_MAX = 64,
	SHUNT_POLICY_RULES_MAX = 256,
};

enum shunt_action {
	SHUNT_ACTION_ALLOW,		/* shared memory */
	SHUNT_ACTION_KERNEL,		/* left to the kernel's TCP */
	SHUNT_ACTION_REFUSE,		/* connect() fails with ECONNREFUSED */
	SHUNT_ACTION_SAME_TENANT,	/* default only: allow within a tenant, else kernel */
};

/* What shuntd knows for sure about a process. */
struct shunt_facts {
	uid_t uid;
	char cgroup[256];		/* cgroup v2 path ("0::" line of /proc/PID/cgroup) */
	uint64_t netns;			/* inode of its network namespace */
};

struct shunt_tenant_def {
	char name[SHUNT_NAME_MAX];
	/* A process belongs if it matches every key given, any value of each. */
	uid_t uids[SHUNT_POLICY_LIST_MAX];
	unsigned nuids;
	char cgroups[SHUNT_POLICY_LIST_MAX][128];	/* path prefixes, at a '/' boundary */
	unsigned ncgroups;
	uint64_t netns[SHUNT_POLICY_LIST_MAX];	/* namespace inodes (named ones resolved) */
	unsigned nnetns;
	uint64_t max_connections;	/* 0: no limit */
	uint64_t max_memory;		/* bytes of circuits, 0: no limit */
};

struct shunt_rule {
	char name[SHUNT_NAME_MAX];
	unsigned position;		/* 1 for the first rule in the file: first match wins */
	char from[SHUNT_NAME_MAX];	/* tenant, or "*" */
	char to[SHUNT_NAME_MAX];
	int family;			/* AF_INET, AF_INET6, or 0: any address */
	uint8_t prefix[16];
	unsigned prefix_len;
	uint16_t port_lo, port_hi;	/* 0..65535 when any */
	enum shunt_action action;
};

struct shunt_policy {
	enum shunt_action def;		/* when no rule matches */
	struct shunt_tenant_def tenants[SHUNT_POLICY_TENANTS_MAX];
	unsigned ntenants;
	struct shunt_rule rules[SHUNT_POLICY_RULES_MAX];
	unsigned nrules;
	char metrics[108];		/* [daemon] metrics = HOST:PORT or unix:PATH, or "" */
};

/* The built-in policy: no tenants but the implicit ones, default same-tenant. */
void shunt_policy_default(struct shunt_policy *p);

/*
 * Read @path into @p (the default policy plus what the file says). 0, or
 * -errno with a message naming the file and line in @err.
 */
int shunt_policy_load(const char *path, struct shunt_policy *p, char *err, size_t errlen);

/*
 * The tenant of a process with @facts: the first defined tenant it matches,
 * else the implicit "uid:N" (written into @buf, SHUNT_NAME_MAX bytes).
 * Returns its name (@buf or the definition's).
 */
const char *shunt_policy_tenant(const struct shunt_policy *p, const struct shunt_facts *facts,
				char *buf);

/* The definition of tenant @name, or NULL for an implicit one. */
const struct shunt_tenant_def *shunt_policy_tenant_def(const struct shunt_policy *p,
						       const char *name);

/*
 * What happens to a connection from tenant @from to a listener of tenant
 * @to at @dst (its port included). Returns the action; *@rule is the rule
 * that matched, or NULL when the default decided.
 */
enum shunt_action shunt_policy_decide(const struct shunt_policy *p, const char *from,
				      const char *to, const struct shunt_wire_addr *dst,
				      const struct shunt_rule **rule);

const char *shunt_action_name(enum shunt_action a);

/* The inode of network namespace @spec: a name under /run/netns, or a path. 0 if none. */
uint64_t shunt_netns_inode(const char *spec);

/*
 * Read the facts of process @pid (uid given by the caller, from SO_PEERCRED);
 * its cgroup only if @cgroup (an empty path otherwise).
 */
void shunt_facts_of(pid_t pid, uid_t uid, bool cgroup, struct shunt_facts *f);

/* Whether any tenant of @p is defined by cgroups: otherwise no cgroup need be read. */
bool shunt_policy_uses_cgroups(const struct shunt_policy *p);

#endif
