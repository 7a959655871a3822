// SPDX-License-Identifier: MIT
/*
 * Network namespaces as shuntd sees them: one view per namespace its clients
 * live in, with an rtnetlink socket inside it and that namespace's local
 * addresses; and the question containers ask: from namespace A, which
 * namespace does a TCP connection to X reach across veth pairs and bridges
 * on this host, if exactly one (docs/containers.md).
 *
 * Netlink messages are built and parsed with libmnl (attribute bounds and
 * types checked by mnl_attr_validate, sequence and port ids by mnl_cb_run)
 * rather than by hand.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_addr.h>
#include <linux/if_bridge.h>
#include <linux/if_link.h>
#include <linux/net_namespace.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>
#include <netinet/in.h>

#include "common/addr.h"
#include "common/log.h"
#include "daemon/shuntd.h"

enum {
	DUMP_BUF = 32768,		/* MNL_SOCKET_DUMP_SIZE: a dump's skb fits */
	REQ_BUF = 1024,			/* any request we build */
	ADDRS_TTL_MS = 1000,		/* how long a namespace's address list is believed */
	NO_TARGET = -1,			/* ask about the socket's own namespace */
	KIND_LEN = 16,
};

/* ---- views ---- */

/* Bind @ns's rtnetlink socket, made inside the namespace: 0 or -errno. */
static int nl_open(struct shuntd *d, struct netns *ns)
{
	struct timeval tv = { .tv_sec = 1 };
	struct mnl_socket *nl;
	bool away = ns->inode != d->netns_self;
	int one = 1, r = 0;

	/*
	 * A socket belongs to the namespace its creator was in when it made it,
	 * for good: step in, make it, step back. shuntd has one thread, so
	 * nothing else runs in the foreign namespace meanwhile.
	 */
	if (away && setns(ns->fd, CLONE_NEWNET) < 0)
		return -errno;
	nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
	if (!nl)
		r = -errno;
	if (away && setns(d->netns_self_fd, CLONE_NEWNET) < 0) {
		/* Every other socket shuntd makes (companions) assumes its own namespace. */
		shunt_err("cannot return to shuntd's own network namespace: %s", strerror(errno));
		abort();
	}
	if (r < 0)
		return r;
	/* Strict checking: the kernel honours IFA_TARGET_NETNSID in address dumps only so. */
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ||
	    mnl_socket_setsockopt(nl, NETLINK_GET_STRICT_CHK, &one, sizeof(one)) < 0 ||
	    setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0) {
		r = -errno;
		mnl_socket_close(nl);
		return r;
	}
	ns->nl = nl;
	return 0;
}

int shuntd_netns_init(struct shuntd *d)
{
	shunt_map_init(&d->netns);
	d->netns_self_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (d->netns_self_fd < 0) {
		int r = -errno;

		shunt_err("shuntd: cannot open /proc/self/ns/net: %s", strerror(-r));
		return r;
	}
	return 0;
}

struct netns *shuntd_netns_get(struct shuntd *d, int nsfd)
{
	struct netns *ns;
	struct stat st;
	int r;

	if (fstat(nsfd, &st) < 0)
		return NULL;
	ns = shunt_map_get(&d->netns, st.st_ino);
	if (ns) {
		ns->refs++;
		return ns;
	}
	ns = calloc(1, sizeof(*ns));
	if (!ns)
		return NULL;
	ns->inode = st.st_ino;
	ns->refs = 1;
	ns->fd = fcntl(nsfd, F_DUPFD_CLOEXEC, 3);
	if (ns->fd < 0 || shunt_map_put(&d->netns, ns->inode, ns) < 0) {
		if (ns->fd >= 0)
			close(ns->fd);
		free(ns);
		return NULL;
	}
	/* Without CAP_SYS_ADMIN only loopback is known there, as before views existed. */
	r = nl_open(d, ns);
	if (r < 0)
		shunt_info("network namespace %llu: no rtnetlink socket in it (%s); "
			   "only loopback connections there use shared memory",
			   (unsigned long long)ns->inode, strerror(-r));
	shunt_debug("network namespace %llu: watched", (unsigned long long)ns->inode);
	return ns;
}

