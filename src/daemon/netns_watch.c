// SPDX-License-Identifier: MIT
/*
 * The rtnetlink sockets of one namespace view, in shuntd's event loop: its
 * own, made inside the namespace and subscribed to its link, address,
 * route, rule and nsid notifications; and, once the view reaches far
 * namespaces (no view of their own), a second one that hears theirs
 * (NETLINK_LISTEN_ALL_NSID, links and addresses only), so that a storm
 * there never costs the view its own facts. Dumps fill the facts at first
 * and after an overrun; notifications keep them current; the few questions
 * the facts cannot answer are asked on the same socket, so every answer
 * comes in order with the notifications before it.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <libmnl/libmnl.h>
#include <linux/fib_rules.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/net_namespace.h>
#include <linux/rtnetlink.h>

#include "common/log.h"
#include "common/sys.h"
#include "daemon/netns.h"

#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif

enum {
	RECV_BUF = 32768,		/* a dump's skb fits (netlink caps it at 32 KiB) */
	DRAIN_BUDGET = 1 << 20,		/* bytes read per socket per drain: a storm cannot hold the loop */
};

static const unsigned own_groups[] = {
	RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR, RTNLGRP_IPV4_ROUTE,
	RTNLGRP_IPV6_ROUTE, RTNLGRP_IPV4_RULE, RTNLGRP_IPV6_RULE, RTNLGRP_NSID,
};
static const unsigned far_groups[] = {
	RTNLGRP_LINK, RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR,
};

static void broke(struct shuntd *d, struct ns_sock *s);

struct nlmsghdr *ns_watch_request(char *buf, uint16_t type, uint16_t flags)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);

	nlh->nlmsg_type = type;
	nlh->nlmsg_flags = NLM_F_REQUEST | flags;
	return nlh;
}

/* A socket inside the namespace: step in, make it, step back. */
static struct mnl_socket *open_inside(struct shuntd *d, struct netns_view *v, int *err)
{
	bool away = v->ns->inode != d->netns_self;
	struct mnl_socket *nl;

	/* shuntd has one thread: nothing else runs in the foreign namespace meanwhile. */
	if (away && setns(v->ns->fd, CLONE_NEWNET) < 0) {
		*err = -errno;
		return NULL;
	}
	nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC | SOCK_NONBLOCK);
	*err = nl ? 0 : -errno;
	if (away && setns(d->netns_self_fd, CLONE_NEWNET) < 0) {
		/* Every other socket shuntd makes (companions) assumes its own namespace. */
		shunt_err("cannot return to shuntd's own network namespace: %s", strerror(errno));
		abort();
	}
	return nl;
}

int ns_watch_open(struct shuntd *d, struct ns_sock *s)
{
	struct netns_world *w = ns_world(d);
	struct netns_view *v = s->view;
	const unsigned *groups = s->far ? far_groups : own_groups;
	size_t ngroups = s->far ? sizeof(far_groups) / sizeof(far_groups[0]) :
				  sizeof(own_groups) / sizeof(own_groups[0]);
	int one = 1, rcvbuf = (int)w->rcvbuf, r, fd;
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = s };
	struct mnl_socket *nl = open_inside(d, v, &r);

	if (!nl)
		return r;
	fd = mnl_socket_get_fd(nl);
	/*
	 * Strict checking: the kernel honours IFA_TARGET_NETNSID in address
	 * dumps only so. A large buffer: notifications that do not fit are
	 * lost (ENOBUFS), and cost a dump of everything again.
	 */
	if (mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0 ||
	    mnl_socket_setsockopt(nl, NETLINK_GET_STRICT_CHK, &one, sizeof(one)) < 0)
		goto fail;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof(rcvbuf)) < 0)
		(void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	for (size_t k = 0; k < ngroups; k++)
		if (setsockopt(fd, SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, &groups[k],
			       sizeof(groups[k])) < 0)
			goto fail;
	/* Another namespace's notices come tagged with the nsid this one gives it. */
	if (s->far && setsockopt(fd, SOL_NETLINK, NETLINK_LISTEN_ALL_NSID, &one, sizeof(one)) < 0)
		goto fail;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		goto fail;
	s->nl = nl;
	s->portid = mnl_socket_get_portid(nl);
	s->reopen = false;
	s->behind = false;
	/* Subscribed first, then dumped: nothing that changes in between is missed. */
	if (s->far) {
		for (struct ns_far *f = v->fars; f; f = f->next) {
			f->todo = NS_DUMPS_FAR;
			f->failed = false;
		}
	} else {
		v->todo = NS_DUMPS_ALL;
		v->fars_dirty = true;
	}
	ns_watch_next_dump(d, s);
	return 0;
fail:
	r = -errno;
	mnl_socket_close(nl);
	return r;
}

