// SPDX-License-Identifier: MIT
/* The control client: this process's session with shuntd. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/log.h"
#include "common/proto.h"
#include "common/sys.h"
#include "preload/control.h"
#include "preload/plink.h"
#include "preload/relisten.h"
#include "preload/stats.h"
#include "preload/util.h"

/*
 * Lock order: ctl_lock is taken after a socket's lock and the notice lock,
 * never before; only the links' lock (to install the daemon link) is taken
 * while it is held.
 */
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sockaddr_un ctl_addr;	/* set once by init */
static int ctl_fd = -1;			/* under ctl_lock */
static uint32_t ctl_seq;		/* under ctl_lock */
static int64_t ctl_retry_at;		/* under ctl_lock: no reconnect before */
static bool ctl_warned;			/* under ctl_lock */
static bool ctl_had_session;		/* under ctl_lock: a session was opened before */
static bool ctl_claimed;		/* under ctl_lock: the last HELLO claimed a ticket */
static _Atomic uint64_t session_id;	/* written under ctl_lock; 0: no session */
static uint64_t claim_ticket, claim_secret;	/* under ctl_lock: a fork child's first HELLO */
static bool claim_exec;			/* under ctl_lock: a new image's first HELLO */
static int exec_claimed = -ENOENT;	/* under ctl_lock: what that HELLO's claim said */

void shunt_ctl_init(void)
{
	const char *path = getenv("SHUNT_SOCKET");

	if (!path || !*path)
		path = "/run/shunt/shuntd.sock";
	ctl_addr.sun_family = AF_UNIX;
	if (strlen(path) < sizeof(ctl_addr.sun_path))
		strcpy(ctl_addr.sun_path, path);
}

void shunt_ctl_fork_prepare(void)
{
	pthread_mutex_lock(&ctl_lock);
}

void shunt_ctl_fork_parent(void)
{
	pthread_mutex_unlock(&ctl_lock);
}

void shunt_ctl_after_fork(void)
{
	/* Only this thread exists in the child; the lock may have been held. */
	pthread_mutex_init(&ctl_lock, NULL);
	if (ctl_fd >= 0)
		shunt_close_hidden(ctl_fd);
	ctl_fd = -1;
	ctl_retry_at = 0;
	claim_ticket = 0;
	atomic_store(&session_id, 0);
}

/*
 * The session is over (shuntd died, or broke the protocol): what it held at
 * shuntd is released there, if shuntd still lives. Connections keep their
 * circuits; new ones use the kernel until a session can be opened again.
 */
static void drop_session(const char *why, int err)
{
	if (!ctl_warned)
		shunt_warn("lost shuntd at %s (%s: %s); new sockets use the kernel",
			   ctl_addr.sun_path, why, strerror(err));
	ctl_warned = true;
	shunt_close_hidden(ctl_fd);
	ctl_fd = -1;
	atomic_store(&session_id, 0);
	ctl_retry_at = shunt_now_ns() + 1000000000;
	shunt_relisten_lost();
}

static int exchange_locked(void *req, const int *fds, unsigned nfds, void *reply,
			   int *rfds, unsigned *nrfds);