struct netns *shuntd_netns_of_pid(struct shuntd *d, pid_t pid)
{
	struct netns *ns;
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	ns = shuntd_netns_get(d, fd);
	close(fd);
	return ns;
}

struct netns *shuntd_netns_of_socket(struct shuntd *d, int fd, uint64_t inode)
{
	struct netns *ns = inode ? shunt_map_get(&d->netns, inode) : NULL;
	int nsfd;

	if (ns) {
		ns->refs++;
		return ns;
	}
	nsfd = ioctl(fd, SIOCGSKNS);
	/* Without CAP_NET_ADMIN: shuntd_socket_facts knew it was our own by its cookie. */
	if (nsfd < 0 && errno == EPERM && inode == d->netns_self)
		return shuntd_netns_get(d, d->netns_self_fd);
	if (nsfd < 0)
		return NULL;
	ns = shuntd_netns_get(d, nsfd);
	close(nsfd);
	return ns;
}

void shuntd_netns_put(struct shuntd *d, struct netns *ns)
{
	if (!ns || --ns->refs)
		return;
	shunt_debug("network namespace %llu: let go", (unsigned long long)ns->inode);
	shunt_map_del(&d->netns, ns->inode);
	if (ns->nl)
		mnl_socket_close(ns->nl);
	close(ns->fd);
	free(ns->addrs);
	free(ns);
}

/* ---- talking to the kernel ---- */

/*
 * Send @req on @ns's socket; every reply message goes to @cb. 0 when the
 * kernel answered (and acknowledged), -errno when it refused or could not
 * be heard. A socket that lost track of its replies is closed, to be made
 * again on next use.
 */
static int nl_talk(struct shuntd *d, struct netns *ns, struct nlmsghdr *req, mnl_cb_t cb,
		   void *arg)
{
	char *buf;
	unsigned portid;
	ssize_t n;
	int r;

	if (!ns->nl && (r = nl_open(d, ns)) < 0)
		return r;
	buf = malloc(DUMP_BUF);
	if (!buf)
		return -ENOMEM;
	portid = mnl_socket_get_portid(ns->nl);
	req->nlmsg_seq = ++ns->seq;
	if (mnl_socket_sendto(ns->nl, req, req->nlmsg_len) < 0) {
		r = -errno;
		goto broken;
	}
	do {
		n = mnl_socket_recvfrom(ns->nl, buf, DUMP_BUF);
		if (n < 0) {
			r = -errno;
			goto broken;
		}
		errno = 0;
		r = mnl_cb_run(buf, (size_t)n, req->nlmsg_seq, portid, cb, arg);
	} while (r > MNL_CB_STOP);
	/* MNL_CB_ERROR: the kernel's error (errno), or a reply that is not ours. */
	r = r < 0 ? -(errno ? errno : EPROTO) : 0;
	if (r == -ESRCH || r == -EPROTO || r == -EINTR)
		goto broken;
	free(buf);
	return r;
broken:
	/* Whatever is still queued would answer the next request: start afresh. */
	mnl_socket_close(ns->nl);
	ns->nl = NULL;
	free(buf);
	return r;
}

static struct nlmsghdr *request(char *buf, uint16_t type, uint16_t flags)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);

	nlh->nlmsg_type = type;
	/* A single answer is followed by an acknowledgement, so we know it is all. */
	nlh->nlmsg_flags = NLM_F_REQUEST | (flags ? flags : NLM_F_ACK);
	return nlh;
}

static size_t ip_len(int family)
{
	return family == AF_INET ? 4 : 16;
}

/* ---- addresses ---- */

