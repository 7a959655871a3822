// SPDX-License-Identifier: MIT
// Ancillary data on TCP sockets: TCP_INQ's TCP_CM_INQ control message on
// recvmsg (and how a control buffer too small for it is truncated), and
// the SOL_SOCKET control messages sendmsg accepts or refuses (SO_PRIORITY,
// SO_MARK, SO_TIMESTAMPING, SCM_TXTIME, unknown types, bad lengths), with
// and without CAP_NET_RAW / CAP_NET_ADMIN.
// shunt-expect: shm_connect>=4 shm_accept>=4 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <linux/capability.h>
#include <linux/net_tstamp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// Newer than some C libraries' headers.
enum {
	X_SO_TIMESTAMPING_NEW = 65,
	X_SCM_TS_OPT_ID = 78,
	X_TS_TX_COMPLETION = 1 << 18,
};

static void show_cmsgs(struct msghdr *mh)
{
	printf("  msg_controllen = %zu, msg_flags = %#x\n", (size_t)mh->msg_controllen,
	       (unsigned)mh->msg_flags);
	if (!mh->msg_control)
		return;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
		int v = -1;

		if (cm->cmsg_len >= CMSG_LEN(sizeof(v)))
			memcpy(&v, CMSG_DATA(cm), sizeof(v));
		printf("  cmsg level %d type %d len %zu value %d\n", cm->cmsg_level,
		       cm->cmsg_type, (size_t)cm->cmsg_len, v);
	}
}

