// SPDX-License-Identifier: MIT
/*
 * The facts shuntd keeps about one network namespace: its links and
 * addresses, as rtnetlink dumps and notifications tell them (netns_watch.c
 * reads them; netns_fib.c keeps routes and rules), with the route flushes
 * the kernel does not announce applied as the kernel applies them.
 *
 * Messages are parsed with libmnl (attribute types and sizes checked by
 * mnl_attr_validate before use).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/if_bridge.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <netinet/in.h>

#include "daemon/netns.h"

uint64_t ns_hash(const void *p, size_t n, uint64_t h)
{
	const uint8_t *b = p;

	/* FNV-1a: keys are short and made by the kernel, not chosen to collide. */
	for (size_t k = 0; k < n; k++)
		h = (h ^ b[k]) * 0x100000001b3ull;
	return h;
}

static size_t ip_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

bool ns_prefix_has(const uint8_t *prefix, unsigned len, const uint8_t *ip)
{
	unsigned bytes = len / 8, bits = len % 8;

	if (memcmp(prefix, ip, bytes))
		return false;
	if (!bits)
		return true;
	uint8_t mask = (uint8_t)(0xff00u >> bits);

	return (prefix[bytes] & mask) == (ip[bytes] & mask);
}

void ns_facts_init(struct ns_facts *f)
{
	memset(f, 0, sizeof(*f));
	shunt_map_init(&f->links);
	shunt_map_init(&f->addrs);
	shunt_map_init(&f->routes);
}

/* Free every address chain of @m. */
static void free_chains(struct shunt_map *m)
{
	struct ns_addr *a;
	uint64_t key;
	size_t it = 0;

	while ((a = shunt_map_next(m, &it, &key))) {
		while (a) {
			struct ns_addr *next = a->next;

			free(a);
			a = next;
		}
	}
	shunt_map_free(m);
}

void ns_facts_free(struct ns_facts *f)
{
	struct ns_link *l;
	uint64_t key;
	size_t it = 0;

	while ((l = shunt_map_next(&f->links, &it, &key)))
		free(l);
	shunt_map_free(&f->links);
	free_chains(&f->addrs);
	ns_fib_free(f);
	ns_facts_init(f);
}

uint64_t ns_facts_mark(struct ns_facts *f)
{
	return ++f->tick;
}

/* ---- links ---- */

struct ns_link *ns_facts_link(const struct ns_facts *f, uint32_t ifindex)
{
	return ifindex ? shunt_map_get(&f->links, ifindex) : NULL;
}

static void copy_str(char *to, size_t n, const struct nlattr *at)
{
	size_t len = mnl_attr_get_payload_len(at);
	const char *s = mnl_attr_get_payload(at);

	len = strnlen(s, len < n - 1 ? len : n - 1);
	memcpy(to, s, len);
	to[len] = 0;
}

static void parse_port(const struct nlattr *nest, struct ns_link *l)
{
	const struct nlattr *in;

	mnl_attr_for_each_nested(in, nest) {
		if (mnl_attr_validate(in, MNL_TYPE_U8) < 0)
			continue;
		if (mnl_attr_get_type(in) == IFLA_BRPORT_STATE)
			l->port_state = mnl_attr_get_u8(in);
		else if (mnl_attr_get_type(in) == IFLA_BRPORT_ISOLATED)
			l->port_isolated = mnl_attr_get_u8(in);
	}
}

static void parse_linkinfo(const struct nlattr *info, struct ns_link *l)
{
	const struct nlattr *at, *in;

	mnl_attr_for_each_nested(at, info) {
		switch (mnl_attr_get_type(at)) {
		case IFLA_INFO_KIND:
			copy_str(l->kind, sizeof(l->kind), at);
			break;
		case IFLA_INFO_SLAVE_KIND:
			copy_str(l->slave_kind, sizeof(l->slave_kind), at);
			break;
		case IFLA_INFO_DATA:
			if (mnl_attr_validate(at, MNL_TYPE_NESTED) < 0)
				break;
			mnl_attr_for_each_nested(in, at)
				if (mnl_attr_get_type(in) == IFLA_BR_VLAN_FILTERING &&
				    mnl_attr_validate(in, MNL_TYPE_U8) == 0)
					l->vlan_filtering = mnl_attr_get_u8(in);
			break;
		case IFLA_INFO_SLAVE_DATA:
			if (mnl_attr_validate(at, MNL_TYPE_NESTED) == 0)
				parse_port(at, l);
			break;
		}
	}
}

