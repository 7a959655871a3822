// SPDX-License-Identifier: MIT
/*
 * The routing tables and policy rules of a namespace as rtnetlink tells
 * them (kept in struct ns_facts, applied by netns_facts.c), and the lookup
 * the kernel makes in them for a connect, where they say it exactly: rules
 * that only look tables up, single-path routes, and a source address the
 * kernel's own choice cannot differ from. Anything else is left to
 * netns_route.c to ask the kernel.
 */
#include <stdlib.h>
#include <string.h>
#include <libmnl/libmnl.h>
#include <linux/fib_rules.h>
#include <linux/if_addr.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>

#include "daemon/netns.h"

enum {
	MODEL_OK,
	MODEL_COMPLEX,			/* the facts cannot say exactly: ask */
	MAX_RULES = 32,
};

static size_t ip_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

/* ---- routes ---- */

static unsigned fam_index(int family)
{
	return family == AF_INET ? 0 : 1;
}

static uint64_t route_key(int family, uint32_t table, unsigned len, const uint8_t *dst)
{
	uint8_t head[6] = { (uint8_t)family, (uint8_t)len, (uint8_t)table, (uint8_t)(table >> 8),
			    (uint8_t)(table >> 16), (uint8_t)(table >> 24) };
	uint8_t masked[NS_IP_LEN] = { 0 };
	unsigned bytes = len / 8;

	memcpy(masked, dst, bytes);
	if (len % 8)
		masked[bytes] = dst[bytes] & (uint8_t)(0xff00u >> (len % 8));
	return ns_hash(masked, ip_len(family), ns_hash(head, sizeof(head), 0xcbf29ce484222325ull)) | 1;
}

/* The chain holding the routes of @family, @table whose prefix of length @len holds @dst. */
static const struct ns_route *routes_at(const struct ns_facts *f, int family, uint32_t table,
					unsigned len, const uint8_t *dst)
{
	if (!f->route_lens[fam_index(family)][len])
		return NULL;
	return shunt_map_get(&f->routes, route_key(family, table, len, dst));
}

/* Identity, as the kernel tells a route to delete from another. */
static bool same_route(const struct ns_route *a, const struct ns_route *b)
{
	size_t n = ip_len(a->family);

	return a->family == b->family && a->table == b->table && a->dst_len == b->dst_len &&
	       a->src_len == b->src_len && a->tos == b->tos && a->priority == b->priority &&
	       a->type == b->type && a->oif == b->oif && a->gateway == b->gateway &&
	       !memcmp(a->dst, b->dst, n) && !memcmp(a->gw, b->gw, n);
}

static void route_unlink(struct ns_facts *f, struct ns_route *r)
{
	uint64_t key = route_key(r->family, r->table, r->dst_len, r->dst);
	struct ns_route *head = shunt_map_get(&f->routes, key), **pp = &head;

	while (*pp && *pp != r)
		pp = &(*pp)->next;
	if (!*pp)
		return;
	*pp = r->next;
	if (head)
		shunt_map_put(&f->routes, key, head);
	else
		shunt_map_del(&f->routes, key);
	f->route_lens[fam_index(r->family)][r->dst_len]--;
	f->nroutes--;
	free(r);
}

/*
 * Drop the routes of @family that match: through @oif (single next hop),
 * or with preferred source @prefsrc. @with_complex: those we do not model
 * too. Collected first: the map must not change while it is walked.
 */
void ns_fib_drop(struct ns_facts *f, int family, uint32_t oif, const uint8_t *prefsrc,
		 bool with_complex)
{
	struct ns_route *gone = NULL, *r, *next;
	uint64_t key;
	size_t it = 0;

	while ((r = shunt_map_next(&f->routes, &it, &key))) {
		for (; r; r = r->next) {
			if (r->family != family || (r->complex && !with_complex))
				continue;
			if (oif && r->oif != oif)
				continue;
			if (prefsrc && (!r->has_prefsrc || memcmp(r->prefsrc, prefsrc, ip_len(family))))
				continue;
			r->seen = (uint64_t)(uintptr_t)gone;	/* the entry dies: reuse as a link */
			gone = r;
		}
	}
	for (r = gone; r; r = next) {
		next = (struct ns_route *)(uintptr_t)r->seen;
		route_unlink(f, r);
	}
}

