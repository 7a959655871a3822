// SPDX-License-Identifier: MIT
/*
 * TCP_INFO of a circuit socket: the kernel half answers (its options and
 * sizes are the connection's, a companion's even its MSS and window scale),
 * and the fields that follow the connection come from the circuit.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <netinet/in.h>
#include <linux/tcp.h>

#include "preload/conn.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/tcpinfo.h"

/* The kernel's TCP states (netinet/tcp.h's, which cannot be had with linux/tcp.h). */
enum { K_SYN_SENT = 2, K_CLOSE = 7, K_LISTEN = 10 };

/* Write @size bytes of @v at @off of the program's buffer, as far as its length goes. */
static void put_field(void *val, socklen_t len, size_t off, const void *v, size_t size)
{
	if (off >= len)
		return;
	memcpy((char *)val + off, v, len - off < size ? len - off : size);
}

#define PUT(field, value)                                                        \
	do {                                                                     \
		__typeof__(((struct tcp_info *)0)->field) v_ = (value);          \
		put_field(val, len, offsetof(struct tcp_info, field), &v_, sizeof(v_)); \
	} while (0)

void shunt_tcpinfo_circuit(struct shunt_conn *c, void *val, socklen_t len)
{
	uint64_t sent = shunt_conn_tx_bytes(c), received;
	/* The connector's SYN is acknowledged once the connection is up; the acceptor's was before. */
	uint64_t acked = sent + (c->end == SHUNT_END_CONNECTOR) + shunt_conn_fin_sent(c);

	/* Arrived is received, read or not; a FIN counts one more. */
	received = shunt_conn_rx_bytes(c) + shunt_conn_inq(c) + shunt_conn_fin_received(c);
	PUT(tcpi_state, (uint8_t)shunt_conn_tcp_state(c));
	/* Bytes in the ring are in the peer's receive queue: sent and acknowledged. */
	PUT(tcpi_unacked, 0);
	PUT(tcpi_notsent_bytes, 0);
	PUT(tcpi_bytes_sent, sent);
	PUT(tcpi_bytes_acked, acked);
	PUT(tcpi_bytes_received, received);
}

void shunt_tcpinfo_connecting(void *val, socklen_t len)
{
	PUT(tcpi_state, (uint8_t)K_SYN_SENT);
	PUT(tcpi_bytes_sent, 0);
	PUT(tcpi_bytes_acked, 0);
	PUT(tcpi_bytes_received, 0);
}

bool shunt_tcpinfo_carried(int fd)
{
	struct tcp_info ti = { .tcpi_state = K_CLOSE };
	socklen_t len = sizeof(ti);

	if (SHUNT_LIBC(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
	    ti.tcpi_state == K_LISTEN)
		return false;
	return ti.tcpi_state != K_CLOSE || ti.tcpi_segs_in || ti.tcpi_segs_out;
}
