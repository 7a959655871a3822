// SPDX-License-Identifier: MIT
/*
 * Ancillary data of circuit sockets: sendmsg's control data checked as
 * ____sys_sendmsg and sock_cmsg_send check it (Linux 6.15 and later), and
 * recvmsg's control messages written as put_cmsg writes them.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <linux/net_tstamp.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/cmsg.h"
#include "preload/libc.h"
#include "preload/util.h"

/* SOL_SOCKET control messages newer than some C libraries' headers. */
enum {
	CM_SO_PRIORITY = 12,
	CM_SO_MARK = 36,
	CM_SO_TIMESTAMPING_OLD = 37,
	CM_SCM_TXTIME = 61,
	CM_SO_TIMESTAMPING_NEW = 65,
	CM_SCM_TS_OPT_ID = 78,
	CM_SCM_DEVMEM_DMABUF = 79,
	/* SOF_TIMESTAMPING_TX_COMPLETION, Linux 6.15 */
	TS_TX_COMPLETION = 1 << 18,
	TS_TX_RECORD = SOF_TIMESTAMPING_TX_HARDWARE | SOF_TIMESTAMPING_TX_SOFTWARE |
		       SOF_TIMESTAMPING_TX_SCHED | SOF_TIMESTAMPING_TX_ACK | TS_TX_COMPLETION,
	/* ____sys_sendmsg's buffer on its stack: larger ones are allocated. */
	CTL_ON_STACK = sizeof(struct cmsghdr) + 20,
};

/* The kernel's CMSG_ALIGN, CMSG_LEN and CMSG_SPACE (the C library's agree on Linux). */
static size_t cm_align(size_t len)
{
	return (len + sizeof(long) - 1) & ~(sizeof(long) - 1);
}

static size_t cm_len(size_t len)
{
	return cm_align(sizeof(struct cmsghdr)) + len;
}

static size_t cm_space(size_t len)
{
	return cm_align(sizeof(struct cmsghdr)) + cm_align(len);
}

/* net.core.optmem_max of our network namespace, or INT_MAX if unreadable. */
static long optmem_max(void)
{
	char buf[32];
	long fd = shunt_syscall(SYS_openat, AT_FDCWD, "/proc/sys/net/core/optmem_max",
				O_RDONLY | O_CLOEXEC);
	long n, v = 0;

	if (fd < 0)
		return INT_MAX;
	n = shunt_syscall(SYS_read, (int)fd, buf, sizeof(buf) - 1);
	shunt_close_internal((int)fd);
	if (n <= 0)
		return INT_MAX;
	for (long i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++)
		v = v * 10 + (buf[i] - '0');
	return v > 0 ? v : INT_MAX;
}

int shunt_cmsg_send_buffer(const struct msghdr *msg)
{
	size_t len = msg->msg_controllen;

	if (!len)
		return 0;
	if (len > INT_MAX)
		return -ENOBUFS;
	/* sock_kmalloc: within optmem_max, with the socket's other uses (none here) */
	if (len > CTL_ON_STACK && (long)len >= optmem_max())
		return -ENOBUFS;
	if (!msg->msg_control)
		return -EFAULT;
	return 0;
}

/* Whether the process may do what needs CAP_NET_RAW or CAP_NET_ADMIN on @fd's network. */
static bool net_capable(int fd)
{
	uint32_t mark = 0;
	socklen_t len = sizeof(mark);

	/* The kernel's own check, in the socket's namespace: setting the mark it already has. */
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_MARK, &mark, &len) < 0)
		return false;
	return SHUNT_LIBC(setsockopt)(fd, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) == 0;
}

/* Whether SO_TXTIME was set on @fd (its SOCK_TXTIME flag), as far as it reads back. */
static bool txtime_on(int fd)
{
	struct { int32_t clockid; uint32_t flags; } t = { 0, 0 };
	socklen_t len = sizeof(t);

	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_TXTIME, &t, &len) < 0)
		return false;
	return t.clockid || t.flags;
}

