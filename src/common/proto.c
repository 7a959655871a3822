// SPDX-License-Identifier: MIT
/* Framing of control messages over SOCK_SEQPACKET with SCM_RIGHTS. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/proto.h"
#include "common/sys.h"

void shunt_proto_init(void *msg, uint16_t type, size_t len, uint32_t seq)
{
	struct shunt_msg_hdr *h = msg;

	memset(msg, 0, len);
	h->type = type;
	h->version = SHUNT_PROTO_VERSION;
	h->len = (uint32_t)len;
	h->seq = seq;
}

size_t shunt_proto_size(uint16_t type)
{
	switch (type) {
	case SHUNT_MSG_HELLO: return sizeof(struct shunt_msg_hello);
	case SHUNT_MSG_HELLO | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_hello_reply);
	case SHUNT_MSG_LISTEN: return sizeof(struct shunt_msg_listen);
	case SHUNT_MSG_LISTEN | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_listen_reply);
	case SHUNT_MSG_UNLISTEN: return sizeof(struct shunt_msg_unlisten);
	case SHUNT_MSG_UNLISTEN | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_hdr);
	case SHUNT_MSG_CONNECT: return sizeof(struct shunt_msg_connect);
	case SHUNT_MSG_CONNECT | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_circuit);
	case SHUNT_MSG_ACCEPT: return sizeof(struct shunt_msg_accept);
	case SHUNT_MSG_ACCEPT | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_circuit);
	case SHUNT_MSG_CLOSE: return sizeof(struct shunt_msg_close);
	case SHUNT_MSG_CLOSE | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_hdr);
	case SHUNT_MSG_LINK: return sizeof(struct shunt_msg_link);
	case SHUNT_MSG_LINK | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_link_reply);
	case SHUNT_MSG_LINK_NEXT: return sizeof(struct shunt_msg_link);
	case SHUNT_MSG_LINK_NEXT | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_link_reply);
	case SHUNT_MSG_FORK: return sizeof(struct shunt_msg_fork);
	case SHUNT_MSG_FORK | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_fork_reply);
	case SHUNT_MSG_FORK_DONE: return sizeof(struct shunt_msg_fork_done);
	case SHUNT_MSG_DOWNGRADE: return sizeof(struct shunt_msg_downgrade);
	case SHUNT_MSG_DOWNGRADE | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_hdr);
	case SHUNT_MSG_UNREPAIR: return sizeof(struct shunt_msg_unrepair);
	case SHUNT_MSG_UNREPAIR | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_hdr);
	case SHUNT_MSG_WITHDRAW: return sizeof(struct shunt_msg_withdraw);
	case SHUNT_MSG_EXEC: return sizeof(struct shunt_msg_exec);
	case SHUNT_MSG_EXEC | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_exec_reply);
	case SHUNT_MSG_EXEC_KEEP: return sizeof(struct shunt_msg_exec_keep);
	case SHUNT_MSG_EXEC_KEEP | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_hdr);
	case SHUNT_MSG_EXEC_DONE: return sizeof(struct shunt_msg_exec_done);
	case SHUNT_MSG_EXEC_NEXT: return sizeof(struct shunt_msg_exec_next);
	case SHUNT_MSG_EXEC_NEXT | SHUNT_MSG_REPLY: return sizeof(struct shunt_msg_exec_end);
	case SHUNT_MSG_STATUS: return sizeof(struct shunt_msg_status);
	case SHUNT_MSG_STATUS_SESSION: return sizeof(struct shunt_msg_status_session);
	case SHUNT_MSG_STATUS_LISTENER: return sizeof(struct shunt_msg_status_listener);
	case SHUNT_MSG_STATUS_CONN: return sizeof(struct shunt_msg_status_conn);
	case SHUNT_MSG_STATUS_END: return sizeof(struct shunt_msg_status_end);
	case SHUNT_MSG_STATUS_POLICY: return sizeof(struct shunt_msg_status_policy);
	default: return 0;
	}
}

int shunt_proto_check(const void *buf, size_t len)
{
	struct shunt_msg_hdr h;
	size_t want;

	if (len < sizeof(h) || len > SHUNT_MSG_MAX)
		return -EPROTO;
	memcpy(&h, buf, sizeof(h));
	if (h.version != SHUNT_PROTO_VERSION || h.len != len)
		return -EPROTO;
	want = shunt_proto_size(h.type);
	if (!want)
		return -EPROTO;
	/* Replies other than SHUNT_OK are bare headers, but one that says why. */
	if (h.type == (SHUNT_MSG_CONNECT | SHUNT_MSG_REPLY) && h.status == SHUNT_KERNEL_POLICY)
		want = sizeof(struct shunt_msg_connect_kernel);
	else if ((h.type == (SHUNT_MSG_CONNECT | SHUNT_MSG_REPLY) ||
		  h.type == (SHUNT_MSG_ACCEPT | SHUNT_MSG_REPLY)) && h.status == SHUNT_USE_CHANNEL)
		want = sizeof(struct shunt_msg_chan);
	else if ((h.type & SHUNT_MSG_REPLY) && h.status != SHUNT_OK)
		want = sizeof(h);
	else if (!(h.type & SHUNT_MSG_REPLY) && h.status != 0)
		return -EPROTO;
	return len == want ? 0 : -EPROTO;
}

