// SPDX-License-Identifier: MIT
/*
 * The question containers ask: from namespace A, which namespace does a TCP
 * connection to X reach across veth pairs and bridges on this host, if
 * exactly one (docs/containers.md). Answered from the facts the views keep
 * current (netns.c), without a netlink round trip in the common case.
 */
#include <stdlib.h>
#include <string.h>
#include <linux/if.h>
#include <linux/if_bridge.h>
#include <linux/rtnetlink.h>

#include "common/addr.h"
#include "common/log.h"
#include "daemon/netns.h"

enum { MAX_STALE = 4 };

/* Where the facts of one namespace on the way are. */
struct place {
	struct netns *ns;		/* its view; NULL for a far namespace (no shunt process) */
	const struct ns_facts *facts;
	struct netns_view *space;	/* whose nsids its links carry (and whose socket asks) */
	struct ns_far *far;		/* the far namespace, or NULL */
};

/* A link whose facts disagree with its other end's: asked for before trying again. */
struct stale {
	struct netns_view *v;
	bool far;
	int32_t nsid;			/* of the far namespace, in @v's space */
	uint32_t ifindex;
};

struct reach {
	struct shuntd *d;
	const struct shunt_wire_addr *dst;
	uint32_t arrive;		/* where the namespace reached receives it */
	const char *why;		/* why not, for the debug log */
	struct stale stale[MAX_STALE];
	unsigned nstale;
};

static void note_stale(struct reach *rc, const struct place *p, uint32_t ifindex)
{
	if (rc->nstale < MAX_STALE)
		rc->stale[rc->nstale++] = (struct stale){ p->space, p->far != NULL,
							  p->far ? p->far->nsid : -1, ifindex };
}

/*
 * The other end of veth @l (in @at), in @peer, if both sides' facts agree
 * that it is. A veth's carrier follows both ends being up, and its peer's
 * namespace and index, when that end moves, are told only by the kernel's
 * link watch, up to a second later; each end's own presence and IFF_UP are
 * told at once. So the pair is taken from both ends' own facts, and where
 * they disagree the stale one is asked for.
 */
static const struct ns_link *other_end(const struct place *at, const struct ns_link *l,
				       const struct place *peer)
{
	const struct ns_link *o = ns_facts_link(peer->facts, l->peer);

	if (!o || strcmp(o->kind, "veth") || o->peer != l->index)
		return NULL;
	/* Between two views the nsid must lead back too (a far namespace's cannot be read). */
	if (at->ns && peer->ns &&
	    (!o->has_peer_nsid || ns_view_by_nsid(peer->space, o->peer_nsid) != at->ns))
		return NULL;
	return o;
}

/*
 * The namespace @space numbers @nsid: 1 with its facts in @p, 0 if it is
 * none we follow (no shunt process there), -1 if its facts are not
 * complete now (the connect then goes to the kernel).
 */
static int resolve(struct netns_view *space, int32_t nsid, bool far_too, struct place *p)
{
	struct netns *ns = ns_view_by_nsid(space, nsid);
	struct ns_far *far;

	if (ns) {
		if (!ns_view_ready(ns->view))
			return -1;
		*p = (struct place){ ns, &ns->view->facts, ns->view, NULL };
		return 1;
	}
	/* An nsid asked about and not answered yet may be a view's. */
	if (space->nsid_asked || space->nsids_due)
		return -1;
	if (!far_too)
		return 0;
	far = ns_far_find(space, nsid);
	if (!far || !ns_far_ready(space, far))
		return -1;
	*p = (struct place){ NULL, &far->facts, space, far };
	return 1;
}

/* Whether a listener in @ns could take @dst (port and address; listener.c ranks them). */
static bool listened_in(struct shuntd *d, const struct netns *ns, const struct shunt_wire_addr *dst)
{
	struct listener *l;
	uint64_t key;
	size_t it = 0;

	while ((l = shunt_map_next(&d->listeners, &it, &key))) {
		struct shunt_wire_addr la = l->addr;

		shunt_addr_unmap(&la);
		if (l->ns == ns && la.port == dst->port &&
		    (shunt_addr_is_any(&la) || shunt_addr_same_ip(&la, dst)))
			return true;
	}
	return false;
}