static int open_session_locked(void)
{
	struct shunt_msg_hello hello;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	int rfds[SHUNT_MSG_MAX_FDS];
	unsigned n = 0;
	int fd, r;

	if (ctl_fd >= 0)
		return 0;
	if (!ctl_addr.sun_path[0] || shunt_now_ns() < ctl_retry_at)
		return -ENOTCONN;
	fd = (int)shunt_syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (shunt_syscall(SYS_connect, fd, &ctl_addr, sizeof(ctl_addr)) < 0) {
		r = -errno;
		shunt_close_internal(fd);
		if (!ctl_warned)
			shunt_info("shuntd not reachable at %s (%s); using the kernel",
				   ctl_addr.sun_path, strerror(-r));
		ctl_warned = true;
		ctl_retry_at = shunt_now_ns() + 1000000000;
		return -ENOTCONN;
	}
	ctl_fd = shunt_fd_hide(fd);
	shunt_proto_init(&hello, SHUNT_MSG_HELLO, sizeof(hello), 0);
	if (claim_ticket) {
		hello.flags = SHUNT_HELLO_CLAIM;
		hello.ticket = claim_ticket;
		hello.secret = claim_secret;
		claim_ticket = 0;
	} else if (claim_exec) {
		hello.flags = SHUNT_HELLO_EXEC;
		claim_exec = false;
	}
	r = exchange_locked(&hello, NULL, 0, reply, rfds, &n);
	if (r != SHUNT_OK || n != 2) {
		shunt_proto_close_fds(rfds, n);
		drop_session("hello", r < 0 ? -r : EPROTO);
		return -ENOTCONN;
	}
	const struct shunt_msg_hello_reply *hr = (const void *)reply;
	bool claimed = (hello.flags & SHUNT_HELLO_CLAIM) && !hr->claim;

	ctl_claimed = claimed;
	if (hello.flags & SHUNT_HELLO_EXEC)
		exec_claimed = hr->claim;

	if ((hello.flags & SHUNT_HELLO_CLAIM) && hr->claim)
		shunt_warn("shuntd refused this fork child its parent's sockets (%s); "
			   "they may end when the parent closes them", strerror(-hr->claim));
	if (shunt_plink_install_daemon(hr->link, rfds) < 0) {
		drop_session("daemon link", EPROTO);
		return -ENOTCONN;
	}
	atomic_store(&session_id, hr->session);
	if (ctl_warned && ctl_had_session)
		shunt_info("shuntd at %s answers again", ctl_addr.sun_path);
	ctl_warned = false;
	/*
	 * Not the first session, and not a fork child's claim of what its
	 * parent holds: this daemon knows none of our listeners (a restarted
	 * shuntd, or one that dropped us). They are registered again.
	 */
	if (ctl_had_session && !claimed)
		shunt_relisten_renew();
	ctl_had_session = true;
	return 0;
}

/*
 * Send @req and wait for its reply (into @reply, SHUNT_MSG_MAX bytes) with
 * descriptors into @rfds. The reply must answer this request: same type and
 * sequence number, and a well-formed message. Returns the reply's status
 * (>= 0) or -errno; on a transport error the session is dropped.
 */
static int exchange_locked(void *req, const int *fds, unsigned nfds, void *reply,
			   int *rfds, unsigned *nrfds)
{
	struct shunt_msg_hdr *h = req;
	int tmp[SHUNT_MSG_MAX_FDS];
	unsigned n = 0;
	ssize_t len;
	int r;

	h->seq = ++ctl_seq;
	r = shunt_proto_send(ctl_fd, req, fds, nfds);
	if (r < 0) {
		drop_session("send", -r);
		return -ENOTCONN;
	}
	len = shunt_proto_recv(ctl_fd, reply, rfds ? rfds : tmp, &n, 0);
	if (len <= 0) {
		drop_session("receive", len ? (int)-len : ECONNRESET);
		return -ENOTCONN;
	}
	const struct shunt_msg_hdr *rh = reply;

	if (shunt_proto_check(reply, (size_t)len) < 0 || rh->type != (h->type | SHUNT_MSG_REPLY) ||
	    rh->seq != h->seq) {
		shunt_proto_close_fds(rfds ? rfds : tmp, n);
		drop_session("reply", EPROTO);
		return -ENOTCONN;
	}
	if (!rfds)
		shunt_proto_close_fds(tmp, n);
	*nrfds = n;
	return rh->status;
}

static int request(void *req, const int *fds, unsigned nfds, void *reply, int *rfds,
		   unsigned *nrfds)
{
	int r;

	pthread_mutex_lock(&ctl_lock);
	r = open_session_locked();
	if (r == 0)
		r = exchange_locked(req, fds, nfds, reply, rfds, nrfds);
	pthread_mutex_unlock(&ctl_lock);
	return r;
}