struct addr_dump {
	struct netns_addr *addrs;
	size_t n, cap;
	int err;
};

static int addr_cb(const struct nlmsghdr *nlh, void *arg)
{
	struct addr_dump *a = arg;
	const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(nlh);
	const struct nlattr *at, *local = NULL, *address = NULL;
	uint32_t flags;

	if (nlh->nlmsg_type != RTM_NEWADDR || mnl_nlmsg_get_payload_len(nlh) < sizeof(*ifa) ||
	    (ifa->ifa_family != AF_INET && ifa->ifa_family != AF_INET6))
		return MNL_CB_OK;
	flags = ifa->ifa_flags;
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
				flags = mnl_attr_get_u32(at);
			break;
		}
	}
	/* IFA_LOCAL is ours where both are given (IFA_ADDRESS is then the far end). */
	at = local ? local : address;
	/* An IPv6 address still on trial (DAD) cannot be connected to yet. */
	if (!at || mnl_attr_get_payload_len(at) != ip_len(ifa->ifa_family) ||
	    (flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED)))
		return MNL_CB_OK;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 16;
		struct netns_addr *more = realloc(a->addrs, cap * sizeof(*more));

		if (!more) {
			a->err = -ENOMEM;
			return MNL_CB_OK;	/* read on: the replies must be drained */
		}
		a->addrs = more;
		a->cap = cap;
	}
	struct netns_addr *e = &a->addrs[a->n++];

	memset(e, 0, sizeof(*e));
	e->ip.family = ifa->ifa_family;
	memcpy(e->ip.addr, mnl_attr_get_payload(at), ip_len(ifa->ifa_family));
	e->ifindex = ifa->ifa_index;
	return MNL_CB_OK;
}