// recvmsg of up to @len bytes with @ctl_len bytes of control buffer (0: none).
static void recv_inq(const char *what, int s, size_t len, size_t ctl_len, int flags)
{
	union {
		char buf[256];
		struct cmsghdr align;
	} ctl;
	char data[64] = { 0 };
	struct iovec iov = { data, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	memset(ctl.buf, 0x55, sizeof(ctl.buf));
	if (ctl_len) {
		mh.msg_control = ctl.buf;
		mh.msg_controllen = ctl_len;
	}
	if (T_REPORT_DATA(what, recvmsg(s, &mh, flags), data) < 0)
		return;
	show_cmsgs(&mh);
	if (ctl_len >= sizeof(struct cmsghdr) && ctl_len < CMSG_LEN(sizeof(int))) {
		struct cmsghdr cm;

		memcpy(&cm, ctl.buf, sizeof(cm));
		printf("  truncated header: len %zu level %d type %d\n", (size_t)cm.cmsg_len,
		       cm.cmsg_level, cm.cmsg_type);
	}
}

static void inq(void)
{
	int c, s, one = 1, zero = 0, two = 2, v = -1;
	socklen_t len = sizeof(v);

	t_pair(AF_INET, &c, &s);
	T_REPORT("setsockopt(TCP_INQ, 1)", setsockopt(s, IPPROTO_TCP, TCP_INQ, &one, sizeof(one)));
	getsockopt(s, IPPROTO_TCP, TCP_INQ, &v, &len);
	printf("TCP_INQ reads back %d\n", v);
	t_send_all(c, "hello world", 11);
	t_wait_inq(s, 11);
	recv_inq("recvmsg 4 bytes", s, 4, 64, 0);
	recv_inq("recvmsg MSG_PEEK 2 bytes", s, 2, 64, MSG_PEEK);
	recv_inq("recvmsg, control buffer of one header", s, 2, sizeof(struct cmsghdr), 0);
	recv_inq("recvmsg, control buffer of 8 bytes", s, 1, 8, 0);
	recv_inq("recvmsg, no control buffer", s, 1, 0, 0);
	recv_inq("recvmsg, the rest", s, 64, 64, 0);
	recv_inq("recvmsg on empty", s, 64, 64, MSG_DONTWAIT);
	T_REPORT("setsockopt(TCP_INQ, 2)", setsockopt(s, IPPROTO_TCP, TCP_INQ, &two, sizeof(two)));
	shutdown(c, SHUT_WR);
	t_wait_event(s, POLLRDHUP);
	recv_inq("recvmsg at EOF", s, 64, 64, 0);
	T_REPORT("setsockopt(TCP_INQ, 0)", setsockopt(s, IPPROTO_TCP, TCP_INQ, &zero, sizeof(zero)));
	recv_inq("recvmsg at EOF, TCP_INQ off", s, 64, 64, 0);
	close(c);
	close(s);
}

static void inq_inherited(void)
{
	struct t_addr a;
	int lfd, c, s, one = 1;

	lfd = t_listen_loopback(AF_INET, 4, &a);
	setsockopt(lfd, IPPROTO_TCP, TCP_INQ, &one, sizeof(one));
	c = t_connect(&a);
	t_wait_event(lfd, POLLIN);
	s = t_accept(lfd);
	t_send_all(c, "xy", 2);
	t_wait_inq(s, 2);
	recv_inq("accepted from a TCP_INQ listener: recvmsg 1 byte", s, 1, 64, 0);
	close(c);
	close(s);
	close(lfd);
}

static int sends;	// bytes the receiver should get

// sendmsg of one byte with one control message of @len data bytes holding @val.
static void send_one(const char *what, int c, int level, int type, size_t len, uint64_t val)
{
	union {
		char buf[64];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { "x", 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = CMSG_SPACE(len) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	long r;

	memset(ctl.buf, 0, sizeof(ctl.buf));
	cm->cmsg_level = level;
	cm->cmsg_type = type;
	cm->cmsg_len = CMSG_LEN(len);
	memcpy(CMSG_DATA(cm), &val, len < sizeof(val) ? len : sizeof(val));
	r = T_REPORT(what, sendmsg(c, &mh, MSG_NOSIGNAL));
	if (r > 0)
		sends += (int)r;
}

// sendmsg of one byte with a raw control buffer.
static void send_raw(const char *what, int c, void *ctl, size_t ctl_len)
{
	struct iovec iov = { "x", 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
			     .msg_controllen = ctl_len };
	long r = T_REPORT(what, sendmsg(c, &mh, MSG_NOSIGNAL));

	if (r > 0)
		sends += (int)r;
}

static bool set_net_caps(bool on)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	uint32_t net = 1u << CAP_NET_RAW | 1u << CAP_NET_ADMIN;

	if (syscall(SYS_capget, &h, d))
		t_fatal("capget");
	if (on && (d[0].permitted & net) != net)
		return false;
	d[0].effective = on ? d[0].effective | net : d[0].effective & ~net;
	if (syscall(SYS_capset, &h, d))
		t_fatal("capset");
	return true;
}

static void privileged(int c, const char *who)
{
	char what[96];

	snprintf(what, sizeof(what), "%s: SO_MARK 7", who);
	send_one(what, c, SOL_SOCKET, SO_MARK, 4, 7);
	snprintf(what, sizeof(what), "%s: SO_MARK of 2 bytes", who);
	send_one(what, c, SOL_SOCKET, SO_MARK, 2, 7);
	snprintf(what, sizeof(what), "%s: SO_PRIORITY 7", who);
	send_one(what, c, SOL_SOCKET, SO_PRIORITY, 4, 7);
	snprintf(what, sizeof(what), "%s: SO_PRIORITY -1", who);
	send_one(what, c, SOL_SOCKET, SO_PRIORITY, 4, 0xffffffff);
}

static void control_messages(void)
{
	union {
		char buf[64];
		struct cmsghdr align;
	} ctl;
	struct { int clockid; unsigned flags; } txtime = { CLOCK_MONOTONIC, 0 };
	struct cmsghdr *cm = &ctl.align;
	char buf[4096];
	int c, s, got = 0;
	ssize_t r;

	t_pair(AF_INET, &c, &s);
	send_one("SO_PRIORITY 3", c, SOL_SOCKET, SO_PRIORITY, 4, 3);
	send_one("SO_PRIORITY of 8 bytes", c, SOL_SOCKET, SO_PRIORITY, 8, 3);
	send_one("SO_TIMESTAMPING TX_SOFTWARE", c, SOL_SOCKET, SO_TIMESTAMPING_OLD, 4,
		 SOF_TIMESTAMPING_TX_SOFTWARE);
	send_one("SO_TIMESTAMPING_NEW TX_ACK", c, SOL_SOCKET, X_SO_TIMESTAMPING_NEW, 4,
		 SOF_TIMESTAMPING_TX_ACK);
	send_one("SO_TIMESTAMPING TX_COMPLETION", c, SOL_SOCKET, SO_TIMESTAMPING_OLD, 4,
		 X_TS_TX_COMPLETION);
	send_one("SO_TIMESTAMPING RX_SOFTWARE", c, SOL_SOCKET, SO_TIMESTAMPING_OLD, 4,
		 SOF_TIMESTAMPING_RX_SOFTWARE);
	send_one("SO_TIMESTAMPING of 8 bytes", c, SOL_SOCKET, SO_TIMESTAMPING_OLD, 8,
		 SOF_TIMESTAMPING_TX_SOFTWARE);
	send_one("SCM_TS_OPT_ID", c, SOL_SOCKET, X_SCM_TS_OPT_ID, 4, 1);
	send_one("SCM_TXTIME without SO_TXTIME", c, SOL_SOCKET, SCM_TXTIME, 8, 0);
	T_REPORT("setsockopt(SO_TXTIME, CLOCK_MONOTONIC)",
		 setsockopt(c, SOL_SOCKET, SO_TXTIME, &txtime, sizeof(txtime)));
	send_one("SCM_TXTIME", c, SOL_SOCKET, SCM_TXTIME, 8, 0);
	send_one("SCM_TXTIME of 4 bytes", c, SOL_SOCKET, SCM_TXTIME, 4, 0);
	send_one("SCM_RIGHTS (ignored on TCP)", c, SOL_SOCKET, SCM_RIGHTS, 4, 0);
	send_one("SCM_CREDENTIALS (ignored on TCP)", c, SOL_SOCKET, SCM_CREDENTIALS, 12, 0);
	send_one("SOL_SOCKET type 999", c, SOL_SOCKET, 999, 4, 0);
	send_one("SOL_SOCKET SO_RCVBUF", c, SOL_SOCKET, SO_RCVBUF, 4, 0);
	send_one("IPPROTO_IP IP_TOS (ignored)", c, IPPROTO_IP, IP_TOS, 4, 0x10);
	send_one("IPPROTO_IP type 999 (ignored)", c, IPPROTO_IP, 999, 4, 0);
	send_one("level 12345 (ignored)", c, 12345, 1, 4, 0);

	memset(ctl.buf, 0, sizeof(ctl.buf));
	send_raw("control buffer of 8 bytes", c, ctl.buf, 8);
	cm->cmsg_len = 8;
	send_raw("cmsg_len 8", c, ctl.buf, sizeof(struct cmsghdr));
	cm->cmsg_len = 100;
	send_raw("cmsg_len past the buffer", c, ctl.buf, sizeof(struct cmsghdr));
	cm->cmsg_len = sizeof(struct cmsghdr);
	cm->cmsg_level = 0;
	send_raw("empty cmsg at level 0", c, ctl.buf, sizeof(struct cmsghdr));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SO_PRIORITY;
	send_raw("SO_PRIORITY without data", c, ctl.buf, sizeof(struct cmsghdr));
	send_raw("control buffer NULL", c, NULL, sizeof(struct cmsghdr));
	send_raw("control buffer of 1 MiB", c, ctl.buf, 1 << 20);

	set_net_caps(false);
	privileged(c, "without CAP_NET_RAW and CAP_NET_ADMIN");
	if (set_net_caps(true))
		privileged(c, "with them");
	else
		printf("(no CAP_NET_RAW and CAP_NET_ADMIN to be had here)\n");

	t_wait_inq(s, sends);
	while (got < sends && (r = recv(s, buf, sizeof(buf), 0)) > 0)
		got += (int)r;
	printf("the receiver got %d bytes\n", got);

	// A refused control message after SHUT_WR, or after a reset: the state goes first.
	shutdown(c, SHUT_WR);
	send_one("after SHUT_WR, SOL_SOCKET type 999", c, SOL_SOCKET, 999, 4, 0);
	close(c);
	close(s);
	{
		struct linger lg = { 1, 0 };

		t_pair(AF_INET, &c, &s);
		setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(s);
		t_wait_event(c, POLLERR);
		send_one("after a reset, SOL_SOCKET type 999", c, SOL_SOCKET, 999, 4, 0);
		send_one("again", c, SOL_SOCKET, 999, 4, 0);
		close(c);
	}
}

int main(void)
{
	t_start(30);
	inq();
	inq_inherited();
	control_messages();
	return t_finish();
}
