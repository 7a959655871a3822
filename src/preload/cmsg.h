/* SPDX-License-Identifier: MIT */
/*
 * Ancillary data of circuit sockets: what the kernel says of the control
 * data a TCP sendmsg carries, and control messages written back by
 * recvmsg the way the kernel's put_cmsg writes them.
 */
#ifndef SHUNT_CMSG_H
#define SHUNT_CMSG_H

#include <stddef.h>
#include <sys/socket.h>

/*
 * What ____sys_sendmsg says of @msg's control buffer before the protocol
 * sees it: 0, -ENOBUFS (larger than the socket may allocate) or -EFAULT
 * (no buffer). A buffer at a bad address other than NULL faults here.
 */
int shunt_cmsg_send_buffer(const struct msghdr *msg);

/*
 * What sock_cmsg_send says of the control messages for a TCP socket whose
 * kernel half is @fd: 0, or -EINVAL (malformed, unknown SOL_SOCKET type,
 * bad length or value), -EPERM (SO_MARK, or SO_PRIORITY above 6, without
 * CAP_NET_RAW or CAP_NET_ADMIN). Messages of other levels are ignored, as
 * tcp_sendmsg ignores them. The values themselves change nothing on a
 * circuit (docs/differences.md).
 */
int shunt_cmsg_send_check(int fd, const struct msghdr *msg);

/*
 * put_cmsg: append a control message to what recvmsg returns in @msg,
 * *@used bytes of msg_control being taken already; sets MSG_CTRUNC in
 * msg_flags when it does not fit, truncating it as the kernel does.
 */
void shunt_cmsg_put(struct msghdr *msg, size_t *used, int level, int type, const void *data,
		    size_t len);

#endif