/* Every address of the namespace @target (an nsid in @ns's view, or NO_TARGET: @ns's own). */
static int addr_dump(struct shuntd *d, struct netns *ns, int32_t target, struct addr_dump *a)
{
	char buf[REQ_BUF];
	struct nlmsghdr *nlh = request(buf, RTM_GETADDR, NLM_F_DUMP);
	struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
	int r;

	ifa->ifa_family = AF_UNSPEC;
	if (target != NO_TARGET)
		mnl_attr_put_u32(nlh, IFA_TARGET_NETNSID, (uint32_t)target);
	memset(a, 0, sizeof(*a));
	r = nl_talk(d, ns, nlh, addr_cb, a);
	if (r == 0 && a->err)
		r = a->err;
	if (r < 0) {
		free(a->addrs);
		memset(a, 0, sizeof(*a));
	}
	return r;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* @ns's addresses, read again when older than ADDRS_TTL_MS (a connect burst reads them once). */
static void refresh_addrs(struct shuntd *d, struct netns *ns)
{
	int64_t now = now_ms();
	struct addr_dump a;

	if (ns->addrs_read && now - ns->addrs_at < ADDRS_TTL_MS)
		return;
	/* Unknown is not local (connections there go to the kernel) until we try again. */
	if (addr_dump(d, ns, NO_TARGET, &a) < 0)
		memset(&a, 0, sizeof(a));
	free(ns->addrs);
	ns->addrs = a.addrs;
	ns->naddrs = a.n;
	ns->addrs_at = now;
	ns->addrs_read = true;
}

enum where {
	NOT_HERE = 0,
	ELSEWHERE,			/* local in the namespace, not on the interface asked about */
	ON_IFACE,
};

/* Whether @ip is among @addrs, and on interface @ifindex (0: any) in particular. */
static enum where find_addr(const struct netns_addr *addrs, size_t n,
			    const struct shunt_wire_addr *ip, uint32_t ifindex)
{
	enum where w = NOT_HERE;

	for (size_t k = 0; k < n; k++) {
		if (!shunt_addr_same_ip(&addrs[k].ip, ip))
			continue;
		if (!ifindex || addrs[k].ifindex == ifindex)
			return ON_IFACE;
		w = ELSEWHERE;
	}
	return w;
}

bool shuntd_netns_is_local(struct shuntd *d, struct netns *ns, const struct shunt_wire_addr *ip)
{
	if (!ns)
		return false;
	refresh_addrs(d, ns);
	return find_addr(ns->addrs, ns->naddrs, ip, 0) != NOT_HERE;
}

/* ---- routes ---- */

struct route {
	uint8_t type;			/* RTN_* */
	uint32_t oif;
	bool gateway;
	bool has_src;
	struct shunt_wire_addr src;
};

static int route_cb(const struct nlmsghdr *nlh, void *arg)
{
	struct route *rt = arg;
	const struct rtmsg *rtm = mnl_nlmsg_get_payload(nlh);
	const struct nlattr *at;

	if (nlh->nlmsg_type != RTM_NEWROUTE || mnl_nlmsg_get_payload_len(nlh) < sizeof(*rtm))
		return MNL_CB_OK;
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
	return MNL_CB_OK;
}

/*
 * The route the kernel of @ns would take for a TCP connection to @dst from
 * a socket described by @h (its bound address, device and mark, which
 * policy routing may look at): RTM_GETROUTE, as `ip route get` does.
 */
static int route_get(struct shuntd *d, struct netns *ns, const struct shunt_wire_addr *dst,
		     const struct shuntd_route_hints *h, struct route *rt)
{
	char buf[REQ_BUF];
	struct nlmsghdr *nlh = request(buf, RTM_GETROUTE, 0);
	struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
	size_t len = ip_len(dst->family);
	uint32_t oif = h->oif;

	rtm->rtm_family = dst->family;
	rtm->rtm_dst_len = len * 8;
	mnl_attr_put(nlh, RTA_DST, len, dst->addr);
	if (h->has_src) {
		rtm->rtm_src_len = len * 8;
		mnl_attr_put(nlh, RTA_SRC, len, h->src.addr);
	}
	/* A link-local IPv6 destination names its interface. */
	if (!oif && dst->family == AF_INET6)
		oif = dst->scope_id;
	if (oif)
		mnl_attr_put_u32(nlh, RTA_OIF, oif);
	if (h->mark)
		mnl_attr_put_u32(nlh, RTA_MARK, h->mark);
	mnl_attr_put_u8(nlh, RTA_IP_PROTO, IPPROTO_TCP);
	if (dst->port)
		mnl_attr_put_u16(nlh, RTA_DPORT, htons(dst->port));
	if (h->src.port)
		mnl_attr_put_u16(nlh, RTA_SPORT, htons(h->src.port));
	memset(rt, 0, sizeof(*rt));
	rt->type = RTN_UNSPEC;
	return nl_talk(d, ns, nlh, route_cb, rt);
}

/* ---- links ---- */

struct iface {
	uint32_t index;
	uint32_t flags;			/* IFF_* */
	uint32_t master;		/* IFLA_MASTER: the bridge it is a port of */
	uint32_t peer;			/* IFLA_LINK: a veth's other end */
	bool has_peer_nsid;		/* that end is in another namespace... */
	int32_t peer_nsid;		/* ...with this nsid in the asking socket's view */
	char kind[KIND_LEN];		/* IFLA_INFO_KIND: "veth", "bridge" */
	char slave_kind[KIND_LEN];	/* IFLA_INFO_SLAVE_KIND: "bridge" for a bridge port */
	int port_state;			/* IFLA_BRPORT_STATE, or -1 */
	bool port_isolated;		/* IFLA_BRPORT_ISOLATED */
	bool vlan_filtering;		/* a bridge's IFLA_BR_VLAN_FILTERING */
};

struct iface_list {
	struct iface *links;
	size_t n, cap;
	int err;
};

static void copy_str(char *to, size_t n, const struct nlattr *at)
{
	size_t len = mnl_attr_get_payload_len(at);
	const char *s = mnl_attr_get_payload(at);

	len = strnlen(s, len < n - 1 ? len : n - 1);
	memcpy(to, s, len);
	to[len] = 0;
}

static void parse_linkinfo(const struct nlattr *info, struct iface *l)
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
			if (mnl_attr_validate(at, MNL_TYPE_NESTED) < 0)
				break;
			mnl_attr_for_each_nested(in, at) {
				if (mnl_attr_validate(in, MNL_TYPE_U8) < 0)
					continue;
				if (mnl_attr_get_type(in) == IFLA_BRPORT_STATE)
					l->port_state = mnl_attr_get_u8(in);
				else if (mnl_attr_get_type(in) == IFLA_BRPORT_ISOLATED)
					l->port_isolated = mnl_attr_get_u8(in);
			}
			break;
		}
	}
}

