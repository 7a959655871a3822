/* SPDX-License-Identifier: MIT */
/*
 * How many bytes of its stream a kernel TCP socket has taken in from its
 * program and given out to it, as the kernel itself counts them: the byte
 * counts at which a connection can switch between the kernel and a circuit
 * (docs/transports.md, "a switch at a byte boundary"), for a socket whose
 * every write and read the library did not see (raw system calls, a
 * program before exec).
 *
 *   written = tcpi_bytes_acked + SIOCOUTQ, less the SYN and the FIN
 *   read    = tcpi_bytes_received - SIOCINQ, less the FIN
 *
 * A SYN takes one sequence number: the connector's is in its bytes_acked
 * once answered and in its SIOCOUTQ until then; the acceptor's never is
 * (the kernel makes the accepted socket with it acknowledged). A FIN takes
 * one in each count of the side that sent it, and in bytes_received of the
 * side that got it. Urgent data (MSG_OOB) not yet read makes SIOCINQ stop at
 * the mark: the read count is refused then.
 *
 * Each count is two system calls; an ACK or a segment that lands between
 * them is caught by reading TCP_INFO again, and the count taken once that
 * reads the same twice. A write or read of another thread meanwhile is the
 * caller's to exclude.
 *
 * Proven exact on this host's kernel and the guest's (6.1), over loopback
 * and lossy links, by tests/integration/tcp_count.c. Nothing calls it yet:
 * the switch itself is not built.
 */
#ifndef SHUNT_COMMON_TCP_COUNT_H
#define SHUNT_COMMON_TCP_COUNT_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Bytes the program has written into TCP socket @fd (@connector: it made
 * the connection by connect(), rather than accepted it), into @n: 0, or
 * -ENOTCONN (not a connected or connecting TCP socket), -EAGAIN (the
 * counts kept moving), or -errno of getsockopt/ioctl.
 */
int shunt_tcp_written(int fd, bool connector, uint64_t *n);

/*
 * Bytes the program has read out of TCP socket @fd, into @n: 0, or
 * -ENOTCONN, -EAGAIN, -EINVAL (urgent data not yet read), -errno.
 */
int shunt_tcp_read(int fd, uint64_t *n);

#endif
