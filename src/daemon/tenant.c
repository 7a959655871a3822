// SPDX-License-Identifier: MIT
/*
 * Tenants: every process gets one from facts shuntd checks itself (its uid
 * from SO_PEERCRED, its cgroup and network namespace from /proc), never
 * from the library; the policy maps facts to tenants and decides what a
 * connect between two tenants gets. Each tenant's live connections and
 * circuit memory are accounted, and its limits enforced: past a limit a
 * connect goes to the kernel, it does not fail.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/addr.h"
#include "common/log.h"
#include "common/proto.h"
#include "daemon/shuntd.h"

struct tenant *shuntd_tenant_get(struct shuntd *d, const char *name)
{
	struct tenant *t;

	for (t = d->tenants; t; t = t->next)
		if (!strcmp(t->name, name))
			return t;
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->next = d->tenants;
	d->tenants = t;
	return t;
}

void shuntd_tenant_identify(struct shuntd *d, struct session *s)
{
	char buf[SHUNT_NAME_MAX];

	/* A policy reload identifies every session again, with what it needs read. */
	shunt_facts_of(s->pid, s->uid, shunt_policy_uses_cgroups(d->policy), &s->facts);
	s->tenant = shuntd_tenant_get(d, shunt_policy_tenant(d->policy, &s->facts, buf));
}

int shuntd_policy_load(struct shuntd *d)
{
	struct shunt_policy *p = malloc(sizeof(*p));
	char err[512];
	uint64_t key;
	size_t it = 0;
	struct session *s;

	if (!p)
		return -ENOMEM;
	if (!d->cfg.config_path) {
		shunt_policy_default(p);
	} else if (shunt_policy_load(d->cfg.config_path, p, err, sizeof(err)) < 0) {
		shunt_err("%s", err);
		free(p);
		return -EINVAL;
	}
	free(d->policy);
	d->policy = p;
	/* Channels were granted by the old policy: new connects ask again. */
	shuntd_chan_close_all(d);
	/* Tenants follow the new policy; what is charged stays where it is. */
	while ((s = shunt_map_next(&d->sessions, &it, &key)))
		if (!s->ticket)
			shuntd_tenant_identify(d, s);
	shunt_info("policy: %s (%u tenants, %u rules, default %s)",
		   d->cfg.config_path ? d->cfg.config_path : "built in", p->ntenants, p->nrules,
		   shunt_action_name(p->def));
	return 0;
}

void shuntd_tenant_fallback(struct shuntd *d, struct session *s, enum shunt_fallback why)
{
	d->fallbacks[why]++;
	if (s->tenant)
		s->tenant->fallbacks[why]++;
}

/* Whether one more end (and, for the connector, @memory bytes) fits tenant @t's limits. */
static enum shunt_fallback over_limit(struct shuntd *d, const struct tenant *t,
				       uint64_t memory)
{
	const struct shunt_tenant_def *def = t ? shunt_policy_tenant_def(d->policy, t->name) : NULL;

	if (!def)
		return SHUNT_FALLBACK_REASONS;
	if (def->max_connections && t->connections + 1 > def->max_connections)
		return SHUNT_FALLBACK_LIMIT_CONNECTIONS;
	if (def->max_memory && memory && t->memory + memory > def->max_memory)
		return SHUNT_FALLBACK_LIMIT_MEMORY;
	return SHUNT_FALLBACK_REASONS;
}

/* Count a policy decision against its pair of tenants and its rule. */
static void count_pair(struct shuntd *d, const char *from, const char *to,
		       const struct shunt_rule *rule, bool refused)
{
	const char *rname = rule ? rule->name : "";
	struct policy_pair *p;

	for (p = d->pairs; p; p = p->next)
		if (!strcmp(p->from, from) && !strcmp(p->to, to) && !strcmp(p->rule, rname) &&
		    p->refused == refused)
			break;
	if (!p && d->npairs < SHUNTD_POLICY_PAIRS && (p = calloc(1, sizeof(*p)))) {
		snprintf(p->from, sizeof(p->from), "%s", from);
		snprintf(p->to, sizeof(p->to), "%s", to);
		snprintf(p->rule, sizeof(p->rule), "%s", rname);
		p->refused = refused;
		p->next = d->pairs;
		d->pairs = p;
		d->npairs++;
	}
	if (p)
		p->count++;
}