static int link_cb(const struct nlmsghdr *nlh, void *arg)
{
	struct iface_list *ll = arg;
	const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(nlh);
	const struct nlattr *at;
	struct iface l = { .port_state = -1 };

	if (nlh->nlmsg_type != RTM_NEWLINK || mnl_nlmsg_get_payload_len(nlh) < sizeof(*ifi))
		return MNL_CB_OK;
	l.index = (uint32_t)ifi->ifi_index;
	l.flags = ifi->ifi_flags;
	mnl_attr_for_each(at, nlh, sizeof(*ifi)) {
		switch (mnl_attr_get_type(at)) {
		case IFLA_MASTER:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				l.master = mnl_attr_get_u32(at);
			break;
		case IFLA_LINK:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0)
				l.peer = mnl_attr_get_u32(at);
			break;
		case IFLA_LINK_NETNSID:
			if (mnl_attr_validate(at, MNL_TYPE_U32) == 0) {
				l.peer_nsid = (int32_t)mnl_attr_get_u32(at);
				l.has_peer_nsid = l.peer_nsid >= 0;
			}
			break;
		case IFLA_LINKINFO:
			if (mnl_attr_validate(at, MNL_TYPE_NESTED) == 0)
				parse_linkinfo(at, &l);
			break;
		}
	}
	if (ll->n == ll->cap) {
		size_t cap = ll->cap ? ll->cap * 2 : 8;
		struct iface *more = realloc(ll->links, cap * sizeof(*more));

		if (!more) {
			ll->err = -ENOMEM;
			return MNL_CB_OK;
		}
		ll->links = more;
		ll->cap = cap;
	}
	ll->links[ll->n++] = l;
	return MNL_CB_OK;
}

/*
 * Links of namespace @target as seen through @ns's socket: interface
 * @ifindex, or (ifindex 0) every port of bridge @master. The kernel gives
 * each link's IFLA_LINK_NETNSID in the view of the asking namespace, not
 * the link's own, so every nsid we meet is one of @ns's.
 */
static int link_query(struct shuntd *d, struct netns *ns, int32_t target, uint32_t ifindex,
		      uint32_t master, struct iface_list *ll)
{
	char buf[REQ_BUF];
	struct nlmsghdr *nlh = request(buf, RTM_GETLINK, ifindex ? 0 : NLM_F_DUMP);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
	int r;

	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = (int)ifindex;
	mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
	if (target != NO_TARGET)
		mnl_attr_put_u32(nlh, IFLA_TARGET_NETNSID, (uint32_t)target);
	if (!ifindex)
		mnl_attr_put_u32(nlh, IFLA_MASTER, master);
	memset(ll, 0, sizeof(*ll));
	r = nl_talk(d, ns, nlh, link_cb, ll);
	if (r == 0 && ll->err)
		r = ll->err;
	if (r == 0 && ifindex && ll->n != 1)
		r = -ENODEV;
	if (r < 0) {
		free(ll->links);
		memset(ll, 0, sizeof(*ll));
	}
	return r;
}