static void free_reqs(struct ns_req *r)
{
	while (r) {
		struct ns_req *next = r->next;

		free(r);
		r = next;
	}
}

void ns_watch_close(struct shuntd *d, struct ns_sock *s)
{
	if (!s->nl)
		return;
	epoll_ctl(ns_world(d)->epfd, EPOLL_CTL_DEL, mnl_socket_get_fd(s->nl), NULL);
	mnl_socket_close(s->nl);
	s->nl = NULL;
	free(s->dump);
	s->dump = NULL;
	free_reqs(s->reqs);
	s->reqs = NULL;
	if (!s->far) {
		s->view->nsid_asked = 0;
		ns_route_forget(s->view);
	}
}

int ns_watch_send(struct shuntd *d, struct ns_sock *s, struct nlmsghdr *nlh,
		  const struct ns_req *r)
{
	struct netns_world *w = ns_world(d);
	struct ns_req *copy;

	if (!s->nl)
		return -ENOTCONN;
	copy = malloc(sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	*copy = *r;
	if (++s->seq == 0)
		++s->seq;
	nlh->nlmsg_seq = s->seq;
	copy->seq = s->seq;
	if (mnl_socket_sendto(s->nl, nlh, nlh->nlmsg_len) < 0) {
		int e = -errno;

		free(copy);
		/* The socket is out of order: every answer may be lost, start afresh. */
		s->reopen = true;
		return e;
	}
	w->stats.requests[r->kind]++;
	if (w->deciding)
		w->stats.deciding_requests++;
	if (r->kind == NS_REQ_DUMP) {
		s->dump = copy;
	} else {
		copy->next = s->reqs;
		s->reqs = copy;
	}
	return 0;
}

bool ns_watch_pending(const struct ns_sock *s, uint32_t seq)
{
	if (s->dump && s->dump->seq == seq)
		return true;
	for (const struct ns_req *r = s->reqs; r; r = r->next)
		if (r->seq == seq)
			return true;
	return false;
}

/* Ask for dump @what of the view (on its own socket), or of far namespace @far. */
static int start_dump(struct shuntd *d, struct ns_sock *s, enum ns_dump what, struct ns_far *far)
{
	char buf[256];
	struct ns_req r = { .kind = NS_REQ_DUMP, .dump = what, .far = far != NULL,
			    .nsid = far ? far->nsid : -1 };
	struct nlmsghdr *nlh;

	r.mark = ns_facts_mark(far ? &far->facts : &s->view->facts);
	switch (what) {
	case NS_DUMP_LINK: {
		struct ifinfomsg *ifi;

		nlh = ns_watch_request(buf, RTM_GETLINK, NLM_F_DUMP);
		ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
		ifi->ifi_family = AF_UNSPEC;
		mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
		if (far)
			mnl_attr_put_u32(nlh, IFLA_TARGET_NETNSID, (uint32_t)far->nsid);
		break;
	}
	case NS_DUMP_ADDR: {
		struct ifaddrmsg *ifa;

		nlh = ns_watch_request(buf, RTM_GETADDR, NLM_F_DUMP);
		ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
		ifa->ifa_family = AF_UNSPEC;
		if (far)
			mnl_attr_put_u32(nlh, IFA_TARGET_NETNSID, (uint32_t)far->nsid);
		break;
	}
	case NS_DUMP_ROUTE4:
	case NS_DUMP_ROUTE6: {
		struct rtmsg *rtm;

		nlh = ns_watch_request(buf, RTM_GETROUTE, NLM_F_DUMP);
		rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
		rtm->rtm_family = what == NS_DUMP_ROUTE4 ? AF_INET : AF_INET6;
		break;
	}
	default: {
		struct fib_rule_hdr *frh;

		nlh = ns_watch_request(buf, RTM_GETRULE, NLM_F_DUMP);
		frh = mnl_nlmsg_put_extra_header(nlh, sizeof(*frh));
		frh->family = what == NS_DUMP_RULE4 ? AF_INET : AF_INET6;
		break;
	}
	}
	return ns_watch_send(d, s, nlh, &r);
}

void ns_watch_next_dump(struct shuntd *d, struct ns_sock *s)
{
	struct netns_view *v = s->view;

	/* One dump at a time per socket (the kernel says EBUSY otherwise). */
	if (!s->nl || s->dump || s->reopen)
		return;
	if (!s->far) {
		for (unsigned k = 0; k < NS_DUMPS; k++)
			if (v->todo & (1u << k)) {
				start_dump(d, s, k, NULL);
				return;
			}
		return;
	}
	for (struct ns_far *f = v->fars; f; f = f->next)
		for (unsigned k = 0; k < NS_DUMPS && !f->failed; k++)
			if (f->todo & (1u << k)) {
				start_dump(d, s, k, f);
				return;
			}
}

static int error_of(const struct nlmsghdr *nlh)
{
	const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);

	if (mnl_nlmsg_get_payload_len(nlh) < sizeof(*e))
		return -EPROTO;
	return e->error;
}

