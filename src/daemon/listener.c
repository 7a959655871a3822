// SPDX-License-Identifier: MIT
/*
 * The listener registry: shunt listening sockets keyed by network namespace,
 * address and port, matched against connect() the way the kernel matches a
 * SYN (in the namespace the SYN would reach: netns.c), each with its own
 * accept queue of circuits and a backlog as large as the kernel's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>

#include "common/addr.h"
#include "common/log.h"
#include "common/proto.h"
#include "common/sys.h"
#include "daemon/shuntd.h"

enum {
	/* Counts to spare taken off a doorbell per question: a flood stays bounded work. */
	SETTLE_MAX = 64,
};

/*
 * The reply to a LISTEN: registration @l's id, and its session's hold's
 * announce; for a new registration (@fresh) the listener's bells and
 * doorbell before it.
 */
static void reply_listen(struct session *s, uint32_t seq, struct listener *l, bool fresh)
{
	struct shunt_msg_listen_reply r;
	struct hold *h = shuntd_hold_find_listener(s, l);
	int fds[3] = { l->bells, l->doorbell, h ? h->announce : -1 };

	if (!h) {
		shuntd_session_reply_status(s, SHUNT_MSG_LISTEN, seq, -ENOENT);
		return;
	}
	shunt_proto_init(&r, SHUNT_MSG_LISTEN | SHUNT_MSG_REPLY, sizeof(r), seq);
	r.listener = l->id;
	shuntd_session_reply(s, &r, fresh ? fds : fds + 2, fresh ? 3 : 1);
}

/*
 * @l's doorbell and the epoll instance its holders poll, holding it (and
 * later each channel's bell, chan.c). 0 or -errno.
 */
static int make_bells(struct listener *l)
{
	struct epoll_event ev = { .events = EPOLLIN };

	l->doorbell = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
	l->bells = epoll_create1(EPOLL_CLOEXEC);
	if (l->doorbell >= 0 && l->bells >= 0 &&
	    epoll_ctl(l->bells, EPOLL_CTL_ADD, l->doorbell, &ev) == 0)
		return 0;
	return -errno;
}

static void close_bells(struct listener *l)
{
	if (l->doorbell >= 0)
		close(l->doorbell);
	if (l->bells >= 0)
		close(l->bells);
}

/*
 * Listeners are found by port: every match (a connect's destination, a
 * SO_REUSEPORT group) is on one port, and few listeners share one, so the
 * chain is short whatever else listens on the host.
 */
static struct listener *on_port(struct shuntd *d, uint16_t port)
{
	return shunt_map_get(&d->ports, (uint64_t)port + 1);
}

struct listener *shuntd_listeners_on_port(struct shuntd *d, uint16_t port)
{
	return on_port(d, port);
}

/* Enter @l (its address known) in the listeners: by id, by port, and in the directory. */
static int enter(struct shuntd *d, struct listener *l)
{
	if (shunt_map_put(&d->listeners, l->id, l) < 0)
		return -ENOMEM;
	l->port_next = on_port(d, l->addr.port);
	if (shunt_map_put(&d->ports, (uint64_t)l->addr.port + 1, l) < 0) {
		shunt_map_del(&d->listeners, l->id);
		return -ENOMEM;
	}
	/* Published before the reply: a connect after listen() returned asks. */
	shuntd_directory_listener(d, l, 1);
	return 0;
}

static void leave(struct shuntd *d, struct listener *l)
{
	shunt_map_del(&d->listeners, l->id);
	if (on_port(d, l->addr.port) == l) {
		if (l->port_next)
			shunt_map_put(&d->ports, (uint64_t)l->addr.port + 1, l->port_next);
		else
			shunt_map_del(&d->ports, (uint64_t)l->addr.port + 1);
	} else {
		for (struct listener *o = on_port(d, l->addr.port); o; o = o->port_next)
			if (o->port_next == l) {
				o->port_next = l->port_next;
				break;
			}
	}
	shuntd_directory_listener(d, l, -1);
	shuntd_directory_holds(d, l);	/* nobody now */
}

static struct listener *find_inode(struct shuntd *d, uint64_t netns, uint64_t inode)
{
	struct listener *l;
	uint64_t key;
	size_t it = 0;