static int link_get(struct shuntd *d, struct netns *ns, int32_t target, uint32_t ifindex,
		    struct iface *l)
{
	struct iface_list ll;
	int r = link_query(d, ns, target, ifindex, 0, &ll);

	if (r == 0)
		*l = ll.links[0];
	free(ll.links);
	return r;
}

/* Up at both ends: for a veth, carrier (IFF_LOWER_UP) means its peer is up too. */
static bool link_up(const struct iface *l)
{
	return (l->flags & (IFF_UP | IFF_LOWER_UP)) == (IFF_UP | IFF_LOWER_UP);
}

/* ---- namespace ids ---- */

static int nsid_cb(const struct nlmsghdr *nlh, void *arg)
{
	int32_t *nsid = arg;
	const struct nlattr *at;

	if (nlh->nlmsg_type != RTM_NEWNSID)
		return MNL_CB_OK;
	mnl_attr_for_each(at, nlh, sizeof(struct rtgenmsg))
		if (mnl_attr_get_type(at) == NETNSA_NSID && mnl_attr_validate(at, MNL_TYPE_U32) == 0)
			*nsid = (int32_t)mnl_attr_get_u32(at);
	return MNL_CB_OK;
}

/*
 * The nsid namespace @of has in @ns's view (RTM_GETNSID with NETNSA_FD),
 * NETNSA_NSID_NOT_ASSIGNED if it has none (it has one once a link of @ns
 * or one we were told about from @ns pointed into @of), or -errno.
 */
static int32_t nsid_of(struct shuntd *d, struct netns *ns, const struct netns *of)
{
	char buf[REQ_BUF];
	struct nlmsghdr *nlh = request(buf, RTM_GETNSID, 0);
	struct rtgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
	int32_t nsid = NETNSA_NSID_NOT_ASSIGNED;
	int r;

	g->rtgen_family = AF_UNSPEC;
	mnl_attr_put_u32(nlh, NETNSA_FD, (uint32_t)of->fd);
	r = nl_talk(d, ns, nlh, nsid_cb, &nsid);
	return r < 0 ? r : nsid;
}

/* ---- reachability ---- */

/* A namespace that may answer for the destination: it is local there. */
struct cand {
	struct netns *ns;
	int32_t nsid;			/* in the connecting namespace's view */
	enum where where;		/* how it answers: on the interface we arrive by, or not */
	uint32_t arrive;		/* that interface, in its namespace */
};

struct reach {
	struct shuntd *d;
	struct netns *from;
	const struct shunt_wire_addr *dst;
	struct cand *cands;
	size_t ncands;
	uint32_t arrive;		/* where the namespace reached receives it */
};

static struct cand *cand_by_nsid(struct reach *rc, int32_t nsid)
{
	for (size_t k = 0; k < rc->ncands; k++)
		if (rc->cands[k].nsid >= 0 && rc->cands[k].nsid == nsid)
			return &rc->cands[k];
	return NULL;
}

/*
 * Learn the nsid each candidate has in the connecting namespace's view. Ask
 * after the link queries: reporting a link that points into a namespace is
 * what gives that namespace an nsid there, if it had none.
 */
static void map_nsids(struct reach *rc)
{
	for (size_t k = 0; k < rc->ncands; k++) {
		int32_t id;

		if (rc->cands[k].nsid >= 0)
			continue;
		id = nsid_of(rc->d, rc->from, rc->cands[k].ns);
		rc->cands[k].nsid = id >= 0 ? id : NETNSA_NSID_NOT_ASSIGNED;
	}
}

/* Arriving at the far end of a veth pair, interface @in: only that namespace is reached. */
static struct netns *direct(struct reach *rc, const struct iface *out, const struct iface *in)
{
	struct cand *c;