static bool parse_route(const struct nlmsghdr *nlh, struct ns_route *r)
{
	const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
	const struct nlattr *at;
	size_t n;

	memset(r, 0, sizeof(*r));
	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(*rtm) ||
	    (rtm->rtm_family != AF_INET && rtm->rtm_family != AF_INET6))
		return false;
	/* Cached clones of IPv6 routes are not routes (dumped only when asked for). */
	if (rtm->rtm_flags & RTM_F_CLONED)
		return false;
	r->family = rtm->rtm_family;
	n = ip_len(r->family);
	r->dst_len = rtm->rtm_dst_len;
	r->src_len = rtm->rtm_src_len;
	r->tos = rtm->rtm_tos;
	r->type = rtm->rtm_type;
	r->scope = rtm->rtm_scope;
	r->table = rtm->rtm_table;
	r->flags = rtm->rtm_flags;
	if (r->dst_len > n * 8)
		return false;
	mnl_attr_for_each(at, nlh, sizeof(*rtm)) {
		switch (mnl_attr_get_type(at)) {
		case RTA_TABLE:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				r->table = mnl_attr_get_u32(at);
			break;
		case RTA_DST:
			if (mnl_attr_get_payload_len(at) == n)
				memcpy(r->dst, mnl_attr_get_payload(at), n);
			break;
		case RTA_PRIORITY:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				r->priority = mnl_attr_get_u32(at);
			break;
		case RTA_OIF:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				r->oif = mnl_attr_get_u32(at);
			break;
		case RTA_GATEWAY:
			r->gateway = true;
			if (mnl_attr_get_payload_len(at) == n)
				memcpy(r->gw, mnl_attr_get_payload(at), n);
			break;
		case RTA_VIA:
			r->gateway = true;
			r->complex = true;
			break;
		case RTA_PREFSRC:
			if (mnl_attr_get_payload_len(at) == n) {
				r->has_prefsrc = true;
				memcpy(r->prefsrc, mnl_attr_get_payload(at), n);
			}
			break;
		case RTA_CACHEINFO:
			/* A route that expires (learnt from router adverts) goes away on its own. */
			if (mnl_attr_get_payload_len(at) >= sizeof(struct rta_cacheinfo) &&
			    ((const struct rta_cacheinfo *)mnl_attr_get_payload(at))->rta_expires)
				r->complex = true;
			break;
		case RTA_MULTIPATH:
		case RTA_NH_ID:
		case RTA_ENCAP:
		case RTA_SRC:
			/* Several next hops, a nexthop object, an encapsulation, a source prefix. */
			r->complex = true;
			break;
		}
	}
	/* Only what the lookup in netns_route.c follows exactly is modelled. */
	switch (r->type) {
	case RTN_UNICAST:
	case RTN_LOCAL:
	case RTN_BROADCAST:
	case RTN_ANYCAST:
	case RTN_MULTICAST:
	case RTN_UNREACHABLE:
	case RTN_PROHIBIT:
	case RTN_BLACKHOLE:
		break;
	default:
		r->complex = true;	/* RTN_THROW goes on to the next rule, and the rest */
	}
	if (r->tos || r->src_len)
		r->complex = true;
	return true;
}

