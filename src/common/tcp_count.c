// SPDX-License-Identifier: MIT
/* The kernel's own byte counts of a TCP connection (common/tcp_count.h). */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "common/sys.h"
#include "common/tcp_count.h"

/* How many times two TCP_INFO reads may differ before a count gives up. */
enum { TRIES = 16 };

/* The kernel's TCP states (tcp_states.h; <netinet/tcp.h> would clash with linux/tcp.h). */
enum {
	S_ESTABLISHED = 1, S_SYN_SENT, S_SYN_RECV, S_FIN_WAIT1, S_FIN_WAIT2, S_TIME_WAIT,
	S_CLOSE, S_CLOSE_WAIT, S_LAST_ACK, S_LISTEN, S_CLOSING,
};

#define BIT(s) (1u << (s))

/* States in which this side's FIN has a sequence number. */
static const unsigned fin_sent = BIT(S_FIN_WAIT1) | BIT(S_FIN_WAIT2) | BIT(S_CLOSING) |
				 BIT(S_TIME_WAIT) | BIT(S_LAST_ACK);
/* States in which the peer's FIN has arrived. */
static const unsigned fin_received = BIT(S_CLOSE_WAIT) | BIT(S_LAST_ACK) | BIT(S_CLOSING) |
				     BIT(S_TIME_WAIT);
/* States in which the counts mean a connection's. */
static const unsigned counted = BIT(S_ESTABLISHED) | BIT(S_SYN_SENT) | BIT(S_SYN_RECV) |
				BIT(S_FIN_WAIT1) | BIT(S_FIN_WAIT2) | BIT(S_TIME_WAIT) |
				BIT(S_CLOSE_WAIT) | BIT(S_LAST_ACK) | BIT(S_CLOSING);

static int info(int fd, struct tcp_info *ti)
{
	socklen_t len = sizeof(*ti);

	memset(ti, 0, sizeof(*ti));
	if (shunt_syscall(SYS_getsockopt, fd, IPPROTO_TCP, TCP_INFO, ti, &len) < 0)
		return -errno;
	/* Kernels before 4.1 have no byte counts: nothing to go by. */
	if (len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti->tcpi_bytes_received))
		return -ENOTCONN;
	if (ti->tcpi_state >= 32 || !(counted & BIT(ti->tcpi_state)))
		return -ENOTCONN;
	return 0;
}

static int queued(int fd, unsigned long req, uint64_t *n)
{
	int v = 0;

	if (shunt_syscall(SYS_ioctl, fd, req, &v) < 0)
		return -errno;
	*n = (uint64_t)(unsigned)v;
	return 0;
}

/*
 * TCP_INFO into @ti and the queue @sending selects (SIOCOUTQ, else SIOCINQ)
 * into @q, read so that they agree: TCP_INFO again after the ioctl, until
 * the byte count beside that queue reads the same both times (it only
 * grows, so nothing moved it in between).
 */
static int snapshot(int fd, bool sending, struct tcp_info *ti, uint64_t *q)
{
	struct tcp_info a;
	int r;

	for (int i = 0; i < TRIES; i++) {
		if ((r = info(fd, &a)) < 0 || (r = queued(fd, sending ? SIOCOUTQ : SIOCINQ, q)) < 0 ||
		    (r = info(fd, ti)) < 0)
			return r;
		if ((sending ? a.tcpi_bytes_acked == ti->tcpi_bytes_acked
			     : a.tcpi_bytes_received == ti->tcpi_bytes_received) &&
		    a.tcpi_state == ti->tcpi_state)
			return 0;
	}
	return -EAGAIN;
}

int shunt_tcp_written(int fd, bool connector, uint64_t *n)
{
	struct tcp_info ti;
	uint64_t q = 0, seqs, ctl;
	int r = snapshot(fd, true, &ti, &q);

	if (r < 0)
		return r;
	seqs = ti.tcpi_bytes_acked + q;
	ctl = (connector ? 1u : 0u) + !!(fin_sent & BIT(ti.tcpi_state));
	if (seqs < ctl)
		return -ENOTCONN;
	*n = seqs - ctl;
	return 0;
}

int shunt_tcp_read(int fd, uint64_t *n)
{
	struct tcp_info ti;
	uint64_t q = 0, ctl;
	char c;
	int r;

	/* Urgent data not yet read: SIOCINQ counts only up to its mark. */
	if (shunt_syscall(SYS_recvfrom, fd, &c, 1, MSG_OOB | MSG_PEEK | MSG_DONTWAIT, NULL, NULL) >= 0)
		return -EINVAL;
	if (errno != EINVAL)
		return errno == EAGAIN ? -EINVAL : -errno;
	if ((r = snapshot(fd, false, &ti, &q)) < 0)
		return r;
	ctl = !!(fin_received & BIT(ti.tcpi_state));
	if (ti.tcpi_bytes_received < q + ctl)
		return -ENOTCONN;
	*n = ti.tcpi_bytes_received - q - ctl;
	return 0;
}