static uint32_t data_u32(const struct cmsghdr *cm)
{
	uint32_t v;

	memcpy(&v, CMSG_DATA(cm), sizeof(v));
	return v;
}

/* __sock_cmsg_send for one SOL_SOCKET message of a TCP socket. */
static int check_one(int fd, const struct cmsghdr *cm)
{
	uint32_t v;

	switch (cm->cmsg_type) {
	case CM_SO_MARK:
		if (!net_capable(fd))
			return -EPERM;
		return cm->cmsg_len == cm_len(sizeof(uint32_t)) ? 0 : -EINVAL;
	case CM_SO_TIMESTAMPING_OLD:
	case CM_SO_TIMESTAMPING_NEW:
		if (cm->cmsg_len != cm_len(sizeof(uint32_t)))
			return -EINVAL;
		return data_u32(cm) & ~(uint32_t)TS_TX_RECORD ? -EINVAL : 0;
	case CM_SCM_TXTIME:
		if (!txtime_on(fd))
			return -EINVAL;
		return cm->cmsg_len == cm_len(sizeof(uint64_t)) ? 0 : -EINVAL;
	case CM_SCM_TS_OPT_ID:
		return -EINVAL;		/* never for TCP */
	case SCM_RIGHTS:
	case SCM_CREDENTIALS:
		return 0;		/* semantically SOL_UNIX: ignored */
	case CM_SO_PRIORITY:
		if (cm->cmsg_len != cm_len(sizeof(uint32_t)))
			return -EINVAL;
		v = data_u32(cm);
		return (int32_t)v >= 0 && v <= 6 ? 0 : net_capable(fd) ? 0 : -EPERM;
	case CM_SCM_DEVMEM_DMABUF:
		if (cm->cmsg_len != cm_len(sizeof(uint32_t)))
			return -EINVAL;
		/* A circuit has no device memory binding, as a socket without one. */
		return data_u32(cm) ? -EINVAL : 0;
	default:
		return -EINVAL;
	}
}

int shunt_cmsg_send_check(int fd, const struct msghdr *msg)
{
	const char *ctl = msg->msg_control;
	size_t size = msg->msg_controllen, off = 0;

	/* for_each_cmsghdr, with the kernel's CMSG_OK and __cmsg_nxthdr */
	if (!ctl || size < sizeof(struct cmsghdr))
		return 0;
	for (;;) {
		struct cmsghdr cm;
		int r;

		memcpy(&cm, ctl + off, sizeof(cm));
		if (cm.cmsg_len < sizeof(struct cmsghdr) || cm.cmsg_len > size - off)
			return -EINVAL;
		if (cm.cmsg_level == SOL_SOCKET) {
			r = check_one(fd, (const struct cmsghdr *)(ctl + off));
			if (r)
				return r;
		}
		off += cm_align(cm.cmsg_len);
		if (off + sizeof(struct cmsghdr) > size)
			return 0;
	}
}

void shunt_cmsg_put(struct msghdr *msg, size_t *used, int level, int type, const void *data,
		    size_t len)
{
	size_t room = msg->msg_controllen - *used, cmlen = cm_len(len);
	struct cmsghdr cm;
	char *at;

	if (!msg->msg_control || msg->msg_controllen < *used || room < sizeof(struct cmsghdr)) {
		msg->msg_flags |= MSG_CTRUNC;
		return;
	}
	if (room < cmlen) {
		msg->msg_flags |= MSG_CTRUNC;
		cmlen = room;
	}
	at = (char *)msg->msg_control + *used;
	cm.cmsg_len = cmlen;
	cm.cmsg_level = level;
	cm.cmsg_type = type;
	memcpy(at, &cm, sizeof(cm));
	memcpy(at + sizeof(cm), data, cmlen - sizeof(cm));
	*used += cm_space(len) < room ? cm_space(len) : room;
}