int ns_fib_apply_route(struct ns_facts *f, const struct nlmsghdr *nlh)
{
	struct ns_route e, *r;
	uint64_t key;

	if (!parse_route(nlh, &e))
		return 0;
	key = route_key(e.family, e.table, e.dst_len, e.dst);
	for (r = shunt_map_get(&f->routes, key); r; r = r->next)
		if (same_route(r, &e))
			break;
	f->epoch++;
	if (nlh->nlmsg_type == RTM_DELROUTE) {
		if (r)
			route_unlink(f, r);
		return 0;
	}
	/* A replaced route's old self is not named: a dump of the family tells which it was. */
	if ((nlh->nlmsg_flags & NLM_F_REPLACE) && r) {
		route_unlink(f, r);
		r = NULL;
	}
	if (!r) {
		r = malloc(sizeof(*r));
		if (!r)
			return NS_APPLY_LOST;
		*r = e;
		r->next = shunt_map_get(&f->routes, key);
		if (shunt_map_put(&f->routes, key, r) < 0) {
			free(r);
			return NS_APPLY_LOST;
		}
		f->route_lens[fam_index(e.family)][e.dst_len]++;
		f->nroutes++;
	} else {
		e.next = r->next;
		*r = e;
	}
	r->seen = f->tick;
	if (nlh->nlmsg_flags & NLM_F_REPLACE)
		return e.family == AF_INET ? NS_APPLY_REDUMP_ROUTE4 : NS_APPLY_REDUMP_ROUTE6;
	return 0;
}

/* ---- policy rules ---- */

static bool parse_rule(const struct nlmsghdr *nlh, struct ns_rule *r)
{
	const struct fib_rule_hdr *frh = mnl_nlmsg_get_payload(nlh);
	const struct nlattr *at;

	memset(r, 0, sizeof(*r));
	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(*frh) ||
	    (frh->family != AF_INET && frh->family != AF_INET6))
		return false;
	r->family = frh->family;
	r->table = frh->table;
	r->sig = ns_hash(mnl_nlmsg_get_payload(nlh), mnl_nlmsg_get_payload_len(nlh),
			 0xcbf29ce484222325ull);
	/* Plain: no selector, not inverted, looks a table up (what default rules are). */
	r->plain = !frh->dst_len && !frh->src_len && !frh->tos &&
		   frh->action == FR_ACT_TO_TBL && !(frh->flags & FIB_RULE_INVERT);
	mnl_attr_for_each(at, nlh, sizeof(*frh)) {
		switch (mnl_attr_get_type(at)) {
		case FRA_PRIORITY:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				r->priority = mnl_attr_get_u32(at);
			break;
		case FRA_TABLE:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				r->table = mnl_attr_get_u32(at);
			break;
		case FRA_PROTOCOL:
		case FRA_FLOW:
		case FRA_PAD:
			break;
		case FRA_SUPPRESS_PREFIXLEN:
		case FRA_SUPPRESS_IFGROUP:
			if (mnl_attr_validate(at, MNL_TYPE_U32) < 0 || mnl_attr_get_u32(at) != UINT32_MAX)
				r->plain = false;
			break;
		case FRA_FWMARK:
		case FRA_FWMASK:
			if (mnl_attr_validate(at, MNL_TYPE_U32) < 0 || mnl_attr_get_u32(at))
				r->plain = false;
			break;
		case FRA_L3MDEV:
		case FRA_IP_PROTO:
			if (mnl_attr_validate(at, MNL_TYPE_U8) < 0 || mnl_attr_get_u8(at))
				r->plain = false;
			break;
		default:
			/* Any other selector (devices, uids, ports, dscp, goto...): not plain. */
			r->plain = false;
		}
	}
	return true;
}

int ns_fib_apply_rule(struct ns_facts *f, const struct nlmsghdr *nlh)
{
	struct ns_rule e;
	size_t k;

	if (!parse_rule(nlh, &e))
		return 0;
	f->epoch++;
	for (k = 0; k < f->nrules; k++)
		if (f->rules[k].sig == e.sig && f->rules[k].family == e.family)
			break;
	if (nlh->nlmsg_type == RTM_DELRULE) {
		if (k < f->nrules)
			f->rules[k] = f->rules[--f->nrules];
		return 0;
	}
	if (k == f->nrules) {
		if (f->nrules == f->rules_cap) {
			size_t cap = f->rules_cap ? f->rules_cap * 2 : 8;
			struct ns_rule *more = realloc(f->rules, cap * sizeof(*more));

			if (!more)
				return NS_APPLY_LOST;
			f->rules = more;
			f->rules_cap = cap;
		}
		f->nrules++;
	}
	e.seen = f->tick;
	f->rules[k] = e;
	return 0;
}