	while ((l = shunt_map_next(&d->listeners, &it, &key)))
		if (l->inode == inode && l->netns == netns)
			return l;
	return NULL;
}

void shuntd_listener_register(struct shuntd *d, struct session *s,
			      const struct shunt_msg_listen *m, int fd)
{
	struct sock_facts f;
	struct listener *l;
	struct netns *ns = NULL;
	int r = shuntd_socket_facts(fd, &f);

	if (r == 0 && !f.listening)
		r = -EINVAL;
	/* Its namespace's view: connects from other namespaces ask for its addresses. */
	if (r == 0)
		ns = shuntd_netns_of_socket(d, fd, f.netns);
	/* We keep no reference to the socket: the port belongs to the process, not to us. */
	close(fd);
	if (r < 0) {
		shunt_warn("session %llu (pid %d, %s): listening socket refused: %s",
			   (unsigned long long)s->id, (int)s->pid, shuntd_session_comm(s), shuntd_socket_refusal(r));
		shuntd_session_reply_status(s, SHUNT_MSG_LISTEN, m->h.seq, r);
		return;
	}
	if (m->listener) {
		l = shunt_map_get(&d->listeners, m->listener);
		if (!l || !shuntd_hold_find_listener(s, l) || l->inode != f.inode) {
			shuntd_netns_put(d, ns);	/* no listener keeps the view */
			shuntd_session_reply_status(s, SHUNT_MSG_LISTEN, m->h.seq, -ENOENT);
			return;
		}
		/* listen() again (or TCP_DEFER_ACCEPT set): the kernel changed it; so do we. */
		l->max_queued = f.max_backlog + 1;
		l->defer_ms = f.defer_accept * 1000;
		shuntd_chan_relisten(l);
		shuntd_listener_admit(d, l);
		reply_listen(s, m->h.seq, l, false);
		shuntd_netns_put(d, ns);
		return;
	}
	/*
	 * A socket already registered, now in another process too (passed
	 * with SCM_RIGHTS, inherited across exec): one more holder of it.
	 */
	l = find_inode(d, f.netns, f.inode);
	if (l) {
		shuntd_netns_put(d, ns);
		if (!shuntd_hold_find_listener(s, l) && !shuntd_hold_listener(d, l, s)) {
			shuntd_session_reply_status(s, SHUNT_MSG_LISTEN, m->h.seq, -ENOMEM);
			return;
		}
		reply_listen(s, m->h.seq, l, true);
		return;
	}
	l = calloc(1, sizeof(*l));
	if (!l) {
		shuntd_netns_put(d, ns);
		shuntd_session_reply_status(s, SHUNT_MSG_LISTEN, m->h.seq, -ENOMEM);
		return;
	}
	r = make_bells(l);
	l->id = shuntd_new_id(d);
	shunt_list_init(&l->holds);
	l->tenant = s->tenant;
	l->netns = f.netns;
	l->ns = ns;
	l->addr = f.local;
	l->v6only = f.v6only;
	l->inode = f.inode;
	l->max_queued = f.max_backlog + 1;
	l->defer_ms = f.defer_accept * 1000;
	l->reuseport = f.reuseport;
	l->uid = f.uid;
	shunt_list_init(&l->acceptq);
	shunt_list_init(&l->synq);
	shunt_list_init(&l->deferq);
	shunt_list_init(&l->channels);
	shunt_list_init(&l->waiters);
	if (r == 0)
		r = enter(d, l);
	if (r == 0 && !shuntd_hold_listener(d, l, s)) {
		leave(d, l);
		r = -ENOMEM;
	}
	if (r < 0) {
		close_bells(l);
		free(l);
		shuntd_netns_put(d, ns);
		shuntd_session_reply_status(s, SHUNT_MSG_LISTEN, m->h.seq, r);
		return;
	}
	char a[SHUNT_ADDR_STRLEN];

	shunt_debug("listener %llu: %s backlog %u (pid %d)", (unsigned long long)l->id,
		    shunt_addr_format(&l->addr, a, sizeof(a)), f.max_backlog, (int)s->pid);
	reply_listen(s, m->h.seq, l, true);
}

