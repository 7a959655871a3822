// SPDX-License-Identifier: MIT
/* The control client: this process's session with shuntd. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/log.h"
#include "common/proto.h"
#include "preload/control.h"
#include "preload/stats.h"
#include "preload/util.h"

/*
 * Lock order: ctl_lock is taken after a socket's lock and never before; no
 * other lock is taken while it is held.
 */
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sockaddr_un ctl_addr;	/* set once by init */
static int ctl_fd = -1;			/* under ctl_lock */
static uint32_t ctl_seq;		/* under ctl_lock */
static int64_t ctl_retry_at;		/* under ctl_lock: no reconnect before */
static bool ctl_warned;			/* under ctl_lock */

void shunt_ctl_init(void)
{
	const char *path = getenv("SHUNT_SOCKET");

	if (!path || !*path)
		path = "/run/shunt/shuntd.sock";
	ctl_addr.sun_family = AF_UNIX;
	if (strlen(path) < sizeof(ctl_addr.sun_path))
		strcpy(ctl_addr.sun_path, path);
}

void shunt_ctl_after_fork(void)
{
	/* Only this thread exists in the child; the lock may have been held. */
	pthread_mutex_init(&ctl_lock, NULL);
	if (ctl_fd >= 0)
		shunt_close_hidden(ctl_fd);
	ctl_fd = -1;
	ctl_retry_at = 0;
}

static void drop_session(const char *why, int err)
{
	if (!ctl_warned)
		shunt_warn("lost shuntd at %s (%s: %s); new sockets use the kernel",
			   ctl_addr.sun_path, why, strerror(err));
	ctl_warned = true;
	shunt_close_hidden(ctl_fd);
	ctl_fd = -1;
	ctl_retry_at = shunt_now_ns() + 1000000000;
}

static int exchange_locked(void *req, const int *fds, unsigned nfds, void *reply,
			   int *rfds, unsigned *nrfds);

static int open_session_locked(void)
{
	struct shunt_msg_hello hello;
	_Alignas(8) char reply[SHUNT_MSG_MAX];
	unsigned n = 0;
	int fd, r;

	if (ctl_fd >= 0)
		return 0;
	if (!ctl_addr.sun_path[0] || shunt_now_ns() < ctl_retry_at)
		return -ENOTCONN;
	fd = (int)syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (syscall(SYS_connect, fd, &ctl_addr, sizeof(ctl_addr)) < 0) {
		r = -errno;
		shunt_close_internal(fd);
		if (!ctl_warned)
			shunt_info("shuntd not reachable at %s (%s); using the kernel",
				   ctl_addr.sun_path, strerror(-r));
		ctl_warned = true;
		ctl_retry_at = shunt_now_ns() + 1000000000;
		shunt_stats.fallback_nodaemon++;
		return -ENOTCONN;
	}
	ctl_fd = shunt_fd_hide(fd);
	shunt_proto_init(&hello, SHUNT_MSG_HELLO, sizeof(hello), 0);
	r = exchange_locked(&hello, NULL, 0, reply, NULL, &n);
	if (r < 0)
		return r;
	ctl_warned = false;
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

void shunt_ctl_unlisten(uint64_t listener)
{
	struct shunt_msg_unlisten m;

	shunt_proto_init(&m, SHUNT_MSG_UNLISTEN, sizeof(m), 0);
	m.listener = listener;
	notify(&m);
}

void shunt_grant_discard(struct shunt_grant *g)
{
	int fds[5] = { g->kernel_half, g->memfd, g->link_memfd, g->link_efd_mine,
		       g->link_efd_peer };

	shunt_proto_close_fds(fds, 5);
	g->kernel_half = g->memfd = g->link_memfd = g->link_efd_mine = g->link_efd_peer = -1;
}

/* Unpack a circuit reply and its descriptors into @g. */
static int take_grant(int status, const void *reply, int *rfds, unsigned n,
		      struct shunt_grant *g)
{
	unsigned want, i = 0;

	g->kernel_half = g->memfd = g->link_memfd = g->link_efd_mine = g->link_efd_peer = -1;
	if (status != SHUNT_OK) {
		shunt_proto_close_fds(rfds, n);
		return status;
	}
	memcpy(&g->msg, reply, sizeof(g->msg));
	want = 1 + (g->msg.flags & SHUNT_CIRCUIT_NEW_LINK ? 3 : 0) +
	       (g->msg.flags & SHUNT_CIRCUIT_KERNEL_HALF ? 1 : 0);
	if (n != want || g->msg.end > 1 || g->msg.link_side > 1) {
		shunt_proto_close_fds(rfds, n);
		return -EPROTO;
	}
	if (g->msg.flags & SHUNT_CIRCUIT_KERNEL_HALF)
		g->kernel_half = rfds[i++];
	g->memfd = rfds[i++];
	if (g->msg.flags & SHUNT_CIRCUIT_NEW_LINK) {
		g->link_memfd = rfds[i++];
		g->link_efd_mine = rfds[i++];
		g->link_efd_peer = rfds[i++];
	}
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

	shunt_proto_init(&m, SHUNT_MSG_CONNECT, sizeof(m), 0);
	m.dst = *dst;
	m.flags = flags;
	return request_circuit(&m, fd, g);
}

int shunt_ctl_accept(int fd, uint64_t listener, struct shunt_grant *g)
{
	struct shunt_msg_accept m;

	shunt_proto_init(&m, SHUNT_MSG_ACCEPT, sizeof(m), 0);
	m.listener = listener;
	return request_circuit(&m, fd, g);
}

void shunt_ctl_close(uint64_t circuit, unsigned end)
{
	struct shunt_msg_close m;

	shunt_proto_init(&m, SHUNT_MSG_CLOSE, sizeof(m), 0);
	m.circuit = circuit;
	m.end = end;
	notify(&m);
}
