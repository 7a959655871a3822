/* SPDX-License-Identifier: MIT */
/*
 * Inside shuntd's views of network namespaces (the netns*.c files): the
 * facts kept per namespace from rtnetlink notifications, the socket they
 * come by, and the namespaces reached by a view's veth pairs that have no
 * view of their own. docs/containers.md says how each fact is kept current.
 * Single-threaded like the rest of shuntd: nothing here is locked.
 */
#ifndef SHUNTD_NETNS_H
#define SHUNTD_NETNS_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/netlink.h>

#include "common/map.h"
#include "daemon/shuntd.h"

enum {
	NS_KIND_LEN = 16,
	NS_IP_LEN = 16,
	NS_ROUTE_CACHE = 64,		/* answers of route queries kept per view */
};

/* ---- facts (netns_facts.c) ---- */

/* A network interface, as the reachability decision needs it. */
struct ns_link {
	uint32_t index;
	uint32_t flags;			/* IFF_* */
	uint32_t master;		/* IFLA_MASTER: the bridge it is a port of */
	uint32_t peer;			/* IFLA_LINK: a veth's other end */
	bool has_peer_nsid;		/* that end is in another namespace... */
	int32_t peer_nsid;		/* ...with this nsid (whose space: struct ns_facts) */
	char kind[NS_KIND_LEN];		/* IFLA_INFO_KIND: "veth", "bridge" */
	char slave_kind[NS_KIND_LEN];	/* IFLA_INFO_SLAVE_KIND: "bridge" for a bridge port */
	int port_state;			/* IFLA_BRPORT_STATE, or -1 */
	bool port_isolated;		/* IFLA_BRPORT_ISOLATED */
	bool vlan_filtering;		/* a bridge's IFLA_BR_VLAN_FILTERING */
	bool refetch;			/* far facts: its newest state has been asked for */
	uint64_t seen;			/* the dump tick that last confirmed it */
};

/* An IPv4 or IPv6 address of the namespace. */
struct ns_addr {
	struct ns_addr *next;		/* in its hash chain (same local address) */
	uint8_t family;
	uint8_t prefixlen;
	uint8_t scope;			/* RT_SCOPE_* */
	uint32_t flags;			/* IFA_F_* */
	uint32_t ifindex;
	uint8_t local[NS_IP_LEN];	/* IFA_LOCAL, else IFA_ADDRESS: the address itself */
	uint8_t peer[NS_IP_LEN];	/* IFA_ADDRESS (the far end on a point-to-point link) */
	uint64_t seen;
};

/* A route of any table (facts of views only). */
struct ns_route {
	struct ns_route *next;		/* in its hash chain (same table, prefix) */
	uint8_t family;
	uint8_t dst_len;
	uint8_t src_len;
	uint8_t tos;
	uint8_t type;			/* RTN_* */
	uint8_t scope;
	bool gateway;			/* RTA_GATEWAY or RTA_VIA */
	bool has_prefsrc;
	bool complex;			/* something not modelled: see netns_route.c */
	uint32_t table;
	uint32_t priority;		/* RTA_PRIORITY: the metric */
	uint32_t oif;
	uint32_t flags;			/* rtm_flags: RTNH_F_DEAD, RTNH_F_LINKDOWN */
	uint8_t dst[NS_IP_LEN];
	uint8_t gw[NS_IP_LEN];
	uint8_t prefsrc[NS_IP_LEN];
	uint64_t seen;
};

/* A policy routing rule (facts of views only). */
struct ns_rule {
	uint8_t family;
	bool plain;			/* selects every packet and looks up a table */
	uint32_t priority;
	uint32_t table;
	uint64_t sig;			/* a hash of the whole message: what deletes it */
	uint64_t seen;
};

/* What one dump refreshes: entries it did not confirm are dropped after it. */
enum ns_dump {
	NS_DUMP_LINK,
	NS_DUMP_ADDR,
	NS_DUMP_ROUTE4,
	NS_DUMP_ROUTE6,
	NS_DUMP_RULE4,
	NS_DUMP_RULE6,
	NS_DUMPS,
	NS_DUMPS_ALL = (1u << NS_DUMPS) - 1,
	NS_DUMPS_FAR = (1u << NS_DUMP_LINK) | (1u << NS_DUMP_ADDR),
};

/*
 * The facts of one namespace. Nsids in links are in the space of the
 * socket they were read by: the view's own for a view's facts, the owning
 * view's for far facts (read through it with IFLA_TARGET_NETNSID).
 */