static void parse_link(const struct nlmsghdr *nlh, struct ns_link *l)
{
	const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
	const struct nlattr *at;

	memset(l, 0, sizeof(*l));
	l->port_state = -1;
	l->index = (uint32_t)ifi->ifi_index;
	l->flags = ifi->ifi_flags;
	mnl_attr_for_each(at, nlh, sizeof(*ifi)) {
		switch (mnl_attr_get_type(at)) {
		case IFLA_MASTER:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				l->master = mnl_attr_get_u32(at);
			break;
		case IFLA_LINK:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				l->peer = mnl_attr_get_u32(at);
			break;
		case IFLA_LINK_NETNSID:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0) {
				l->peer_nsid = (int32_t)mnl_attr_get_u32(at);
				l->has_peer_nsid = l->peer_nsid >= 0;
			}
			break;
		case IFLA_LINKINFO:
			if (mnl_attr_validate(at, MNL_TYPE_NESTED) == 0)
				parse_linkinfo(at, l);
			break;
		}
	}
}

static void drop_addrs_on(struct ns_facts *f, uint32_t ifindex);

/*
 * The bridge's own notices about a port (family AF_BRIDGE): its state and
 * isolation change without a generic RTM_NEWLINK. RTM_DELLINK here means
 * the port left its bridge, not that the link is gone.
 */
static int apply_bridge_port(struct ns_facts *f, const struct nlmsghdr *nlh)
{
	const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
	struct ns_link *l = ns_facts_link(f, (uint32_t)ifi->ifi_index);
	const struct nlattr *at, *protinfo = NULL;
	uint32_t master = 0;

	if (!l)
		return 0;	/* its generic RTM_NEWLINK comes (or came) with all of it */
	mnl_attr_for_each(at, nlh, sizeof(*ifi)) {
		if (mnl_attr_get_type(at) == IFLA_MASTER && mnl_attr_validate(at, MNL_TYPE_U32) == 0)
			master = mnl_attr_get_u32(at);
		else if (mnl_attr_get_type(at) == IFLA_PROTINFO &&
			 mnl_attr_validate(at, MNL_TYPE_NESTED) == 0)
			protinfo = at;
	}
	if (nlh->nlmsg_type == RTM_DELLINK) {
		l->master = 0;
		l->slave_kind[0] = 0;
		l->port_state = -1;
		l->port_isolated = false;
	} else if (protinfo) {
		/* The bridge device itself is announced too, without IFLA_PROTINFO. */
		if (master)
			l->master = master;
		snprintf(l->slave_kind, sizeof(l->slave_kind), "bridge");
		parse_port(protinfo, l);
	}
	f->epoch++;
	return 0;
}

static int apply_link(struct ns_facts *f, const struct nlmsghdr *nlh, enum ns_origin origin,
		      uint32_t *refetch)
{
	const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
	uint32_t index = (uint32_t)ifi->ifi_index;
	struct ns_link *l;

	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(*ifi) || !index)
		return 0;
	if (ifi->ifi_family == AF_BRIDGE)
		return apply_bridge_port(f, nlh);
	l = ns_facts_link(f, index);
	if (nlh->nlmsg_type == RTM_DELLINK) {
		if (l) {
			shunt_map_del(&f->links, index);
			free(l);
		}
		/* An interface that goes takes its routes along without a word (both families). */
		if (origin == NS_ORIGIN_OWN) {
			ns_fib_drop(f, AF_INET, index, NULL, false);
			ns_fib_drop(f, AF_INET6, index, NULL, false);
		}
		drop_addrs_on(f, index);
		f->epoch++;
		return 0;
	}
	if (!l) {
		l = calloc(1, sizeof(*l));
		if (!l || shunt_map_put(&f->links, index, l) < 0) {
			free(l);
			return NS_APPLY_LOST;
		}
		l->index = index;
	}
	f->epoch++;
	if (origin == NS_ORIGIN_FAR_EVENT) {
		/*
		 * Its nsids are numbered in the far namespace's own space, which
		 * we cannot read: ask for the link through the view instead.
		 */
		l->seen = f->tick;
		if (l->refetch)
			return 0;
		l->refetch = true;
		*refetch = index;
		return NS_APPLY_REFETCH;
	}
	bool refetching = l->refetch;

	parse_link(nlh, l);
	l->refetch = refetching;
	l->seen = f->tick;
	/*
	 * IPv4 flushes the routes of a link taken down without telling
	 * (fib_disable_ip); routes with several next hops stay (they are
	 * never modelled: netns_route.c asks the kernel about them).
	 */
	if (origin == NS_ORIGIN_OWN && !(l->flags & IFF_UP))
		ns_fib_drop(f, AF_INET, index, NULL, false);
	return 0;
}

