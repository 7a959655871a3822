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

static const struct shunt_request_kind requests[SHUNT_MSG_TYPE_MAX + 1] = {
#define ROW(type, request, reply, nfds, answer, handler) \
	[SHUNT_MSG_##type] = { request, reply, nfds, SHUNT_ANSWER_##answer },
	SHUNT_REQUESTS(ROW)
#undef ROW
};

static const size_t records[SHUNT_MSG_TYPE_MAX + 1] = {
#define ROW(type, size) [SHUNT_MSG_##type] = size,
	SHUNT_RECORDS(ROW)
#undef ROW
};

const struct shunt_request_kind *shunt_request_kind(uint16_t type)
{
	if (type > SHUNT_MSG_TYPE_MAX || !requests[type].size)
		return NULL;
	return &requests[type];
}

size_t shunt_proto_size(uint16_t type)
{
	const struct shunt_request_kind *k = shunt_request_kind(type & ~SHUNT_MSG_REPLY);

	if (k)
		return type & SHUNT_MSG_REPLY ? k->reply_size : k->size;
	if (type > SHUNT_MSG_TYPE_MAX)
		return 0;
	return records[type];
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
