// SPDX-License-Identifier: MIT
// NULL pointers given to the event calls with TCP sockets involved fail
// with EFAULT where the kernel's do: poll's array, epoll_ctl's event,
// epoll_wait's array (only once there is an event to copy out; the event,
// even an edge, is not lost). Pointers into unmapped or protected memory
// are t_efault_io's.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

// NULL, hidden from the compiler, which refuses to pass a literal one.
static void *volatile v_null;

int main(void)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 0xe1 }, out[2];
	int c, s, ep;

	t_start(30);
	t_pair(AF_INET, &c, &s);
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		t_fatal("epoll_create1");

	printf("-- poll\n");
	T_REPORT("poll(NULL, 1)", poll(v_null, 1, 0));
	T_REPORT("poll(NULL, 0)", poll(v_null, 0, 0));

	printf("-- epoll\n");
	T_REPORT("epoll_ctl(ADD, NULL event)", epoll_ctl(ep, EPOLL_CTL_ADD, c, v_null));
	T_REPORT("epoll_ctl(ADD tcp_c)", epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("epoll_ctl(MOD, NULL event)", epoll_ctl(ep, EPOLL_CTL_MOD, c, v_null));
	T_REPORT("epoll_ctl(DEL, NULL event) then ADD back",
		 epoll_ctl(ep, EPOLL_CTL_DEL, c, v_null) ?: epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev));
	T_REPORT("epoll_wait(NULL, nothing ready)", epoll_wait(ep, v_null, 2, 0));
	T_REPORT("send(tcp_s, \"f\")", send(s, "f", 1, 0));
	t_wait_inq(c, 1);
	T_REPORT("epoll_wait(NULL, tcp_c ready)", epoll_wait(ep, v_null, 2, 0));
	T_REPORT("epoll_pwait2(NULL, tcp_c ready)", epoll_pwait2(ep, v_null, 2, NULL, NULL));
	T_REPORT("epoll_wait(valid events)", epoll_wait(ep, out, 2, 0));
	printf("  data %#llx %s\n", (unsigned long long)out[0].data.u64,
	       t_epoll_str(out[0].events));

	// Edge-triggered: the failed copy does not consume the edge.
	ev.events = EPOLLIN | EPOLLET;
	T_REPORT("epoll_ctl(MOD tcp_c EPOLLIN|EPOLLET)", epoll_ctl(ep, EPOLL_CTL_MOD, c, &ev));
	T_REPORT("epoll_wait(NULL, an edge pending)", epoll_wait(ep, v_null, 2, 0));
	T_REPORT("epoll_wait(valid events)", epoll_wait(ep, out, 2, 0));
	T_REPORT("epoll_wait(valid events) again", epoll_wait(ep, out, 2, 0));
	T_REPORT("recv(tcp_c)", recv(c, out, sizeof(out), 0));

	close(ep);
	close(c);
	close(s);
	return t_finish();
}
