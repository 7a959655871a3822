// SPDX-License-Identifier: MIT
// A program with 64 KiB of _Thread_local data, more than the small stack
// the library's own threads asked for can hold (glibc puts static TLS on
// every thread's stack and refused them with EINVAL): the cork timer still
// sends bytes held back at the cork's ceiling, and the idle trimmer still
// gives back the ring pages of a connection that went quiet.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 trim_idle>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <unistd.h>

enum {
	TLS = 64 << 10,
	BULK = 200 << 10,
	QUIET_MS = 1200,	// past the trimmer's 500 ms
};

// Touched through a volatile pointer, so that the compiler keeps it.
static _Thread_local char tls[TLS];

int main(void)
{
	static char bulk[BULK];
	struct pollfd p;
	int c, s, one = 1;
	char buf[8];

	t_start(30);
	((volatile char *)tls)[TLS - 1] = 1;
	t_pair(AF_INET, &c, &s);
	if (setsockopt(c, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)))
		t_fatal("TCP_CORK");
	t_send_all(c, "later", 5);
	p = (struct pollfd){ .fd = s, .events = POLLIN };
	t_expect(poll(&p, 1, T_WAIT_MS) == 1, "corked bytes arrive without another call");
	T_REPORT_DATA("recv", recv(s, buf, sizeof(buf), 0), buf);
	t_send_all(c, bulk, BULK);
	t_recv_all(s, bulk, BULK);
	printf("%d bytes carried, then quiet\n", BULK);
	t_sleep_ms(QUIET_MS);
	close(c);
	close(s);
	return t_finish();
}