static void finish_dump(struct shuntd *d, struct ns_sock *s, int err)
{
	struct netns_view *v = s->view;
	struct ns_req *r = s->dump;
	struct ns_far *far = r->far ? ns_far_find(v, r->nsid) : NULL;
	unsigned bit = 1u << r->dump;

	s->dump = NULL;
	/* A family the kernel lacks (IPv6 off) has nothing to dump: complete, and empty. */
	if (err == -EAFNOSUPPORT || err == -EOPNOTSUPP)
		err = 0;
	if (r->far && !far) {
		/* The far namespace was let go meanwhile. */
	} else if (err < 0) {
		shunt_debug("network namespace %llu: dump %u%s failed: %s",
			    (unsigned long long)v->ns->inode, r->dump, far ? " (far)" : "",
			    strerror(-err));
		if (far)
			far->failed = true;	/* never trusted; let go when its link goes */
		else
			s->reopen = true;
	} else if (r->intr) {
		/* Changed while dumped: entries may have been skipped. Dump it again. */
	} else if (far) {
		ns_facts_sweep(&far->facts, r->dump, r->mark);
		far->todo &= ~bit;
	} else {
		ns_facts_sweep(&v->facts, r->dump, r->mark);
		v->todo &= ~bit;
		if (r->dump == NS_DUMP_LINK)
			v->fars_dirty = true;
		if (!v->todo && v->nsids_due) {
			v->nsids_due = false;
			ns_ask_nsids(d, v, NULL);
		}
	}
	free(r);
	ns_watch_next_dump(d, s);
	/* Everything dumped again: what overran before is forgiven. */
	if (!s->dump)
		s->failures = 0;
}

static struct ns_req *take_req(struct ns_sock *s, uint32_t seq)
{
	for (struct ns_req **pp = &s->reqs; *pp; pp = &(*pp)->next)
		if ((*pp)->seq == seq) {
			struct ns_req *r = *pp;

			*pp = r->next;
			return r;
		}
	return NULL;
}