struct ns_facts {
	struct shunt_map links;		/* ifindex -> struct ns_link */
	struct shunt_map addrs;		/* hash of (family, local) -> chain of struct ns_addr */
	size_t naddrs;
	unsigned homeaddrs;		/* IPv6 addresses flagged IFA_F_HOMEADDRESS */
	struct shunt_map routes;	/* hash of (family, table, prefix) -> chain */
	size_t nroutes;
	uint32_t route_lens[2][129];	/* routes per family (v4, v6) and prefix length */
	struct ns_rule *rules;
	size_t nrules, rules_cap;
	uint64_t tick;			/* bumped when a dump starts */
	uint64_t epoch;			/* bumped by every change: older route answers are stale */
};

/* Empty facts; ns_facts_free frees every entry and leaves them empty again. */
void ns_facts_init(struct ns_facts *f);
void ns_facts_free(struct ns_facts *f);
/* Start a dump of @what: returns the mark ns_facts_sweep takes. */
uint64_t ns_facts_mark(struct ns_facts *f);
/* After a complete dump of @what started at @mark: drop what it did not confirm. */
void ns_facts_sweep(struct ns_facts *f, enum ns_dump what, uint64_t mark);

/* Where a message comes from, which says how far its nsids can be trusted. */
enum ns_origin {
	NS_ORIGIN_OWN,			/* the namespace's own socket: a dump or a notification */
	NS_ORIGIN_FAR_REPLY,		/* a far namespace, as asked through its view (view's nsids) */
	NS_ORIGIN_FAR_EVENT,		/* a far namespace's notification (its own nsids) */
};

/* What applying a message asks of the caller (bits). */
enum ns_apply {
	NS_APPLY_LOST = 1,		/* out of memory: the facts are incomplete, dump again */
	NS_APPLY_REFETCH = 2,		/* ask for link *refetch through the view */
	NS_APPLY_REDUMP_ROUTE4 = 4,	/* a route was replaced: dump the family again */
	NS_APPLY_REDUMP_ROUTE6 = 8,
};

/*
 * Apply one rtnetlink message (a dump's entry or a notification) of the
 * link, address, route or rule families (far facts keep links and
 * addresses only). Returns enum ns_apply bits.
 */
int ns_facts_apply(struct ns_facts *f, const struct nlmsghdr *nlh, enum ns_origin origin,
		   uint32_t *refetch);
/* Link @ifindex, or NULL (owned by @f: valid until its facts next change). */
struct ns_link *ns_facts_link(const struct ns_facts *f, uint32_t ifindex);

enum ns_where {
	NS_NOT_HERE = 0,
	NS_ELSEWHERE,			/* local in the namespace, not on the interface asked about */
	NS_ON_IFACE,
};
/* Whether @ip is a usable local address, and on interface @ifindex (0: any) in particular. */
enum ns_where ns_facts_where(const struct ns_facts *f, const struct shunt_wire_addr *ip,
			     uint32_t ifindex);
/* The chain of addresses equal to @ip (any interface, any state), or NULL. */
const struct ns_addr *ns_facts_addrs_of(const struct ns_facts *f, int family,
					const uint8_t *ip);
/*
 * Every address, in no particular order: start with *@pos = 0 and @prev
 * NULL, pass the last one back; NULL at the end. @f must not change meanwhile.
 */
const struct ns_addr *ns_facts_next_addr(const struct ns_facts *f, size_t *pos,
					 const struct ns_addr *prev);
/* FNV-1a of @p, from @h: the key of address and route chains. */
uint64_t ns_hash(const void *p, size_t n, uint64_t h);
/* Whether the first @len bits of @prefix and @ip agree. */
bool ns_prefix_has(const uint8_t *prefix, unsigned len, const uint8_t *ip);

/* netns_fib.c: routes and rules (views only), and the lookup in them */
/* A route's or a rule's message (new, deleted, dumped): enum ns_apply bits. */
int ns_fib_apply_route(struct ns_facts *f, const struct nlmsghdr *nlh);
int ns_fib_apply_rule(struct ns_facts *f, const struct nlmsghdr *nlh);
/*
 * Drop the routes of @family that match: through @oif (single next hop),
 * or with preferred source @prefsrc. @with_complex: those not modelled too.
 */
void ns_fib_drop(struct ns_facts *f, int family, uint32_t oif, const uint8_t *prefsrc,
		 bool with_complex);
/* ns_facts_sweep for routes and rules; ns_fib_free frees them all. */
void ns_fib_sweep(struct ns_facts *f, enum ns_dump what, uint64_t mark);
void ns_fib_free(struct ns_facts *f);
struct ns_route_result;
struct shuntd_route_hints;
/*
 * The route the kernel takes to @dst for a socket described by @h: 0 and
 * @rt (type RTN_UNSPEC: no route), or 1 when the facts cannot tell exactly.
 */
int ns_fib_lookup(const struct ns_facts *f, const struct shunt_wire_addr *dst,
		  const struct shuntd_route_hints *h, struct ns_route_result *rt);