/*
 * Whether some namespace other than @from has @dst and a listener that
 * could take it. Nothing is asked of the kernel for a connect no shunt
 * listener could take; a namespace whose facts are not complete counts as
 * unknown (-1).
 */
static int wanted(struct shuntd *d, const struct netns *from, const struct shunt_wire_addr *dst)
{
	struct listener *l;
	uint64_t key;
	size_t it = 0;
	int r = 0;

	while ((l = shunt_map_next(&d->listeners, &it, &key))) {
		struct shunt_wire_addr la = l->addr;

		shunt_addr_unmap(&la);
		if (!l->ns || l->ns == from || la.port != dst->port ||
		    !(shunt_addr_is_any(&la) || shunt_addr_same_ip(&la, dst)))
			continue;
		if (!ns_view_ready(l->ns->view))
			r = -1;
		else if (ns_facts_where(&l->ns->view->facts, dst, 0) != NS_NOT_HERE)
			return 1;
	}
	return r;
}

/* Arriving at the far end of a veth pair, interface @in of @p: only that namespace is reached. */
static struct netns *direct(struct reach *rc, const struct place *p, const struct ns_link *in)
{
	/*
	 * Only an address on the interface the packet arrives by: one elsewhere
	 * in the namespace is answered or not depending on arp_ignore.
	 */
	if (!p->ns || ns_facts_where(p->facts, rc->dst, in->index) != NS_ON_IFACE)
		return NULL;
	rc->arrive = in->index;
	return p->ns;
}

struct tally {
	struct netns *ns;
	enum ns_where where;
	uint32_t arrive;
};

/*
 * Arriving on bridge @br of @b through port @ingress (NULL: the bridge is
 * the connecting namespace's own and we leave through it). Every namespace
 * that can answer for the destination on that segment counts: the bridge's
 * own when the address is its own, and each view with a veth end on a
 * forwarding port where the address is local. Exactly one, answering on
 * the interface the frames arrive by, is the one reached; two or more is
 * an address conflict the kernel would settle by ARP race: no match.
 */
static struct netns *bridged(struct reach *rc, const struct place *b, uint32_t br,
			     const struct ns_link *ingress)
{
	const struct ns_link *bridge = ns_facts_link(b->facts, br), *p, *o;
	struct netns *found = NULL;
	enum ns_where found_where = NS_NOT_HERE, w;
	uint32_t arrive = br;
	unsigned answering = 0;
	struct tally *t;
	size_t nt = 0, it = 0;
	uint64_t key;

	if (!bridge || strcmp(bridge->kind, "bridge") || !(bridge->flags & IFF_UP))
		return NULL;
	/* VLANs may separate its ports: we do not follow them (conservative). */
	if (bridge->vlan_filtering)
		return NULL;
	/* The bridge's own namespace answers for its addresses (it may run no shunt process). */
	w = ns_facts_where(b->facts, rc->dst, br);
	if (w != NS_NOT_HERE) {
		answering++;
		found = b->ns;
		found_where = w;
	}
	t = calloc(b->facts->links.len ? b->facts->links.len : 1, sizeof(*t));
	if (!t)
		return NULL;
	while ((p = shunt_map_next(&b->facts->links, &it, &key))) {
		struct place q;
		size_t k;
		int r;

		if (p->master != br || (ingress && p->index == ingress->index) ||
		    strcmp(p->kind, "veth") || !p->has_peer_nsid || !(p->flags & IFF_UP) ||
		    p->port_state != BR_STATE_FORWARDING)
			continue;
		/* Two isolated ports do not forward to each other. */
		if (ingress && ingress->port_isolated && p->port_isolated)
			continue;
		/*
		 * A namespace without shunt processes has no view: we cannot see
		 * whether it has the address too (a conflict on the segment) and
		 * take it that it has not.
		 */
		r = resolve(b->space, p->peer_nsid, false, &q);
		if (r < 0) {
			free(t);
			rc->why = "the facts of a namespace on the bridge are not complete yet";
			return NULL;
		}
		if (r == 0 || q.ns == found)
			continue;
		o = other_end(b, p, &q);
		if (!o) {
			note_stale(rc, b, p->index);
			note_stale(rc, &q, p->peer);
			free(t);
			rc->why = "the two ends of a bridge port disagree (a veth moved)";
			return NULL;
		}
		/* Its far end down: frames to it go nowhere. */
		if (!(o->flags & IFF_UP))
			continue;
		w = ns_facts_where(q.facts, rc->dst, p->peer);
		for (k = 0; k < nt && t[k].ns != q.ns; k++)
			;
		if (k == nt)
			t[nt++] = (struct tally){ q.ns, NS_NOT_HERE, 0 };
		if (w > t[k].where) {
			t[k].where = w;
			t[k].arrive = p->peer;
		}
	}
	for (size_t k = 0; k < nt; k++) {
		if (t[k].where == NS_NOT_HERE)
			continue;
		answering++;
		found = t[k].ns;
		found_where = t[k].where;
		arrive = t[k].arrive;
	}
	free(t);
	if (answering != 1 || found_where != NS_ON_IFACE)
		return NULL;
	rc->arrive = arrive;
	return found;
}

