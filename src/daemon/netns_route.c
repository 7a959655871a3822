// SPDX-License-Identifier: MIT
/*
 * Which route the kernel of a namespace takes for a TCP connect: found in
 * the facts kept from notifications where they say it exactly (netns_fib.c);
 * anything else (policy routing with selectors, several next hops, a
 * device-bound socket, an ambiguous source) asked of the kernel
 * (RTM_GETROUTE, as `ip route get`) without waiting: the answer is taken if
 * the kernel gave it by the time it is read (it answers within the
 * request's own system call), kept until the namespace changes, and
 * otherwise the connect goes to the kernel.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <libmnl/libmnl.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>

#include "common/addr.h"
#include "common/log.h"
#include "daemon/netns.h"

enum {
	VERIFY_SLOT = NS_ROUTE_CACHE,	/* a request's slot for SHUNTD_NETNS_VERIFY */
};

static size_t ip_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

/* ---- asking the kernel ---- */

/* Ask: the request's seq, or -1. */
static int64_t send_query(struct shuntd *d, struct netns_view *v, const struct ns_route_key *k,
			  unsigned slot)
{
	char buf[512];
	struct nlmsghdr *nlh = ns_watch_request(buf, RTM_GETROUTE, 0);
	struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
	size_t len = ip_len(k->dst.family);
	uint32_t oif = k->h.oif;
	struct ns_req r = { .kind = NS_REQ_ROUTE, .slot = slot };

	rtm->rtm_family = (uint8_t)k->dst.family;
	rtm->rtm_dst_len = (uint8_t)(len * 8);
	mnl_attr_put(nlh, RTA_DST, len, k->dst.addr);
	/* What policy routing may look at: source, device, mark, protocol and ports. */
	if (k->h.has_src) {
		rtm->rtm_src_len = (uint8_t)(len * 8);
		mnl_attr_put(nlh, RTA_SRC, len, k->h.src.addr);
	}
	if (!oif && k->dst.family == AF_INET6)
		oif = k->dst.scope_id;
	if (oif)
		mnl_attr_put_u32(nlh, RTA_OIF, oif);
	if (k->h.mark)
		mnl_attr_put_u32(nlh, RTA_MARK, k->h.mark);
	mnl_attr_put_u8(nlh, RTA_IP_PROTO, IPPROTO_TCP);
	if (k->dst.port)
		mnl_attr_put_u16(nlh, RTA_DPORT, htons(k->dst.port));
	if (k->h.src.port)
		mnl_attr_put_u16(nlh, RTA_SPORT, htons(k->h.src.port));
	if (ns_watch_send(d, &v->own, nlh, &r) < 0)
		return -1;
	return (int)v->own.seq;
}

static void parse_answer(const struct nlmsghdr *nlh, struct ns_route_result *rt)
{
	const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
	const struct nlattr *at;

	memset(rt, 0, sizeof(*rt));
	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(*rtm))
		return;
	rt->type = rtm->rtm_type;
	mnl_attr_for_each(at, nlh, sizeof(*rtm)) {
		switch (mnl_attr_get_type(at)) {
		case RTA_OIF:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				rt->oif = mnl_attr_get_u32(at);
			break;
		case RTA_GATEWAY:
		case RTA_VIA:
			rt->gateway = true;
			break;
		case RTA_PREFSRC:
			if (mnl_attr_get_payload_len(at) != ip_len(rtm->rtm_family))
				break;
			rt->has_src = true;
			rt->src.family = rtm->rtm_family;
			memcpy(rt->src.addr, mnl_attr_get_payload(at), ip_len(rtm->rtm_family));
			break;
		}
	}
}

void ns_route_answer(struct shuntd *d, struct netns_view *v, const struct ns_req *r,
		     const struct nlmsghdr *nlh)
{
	struct ns_route_cached *e = r->slot == VERIFY_SLOT ? &v->verify : &v->cache[r->slot];

	if (!e->used || e->seq != r->seq || ns_world(d)->hang)
		return;	/* asked again since, or (a test) the kernel is to seem hung */
	if (nlh)
		parse_answer(nlh, &e->rt);
	else
		memset(&e->rt, 0, sizeof(e->rt));	/* ENETUNREACH and the like: no route */
	e->answered = true;
	/* Every notification before the answer has been applied: it is as current as they. */
	e->epoch = v->facts.epoch;
}

void ns_route_forget(struct netns_view *v)
{
	memset(v->cache, 0, sizeof(v->cache));
	memset(&v->verify, 0, sizeof(v->verify));
}