/* ---- views and their sockets (netns.c, netns_watch.c) ---- */

/* A namespace reached by a view's veth pairs that has no view: kept through the view. */
struct ns_far {
	struct ns_far *next;
	int32_t nsid;			/* in the owning view's space */
	struct ns_facts facts;
	unsigned todo;			/* dumps (NS_DUMP_LINK, NS_DUMP_ADDR) not yet complete */
	bool failed;			/* an answer about it failed: never trusted again */
};

/* One request on a view's socket whose answer is still awaited. */
enum ns_req_kind {
	NS_REQ_DUMP = 1,		/* one of enum ns_dump, of the view or of a far namespace */
	NS_REQ_LINK,			/* one link: of a far namespace, or one whose facts disagree */
	NS_REQ_NSID,			/* the nsid a view has in this one */
	NS_REQ_ROUTE,			/* RTM_GETROUTE: what the model cannot tell */
};

struct ns_req {
	struct ns_req *next;
	uint32_t seq;
	enum ns_req_kind kind;
	enum ns_dump dump;
	bool far;			/* NS_REQ_DUMP, NS_REQ_LINK: of the far namespace @nsid */
	bool intr;			/* NS_REQ_DUMP: the kernel said the dump was inconsistent */
	int32_t nsid;
	uint32_t ifindex;
	uint64_t inode;			/* NS_REQ_NSID: the view asked about */
	uint64_t mark;			/* NS_REQ_DUMP: ns_facts_mark at its start */
	unsigned slot;			/* NS_REQ_ROUTE: its cache entry */
};

/* A route as the kernel (or the model) chose it. */
struct ns_route_result {
	uint8_t type;			/* RTN_*; RTN_UNSPEC: no route */
	uint32_t oif;
	bool gateway;
	bool has_src;
	struct shunt_wire_addr src;
};

/* What a route query was, and what the kernel answered. */
struct ns_route_key {
	struct shunt_wire_addr dst;
	struct shuntd_route_hints h;
};

struct ns_route_cached {
	bool used;
	bool answered;			/* else still awaited */
	uint64_t epoch;			/* the facts' epoch when asked */
	uint32_t seq;
	struct ns_route_key key;
	struct ns_route_result rt;
};

/* One rtnetlink socket of a view, made inside its namespace, and what it awaits. */
struct ns_sock {
	struct netns_view *view;
	bool far;			/* hears far namespaces (NETLINK_LISTEN_ALL_NSID) */
	struct mnl_socket *nl;		/* NULL: none (not made yet, or broken) */
	unsigned portid;
	uint32_t seq;
	bool reopen;			/* it overran (ENOBUFS) or broke: make it again */
	unsigned failures;		/* ...so many times since it last dumped everything */
	int64_t retry_at;		/* ...not before then (CLOCK_MONOTONIC, ms) */
	bool behind;			/* input left unread: the facts may be old */
	struct ns_req *dump;		/* the dump running now, or NULL */
	struct ns_req *reqs;		/* other requests awaiting an answer */
};

/* What shuntd knows about one namespace (struct netns.view). */
struct netns_view {
	struct netns *ns;
	struct ns_sock own;		/* its own notifications, dumps and questions */
	struct ns_sock far_sock;	/* its far namespaces', once it has some */
	bool no_socket;			/* could not make one (no privilege): knows nothing */
	bool no_far;			/* cannot hear far namespaces: never follows any */
	bool fars_dirty;		/* links or nsids changed: far namespaces to review */
	struct ns_facts facts;
	unsigned todo;			/* own dumps not yet complete (bits of enum ns_dump) */
	struct shunt_map nsids;		/* nsid + 1 -> struct netns: other views, as this one numbers them */
	struct shunt_map nsid_of;	/* ...and inode -> nsid + 1 */
	unsigned nsid_asked;		/* NS_REQ_NSID awaiting an answer */
	bool nsids_due;			/* ...or to be asked once the dumps are done */
	struct ns_far *fars;
	struct ns_route_cached cache[NS_ROUTE_CACHE];
	struct ns_route_cached verify;	/* SHUNTD_NETNS_VERIFY's own question */
};

/* What every view shares: the loop's watch of their sockets, the test knobs, the counters. */
struct netns_world {
	int watch;			/* SHUNTD_WATCH_NETNS: first, the loop's tag */
	int epfd;			/* every view's socket; the loop watches it as one */
	int timerfd;			/* in epfd: a broken socket's time to be made again */
	int64_t wake_at;		/* ...when it is armed for (CLOCK_MONOTONIC, ms), or 0 */
	bool watched;
	bool dirty;			/* a view was made or let go: the others have settling to do */
	bool deciding;			/* a connect is being decided (counts its requests) */
	uint32_t rcvbuf;		/* SHUNTD_NETLINK_RCVBUF (tests), else 4 MiB */
	bool verify;			/* SHUNTD_NETNS_VERIFY: check the route model against the kernel */
	bool hang;			/* SHUNTD_NETLINK_HANG: never take a query's answer in time (tests) */
	struct shuntd_netns_stats stats;
};