static int32_t nsid_of_reply(const struct nlmsghdr *nlh)
{
	const struct nlattr *at;
	int32_t nsid = NETNSA_NSID_NOT_ASSIGNED;

	mnl_attr_for_each(at, nlh, sizeof(struct rtgenmsg))
		if (mnl_attr_get_type(at) == NETNSA_NSID && mnl_attr_validate(at, MNL_TYPE_U32) == 0)
			nsid = (int32_t)mnl_attr_get_u32(at);
	return nsid;
}

/* Ask for link @ifindex of the view, or of far namespace @far: its seq, or -1. */
static int64_t ask_link(struct shuntd *d, struct netns_view *v, struct ns_far *far,
			uint32_t ifindex)
{
	struct ns_sock *s = far ? &v->far_sock : &v->own;
	char buf[256];
	struct nlmsghdr *nlh = ns_watch_request(buf, RTM_GETLINK, 0);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifi));
	struct ns_req r = { .kind = NS_REQ_LINK, .far = far != NULL, .nsid = far ? far->nsid : -1,
			    .ifindex = ifindex };

	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = (int)ifindex;
	mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
	if (far)
		mnl_attr_put_u32(nlh, IFLA_TARGET_NETNSID, (uint32_t)far->nsid);
	if (ns_watch_send(d, s, nlh, &r) < 0)
		return -1;
	return s->seq;
}

/* What applying a message asks for: a dump again, a link's newest state. */
static void after_apply(struct shuntd *d, struct ns_sock *s, int got, struct ns_far *far,
			uint32_t refetch)
{
	struct netns_view *v = s->view;

	if (got & NS_APPLY_LOST)
		s->reopen = true;	/* out of memory: the facts cannot be trusted, dump again */
	if (got & NS_APPLY_REDUMP_ROUTE4)
		v->todo |= 1u << NS_DUMP_ROUTE4;
	if (got & NS_APPLY_REDUMP_ROUTE6)
		v->todo |= 1u << NS_DUMP_ROUTE6;
	if (got & (NS_APPLY_REDUMP_ROUTE4 | NS_APPLY_REDUMP_ROUTE6))
		ns_watch_next_dump(d, s);
	if ((got & NS_APPLY_REFETCH) && far && ask_link(d, v, far, refetch) < 0)
		far->failed = true;
}

/*
 * The newest state of a link: of a far namespace, asked for after its
 * notification; or of the view's own, asked for when the facts of its two
 * ends disagree (after a move, until the kernel's delayed notice comes).
 */
static void on_link(struct shuntd *d, struct ns_sock *s, const struct ns_req *r,
		    const struct nlmsghdr *nlh, int err)
{
	struct netns_view *v = s->view;
	struct ns_far *far = r->far ? ns_far_find(v, r->nsid) : NULL;
	struct ns_facts *f = far ? &far->facts : &v->facts;
	struct ns_link *l;
	uint32_t refetch = 0;

	if (r->far && !far)
		return;
	if (err == 0 && nlh->nlmsg_type == RTM_NEWLINK) {
		after_apply(d, s, ns_facts_apply(f, nlh, far ? NS_ORIGIN_FAR_REPLY : NS_ORIGIN_OWN,
						 &refetch), far, 0);
		if (!far)
			v->fars_dirty = true;
	} else if (err == -ENODEV) {
		/* Gone before we asked: its RTM_DELLINK follows, or came. */
		l = ns_facts_link(f, r->ifindex);
		if (l) {
			shunt_map_del(&f->links, l->index);
			free(l);
			f->epoch++;
		}
	} else if (far) {
		far->failed = true;	/* not trusted any more */
	}
	l = ns_facts_link(f, r->ifindex);
	if (l)
		l->refetch = false;
}

