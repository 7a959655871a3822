// SPDX-License-Identifier: MIT
/*
 * Network namespaces as shuntd sees them: one view per namespace its clients
 * live in, whose facts (netns_facts.c) its rtnetlink socket (netns_watch.c)
 * keeps current; the nsids the views give each other; and the namespaces
 * reached by a view's veth pairs that have no view (far namespaces), kept
 * through the view. The decision these facts serve is netns_reach.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <libmnl/libmnl.h>
#include <linux/net_namespace.h>
#include <linux/rtnetlink.h>
#include <linux/sockios.h>

#include "common/log.h"
#include "common/sys.h"
#include "daemon/netns.h"

enum {
	SYNC_ROUNDS = 8,		/* reads per sync: answers may ask for more */
	DEFAULT_RCVBUF = 4 << 20,
};

struct netns_world *ns_world(struct shuntd *d)
{
	return d->netns_world;
}

static uint32_t env_u32(const char *name, uint32_t dflt)
{
	const char *s = getenv(name);
	char *end;
	unsigned long v;

	if (!s || !*s)
		return dflt;
	v = strtoul(s, &end, 10);
	return *end || v > UINT32_MAX ? dflt : (uint32_t)v;
}

int shuntd_netns_init(struct shuntd *d)
{
	struct netns_world *w = calloc(1, sizeof(*w));
	struct epoll_event ev = { .events = EPOLLIN };
	int r;

	shunt_map_init(&d->netns);
	if (!w)
		return -ENOMEM;
	d->netns_world = w;
	w->watch = SHUNTD_WATCH_NETNS;
	/* Knobs for tests: a small buffer overruns; verify checks the route model against
	 * the kernel; hang never takes a route query's answer in time. */
	w->rcvbuf = env_u32("SHUNTD_NETLINK_RCVBUF", DEFAULT_RCVBUF);
	w->verify = env_u32("SHUNTD_NETNS_VERIFY", 0) != 0;
	w->hang = env_u32("SHUNTD_NETLINK_HANG", 0) != 0;
	d->netns_self_fd = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	ev.data.ptr = &w->timerfd;
	if (d->netns_self_fd < 0 || w->epfd < 0 || w->timerfd < 0 ||
	    epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->timerfd, &ev) < 0) {
		r = -errno;
		shunt_err("shuntd: cannot open /proc/self/ns/net, or make the epoll and timer fds "
			  "of the namespace views: %s", strerror(-r));
		return r;
	}
	return 0;
}