	map_nsids(rc);
	c = cand_by_nsid(rc, out->peer_nsid);
	if (!c)
		return NULL;
	refresh_addrs(rc->d, c->ns);
	/*
	 * Only an address on the interface the packet arrives by: one elsewhere
	 * in the namespace is answered or not depending on arp_ignore.
	 */
	if (find_addr(c->ns->addrs, c->ns->naddrs, rc->dst, in->index) != ON_IFACE)
		return NULL;
	rc->arrive = in->index;
	return c->ns;
}

/*
 * Arriving on bridge @br of namespace @brns (an nsid in @from's view, or
 * NO_TARGET for @from itself) through port @ingress (NULL: the bridge is
 * @from's own and we leave through it). Every namespace that can answer
 * for the destination on that segment counts: the bridge's own namespace
 * when the address is its own, and each namespace with a veth end on a
 * forwarding port where the address is local. Exactly one, answering on
 * the interface the frames arrive by, is the one reached; two or more is
 * an address conflict the kernel would settle by ARP race: no match.
 */
static struct netns *bridged(struct reach *rc, int32_t brns, uint32_t br,
			     const struct iface *ingress)
{
	struct shuntd *d = rc->d;
	struct netns *found = NULL;
	uint32_t arrive = br;
	struct iface bridge;
	struct iface_list ports;
	unsigned answering = 0;
	enum where found_where = NOT_HERE;

	if (link_get(d, rc->from, brns, br, &bridge) < 0 || strcmp(bridge.kind, "bridge") ||
	    !(bridge.flags & IFF_UP))
		return NULL;
	/* VLANs may separate its ports: we do not follow them (conservative). */
	if (bridge.vlan_filtering)
		return NULL;
	if (link_query(d, rc->from, brns, 0, br, &ports) < 0)
		return NULL;
	map_nsids(rc);
	if (brns != NO_TARGET) {
		/* The bridge's own namespace answers for its addresses (it may run no shunt process). */
		struct cand *c = cand_by_nsid(rc, brns);
		enum where w;

		if (c) {
			refresh_addrs(d, c->ns);
			w = find_addr(c->ns->addrs, c->ns->naddrs, rc->dst, br);
		} else {
			struct addr_dump a;

			if (addr_dump(d, rc->from, brns, &a) < 0) {
				free(ports.links);
				return NULL;
			}
			w = find_addr(a.addrs, a.n, rc->dst, br);
			free(a.addrs);
		}
		if (w != NOT_HERE) {
			answering++;
			found = c ? c->ns : NULL;
			found_where = w;
		}
	}
	for (size_t k = 0; k < rc->ncands; k++)
		rc->cands[k].where = NOT_HERE;
	for (size_t k = 0; k < ports.n; k++) {
		const struct iface *p = &ports.links[k];
		struct cand *c;
		enum where w;

		if ((ingress && p->index == ingress->index) || strcmp(p->kind, "veth") ||
		    !p->has_peer_nsid || !link_up(p) || p->port_state != BR_STATE_FORWARDING)
			continue;
		/* Two isolated ports do not forward to each other. */
		if (ingress && ingress->port_isolated && p->port_isolated)
			continue;
		/*
		 * A namespace without shunt processes has no view: we cannot see
		 * whether it has the address too (a conflict on the segment) and
		 * take it that it has not.
		 */
		c = cand_by_nsid(rc, p->peer_nsid);
		if (!c || c->ns == found)
			continue;
		refresh_addrs(d, c->ns);
		w = find_addr(c->ns->addrs, c->ns->naddrs, rc->dst, p->peer);
		if (w > c->where) {
			c->where = w;
			c->arrive = p->peer;
		}
	}
	free(ports.links);
	for (size_t k = 0; k < rc->ncands; k++) {
		if (rc->cands[k].where == NOT_HERE)
			continue;
		answering++;
		found = rc->cands[k].ns;
		found_where = rc->cands[k].where;
		arrive = rc->cands[k].arrive;
	}
	if (answering != 1 || found_where != ON_IFACE)
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
	struct route rt;

	back.port = 0;
	return route_get(d, to, &back, &h, &rt) == 0 && rt.type == RTN_UNICAST && !rt.gateway &&
	       rt.oif == arrive;
}