/*
 * Whether @to answers @client (the connection's source) the way it came, on
 * interface @arrive without a gateway: otherwise the kernel's SYN-ACK goes
 * elsewhere (or nowhere), and strict reverse-path filtering drops the SYN.
 */
static bool way_back(struct shuntd *d, struct netns *to, const struct shunt_wire_addr *client,
		     const struct shunt_wire_addr *dst, uint32_t arrive)
{
	struct shuntd_route_hints h = { .src = *dst, .has_src = true };
	struct shunt_wire_addr back = *client;
	struct ns_route_result rt;

	back.port = 0;
	return ns_route_get(d, to, &back, &h, &rt) == NS_ROUTE_OK && rt.type == RTN_UNICAST &&
	       !rt.gateway && rt.oif == arrive;
}

static struct netns *decide(struct reach *rc, struct netns *from,
			    const struct shuntd_route_hints *h, struct shunt_wire_addr *src)
{
	struct shuntd *d = rc->d;
	struct netns_view *vf = from->view;
	struct ns_route_result rt;
	struct ns_link out, in;
	const struct ns_link *l;
	struct place here = { from, &vf->facts, vf, NULL }, peer;
	struct netns *to = NULL;
	int r;

	rc->why = "the facts of its namespace are not complete yet";
	if (!ns_view_ready(vf))
		return NULL;
	/* Who could answer at all: a namespace we know where it is local, with a listener for it. */
	r = wanted(d, from, rc->dst);
	rc->why = r < 0 ? "the facts of a namespace with a listener are not complete yet" :
			  "no other namespace we know has that address and a listener for it";
	if (r <= 0)
		return NULL;
	rc->why = "its route is not known now (asked of the kernel)";
	if (ns_route_get(d, from, rc->dst, h, &rt) != NS_ROUTE_OK)
		return NULL;
	rc->why = "no route";
	if (rt.type == RTN_UNSPEC)
		return NULL;
	if (rt.type == RTN_LOCAL) {
		/* Local after all (a local route without an address): @from's own listeners. */
		*src = *rc->dst;
		return from;
	}
	/* A socket bound to an address sends from it (the kernel then names no other source). */
	if (h->has_src) {
		rt.src = h->src;
		rt.has_src = true;
	}
	/* Through a gateway, the next hop decides: not followed (conservative). */
	rc->why = "not an on-link unicast route";
	if (rt.type != RTN_UNICAST || rt.gateway || !rt.oif || !rt.has_src)
		return NULL;
	rc->why = "its interface is down";
	l = ns_facts_link(&vf->facts, rt.oif);
	if (!l || !(l->flags & IFF_UP))
		return NULL;
	out = *l;	/* copied: asking the kernel reads notifications, which may change facts */
	rc->why = "not across a veth pair or a bridge, or not to exactly one namespace we know";
	if (!strcmp(out.kind, "veth")) {
		/* Both ends in @from: what comes out goes back into @from, not to a listener elsewhere. */
		if (!out.has_peer_nsid)
			return NULL;
		r = resolve(vf, out.peer_nsid, true, &peer);
		if (r == 0)
			note_stale(rc, &here, out.index);
		if (r <= 0)
			return NULL;
		l = other_end(&here, &out, &peer);
		if (!l) {
			rc->why = "the two ends of its veth pair disagree (one moved)";
			note_stale(rc, &here, out.index);
			note_stale(rc, &peer, out.peer);
			return NULL;
		}
		in = *l;
		rc->why = "the far end of its veth pair is down";
		if (!(in.flags & IFF_UP))
			return NULL;
		rc->why = "not to exactly one namespace we know";
		if (!in.master)
			to = direct(rc, &peer, &in);
		else if (!strcmp(in.slave_kind, "bridge") && in.port_state == BR_STATE_FORWARDING)
			to = bridged(rc, &peer, in.master, &in);
	} else if (!strcmp(out.kind, "bridge")) {
		to = bridged(rc, &here, out.index, NULL);
	}
	/* macvlan, ipvlan, tunnels, physical devices: left to the kernel. */
	if (!to)
		return NULL;
	/* No listener there could take it: nothing more to ask. */
	if (!listened_in(d, to, rc->dst))
		return NULL;
	if (!way_back(d, to, &rt.src, rc->dst, rc->arrive)) {
		rc->why = "the answer would not come back the same way";
		return NULL;
	}
	*src = rt.src;
	return to;
}