void shuntd_listener_unregister(struct shuntd *d, struct session *s,
				 const struct shunt_msg_unlisten *m)
{
	struct listener *l = shunt_map_get(&d->listeners, m->listener);
	struct hold *h = l ? shuntd_hold_find_listener(s, l) : NULL;
	int status = h ? SHUNT_OK : -ENOENT;

	/*
	 * Answered once done, so that the program's next call sees the
	 * kernel as it would: the port held by the accepted connections
	 * alone (their companions, chan.c), queued ones reset.
	 */
	if (h && (m->flags & SHUNT_UNLISTEN_SHUTDOWN))
		shuntd_listener_destroy(d, l);
	else if (h)
		shuntd_hold_release(d, h, false);	/* the last one destroys it */
	/* Still there (the id is never used again), or gone with its waiters answered. */
	l = shunt_map_get(&d->listeners, m->listener);
	if (l && (m->flags & SHUNT_UNLISTEN_COUNTED))
		shuntd_family_counted(d, l);
	if (m->flags & SHUNT_UNLISTEN_UNANSWERED)
		return;
	/* Its family's last holder: once the others' closes are read (family.c). */
	if (l && shuntd_family_wait(d, l, s, m->h.seq, m->after, status))
		return;
	shuntd_session_reply_status(s, SHUNT_MSG_UNLISTEN, m->h.seq, status);
}

struct session *shuntd_listener_holder(struct listener *l)
{
	if (shunt_list_empty(&l->holds))
		return NULL;
	return shunt_list_first(&l->holds, struct hold, node)->session;
}

/* Whether @a and @b are one SO_REUSEPORT group: same address, both set it, one owner. */
static bool same_group(const struct listener *a, const struct listener *b)
{
	return a != b && a->reuseport && b->reuseport && a->netns == b->netns &&
	       a->uid == b->uid && a->v6only == b->v6only &&
	       shunt_addr_same_ip(&a->addr, &b->addr) && a->addr.port == b->addr.port &&
	       a->addr.scope_id == b->addr.scope_id;
}

/* Another listener of @l's group, for the connections @l leaves behind, or NULL. */
static struct listener *group_heir(struct shuntd *d, struct listener *l)
{
	for (struct listener *o = on_port(d, l->addr.port); o; o = o->port_next)
		if (same_group(l, o))
			return o;
	return NULL;
}

/*
 * net.ipv4.tcp_migrate_req of the daemon's own namespace: 1 moves the
 * connections of a closing SO_REUSEPORT listener to another of its group.
 * Read for listeners in that namespace only; elsewhere the default (0).
 */