/* An answer to a request of ours; false if it was none of ours. */
static bool on_reply(struct shuntd *d, struct ns_sock *s, const struct nlmsghdr *nlh)
{
	struct netns_view *v = s->view;
	uint32_t seq = nlh->nlmsg_seq, refetch = 0;
	struct ns_req *r;
	struct ns_far *far;
	int got;

	if (s->dump && s->dump->seq == seq) {
		r = s->dump;
		if (nlh->nlmsg_flags & NLM_F_DUMP_INTR)
			r->intr = true;
		if (nlh->nlmsg_type == NLMSG_DONE) {
			finish_dump(d, s, 0);
		} else if (nlh->nlmsg_type == NLMSG_ERROR) {
			finish_dump(d, s, error_of(nlh));
		} else {
			far = r->far ? ns_far_find(v, r->nsid) : NULL;
			if (r->far && !far)
				return true;
			got = ns_facts_apply(far ? &far->facts : &v->facts, nlh,
					     far ? NS_ORIGIN_FAR_REPLY : NS_ORIGIN_OWN, &refetch);
			after_apply(d, s, got, far, refetch);
		}
		return true;
	}
	if (nlh->nlmsg_type == NLMSG_DONE || !(r = take_req(s, seq)))
		return false;
	got = nlh->nlmsg_type == NLMSG_ERROR ? error_of(nlh) : 0;
	switch (r->kind) {
	case NS_REQ_LINK:
		on_link(d, s, r, nlh, got);
		break;
	case NS_REQ_NSID:
		v->nsid_asked--;
		ns_on_nsid(d, v, r, got == 0 && nlh->nlmsg_type == RTM_NEWNSID ?
				    nsid_of_reply(nlh) : NETNSA_NSID_NOT_ASSIGNED);
		break;
	case NS_REQ_ROUTE:
		ns_route_answer(d, v, r, got == 0 && nlh->nlmsg_type == RTM_NEWROUTE ? nlh : NULL);
		break;
	default:
		break;
	}
	free(r);
	return true;
}

static void dispatch(struct shuntd *d, struct ns_sock *s, const struct nlmsghdr *nlh,
		     bool tagged, int32_t nsid)
{
	struct netns_view *v = s->view;
	uint32_t refetch = 0;
	int got;

	if (tagged) {
		/* Another namespace's notification: ours only if it is a far one. */
		struct ns_far *far = ns_far_find(v, nsid);

		if (!far)
			return;
		ns_world(d)->stats.events++;
		got = ns_facts_apply(&far->facts, nlh, NS_ORIGIN_FAR_EVENT, &refetch);
		after_apply(d, s, got, far, refetch);
		return;
	}
	/* Notifications carry the port of whoever caused them, never ours. */
	if (nlh->nlmsg_pid == s->portid && on_reply(d, s, nlh))
		return;
	/* The rest: of a request given up on, or (far socket) the view's own notices again. */
	if (s->far || nlh->nlmsg_type == NLMSG_DONE || nlh->nlmsg_type == NLMSG_ERROR)
		return;
	ns_world(d)->stats.events++;
	if (nlh->nlmsg_type == RTM_NEWNSID || nlh->nlmsg_type == RTM_DELNSID) {
		ns_on_nsid_event(d, v, nlh);
		return;
	}
	got = ns_facts_apply(&v->facts, nlh, NS_ORIGIN_OWN, &refetch);
	after_apply(d, s, got, NULL, 0);
	if (nlh->nlmsg_type == RTM_NEWLINK || nlh->nlmsg_type == RTM_DELLINK)
		v->fars_dirty = true;
}