void shunt_proto_close_fds(const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			shunt_syscall(SYS_close, fds[i]);
}

int shunt_proto_send(int sock, const void *msg, const int *fds, unsigned nfds)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * SHUNT_MSG_MAX_FDS)];
		struct cmsghdr align;
	} ctl;
	const struct shunt_msg_hdr *h = msg;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = h->len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	long r;

	if (nfds > SHUNT_MSG_MAX_FDS)
		return -EINVAL;
	if (nfds) {
		struct cmsghdr *c;

		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		r = shunt_sys_ret(shunt_syscall(SYS_sendmsg, sock, &mh, MSG_NOSIGNAL));
	while (r == -EINTR);
	if (r < 0)
		return (int)r;
	return (size_t)r == h->len ? 0 : -EPROTO;
}

/* Receive with @truncated NULL: MSG_CTRUNC is -EPROTO, as any other damage. */
static ssize_t recv_msg(int sock, void *buf, int *fds, unsigned *nfds, int flags, bool *truncated)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * (SHUNT_MSG_MAX_FDS + 1))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = SHUNT_MSG_MAX };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf) };
	unsigned n = 0;
	long r;

	do
		r = shunt_sys_ret(shunt_syscall(SYS_recvmsg, sock, &mh, MSG_CMSG_CLOEXEC | flags));
	while (r == -EINTR && !(flags & MSG_DONTWAIT));
	if (r < 0)
		return r;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		int tmp[SHUNT_MSG_MAX_FDS + 1];

		if (k > SHUNT_MSG_MAX_FDS + 1)
			k = SHUNT_MSG_MAX_FDS + 1;
		memcpy(tmp, CMSG_DATA(c), k * sizeof(int));
		for (size_t i = 0; i < k; i++) {
			if (n < SHUNT_MSG_MAX_FDS) {
				fds[n++] = tmp[i];
			} else {
				shunt_syscall(SYS_close, tmp[i]);
				r = -EPROTO;
			}
		}
	}
	if (truncated)
		*truncated = r >= 0 && (mh.msg_flags & MSG_CTRUNC);
	if ((mh.msg_flags & MSG_TRUNC) || ((mh.msg_flags & MSG_CTRUNC) && !truncated))
		r = -EPROTO;
	/*
	 * An empty record reads like the end of the stream, but the end of the
	 * stream carries no descriptors: one that does is a malformed message,
	 * and its descriptors must be closed like any other's (returning 0
	 * would hand them to a caller that is about to drop the session).
	 */
	if (r == 0 && n)
		r = -EPROTO;
	if (r < 0) {
		shunt_proto_close_fds(fds, n);
		n = 0;
	}
	*nfds = n;
	return r;
}

const char *shunt_fallback_name(unsigned why)
{
	static const char *const names[SHUNT_FALLBACK_REASONS] = {
		[SHUNT_FALLBACK_NO_LISTENER] = "no_listener",
		[SHUNT_FALLBACK_POLICY] = "policy",
		[SHUNT_FALLBACK_REFUSED] = "policy_refused",
		[SHUNT_FALLBACK_LIMIT_CONNECTIONS] = "limit_connections",
		[SHUNT_FALLBACK_LIMIT_MEMORY] = "limit_memory",
		[SHUNT_FALLBACK_RESOURCES] = "resources",
		[SHUNT_FALLBACK_SOCKET] = "unverified_socket",
	};

	return why < SHUNT_FALLBACK_REASONS ? names[why] : "?";
}

ssize_t shunt_proto_recv(int sock, void *buf, int *fds, unsigned *nfds, int flags)
{
	return recv_msg(sock, buf, fds, nfds, flags, NULL);
}

ssize_t shunt_proto_recv_reply(int sock, void *buf, int *fds, unsigned *nfds, bool *truncated)
{
	*truncated = false;
	return recv_msg(sock, buf, fds, nfds, 0, truncated);
}