static bool migrate_req(struct shuntd *d, const struct listener *l)
{
	char c = '0';
	int fd;

	if (l->netns != d->netns_self)
		return false;
	fd = open("/proc/sys/net/ipv4/tcp_migrate_req", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (read(fd, &c, 1) != 1)
		c = '0';
	close(fd);
	return c == '1';
}

/* Move every circuit queued on @l to @to, in order, as the kernel migrates requests. */
static void migrate(struct shuntd *d, struct listener *l, struct listener *to)
{
	struct shunt_list *pos, *tmp;

	shunt_list_for_each_safe(pos, tmp, &l->acceptq) {
		struct circuit *c = shunt_container_of(pos, struct circuit, queue_node);

		shuntd_circuit_unqueue(c);
		c->listener = to;
		c->queue = CIRCUIT_ACCEPTQ;
		shunt_list_add_tail(&to->acceptq, &c->queue_node);
		to->queued++;
		shuntd_efd_ring(to->doorbell);
	}
	shunt_list_for_each_safe(pos, tmp, &l->deferq) {
		struct circuit *c = shunt_container_of(pos, struct circuit, queue_node);
		int64_t until = c->defer_until;

		shuntd_circuit_unqueue(c);
		c->listener = to;
		c->queue = CIRCUIT_DEFERRED;
		c->defer_until = until;
		shunt_list_add_tail(&to->deferq, &c->queue_node);
		to->ndeferred++;
	}
	shunt_list_for_each_safe(pos, tmp, &l->synq) {
		struct circuit *c = shunt_container_of(pos, struct circuit, queue_node);

		shuntd_circuit_unqueue(c);
		c->listener = to;
		c->queue = CIRCUIT_SYN;
		shunt_list_add_tail(&to->synq, &c->queue_node);
	}
	shuntd_listener_admit(d, to);
}

void shuntd_listener_destroy(struct shuntd *d, struct listener *l)
{
	struct shunt_list *pos, *tmp;
	struct listener *heir = l->reuseport ? group_heir(d, l) : NULL;

	/*
	 * A SO_REUSEPORT group hands them on when the kernel would (its
	 * tcp_migrate_req); a SYN waiting for room meets the group's next
	 * listener in either case, since the kernel's retransmission would.
	 */
	if (heir && migrate_req(d, l))
		migrate(d, l, heir);
	if (heir) {
		shunt_list_for_each_safe(pos, tmp, &l->synq) {
			struct circuit *c = shunt_container_of(pos, struct circuit, queue_node);

			shuntd_circuit_unqueue(c);
			c->listener = heir;
			c->queue = CIRCUIT_SYN;
			shunt_list_add_tail(&heir->synq, &c->queue_node);
		}
		shuntd_listener_admit(d, heir);
	}

	/* Its channels close, and what is queued in them is reset. */
	shuntd_chan_listener_gone(d, l);
	/* Its family's last closes are done. */
	shuntd_family_listener_gone(d, l);
	/* A SYN still waiting for room meets a closed port: connection refused. */
	shunt_list_for_each_safe(pos, tmp, &l->synq) {
		struct circuit *c = shunt_container_of(pos, struct circuit, queue_node);

		shuntd_circuit_unqueue(c);
		shuntd_circuit_set_setup(d, c, SHUNT_SETUP_REFUSED);
		shuntd_circuit_end_done(d, c, SHUNT_END_ACCEPTOR, false);
	}
	/* Established but never accepted (or deferred, waiting for data): the kernel resets them. */
	shunt_list_for_each_safe(pos, tmp, &l->deferq) {
		struct circuit *c = shunt_container_of(pos, struct circuit, queue_node);

		shuntd_circuit_unqueue(c);
		atomic_fetch_or(&c->hdr->end[SHUNT_END_ACCEPTOR].state,
				SHUNT_END_CLOSED | SHUNT_END_RESET);
		shuntd_circuit_end_done(d, c, SHUNT_END_ACCEPTOR, false);
	}
	shunt_list_for_each_safe(pos, tmp, &l->acceptq) {
		struct circuit *c = shunt_container_of(pos, struct circuit, queue_node);

		shuntd_circuit_unqueue(c);
		atomic_fetch_or(&c->hdr->end[SHUNT_END_ACCEPTOR].state,
				SHUNT_END_CLOSED | SHUNT_END_RESET);
		shuntd_circuit_end_done(d, c, SHUNT_END_ACCEPTOR, false);
	}
	/* Its holders let go of it: they are not told, their next accept asks the kernel. */
	shunt_list_for_each_safe(pos, tmp, &l->holds) {
		struct hold *h = shunt_container_of(pos, struct hold, node);

		shunt_list_del(&h->node);
		shunt_list_del(&h->session_node);
		shuntd_hold_free(h);
	}
	leave(d, l);
	close_bells(l);
	shuntd_netns_put(d, l->ns);
	free(l);
}

/*
 * How well listener @l matches an IPv4 or IPv6 destination, as the kernel's
 * compute_score ranks listeners: -1 no match, an address-specific socket
 * before a wildcard one, an IPv4 socket before a dual-stack IPv6 one.
 */
static int score(const struct listener *l, const struct shunt_wire_addr *dst)
{
	struct shunt_wire_addr la = l->addr;

	if (la.port != dst->port)
		return -1;
	if (dst->family == AF_INET) {
		if (la.family == AF_INET6) {
			if (l->v6only)
				return -1;
			if (!shunt_addr_is_any(&la) && !shunt_addr_is_v4mapped(&la))
				return -1;
			shunt_addr_unmap(&la);
			if (la.family == AF_INET6) /* :: */
				return 1;
			return shunt_addr_same_ip(&la, dst) ? 3 : -1;
		}
		if (shunt_addr_is_any(&la))
			return 2;
		return shunt_addr_same_ip(&la, dst) ? 4 : -1;
	}
	if (la.family != AF_INET6)
		return -1;
	if (shunt_addr_is_any(&la))
		return 1;
	return shunt_addr_same_ip(&la, dst) && la.scope_id == dst->scope_id ? 3 : -1;
}

/*
 * One listener of @l's SO_REUSEPORT group (@l itself if alone). The kernel
 * hashes the 4-tuple over the group's sockets; in turn over the group
 * spreads connections as evenly, and a listener that leaves the group
 * leaves the turn. Members that are not shunt listeners (a program running
 * without shunt) are unknown here: shunt clients never reach them.
 */
static struct listener *spread(struct shuntd *d, struct listener *l)
{
	static uint32_t turn;
	struct listener *o, *pick = l;
	uint32_t n = 1, want;

	for (o = on_port(d, l->addr.port); o; o = o->port_next)
		n += same_group(l, o);
	if (n == 1)
		return l;
	want = turn++ % n;
	if (want == 0)
		return l;
	for (o = on_port(d, l->addr.port); o; o = o->port_next)
		if (same_group(l, o) && --want == 0)
			pick = o;
	return pick;
}

/* The best listener for @dst in namespace @netns, or NULL. */
static struct listener *best_in(struct shuntd *d, uint64_t netns, const struct shunt_wire_addr *dst)
{
	struct listener *best = NULL, *l;
	int best_score = -1;

	for (l = on_port(d, dst->port); l; l = l->port_next) {
		if (l->netns != netns)
			continue;
		int sc = score(l, dst);

		if (sc > best_score) {
			best_score = sc;
			best = l;
		}
	}
	return best && best->reuseport ? spread(d, best) : best;
}

/* Whether some listener outside @netns could take @dst (before asking the kernel the way). */
static bool listened_elsewhere(struct shuntd *d, uint64_t netns, const struct shunt_wire_addr *dst)
{
	for (struct listener *l = on_port(d, dst->port); l; l = l->port_next)
		if (l->netns != netns && score(l, dst) >= 0)
			return true;
	return false;
}

struct listener *shuntd_listener_match(struct shuntd *d, struct netns *from, uint64_t netns,
				       const struct shunt_wire_addr *dst_in,
				       const struct shuntd_route_hints *h,
				       struct shunt_wire_addr *src)
{
	struct shunt_wire_addr dst = *dst_in;
	struct netns *to;

	/* An IPv6 socket connecting to ::ffff:a.b.c.d makes an IPv4 connection. */
	shunt_addr_unmap(&dst);
	/* connect() to the wildcard address reaches the local host. */
	if (shunt_addr_is_any(&dst))
		shunt_addr_set_loopback(&dst);
	dst.flowinfo = 0;
	/*
	 * An address of the connecting namespace (loopback always is) is
	 * delivered there, whoever listens elsewhere on it; the kernel then
	 * takes the destination itself as the source (127.0.0.1 or ::1 for
	 * any loopback one).
	 */
	if (shunt_addr_is_loopback(&dst) || shuntd_netns_is_local(d, from, &dst)) {
		*src = dst;
		src->port = 0;
		if (shunt_addr_is_loopback(&dst))
			shunt_addr_set_loopback(src);
		return best_in(d, netns, &dst);
	}
	/* Another namespace's, if its address is the one the kernel's packets would reach. */
	if (!listened_elsewhere(d, netns, &dst))
		return NULL;
	to = shuntd_netns_reach(d, from, &dst, h, src);
	if (!to)
		return NULL;
	src->port = 0;
	src->scope_id = dst.scope_id;
	return best_in(d, to->inode, &dst);
}

static bool any_deferred;	/* some listener may have deferred circuits */

/* Into the accept queue: accept() and the listener's poll see it now. */
static void to_acceptq(struct listener *l, struct circuit *c)
{
	c->listener = l;
	c->queue = CIRCUIT_ACCEPTQ;
	shunt_list_add_tail(&l->acceptq, &c->queue_node);
	l->queued++;
	shuntd_efd_ring(l->doorbell);
}

void shuntd_listener_enqueue(struct shuntd *d, struct listener *l, struct circuit *c)
{
	(void)d;
	if (!l->defer_ms) {
		to_acceptq(l, c);
		return;
	}
	/*
	 * The kernel keeps such a connection a request socket (the client is
	 * ESTABLISHED) until its first segment with data or a FIN arrives,
	 * or until the SYN-ACK retransmissions the timeout was rounded to
	 * are over; it does not count against the accept queue meanwhile.
	 */
	c->listener = l;
	c->queue = CIRCUIT_DEFERRED;
	c->defer_until = shunt_sys_now_ms() + l->defer_ms;
	shunt_list_add_tail(&l->deferq, &c->queue_node);
	l->ndeferred++;
	any_deferred = true;
}

void shuntd_listener_admit(struct shuntd *d, struct listener *l)
{
	/* The accept queue is ours and the channels' together, as the kernel has one. */
	while (!shunt_list_empty(&l->synq) && l->queued + shuntd_chan_queued(l) < l->max_queued) {
		struct circuit *c = shunt_list_first(&l->synq, struct circuit, queue_node);

		shuntd_circuit_unqueue(c);
		shuntd_listener_enqueue(d, l, c);
		shuntd_circuit_set_setup(d, c, SHUNT_SETUP_ESTABLISHED);
	}
}

void shuntd_listener_settle(struct listener *l)
{
	uint32_t taken = shuntd_efd_take_some(l->doorbell, SETTLE_MAX);

	/* Its holders can ring it too: what it owes is what shuntd queued. */
	shuntd_efd_give_back(l->doorbell, taken, l->queued);
	shuntd_chan_settle(l, SETTLE_MAX);
}

/*
 * Whether deferred circuit @c is complete: the client sent a byte or its
 * FIN (ring 0 carries the connector's bytes). Shared memory the client
 * writes: a lie only makes its own connection acceptable early.
 */
static bool deferred_done(struct circuit *c, int64_t now)
{
	struct shunt_circuit_end *e = &c->hdr->end[SHUNT_END_CONNECTOR];

	return atomic_load_explicit(&c->hdr->ring[SHUNT_END_CONNECTOR].tail,
				    memory_order_acquire) != 0 ||
	       (atomic_load_explicit(&e->state, memory_order_acquire) & SHUNT_END_WR_SHUT) ||
	       now >= c->defer_until;
}

/* Move @l's complete deferred circuits into its accept queue, as room allows. */
static void promote(struct listener *l, int64_t now)
{
	struct shunt_list *pos, *tmp;

	shunt_list_for_each_safe(pos, tmp, &l->deferq) {
		struct circuit *c = shunt_container_of(pos, struct circuit, queue_node);

		/* A full accept queue drops the completing segment: the client sends it again. */
		if (l->queued >= l->max_queued)
			return;
		if (!deferred_done(c, now))
			continue;
		shuntd_circuit_unqueue(c);
		to_acceptq(l, c);
	}
}

void shuntd_listener_deferred_closed(struct shuntd *d, struct circuit *c)
{
	struct listener *l = c->listener;
	uint32_t st = atomic_load(&c->hdr->end[SHUNT_END_CONNECTOR].state);

	/* Its FIN completes the connection; a reset ends the request unseen. */
	if ((st & SHUNT_END_WR_SHUT) && !(st & SHUNT_END_RESET) && l->queued < l->max_queued) {
		shuntd_circuit_unqueue(c);
		to_acceptq(l, c);
		return;
	}
	if (!(st & SHUNT_END_WR_SHUT) || (st & SHUNT_END_RESET)) {
		shuntd_circuit_unqueue(c);
		shuntd_circuit_end_done(d, c, SHUNT_END_ACCEPTOR, false);
	}
}

/* How often deferred circuits are looked at: a client's first byte waits at most this. */
enum { DEFER_TICK_MS = 5 };

int shuntd_listener_next_tick(struct shuntd *d)
{
	(void)d;
	return any_deferred ? DEFER_TICK_MS : -1;
}

void shuntd_listener_tick(struct shuntd *d)
{
	static int64_t last;
	int64_t now;
	struct listener *l;
	uint64_t key;
	size_t it = 0;
	bool left = false;

	if (!any_deferred)
		return;
	now = shunt_sys_now_ms();
	if (now - last < DEFER_TICK_MS)
		return;
	last = now;
	while ((l = shunt_map_next(&d->listeners, &it, &key))) {
		if (!l->ndeferred)
			continue;
		promote(l, now);
		left |= l->ndeferred != 0;
	}
	any_deferred = left;
}