/* Ask for the links whose two ends disagreed: true if every answer came. */
static bool refresh(struct reach *rc)
{
	bool all = true;

	for (unsigned k = 0; k < rc->nstale; k++) {
		struct stale *s = &rc->stale[k];
		struct ns_far *far = s->far ? ns_far_find(s->v, s->nsid) : NULL;

		/* A far namespace let go while its view read: the next try finds out. */
		if (s->far && !far)
			continue;
		all &= ns_watch_refresh_link(rc->d, s->v, far, s->ifindex);
	}
	rc->nstale = 0;
	return all;
}

struct netns *shuntd_netns_reach(struct shuntd *d, struct netns *from,
				 const struct shunt_wire_addr *dst,
				 const struct shuntd_route_hints *h, struct shunt_wire_addr *src)
{
	struct netns_world *w = ns_world(d);
	struct reach rc = { .d = d, .dst = dst, .why = "" };
	struct netns *to;

	if (!from)
		return NULL;
	/* fe80::/10: its scope id names an interface of @from, not of the far end's namespace. */
	if (dst->family == AF_INET6 && dst->addr[0] == 0xfe && (dst->addr[1] & 0xc0) == 0x80)
		return NULL;
	w->deciding = true;
	ns_sync(d);
	to = decide(&rc, from, h, src);
	/* Facts that disagree are asked for, once: the common case never gets here. */
	if (!to && rc.nstale && refresh(&rc))
		to = decide(&rc, from, h, src);
	w->deciding = false;
	if (!to && shunt_log_enabled(SHUNT_LOG_DEBUG)) {
		char a[SHUNT_ADDR_STRLEN];

		shunt_debug("connect from network namespace %llu to %s: no other namespace reached (%s)",
			    (unsigned long long)from->inode, shunt_addr_format(dst, a, sizeof(a)),
			    rc.why);
	}
	return to;
}