/* ---- sweep ---- */

void ns_fib_sweep(struct ns_facts *f, enum ns_dump what, uint64_t mark)
{
	int family = (what == NS_DUMP_ROUTE4 || what == NS_DUMP_RULE4) ? AF_INET : AF_INET6;
	uint64_t key;
	size_t it = 0;

	f->epoch++;
	if (what == NS_DUMP_ROUTE4 || what == NS_DUMP_ROUTE6) {
		struct ns_route *dead = NULL, *r, *next;

		while ((r = shunt_map_next(&f->routes, &it, &key)))
			for (; r; r = r->next)
				if (r->family == family && r->seen < mark) {
					r->seen = (uint64_t)(uintptr_t)dead;
					dead = r;
				}
		for (r = dead; r; r = next) {
			next = (struct ns_route *)(uintptr_t)r->seen;
			route_unlink(f, r);
		}
	} else {
		for (size_t k = 0; k < f->nrules;) {
			if (f->rules[k].family == family && f->rules[k].seen < mark)
				f->rules[k] = f->rules[--f->nrules];
			else
				k++;
		}
	}
}

void ns_fib_free(struct ns_facts *f)
{
	struct ns_route *r, *next;
	uint64_t key;
	size_t it = 0;

	while ((r = shunt_map_next(&f->routes, &it, &key)))
		for (; r; r = next) {
			next = r->next;
			free(r);
		}
	shunt_map_free(&f->routes);
	free(f->rules);
	f->rules = NULL;
	f->nrules = f->rules_cap = 0;
}

/* ---- the lookup ---- */

enum table_hit { HIT_NONE, HIT_FOUND, HIT_COMPLEX };

/*
 * Longest prefix first, as fib_table_lookup and fib6_table_lookup do; at
 * one prefix the lowest metric among routes whose next hop is alive. Two
 * such routes at once (their order is the kernel's insertion order, which
 * the facts do not keep), or anything not modelled: ask.
 */
static enum table_hit table_lookup(const struct ns_facts *f, int family, uint32_t table,
				   const uint8_t *dst, const struct ns_route **hit)
{
	int top = family == AF_INET ? 32 : 128;

	for (int len = top; len >= 0; len--) {
		const struct ns_route *best = NULL;
		bool any = false, tie = false;

		for (const struct ns_route *r = routes_at(f, family, table, (unsigned)len, dst);
		     r; r = r->next) {
			if (r->family != family || r->table != table || r->dst_len != len ||
			    !ns_prefix_has(r->dst, (unsigned)len, dst))
				continue;
			any = true;
			if (r->complex)
				return HIT_COMPLEX;
			if (r->flags & RTNH_F_DEAD)
				continue;
			if (best && r->priority == best->priority)
				tie = true;
			else if (!best || r->priority < best->priority) {
				best = r;
				tie = false;
			}
		}
		if (!any)
			continue;
		/*
		 * Without custom rules IPv4 merges table local into main, where
		 * a wider local route would lose to a longer main one: not modelled.
		 */
		if (family == AF_INET && table == RT_TABLE_LOCAL && len < 32)
			return HIT_COMPLEX;
		if (tie)
			return HIT_COMPLEX;
		if (best) {
			*hit = best;
			return HIT_FOUND;
		}
		/* Every next hop here is dead: the kernel backtracks to shorter prefixes. */
	}
	return HIT_NONE;
}

/* The tables the rules of @family look up, in order: only when every rule is plain. */
static int plain_tables(const struct ns_facts *f, int family, uint32_t *tables)
{
	uint32_t prio[MAX_RULES];
	int n = 0;

	for (size_t k = 0; k < f->nrules; k++) {
		const struct ns_rule *r = &f->rules[k];
		int at;

		if (r->family != family)
			continue;
		if (!r->plain || n == MAX_RULES)
			return -1;
		for (at = n; at > 0 && prio[at - 1] > r->priority; at--) {
			prio[at] = prio[at - 1];
			tables[at] = tables[at - 1];
		}
		/* Equal priorities run in insertion order, which we do not know. */
		if (at > 0 && prio[at - 1] == r->priority)
			return -1;
		prio[at] = r->priority;
		tables[at] = r->table;
		n++;
	}
	return n ? n : -1;
}