/* netns_watch.c: the sockets of a view, their requests, their input */
/*
 * Make socket @s inside its view's namespace, subscribe it, watch it, and
 * start dumping everything it keeps: 0 or -errno. ns_watch_close closes
 * it and drops every request it awaited (their answers are lost).
 */
int ns_watch_open(struct shuntd *d, struct ns_sock *s);
void ns_watch_close(struct shuntd *d, struct ns_sock *s);
/* Send @nlh (seq set here) as request @r (copied): 0 or -errno. */
int ns_watch_send(struct shuntd *d, struct ns_sock *s, struct nlmsghdr *nlh,
		  const struct ns_req *r);
/* Start the next dump due on @s, if none is running. */
void ns_watch_next_dump(struct shuntd *d, struct ns_sock *s);
/*
 * Read and apply what the socket holds, up to a budget; stop early once
 * request @until_seq (0: none) is answered. Returns true if the socket
 * was emptied (else the facts may be behind).
 */
bool ns_watch_drain(struct shuntd *d, struct ns_sock *s, uint32_t until_seq);
/* Whether request @seq is still awaited. */
bool ns_watch_pending(const struct ns_sock *s, uint32_t seq);
/* Make a broken socket again when its time has come (ns_settle). */
void ns_watch_revive(struct shuntd *d, struct ns_sock *s);
/*
 * Ask for link @ifindex of the view (@far NULL) or of far namespace @far,
 * and read up to the answer without waiting for it: true if it came.
 */
bool ns_watch_refresh_link(struct shuntd *d, struct netns_view *v, struct ns_far *far,
			   uint32_t ifindex);
/* Build a request header in @buf. */
struct nlmsghdr *ns_watch_request(char *buf, uint16_t type, uint16_t flags);

/* netns.c: views, nsids, far namespaces */
/* The one netns_world of @d (shuntd_netns_init made it). */
struct netns_world *ns_world(struct shuntd *d);
/* Have ns_sync run by @at (CLOCK_MONOTONIC, ms) even if nothing else happens. */
void ns_world_wake_at(struct shuntd *d, int64_t at);
/* Ask view @v for the nsid it gives each other view (or only @of). */
void ns_ask_nsids(struct shuntd *d, struct netns_view *v, struct netns *of);
/* The answer to NS_REQ_NSID @r: @v numbers view @r->inode @nsid (<0: none yet). */
void ns_on_nsid(struct shuntd *d, struct netns_view *v, const struct ns_req *r, int32_t nsid);
/* RTM_NEWNSID or RTM_DELNSID in @v's namespace. */
void ns_on_nsid_event(struct shuntd *d, struct netns_view *v, const struct nlmsghdr *nlh);
/* The far namespace @v numbers @nsid, or NULL. */
struct ns_far *ns_far_find(struct netns_view *v, int32_t nsid);
/* The view numbered @nsid by @v, or NULL. */
struct netns *ns_view_by_nsid(const struct netns_view *v, int32_t nsid);
/*
 * Make @v's broken sockets again when due; review its far namespaces (one
 * for each veth peer namespace without a view). True if it asked anything.
 */
bool ns_settle(struct shuntd *d, struct netns_view *v);
/* Whether @v's own facts (or those of its far namespace @far) are complete and current. */
bool ns_view_ready(const struct netns_view *v);
bool ns_far_ready(const struct netns_view *v, const struct ns_far *far);
/* Read every view's pending input (a connect is to be decided on current facts). */
void ns_sync(struct shuntd *d);

/* netns_route.c: which route the kernel takes */
enum ns_route_status {
	NS_ROUTE_OK = 0,
	NS_ROUTE_UNKNOWN,		/* cannot tell now: the connect goes to the kernel */
};
/*
 * The route @ns's kernel takes to @dst for a socket described by @h:
 * NS_ROUTE_OK and @rt (type RTN_UNSPEC: no route), or NS_ROUTE_UNKNOWN.
 * May read @ns's socket up to a query's answer (never waits for it).
 */
int ns_route_get(struct shuntd *d, struct netns *ns, const struct shunt_wire_addr *dst,
		 const struct shuntd_route_hints *h, struct ns_route_result *rt);
/* A route query's answer (@nlh NULL: the kernel refused it: no route). */
void ns_route_answer(struct shuntd *d, struct netns_view *v, const struct ns_req *r,
		     const struct nlmsghdr *nlh);
/* Forget every cached answer (the socket was made again). */
void ns_route_forget(struct netns_view *v);

#endif