void ns_world_wake_at(struct shuntd *d, int64_t at)
{
	struct netns_world *w = ns_world(d);
	struct itimerspec its = { .it_value = { .tv_sec = at / 1000,
						.tv_nsec = (at % 1000) * 1000000 } };

	/* Armed already for sooner: that wake settles this too (ns_sync looks at every view). */
	if (w->wake_at && w->wake_at <= at && w->wake_at > shunt_sys_now_ms())
		return;
	w->wake_at = at;
	timerfd_settime(w->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

void shuntd_netns_stats(struct shuntd *d, struct shuntd_netns_stats *out)
{
	*out = ns_world(d)->stats;
}

/* ---- nsids: how each view numbers the others ---- */

struct netns *ns_view_by_nsid(const struct netns_view *v, int32_t nsid)
{
	return nsid >= 0 ? shunt_map_get(&v->nsids, (uint64_t)nsid + 1) : NULL;
}

/* Forget what @v numbered @of (or, @of NULL, what it numbered @nsid). */
static void forget_nsid(struct netns_view *v, const struct netns *of, int32_t nsid)
{
	if (of) {
		uintptr_t n = (uintptr_t)shunt_map_del(&v->nsid_of, of->inode);

		if (n)
			shunt_map_del(&v->nsids, n);
		return;
	}
	of = shunt_map_del(&v->nsids, (uint64_t)nsid + 1);
	if (of)
		shunt_map_del(&v->nsid_of, of->inode);
}

static bool numbered(const struct netns_view *v, const struct netns *of)
{
	return shunt_map_get(&v->nsid_of, of->inode) != NULL;
}

/* Ask @v, without waiting, which nsid it gives @of (a view with an fd). */
static void ask_nsid(struct shuntd *d, struct netns_view *v, struct netns *of)
{
	char buf[128];
	struct nlmsghdr *nlh = ns_watch_request(buf, RTM_GETNSID, 0);
	struct rtgenmsg *g = mnl_nlmsg_put_extra_header(nlh, sizeof(*g));
	struct ns_req r = { .kind = NS_REQ_NSID, .inode = of->inode };

	g->rtgen_family = AF_UNSPEC;
	mnl_attr_put_u32(nlh, NETNSA_FD, (uint32_t)of->fd);
	if (ns_watch_send(d, &v->own, nlh, &r) == 0)
		v->nsid_asked++;
}

void ns_ask_nsids(struct shuntd *d, struct netns_view *v, struct netns *of)
{
	struct netns *x;
	uint64_t key;
	size_t it = 0;

	if (!v->own.nl)
		return;
	/* While its dumps run, an answer could find the buffer full of them: asked after. */
	if (v->todo) {
		v->nsids_due = true;
		return;
	}
	if (of) {
		ask_nsid(d, v, of);
		return;
	}
	while ((x = shunt_map_next(&d->netns, &it, &key)))
		if (x->view != v && !numbered(v, x))
			ask_nsid(d, v, x);
}

void ns_on_nsid(struct shuntd *d, struct netns_view *v, const struct ns_req *r, int32_t nsid)
{
	struct netns *of = shunt_map_get(&d->netns, r->inode);

	if (!of || nsid < 0)
		return;	/* let go meanwhile, or no nsid yet (RTM_NEWNSID says when it has one) */
	forget_nsid(v, of, 0);
	forget_nsid(v, NULL, nsid);
	/* Both ways, so that asking "is it numbered?" costs no walk over every view. */
	if (shunt_map_put(&v->nsids, (uint64_t)nsid + 1, of) < 0 ||
	    shunt_map_put(&v->nsid_of, of->inode, (void *)((uintptr_t)nsid + 1)) < 0) {
		forget_nsid(v, NULL, nsid);
		v->own.reopen = true;	/* out of memory: start afresh */
	}
	v->fars_dirty = true;
}

static void far_free(struct ns_far *f)
{
	ns_facts_free(&f->facts);
	free(f);
}

void ns_on_nsid_event(struct shuntd *d, struct netns_view *v, const struct nlmsghdr *nlh)
{
	const struct nlattr *at;
	int32_t nsid = -1;

	mnl_attr_for_each(at, nlh, sizeof(struct rtgenmsg))
		if (mnl_attr_get_type(at) == NETNSA_NSID && mnl_attr_validate(at, MNL_TYPE_U32) == 0)
			nsid = (int32_t)mnl_attr_get_u32(at);
	if (nsid < 0)
		return;
	v->fars_dirty = true;
	if (nlh->nlmsg_type == RTM_DELNSID) {
		/* Its namespace is gone (or the id was taken back): so is what we knew through it. */
		forget_nsid(v, NULL, nsid);
		for (struct ns_far **pp = &v->fars; *pp; pp = &(*pp)->next)
			if ((*pp)->nsid == nsid) {
				struct ns_far *f = *pp;

				*pp = f->next;
				far_free(f);
				break;
			}
		return;
	}
	/* A new number: for one of our views, perhaps. */
	if (!ns_view_by_nsid(v, nsid))
		ns_ask_nsids(d, v, NULL);
}

/* ---- far namespaces ---- */

struct ns_far *ns_far_find(struct netns_view *v, int32_t nsid)
{
	for (struct ns_far *f = v->fars; f; f = f->next)
		if (f->nsid == nsid)
			return f;
	return NULL;
}

/* A veth end whose other end is in another namespace: the only kind followed there. */
static bool veth_out(const struct ns_link *l)
{
	return l->has_peer_nsid && !strcmp(l->kind, "veth");
}

/* Whether a veth pair of @v leads into namespace @nsid. */
static bool linked_to(const struct netns_view *v, int32_t nsid)
{
	struct ns_link *l;
	uint64_t key;
	size_t it = 0;

	while ((l = shunt_map_next(&v->facts.links, &it, &key)))
		if (veth_out(l) && l->peer_nsid == nsid)
			return true;
	return false;
}

/* Hear the notifications of every namespace @v numbers: far ones are among them. */
static int listen_far(struct shuntd *d, struct netns_view *v)
{
	int r;

	if (v->far_sock.nl)
		return 0;
	if (v->no_far)
		return -EPERM;
	r = ns_watch_open(d, &v->far_sock);
	if (r == -EPERM) {
		/* NETLINK_LISTEN_ALL_NSID needs CAP_NET_BROADCAST. */
		v->no_far = true;
		shunt_info("network namespace %llu: cannot hear the namespaces it links to (%s); "
			   "connections across them go to the kernel",
			   (unsigned long long)v->ns->inode, strerror(-r));
	}
	return r;
}

bool ns_settle(struct shuntd *d, struct netns_view *v)
{
	struct ns_link *l;
	uint64_t key;
	size_t it = 0;

	if (v->own.reopen && !v->no_socket) {
		ns_watch_revive(d, &v->own);
		return v->own.nl != NULL;
	}
	if (v->far_sock.reopen && v->fars) {
		ns_watch_revive(d, &v->far_sock);
		if (!v->far_sock.nl)
			return false;
	}
	/* Far namespaces are decided on complete facts and nsids only. */
	if (!v->fars_dirty || !ns_view_ready(v) || v->nsid_asked || v->nsids_due)
		return false;
	v->fars_dirty = false;
	for (struct ns_far **pp = &v->fars; *pp;) {
		struct ns_far *f = *pp;

		if (!ns_view_by_nsid(v, f->nsid) && linked_to(v, f->nsid)) {
			pp = &f->next;
			continue;
		}
		*pp = f->next;
		far_free(f);
	}
	while ((l = shunt_map_next(&v->facts.links, &it, &key))) {
		struct ns_far *f;

		if (!veth_out(l) || ns_view_by_nsid(v, l->peer_nsid) || ns_far_find(v, l->peer_nsid))
			continue;
		f = calloc(1, sizeof(*f));
		if (!f)
			break;
		ns_facts_init(&f->facts);
		f->nsid = l->peer_nsid;
		f->todo = NS_DUMPS_FAR;
		f->next = v->fars;
		v->fars = f;
		shunt_debug("network namespace %llu: following nsid %d, which has no view",
			    (unsigned long long)v->ns->inode, (int)f->nsid);
	}
	/* Subscribed before the dumps: nothing that changes in between is missed. */
	if (v->fars && listen_far(d, v) == 0)
		ns_watch_next_dump(d, &v->far_sock);
	/* No far namespace left: nobody else's notifications to read. */
	if (!v->fars)
		ns_watch_close(d, &v->far_sock);
	return true;
}

bool ns_view_ready(const struct netns_view *v)
{
	return v && v->own.nl && !v->todo && !v->own.behind && !v->own.reopen;
}

bool ns_far_ready(const struct netns_view *v, const struct ns_far *far)
{
	const struct ns_sock *s = &v->far_sock;

	if (!s->nl || s->behind || s->reopen || far->todo || far->failed)
		return false;
	/* A link whose newest state is still awaited. */
	for (const struct ns_req *r = s->reqs; r; r = r->next)
		if (r->kind == NS_REQ_LINK && r->far && r->nsid == far->nsid)
			return false;
	return true;
}

/* ---- reading ---- */

void ns_sync(struct shuntd *d)
{
	struct netns_world *w = ns_world(d);
	struct netns *ns;
	uint64_t key;
	size_t it;

	for (unsigned round = 0; round < SYNC_ROUNDS; round++) {
		struct epoll_event evs[32];
		int n = epoll_wait(w->epfd, evs, 32, 0);
		bool busy = n > 0;

		for (int k = 0; k < n; k++) {
			uint64_t ticks;

			if (evs[k].data.ptr != &w->timerfd) {
				ns_watch_drain(d, evs[k].data.ptr, 0);
				continue;
			}
			/* A broken socket's time to be made again. */
			(void)!read(w->timerfd, &ticks, sizeof(ticks));
			w->wake_at = 0;
			w->dirty = true;
		}
		/* Only reading (or a view made or let go) gives a view something to settle. */
		if (!busy && !w->dirty)
			return;
		w->dirty = false;
		it = 0;
		while ((ns = shunt_map_next(&d->netns, &it, &key))) {
			struct netns_view *v = ns->view;

			if ((v->fars_dirty || (v->own.reopen && !v->no_socket) ||
			     (v->far_sock.reopen && v->fars)) && ns_settle(d, v))
				busy = true;
		}
		if (!busy)
			return;
	}
}

void shuntd_netns_input(struct shuntd *d)
{
	ns_sync(d);
}

/* ---- views ---- */

static void watch_world(struct shuntd *d)
{
	struct netns_world *w = ns_world(d);

	/* Views are made for clients, once the loop runs (its epoll fd exists by then). */
	if (w->watched || d->epfd <= 0)
		return;
	if (shuntd_loop_watch(d, w->epfd, w) < 0)
		shunt_warn("cannot watch rtnetlink sockets: %s", strerror(errno));
	else
		w->watched = true;
}

struct netns *shuntd_netns_get(struct shuntd *d, int nsfd)
{
	struct netns_world *w = ns_world(d);
	struct netns *ns, *x;
	struct netns_view *v;
	struct stat st;
	uint64_t key;
	size_t it = 0;
	int r;

	if (fstat(nsfd, &st) < 0)
		return NULL;
	ns = shunt_map_get(&d->netns, st.st_ino);
	if (ns) {
		ns->refs++;
		return ns;
	}
	ns = calloc(1, sizeof(*ns));
	v = calloc(1, sizeof(*v));
	if (!ns || !v)
		goto fail;
	ns->inode = st.st_ino;
	ns->refs = 1;
	ns->view = v;
	v->ns = ns;
	ns_facts_init(&v->facts);
	shunt_map_init(&v->nsids);
	shunt_map_init(&v->nsid_of);
	v->own.view = v;
	v->far_sock.view = v;
	v->far_sock.far = true;
	ns->fd = fcntl(nsfd, F_DUPFD_CLOEXEC, 3);
	if (ns->fd < 0 || shunt_map_put(&d->netns, ns->inode, ns) < 0) {
		if (ns->fd >= 0)
			close(ns->fd);
		goto fail;
	}
	watch_world(d);
	w->dirty = true;
	/* Without CAP_SYS_ADMIN only loopback is known there, as before views existed. */
	r = ns_watch_open(d, &v->own);
	if (r < 0) {
		v->no_socket = true;
		shunt_info("network namespace %llu: no rtnetlink socket in it (%s); "
			   "only loopback connections there use shared memory",
			   (unsigned long long)ns->inode, strerror(-r));
	}
	/* How it numbers the others, and they it: asked now, answered by the time it matters. */
	ns_ask_nsids(d, v, NULL);
	while ((x = shunt_map_next(&d->netns, &it, &key)))
		if (x != ns)
			ns_ask_nsids(d, x->view, ns);
	shunt_debug("network namespace %llu: watched", (unsigned long long)ns->inode);
	return ns;
fail:
	free(v);
	free(ns);
	return NULL;
}

struct netns *shuntd_netns_of_pid(struct shuntd *d, pid_t pid, uint64_t inode)
{
	struct netns *ns = inode ? shunt_map_get(&d->netns, inode) : NULL;
	char path[64];
	int fd;

	/* Known already (held open, so its inode is no other's): no need to look. */
	if (ns) {
		ns->refs++;
		return ns;
	}
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

/* @ns, which nobody holds any more: its view, descriptors and directory go. */
static void drop(struct shuntd *d, struct netns *ns)
{
	struct netns_view *v = ns->view;
	struct netns *x;
	uint64_t key;
	size_t it = 0;

	shunt_debug("network namespace %llu: let go", (unsigned long long)ns->inode);
	shuntd_directory_ns_gone(ns);
	shunt_map_del(&d->netns, ns->inode);
	ns_world(d)->dirty = true;
	/* The others forget its number (answers about it still on the way find no view). */
	while ((x = shunt_map_next(&d->netns, &it, &key))) {
		forget_nsid(x->view, ns, 0);
		x->view->fars_dirty = true;
	}
	ns_watch_close(d, &v->own);
	ns_watch_close(d, &v->far_sock);
	while (v->fars) {
		struct ns_far *f = v->fars;

		v->fars = f->next;
		far_free(f);
	}
	ns_facts_free(&v->facts);
	shunt_map_free(&v->nsids);
	shunt_map_free(&v->nsid_of);
	free(v);
	close(ns->fd);
	free(ns);
}

void shuntd_netns_put(struct shuntd *d, struct netns *ns)
{
	if (!ns || --ns->refs)
		return;
	/*
	 * shuntd's own namespace stays watched with no session in it: a
	 * process that connects once and exits (a health check, each command
	 * of a shell script) made shuntd dump that namespace's links and
	 * addresses and make its directory again, about a fifth of shuntd's
	 * time per such process. Any other is let go at once: the descriptor
	 * held for it would keep a namespace that `ip netns del` should end
	 * alive, and its devices with it (a veth pair's name stays taken).
	 */
	if (ns->inode != d->netns_self)
		drop(d, ns);
}

void shuntd_netns_drop_own(struct shuntd *d)
{
	struct netns *ns = shunt_map_get(&d->netns, d->netns_self);

	if (ns && !ns->refs)
		drop(d, ns);
}

bool shuntd_netns_is_local(struct shuntd *d, struct netns *ns, const struct shunt_wire_addr *ip)
{
	struct netns_world *w = ns_world(d);
	bool local;

	if (!ns)
		return false;
	w->deciding = true;
	ns_sync(d);
	/* Not known yet (or not at all): not local; netns_reach then says kernel too. */
	local = ns_view_ready(ns->view) && ns_facts_where(&ns->view->facts, ip, 0) != NS_NOT_HERE;
	w->deciding = false;
	return local;
}