bool ns_watch_drain(struct shuntd *d, struct ns_sock *s, uint32_t until_seq)
{
	/* Single-threaded, and never entered again from within itself. */
	static char buf[RECV_BUF];
	size_t budget = DRAIN_BUDGET;

	while (s->nl && budget) {
		char control[CMSG_SPACE(sizeof(int))];
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
				      .msg_controllen = sizeof(control) };
		bool tagged = false;
		int32_t nsid = -1;
		ssize_t n = recvmsg(mnl_socket_get_fd(s->nl), &msg, MSG_DONTWAIT);
		int left;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			s->behind = false;
			return true;
		}
		if (n < 0 || (msg.msg_flags & MSG_TRUNC)) {
			/* ENOBUFS: notifications were lost. Whatever we knew may be old now. */
			if (n < 0 && errno == ENOBUFS)
				ns_world(d)->stats.overruns++;
			else
				shunt_warn("network namespace %llu: rtnetlink: %s",
					   (unsigned long long)s->view->ns->inode,
					   n < 0 ? strerror(errno) : "message truncated");
			broke(d, s);
			return false;
		}
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
			if (c->cmsg_level == SOL_NETLINK && c->cmsg_type == NETLINK_LISTEN_ALL_NSID &&
			    c->cmsg_len >= CMSG_LEN(sizeof(int))) {
				memcpy(&nsid, CMSG_DATA(c), sizeof(nsid));
				tagged = true;
			}
		budget -= (size_t)n < budget ? (size_t)n : budget;
		/* What was read may give a view far namespaces to review (ns_sync settles). */
		ns_world(d)->dirty = true;
		left = (int)n;
		for (const struct nlmsghdr *nlh = (const struct nlmsghdr *)buf;
		     mnl_nlmsg_ok(nlh, left); nlh = mnl_nlmsg_next(nlh, &left))
			dispatch(d, s, nlh, tagged, nsid);
		if (s->reopen) {
			broke(d, s);
			return false;
		}
		if (until_seq && !ns_watch_pending(s, until_seq))
			return true;
	}
	if (s->nl)
		s->behind = true;
	return false;
}

bool ns_watch_refresh_link(struct shuntd *d, struct netns_view *v, struct ns_far *far,
			   uint32_t ifindex)
{
	struct ns_sock *s = far ? &v->far_sock : &v->own;
	int64_t seq = ask_link(d, v, far, ifindex);

	if (seq < 0 || ns_world(d)->hang)
		return false;
	/* Up to the answer, then what it set off (the nsid it may have given a namespace). */
	ns_watch_drain(d, s, (uint32_t)seq);
	if (ns_watch_pending(s, (uint32_t)seq))
		return false;
	ns_watch_drain(d, s, 0);
	if (s != &v->own)
		ns_watch_drain(d, &v->own, 0);
	return true;
}

/*
 * Notifications were lost, or the socket broke: close it, to be made again
 * (and everything dumped) by ns_watch_revive. Made again at once the first
 * times; after that, later and later (up to a second), so a socket that
 * keeps overrunning (a buffer too small for a dump and its answers) cannot
 * spin the loop.
 */
static void broke(struct shuntd *d, struct ns_sock *s)
{
	struct netns_world *w = ns_world(d);
	int64_t wait = 0;

	ns_watch_close(d, s);
	s->reopen = true;
	s->failures++;
	if (s->failures > 2)
		wait = s->failures > 9 ? 1000 : 10ll << (s->failures - 3);
	s->retry_at = shunt_sys_now_ms() + wait;
	w->dirty = true;
	if (wait)
		ns_world_wake_at(d, s->retry_at);
}

void ns_watch_revive(struct shuntd *d, struct ns_sock *s)
{
	int r;

	if (s->nl && s->reopen)
		broke(d, s);
	if (s->nl || !s->reopen || shunt_sys_now_ms() < s->retry_at)
		return;
	r = ns_watch_open(d, s);
	if (r < 0) {
		shunt_warn("network namespace %llu: cannot make its rtnetlink socket again: %s",
			   (unsigned long long)s->view->ns->inode, strerror(-r));
		broke(d, s);
		return;
	}
	/* The nsids of the other views were asked on the old socket. */
	if (!s->far)
		ns_ask_nsids(d, s->view, NULL);
}