/* ---- addresses ---- */

static uint64_t addr_key(int family, const uint8_t *ip)
{
	uint8_t fam = (uint8_t)family;

	return ns_hash(ip, ip_len(family), ns_hash(&fam, 1, 0xcbf29ce484222325ull)) | 1;
}

const struct ns_addr *ns_facts_addrs_of(const struct ns_facts *f, int family, const uint8_t *ip)
{
	return shunt_map_get(&f->addrs, addr_key(family, ip));
}

static bool usable(const struct ns_addr *a)
{
	/* An IPv6 address still on trial (DAD) cannot be connected to yet. */
	return !(a->flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED));
}

enum ns_where ns_facts_where(const struct ns_facts *f, const struct shunt_wire_addr *ip,
			     uint32_t ifindex)
{
	enum ns_where w = NS_NOT_HERE;

	for (const struct ns_addr *a = ns_facts_addrs_of(f, ip->family, ip->addr); a; a = a->next) {
		if (a->family != ip->family || memcmp(a->local, ip->addr, ip_len(ip->family)) ||
		    !usable(a))
			continue;
		if (!ifindex || a->ifindex == ifindex)
			return NS_ON_IFACE;
		w = NS_ELSEWHERE;
	}
	return w;
}

const struct ns_addr *ns_facts_next_addr(const struct ns_facts *f, size_t *pos,
					 const struct ns_addr *prev)
{
	uint64_t key;

	if (prev && prev->next)
		return prev->next;
	return shunt_map_next(&f->addrs, pos, &key);
}

static bool same_addr(const struct ns_addr *a, const struct ns_addr *b)
{
	size_t n = ip_len(a->family);

	return a->family == b->family && a->ifindex == b->ifindex &&
	       a->prefixlen == b->prefixlen && !memcmp(a->local, b->local, n) &&
	       !memcmp(a->peer, b->peer, n);
}

/* Unlink @a from its chain and free it. */
static void addr_del(struct ns_facts *f, struct ns_addr *a)
{
	uint64_t key = addr_key(a->family, a->local);
	struct ns_addr *head = shunt_map_get(&f->addrs, key), **pp = &head;

	while (*pp && *pp != a)
		pp = &(*pp)->next;
	if (!*pp)
		return;
	*pp = a->next;
	if (head)
		shunt_map_put(&f->addrs, key, head);	/* replaces: no allocation */
	else
		shunt_map_del(&f->addrs, key);
	if (a->family == AF_INET6 && (a->flags & IFA_F_HOMEADDRESS))
		f->homeaddrs--;
	f->naddrs--;
	free(a);
}

static void drop_addrs_on(struct ns_facts *f, uint32_t ifindex)
{
	struct ns_addr *gone = NULL, *a;
	const struct ns_addr *c = NULL;
	size_t it = 0;

	/* The map must not change while it is walked: collect, then delete. */
	while ((c = ns_facts_next_addr(f, &it, c)))
		if (c->ifindex == ifindex) {
			a = (struct ns_addr *)c;
			/* seen is free to reuse as the link of this list: the entry dies. */
			a->seen = (uint64_t)(uintptr_t)gone;
			gone = a;
		}
	while (gone) {
		a = gone;
		gone = (struct ns_addr *)(uintptr_t)a->seen;
		addr_del(f, a);
	}
}

/* Whether @ip is an address of the namespace, in whatever state. */
static bool has_local(const struct ns_facts *f, int family, const uint8_t *ip)
{
	for (const struct ns_addr *a = ns_facts_addrs_of(f, family, ip); a; a = a->next)
		if (a->family == family && !memcmp(a->local, ip, ip_len(family)))
			return true;
	return false;
}