uint64_t shunt_ctl_session(void)
{
	uint64_t id = atomic_load_explicit(&session_id, memory_order_acquire);

	if (id)
		return id;
	pthread_mutex_lock(&ctl_lock);
	open_session_locked();
	pthread_mutex_unlock(&ctl_lock);
	return atomic_load_explicit(&session_id, memory_order_acquire);
}

bool shunt_ctl_has_session(void)
{
	return atomic_load_explicit(&session_id, memory_order_acquire) != 0;
}

int shunt_ctl_claim(uint64_t ticket, uint64_t secret)
{
	int r;

	pthread_mutex_lock(&ctl_lock);
	claim_ticket = ticket;
	claim_secret = secret;
	r = open_session_locked();
	if (r == 0 && !ctl_claimed)
		r = -EACCES;
	claim_ticket = 0;
	pthread_mutex_unlock(&ctl_lock);
	return r;
}

/* Send a message that has no reply. */
static void notify(void *msg)
{
	pthread_mutex_lock(&ctl_lock);
	if (ctl_fd >= 0) {
		((struct shunt_msg_hdr *)msg)->seq = ++ctl_seq;
		int r = shunt_proto_send(ctl_fd, msg, NULL, 0);

		if (r < 0)
			drop_session("send", -r);
	}
	pthread_mutex_unlock(&ctl_lock);
}

int shunt_ctl_listen(int fd, uint64_t refresh, uint64_t *listener, int *doorbell)
{
	struct shunt_msg_listen m;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	int rfds[SHUNT_MSG_MAX_FDS];
	unsigned n = 0;
	int r;

	shunt_proto_init(&m, SHUNT_MSG_LISTEN, sizeof(m), 0);
	m.listener = refresh;
	r = request(&m, &fd, 1, reply, rfds, &n);
	if (r != SHUNT_OK) {
		shunt_proto_close_fds(rfds, n);
		return r > 0 ? -EPROTO : r;
	}
	*listener = ((struct shunt_msg_listen_reply *)reply)->listener;
	if (refresh) {
		shunt_proto_close_fds(rfds, n);
		return 0;
	}
	if (n != 1) {
		shunt_proto_close_fds(rfds, n);
		return -EPROTO;
	}
	*doorbell = shunt_fd_hide(rfds[0]);
	return 0;
}

void shunt_ctl_unlisten(uint64_t listener, bool shutdown)
{
	struct shunt_msg_unlisten m;

	shunt_proto_init(&m, SHUNT_MSG_UNLISTEN, sizeof(m), 0);
	m.listener = listener;
	m.flags = shutdown ? SHUNT_UNLISTEN_SHUTDOWN : 0;
	notify(&m);
}

void shunt_grant_discard(struct shunt_grant *g)
{
	int fds[2] = { g->kernel_half, g->memfd };

	shunt_proto_close_fds(fds, 2);
	g->kernel_half = g->memfd = -1;
}

/* Unpack a circuit reply and its descriptors into @g. */
static int take_grant(int status, const void *reply, int *rfds, unsigned n,
		      struct shunt_grant *g)
{
	unsigned want, i = 0;

	g->kernel_half = g->memfd = -1;
	if (status != SHUNT_OK) {
		shunt_proto_close_fds(rfds, n);
		return status;
	}
	memcpy(&g->msg, reply, sizeof(g->msg));
	want = 1 + (g->msg.flags & SHUNT_CIRCUIT_KERNEL_HALF ? 1 : 0);
	if (n != want || g->msg.end > 1) {
		shunt_proto_close_fds(rfds, n);
		return -EPROTO;
	}
	if (g->msg.flags & SHUNT_CIRCUIT_KERNEL_HALF)
		g->kernel_half = rfds[i++];
	g->memfd = rfds[i++];
	return 0;
}

/* Send @req with socket @fd; a circuit reply is unpacked into @g. */
static int request_circuit(void *req, int fd, struct shunt_grant *g)
{
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	int rfds[SHUNT_MSG_MAX_FDS];
	unsigned n = 0;
	int r = request(req, &fd, 1, reply, rfds, &n);

	return take_grant(r, reply, rfds, n, g);
}