struct netns *shuntd_netns_reach(struct shuntd *d, struct netns *from,
				 const struct shunt_wire_addr *dst,
				 const struct shuntd_route_hints *h, struct shunt_wire_addr *src)
{
	struct reach rc = { .d = d, .from = from, .dst = dst };
	struct netns *ns, *to = NULL;
	const char *why = "no other namespace we know has that address";
	struct iface out, in;
	struct route rt;
	uint64_t key;
	size_t it = 0, n = 0;
	int r;

	if (!from)
		return NULL;
	/* fe80::/10: its scope id names an interface of @from, not of the far end's namespace. */
	if (dst->family == AF_INET6 && dst->addr[0] == 0xfe && (dst->addr[1] & 0xc0) == 0x80)
		return NULL;
	/* Who could answer at all: the namespaces we know where it is a local address. */
	rc.cands = calloc(d->netns.len ? d->netns.len : 1, sizeof(*rc.cands));
	if (!rc.cands)
		return NULL;
	while ((ns = shunt_map_next(&d->netns, &it, &key)))
		if (ns != from && shuntd_netns_is_local(d, ns, dst))
			rc.cands[n++] = (struct cand){ .ns = ns, .nsid = NETNSA_NSID_NOT_ASSIGNED };
	rc.ncands = n;
	if (!n)
		goto out;
	r = route_get(d, from, dst, h, &rt);
	why = "no route";
	if (r < 0)
		goto out;
	if (rt.type == RTN_LOCAL) {
		/* Local after all (our address list is up to a second old): @from's own listeners. */
		*src = *dst;
		to = from;
		goto out;
	}
	/* A socket bound to an address sends from it (the kernel then names no other source). */
	if (h->has_src) {
		rt.src = h->src;
		rt.has_src = true;
	}
	/* Through a gateway, the next hop decides: not followed (conservative). */
	why = "not an on-link unicast route";
	if (rt.type != RTN_UNICAST || rt.gateway || !rt.oif || !rt.has_src)
		goto out;
	why = "its interface is down";
	if (link_get(d, from, NO_TARGET, rt.oif, &out) < 0 || !link_up(&out))
		goto out;
	why = "not across a veth pair or a bridge, or not to exactly one namespace we know";
	if (!strcmp(out.kind, "veth")) {
		/* Both ends in @from: what comes out goes back into @from, not to a listener elsewhere. */
		if (!out.has_peer_nsid ||
		    link_get(d, from, out.peer_nsid, out.peer, &in) < 0 || !link_up(&in))
			goto out;
		if (!in.master)
			to = direct(&rc, &out, &in);
		else if (!strcmp(in.slave_kind, "bridge") && in.port_state == BR_STATE_FORWARDING)
			to = bridged(&rc, out.peer_nsid, in.master, &in);
	} else if (!strcmp(out.kind, "bridge")) {
		to = bridged(&rc, NO_TARGET, out.index, NULL);
	}
	/* macvlan, ipvlan, tunnels, physical devices: left to the kernel. */
	if (to && !way_back(d, to, &rt.src, dst, rc.arrive)) {
		why = "the answer would not come back the same way";
		to = NULL;
	}
	if (to)
		*src = rt.src;
out:
	if (!to && shunt_log_enabled(SHUNT_LOG_DEBUG)) {
		char a[SHUNT_ADDR_STRLEN];

		shunt_debug("connect from network namespace %llu to %s: no other namespace reached (%s)",
			    (unsigned long long)from->inode, shunt_addr_format(dst, a, sizeof(a)), why);
	}
	free(rc.cands);
	return to;
}