static bool same_key(const struct ns_route_key *a, const struct ns_route_key *b)
{
	return shunt_addr_same_ip(&a->dst, &b->dst) && a->dst.port == b->dst.port &&
	       a->dst.scope_id == b->dst.scope_id && a->h.has_src == b->h.has_src &&
	       (!a->h.has_src || shunt_addr_same_ip(&a->h.src, &b->h.src)) &&
	       a->h.src.port == b->h.src.port && a->h.oif == b->h.oif && a->h.mark == b->h.mark;
}

static unsigned slot_of(const struct ns_route_key *k)
{
	uint64_t h = ns_hash(k->dst.addr, sizeof(k->dst.addr), k->dst.family);

	h = ns_hash(&k->dst.port, sizeof(k->dst.port), h);
	h = ns_hash(k->h.src.addr, sizeof(k->h.src.addr), h);
	h = ns_hash(&k->h.mark, sizeof(k->h.mark), h ^ k->h.oif);
	return (unsigned)(h % NS_ROUTE_CACHE);
}

/* Ask, and read up to the answer without waiting for it. */
static int ask(struct shuntd *d, struct netns_view *v, struct ns_route_cached *e,
	       const struct ns_route_key *k, unsigned slot)
{
	int64_t seq;

	e->used = true;
	e->answered = false;
	e->key = *k;
	seq = send_query(d, v, k, slot);
	if (seq < 0) {
		e->used = false;
		return -1;
	}
	e->seq = (uint32_t)seq;
	if (!ns_world(d)->hang)
		ns_watch_drain(d, &v->own, e->seq);
	return e->answered && e->seq == (uint32_t)seq ? 0 : -1;
}

/* SHUNTD_NETNS_VERIFY: what the model said, against what the kernel says. */
static void verify(struct shuntd *d, struct netns_view *v, const struct ns_route_key *k,
		   const struct ns_route_result *m)
{
	struct netns_world *w = ns_world(d);
	struct ns_route_result *q = &v->verify.rt;
	char a[SHUNT_ADDR_STRLEN], s1[SHUNT_ADDR_STRLEN], s2[SHUNT_ADDR_STRLEN];
	bool usable_m, usable_q;

	if (ask(d, v, &v->verify, k, VERIFY_SLOT) < 0)
		return;
	/* What the decision uses: local, on-link unicast (device, source), or anything else. */
	usable_m = m->type == RTN_UNICAST && !m->gateway;
	usable_q = q->type == RTN_UNICAST && !q->gateway;
	if ((m->type == RTN_LOCAL) == (q->type == RTN_LOCAL) && usable_m == usable_q &&
	    (!usable_m || (m->oif == q->oif &&
			   (k->h.has_src || (q->has_src && shunt_addr_same_ip(&m->src, &q->src))))))
		return;
	w->stats.verify_mismatches++;
	shunt_warn("network namespace %llu: route to %s: model says type %u dev %u%s src %s, "
		   "the kernel type %u dev %u%s src %s", (unsigned long long)v->ns->inode,
		   shunt_addr_format(&k->dst, a, sizeof(a)), m->type, m->oif,
		   m->gateway ? " via a gateway" : "", shunt_addr_format(&m->src, s1, sizeof(s1)),
		   q->type, q->oif, q->gateway ? " via a gateway" : "",
		   shunt_addr_format(&q->src, s2, sizeof(s2)));
}

int ns_route_get(struct shuntd *d, struct netns *ns, const struct shunt_wire_addr *dst,
		 const struct shuntd_route_hints *h, struct ns_route_result *rt)
{
	struct netns_world *w = ns_world(d);
	struct netns_view *v = ns->view;
	struct ns_route_key k = { .dst = *dst, .h = *h };
	struct ns_route_cached *e;
	unsigned slot;

	if (!ns_view_ready(v))
		return NS_ROUTE_UNKNOWN;
	if (ns_fib_lookup(&v->facts, dst, h, rt) == 0) {
		w->stats.route_model++;
		if (w->verify)
			verify(d, v, &k, rt);
		return NS_ROUTE_OK;
	}
	slot = slot_of(&k);
	e = &v->cache[slot];
	if (e->used && same_key(&e->key, &k)) {
		if (e->answered && e->epoch == v->facts.epoch) {
			w->stats.route_cached++;
			*rt = e->rt;
			return NS_ROUTE_OK;
		}
		/* Asked already, not answered yet: not asked twice. */
		if (!e->answered && ns_watch_pending(&v->own, e->seq)) {
			w->stats.route_unknown++;
			return NS_ROUTE_UNKNOWN;
		}
	}
	if (ask(d, v, e, &k, slot) < 0 || e->epoch != v->facts.epoch) {
		w->stats.route_unknown++;
		return NS_ROUTE_UNKNOWN;
	}
	w->stats.route_asked++;
	*rt = e->rt;
	return NS_ROUTE_OK;
}