/* A global-scope IPv6 destination: what the source choice below covers. */
static bool v6_global(const uint8_t *a)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	if (a[0] == 0xff || (a[0] == 0xfe && (a[1] & 0x80) == 0x80))
		return false;	/* multicast, link-local, site-local */
	if (!memcmp(a, mapped, sizeof(mapped)))
		return false;
	for (int k = 0; k < 16; k++)
		if (a[k] && !(k == 15 && a[k] == 1))
			return true;
	return false;		/* :: and ::1 */
}

/*
 * The source the kernel picks for route @r when the socket named none: the
 * route's preferred source, else the one address its own rules cannot pass
 * over. IPv4 (inet_select_addr): the first primary address of the device
 * of no narrower scope than the route; with one such address there is no
 * first to know. IPv6 (RFC 6724 as ipv6_dev_get_saddr): a global address
 * on the outgoing device, preferred, wins by rule 5 over any elsewhere;
 * with one such address on the device (and no home addresses) it is that.
 */
static int pick_source(const struct ns_facts *f, const struct ns_route *r, const uint8_t *dst,
		       struct shunt_wire_addr *src)
{
	const struct ns_addr *a = NULL, *one = NULL;
	size_t it = 0, n = 0;

	if (r->has_prefsrc) {
		memcpy(src->addr, r->prefsrc, ip_len(r->family));
		return MODEL_OK;
	}
	if (r->family == AF_INET6 && (!v6_global(dst) || f->homeaddrs))
		return MODEL_COMPLEX;
	while ((a = ns_facts_next_addr(f, &it, a))) {
		if (a->family != r->family || a->ifindex != r->oif)
			continue;
		if (r->family == AF_INET) {
			if ((a->flags & IFA_F_SECONDARY) || a->scope > r->scope)
				continue;
		} else if (a->scope != RT_SCOPE_UNIVERSE ||
			   (a->flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED))) {
			continue;
		}
		one = a;
		n++;
	}
	if (n != 1 ||
	    (r->family == AF_INET6 && (one->flags & (IFA_F_DEPRECATED | IFA_F_OPTIMISTIC))))
		return MODEL_COMPLEX;
	memcpy(src->addr, one->local, ip_len(r->family));
	return MODEL_OK;
}

int ns_fib_lookup(const struct ns_facts *f, const struct shunt_wire_addr *dst,
		  const struct shuntd_route_hints *h, struct ns_route_result *rt)
{
	uint32_t tables[MAX_RULES];
	const struct ns_route *r = NULL;
	int n;

	/* A device-bound socket is routed on-link even without a route (ip_route_output_key_hash). */
	if (h->oif)
		return MODEL_COMPLEX;
	/* Selectors (marks, ports, sources, devices, uids) are policy routing: ask. */
	n = plain_tables(f, dst->family, tables);
	if (n < 0)
		return MODEL_COMPLEX;
	memset(rt, 0, sizeof(*rt));
	for (int k = 0; k < n; k++) {
		enum table_hit hit = table_lookup(f, dst->family, tables[k], dst->addr, &r);

		if (hit == HIT_COMPLEX)
			return MODEL_COMPLEX;
		if (hit == HIT_FOUND)
			break;
		r = NULL;
	}
	if (!r) {
		rt->type = RTN_UNSPEC;	/* ENETUNREACH */
		return MODEL_OK;
	}
	rt->type = r->type;
	rt->oif = r->oif;
	rt->gateway = r->gateway;
	if (r->type != RTN_UNICAST || r->gateway)
		return MODEL_OK;	/* the decision goes no further: no source needed */
	rt->src.family = dst->family;
	if (h->has_src) {
		rt->src = h->src;
	} else if (pick_source(f, r, dst->addr, &rt->src) != MODEL_OK) {
		return MODEL_COMPLEX;
	}
	rt->has_src = true;
	return MODEL_OK;
}