static int apply_addr(struct ns_facts *f, const struct nlmsghdr *nlh, enum ns_origin origin)
{
	const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(nlh);
	const struct nlattr *at, *local = NULL, *address = NULL;
	struct ns_addr e = { 0 }, *a;
	size_t n;

	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(*ifa) ||
	    (ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6))
		return 0;
	e.family = ifa->ifa_family;
	e.prefixlen = ifa->ifa_prefixlen;
	e.scope = ifa->ifa_scope;
	e.flags = ifa->ifa_flags;
	e.ifindex = ifa->ifa_index;
	n = ip_len(e.family);
	mnl_attr_for_each(at, nlh, sizeof(*ifa)) {
		switch (mnl_attr_get_type(at)) {
		case IFA_LOCAL:
			local = at;
			break;
		case IFA_ADDRESS:
			address = at;
			break;
		case IFA_FLAGS:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				e.flags = mnl_attr_get_u32(at);
			break;
		}
	}
	/* IFA_LOCAL is ours where both are given (IFA_ADDRESS is then the far end). */
	at = local ? local : address;
	if (!at || mnl_attr_get_payload_len(at) != n)
		return 0;
	memcpy(e.local, mnl_attr_get_payload(at), n);
	if (address && mnl_attr_get_payload_len(address) == n)
		memcpy(e.peer, mnl_attr_get_payload(address), n);
	for (a = (struct ns_addr *)ns_facts_addrs_of(f, e.family, e.local); a; a = a->next)
		if (same_addr(a, &e))
			break;
	f->epoch++;
	if (nlh->nlmsg_type == RTM_DELADDR) {
		if (a)
			addr_del(f, a);
		/*
		 * The last of an IPv4 address takes along, without a word, every
		 * route that named it as preferred source (fib_del_ifaddr).
		 */
		if (origin == NS_ORIGIN_OWN && e.family == AF_INET && !has_local(f, AF_INET, e.local))
			ns_fib_drop(f, AF_INET, 0, e.local, true);
		return 0;
	}
	if (!a) {
		uint64_t key = addr_key(e.family, e.local);

		a = malloc(sizeof(*a));
		if (!a)
			return NS_APPLY_LOST;
		*a = e;
		a->next = shunt_map_get(&f->addrs, key);
		if (shunt_map_put(&f->addrs, key, a) < 0) {
			free(a);
			return NS_APPLY_LOST;
		}
		f->naddrs++;
		if (e.family == AF_INET6 && (e.flags & IFA_F_HOMEADDRESS))
			f->homeaddrs++;
	} else {
		if (a->family == AF_INET6 && (a->flags & IFA_F_HOMEADDRESS))
			f->homeaddrs--;
		e.next = a->next;
		*a = e;
		if (e.family == AF_INET6 && (e.flags & IFA_F_HOMEADDRESS))
			f->homeaddrs++;
	}
	a->seen = f->tick;
	return 0;
}

/* ---- dispatch, sweep ---- */

int ns_facts_apply(struct ns_facts *f, const struct nlmsghdr *nlh, enum ns_origin origin,
		   uint32_t *refetch)
{
	bool far = origin != NS_ORIGIN_OWN;

	switch (nlh->nlmsg_type) {
	case RTM_NEWLINK:
	case RTM_DELLINK:
		return apply_link(f, nlh, origin, refetch);
	case RTM_NEWADDR:
	case RTM_DELADDR:
		return apply_addr(f, nlh, origin);
	case RTM_NEWROUTE:
	case RTM_DELROUTE:
		return far ? 0 : ns_fib_apply_route(f, nlh);
	case RTM_NEWRULE:
	case RTM_DELRULE:
		return far ? 0 : ns_fib_apply_rule(f, nlh);
	}
	return 0;
}

void ns_facts_sweep(struct ns_facts *f, enum ns_dump what, uint64_t mark)
{
	uint64_t key;
	size_t it = 0;

	f->epoch++;
	if (what == NS_DUMP_LINK) {
		struct ns_link *dead = NULL, *l;

		/* The map must not change while it is walked: the dead are chained through seen. */
		while ((l = shunt_map_next(&f->links, &it, &key)))
			if (l->seen < mark) {
				l->seen = (uint64_t)(uintptr_t)dead;
				dead = l;
			}
		while (dead) {
			l = dead;
			dead = (struct ns_link *)(uintptr_t)l->seen;
			shunt_map_del(&f->links, l->index);
			free(l);
		}
	} else if (what == NS_DUMP_ADDR) {
		struct ns_addr *dead = NULL, *a;
		const struct ns_addr *c = NULL;

		while ((c = ns_facts_next_addr(f, &it, c)))
			if (c->seen < mark) {
				a = (struct ns_addr *)c;
				a->seen = (uint64_t)(uintptr_t)dead;
				dead = a;
			}
		while (dead) {
			a = dead;
			dead = (struct ns_addr *)(uintptr_t)a->seen;
			addr_del(f, a);
		}
	} else {
		ns_fib_sweep(f, what, mark);
	}
}