int shunt_ctl_connect(int fd, const struct shunt_wire_addr *dst, uint32_t flags,
		      struct shunt_grant *g)
{
	struct shunt_msg_connect m;
	int r;

	shunt_proto_init(&m, SHUNT_MSG_CONNECT, sizeof(m), 0);
	m.dst = *dst;
	m.flags = flags;
	r = request_circuit(&m, fd, g);
	if (r == -ENOTCONN)
		shunt_stats.fallback_nodaemon++;
	return r;
}

int shunt_ctl_accept(int fd, uint64_t listener, struct shunt_grant *g)
{
	struct shunt_msg_accept m;
	int r;

	shunt_proto_init(&m, SHUNT_MSG_ACCEPT, sizeof(m), 0);
	m.listener = listener;
	r = request_circuit(&m, fd, g);
	/*
	 * shuntd is gone, and what it had queued went with it: nothing to
	 * take, the kernel's queue is still there (and the stale doorbell is
	 * drained by relisten.c before the caller waits again).
	 */
	return r == -ENOTCONN ? -EAGAIN : r;
}

int shunt_ctl_close(uint64_t circuit, unsigned end, bool shared)
{
	struct shunt_msg_close m;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	unsigned n = 0;

	shunt_proto_init(&m, SHUNT_MSG_CLOSE, sizeof(m), 0);
	m.circuit = circuit;
	m.end = end;
	if (!shared) {
		notify(&m);
		return SHUNT_OK;
	}
	m.flags = SHUNT_CLOSE_SHARED;
	return request(&m, NULL, 0, reply, NULL, &n);
}

/* A link reply: SHUNT_OK with three descriptors, or one that says the link is gone. */
static int take_link(int status, const void *reply, int *rfds, unsigned n,
		     struct shunt_msg_link_reply *r, int fds[3])
{
	if (status != SHUNT_OK) {
		shunt_proto_close_fds(rfds, n);
		return status;
	}
	memcpy(r, reply, sizeof(*r));
	if (n != ((r->flags & SHUNT_LINK_GONE) ? 0u : 3u) || r->side > 1) {
		shunt_proto_close_fds(rfds, n);
		return -EPROTO;
	}
	memcpy(fds, rfds, n * sizeof(int));
	return SHUNT_OK;
}

int shunt_ctl_link(uint64_t partner, struct shunt_msg_link_reply *r, int fds[3])
{
	struct shunt_msg_link m;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	int rfds[SHUNT_MSG_MAX_FDS];
	unsigned n = 0;
	int st;

	shunt_proto_init(&m, SHUNT_MSG_LINK, sizeof(m), 0);
	m.partner = partner;
	st = request(&m, NULL, 0, reply, rfds, &n);
	st = take_link(st, reply, rfds, n, r, fds);
	if (st == SHUNT_OK && (r->flags & SHUNT_LINK_GONE))
		return -EPROTO;
	return st > 0 ? -EPROTO : st;
}

int shunt_ctl_link_next(struct shunt_msg_link_reply *r, int fds[3])
{
	struct shunt_msg_link m;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	int rfds[SHUNT_MSG_MAX_FDS];
	unsigned n = 0;

	int st;

	shunt_proto_init(&m, SHUNT_MSG_LINK_NEXT, sizeof(m), 0);
	st = request(&m, NULL, 0, reply, rfds, &n);
	return take_link(st, reply, rfds, n, r, fds);
}

int shunt_ctl_fork(uint64_t *ticket, uint64_t *secret)
{
	struct shunt_msg_fork m;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	unsigned n = 0;
	int r;

	shunt_proto_init(&m, SHUNT_MSG_FORK, sizeof(m), 0);
	r = request(&m, NULL, 0, reply, NULL, &n);
	if (r != SHUNT_OK)
		return r > 0 ? -EPROTO : r;
	*ticket = ((struct shunt_msg_fork_reply *)reply)->ticket;
	*secret = ((struct shunt_msg_fork_reply *)reply)->secret;
	return 0;
}