int shuntd_tenant_admit(struct shuntd *d, struct session *s, const struct listener *l,
			const struct shunt_wire_addr *dst, struct shunt_msg_connect_kernel *why_msg)
{
	const char *from = s->tenant ? s->tenant->name : "?";
	const char *to = l->tenant ? l->tenant->name : "?";
	uint64_t memory = shunt_circuit_size(d->cfg.ring_size);
	const struct shunt_rule *rule;
	enum shunt_action a = shunt_policy_decide(d->policy, from, to, dst, &rule);
	enum shunt_fallback why;
	char where[SHUNT_ADDR_STRLEN];

	shunt_addr_format(dst, where, sizeof(where));
	if (a == SHUNT_ACTION_KERNEL || a == SHUNT_ACTION_REFUSE) {
		why = a == SHUNT_ACTION_KERNEL ? SHUNT_FALLBACK_POLICY : SHUNT_FALLBACK_REFUSED;
		shuntd_tenant_fallback(d, s, why);
		count_pair(d, from, to, rule, a == SHUNT_ACTION_REFUSE);
		snprintf(why_msg->from, sizeof(why_msg->from), "%s", from);
		snprintf(why_msg->to, sizeof(why_msg->to), "%s", to);
		snprintf(why_msg->rule, sizeof(why_msg->rule), "%s", rule ? rule->name : "");
		snprintf(why_msg->dflt, sizeof(why_msg->dflt), "%s",
			 rule ? "" : shunt_action_name(d->policy->def));
		shunt_warn("connect from pid %d (tenant %s) to %s (tenant %s): %s by %s%s%s",
			   (int)s->pid, from, where, to,
			   a == SHUNT_ACTION_KERNEL ? "left to the kernel" : "refused",
			   rule ? "rule " : "the default policy", rule ? rule->name : "",
			   rule ? "" : (d->policy->def == SHUNT_ACTION_SAME_TENANT ?
					" (different tenants)" : ""));
		return a == SHUNT_ACTION_KERNEL ? SHUNT_KERNEL_POLICY : -ECONNREFUSED;
	}
	why = over_limit(d, s->tenant, memory);
	if (why == SHUNT_FALLBACK_REASONS && l->tenant != s->tenant)
		why = over_limit(d, l->tenant, 0);
	if (why != SHUNT_FALLBACK_REASONS) {
		shuntd_tenant_fallback(d, s, why);
		shunt_warn("connect from pid %d (tenant %s) to %s (tenant %s): left to the kernel, "
			   "%s reached", (int)s->pid, from, where, to,
			   why == SHUNT_FALLBACK_LIMIT_MEMORY ? "max_memory" : "max_connections");
		return SHUNT_KERNEL_LIMIT;
	}
	return SHUNT_OK;
}

void shuntd_tenant_charge(struct circuit *c, unsigned end, struct tenant *t)
{
	if (!t || c->charged[end])
		return;
	c->charged[end] = t;
	/* A connection between two of its own processes is one connection. */
	if (c->charged[!end] != t)
		t->connections++;
	/* The connector's tenant pays for the circuit's memory, until it is freed. */
	if (end == SHUNT_END_CONNECTOR && !c->payer) {
		c->payer = t;
		t->memory += shunt_circuit_size(c->ring_size);
		t->circuits_total++;
	}
}

void shuntd_tenant_release(struct circuit *c, unsigned end)
{
	struct tenant *t = c->charged[end];

	c->charged[end] = NULL;
	if (t && c->charged[!end] != t)
		t->connections--;
}

void shuntd_tenant_free_memory(struct circuit *c)
{
	if (c->payer)
		c->payer->memory -= shunt_circuit_size(c->ring_size);
	c->payer = NULL;
}