void shunt_ctl_fork_done(uint64_t ticket, pid_t pid)
{
	struct shunt_msg_fork_done m;

	shunt_proto_init(&m, SHUNT_MSG_FORK_DONE, sizeof(m), 0);
	m.ticket = ticket;
	m.pid = pid > 0 ? pid : 0;
	notify(&m);
}

int shunt_ctl_downgrade(uint64_t circuit, int fd)
{
	struct shunt_msg_downgrade m;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	unsigned n = 0;
	int r;

	shunt_proto_init(&m, SHUNT_MSG_DOWNGRADE, sizeof(m), 0);
	m.circuit = circuit;
	r = request(&m, &fd, 1, reply, NULL, &n);
	return r > 0 ? -EPROTO : r;
}

const char *shunt_ctl_path(void)
{
	return ctl_addr.sun_path;
}

int shunt_ctl_exec(uint32_t kind, uint64_t *ticket)
{
	struct shunt_msg_exec m;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	unsigned n = 0;
	int r;

	shunt_proto_init(&m, SHUNT_MSG_EXEC, sizeof(m), 0);
	m.kind = kind;
	r = request(&m, NULL, 0, reply, NULL, &n);
	if (r != SHUNT_OK)
		return r > 0 ? -EPROTO : r;
	*ticket = ((struct shunt_msg_exec_reply *)reply)->ticket;
	return 0;
}

int shunt_ctl_exec_keep(uint64_t ticket, int fd, uint64_t circuit, unsigned end,
			uint64_t listener, uint32_t flags)
{
	struct shunt_msg_exec_keep m;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	unsigned n = 0;
	int r;

	shunt_proto_init(&m, SHUNT_MSG_EXEC_KEEP, sizeof(m), 0);
	m.ticket = ticket;
	m.circuit = circuit;
	m.end = end;
	m.listener = listener;
	m.flags = flags;
	r = request(&m, &fd, 1, reply, NULL, &n);
	return r > 0 ? -EPROTO : r;
}

void shunt_ctl_exec_done(uint64_t ticket, pid_t pid)
{
	struct shunt_msg_exec_done m;

	shunt_proto_init(&m, SHUNT_MSG_EXEC_DONE, sizeof(m), 0);
	m.ticket = ticket;
	m.pid = pid > 0 ? pid : 0;
	notify(&m);
}

int shunt_ctl_exec_claim(void)
{
	int r;

	pthread_mutex_lock(&ctl_lock);
	/* Only a first HELLO can claim: a session already open holds nothing of the ticket. */
	if (ctl_fd >= 0) {
		pthread_mutex_unlock(&ctl_lock);
		return -EBUSY;
	}
	claim_exec = true;
	exec_claimed = -ENOENT;
	r = open_session_locked();
	claim_exec = false;
	if (r == 0)
		r = exec_claimed;
	pthread_mutex_unlock(&ctl_lock);
	return r;
}

int shunt_ctl_exec_next(struct shunt_grant *g, uint64_t *inode, uint32_t *flags)
{
	struct shunt_msg_exec_next m;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	int rfds[SHUNT_MSG_MAX_FDS];
	unsigned n = 0;
	int r;

	shunt_proto_init(&m, SHUNT_MSG_EXEC_NEXT, sizeof(m), 0);
	r = request(&m, NULL, 0, reply, rfds, &n);
	g->kernel_half = g->memfd = -1;
	if (r != SHUNT_OK) {
		shunt_proto_close_fds(rfds, n);
		return r == SHUNT_NONE ? SHUNT_NONE : r > 0 ? -EPROTO : r;
	}
	const struct shunt_msg_exec_end *e = (const void *)reply;

	if (n != 1 || e->end > 1) {
		shunt_proto_close_fds(rfds, n);
		return -EPROTO;
	}
	memset(&g->msg, 0, sizeof(g->msg));
	g->msg.circuit = e->circuit;
	g->msg.ring_size = e->ring_size;
	g->msg.end = e->end;
	g->msg.local = e->local;
	g->msg.peer = e->peer;
	g->memfd = rfds[0];
	*inode = e->inode;
	*flags = e->flags;
	return SHUNT_OK;
}
