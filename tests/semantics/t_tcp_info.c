// SPDX-License-Identifier: MIT
// TCP_INFO through a connection's life: the state the kernel reports at each
// step (ESTABLISHED, CLOSE_WAIT after the peer's FIN, FIN_WAIT2 after ours,
// CLOSE after both or a reset, SYN_SENT while a connect waits for room in
// the backlog) and the byte counters of data actually exchanged.
// shunt-expect: shm_connect>=6 shm_accept>=6 kernel_accept==0
#include "t_harness.h"

#include <netinet/in.h>
#include <linux/tcp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { QUIET_MS = 50 };

// The kernel's TCP states (include/net/tcp_states.h); <linux/tcp.h> has
// the whole struct tcp_info, glibc's <netinet/tcp.h> an older one.
enum {
	TCP_ESTABLISHED = 1, TCP_SYN_SENT, TCP_SYN_RECV, TCP_FIN_WAIT1, TCP_FIN_WAIT2,
	TCP_TIME_WAIT, TCP_CLOSE, TCP_CLOSE_WAIT, TCP_LAST_ACK, TCP_LISTEN, TCP_CLOSING,
};

static const char *state_name(int st)
{
	static const char *names[] = {
		[TCP_ESTABLISHED] = "ESTABLISHED", [TCP_SYN_SENT] = "SYN_SENT",
		[TCP_SYN_RECV] = "SYN_RECV", [TCP_FIN_WAIT1] = "FIN_WAIT1",
		[TCP_FIN_WAIT2] = "FIN_WAIT2", [TCP_TIME_WAIT] = "TIME_WAIT",
		[TCP_CLOSE] = "CLOSE", [TCP_CLOSE_WAIT] = "CLOSE_WAIT",
		[TCP_LAST_ACK] = "LAST_ACK", [TCP_LISTEN] = "LISTEN",
		[TCP_CLOSING] = "CLOSING",
	};

	return st >= 0 && st < (int)(sizeof(names) / sizeof(names[0])) && names[st] ? names[st]
										     : "?";
}

// The state, and with @bytes the counters of payload received and acked.
static void info(const char *label, int fd, bool bytes)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0xa5, sizeof(ti));
	errno = T_ERRNO_SENTINEL;
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0) {
		printf("%s: TCP_INFO = -1 %s\n", label, t_errname(errno));
		return;
	}
	printf("%s: %s%s", label, state_name(ti.tcpi_state),
	       errno == T_ERRNO_SENTINEL ? "" : " (errno changed)");
	if (bytes)
		printf(" bytes_received=%llu bytes_acked=%llu",
		       (unsigned long long)ti.tcpi_bytes_received,
		       (unsigned long long)ti.tcpi_bytes_acked);
	printf("\n");
	t_expect(len == sizeof(ti), "%s: the whole struct tcp_info", label);
}

// The state a short TCP_INFO (just the first byte) reports too.
static void info_short(const char *label, int fd)
{
	unsigned char st = 0xa5;
	socklen_t len = 1;

	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &st, &len) < 0)
		t_fatal("TCP_INFO, one byte");
	printf("%s (1 byte): %s len=%u\n", label, state_name(st), (unsigned)len);
}

static void settle(int fd, short events)
{
	t_wait_event(fd, events);
	t_sleep_ms(QUIET_MS);
}

static void lifecycle(int family)
{
	char buf[16];
	int c, s;

	printf("-- %s\n", family == AF_INET ? "IPv4" : "IPv6");
	t_pair(family, &c, &s);
	info("connected, client", c, false);
	info("connected, server", s, false);
	info_short("connected, client", c);
	T_REPORT("send(s, \"hello\")", send(s, "hello", 5, 0));
	t_wait_inq(c, 5);
	T_REPORT_DATA("recv(c)", recv(c, buf, sizeof(buf), 0), buf);
	T_REPORT("send(c, \"abc\")", send(c, "abc", 3, 0));
	t_wait_inq(s, 3);
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
	t_sleep_ms(QUIET_MS);
	info("after the exchange, client", c, true);
	info("after the exchange, server", s, true);

	T_REPORT("shutdown(s, SHUT_WR)", shutdown(s, SHUT_WR));
	settle(c, POLLRDHUP);
	info("server shut writing, client", c, true);
	info("server shut writing, server", s, true);
	info_short("server shut writing, client", c);
	T_REPORT("shutdown(c, SHUT_WR)", shutdown(c, SHUT_WR));
	settle(s, POLLRDHUP);
	info("both shut, client", c, true);
	info("both shut, server", s, true);
	close(c);
	close(s);

	t_pair(family, &c, &s);
	T_REPORT("shutdown(c, SHUT_RD)", shutdown(c, SHUT_RD));
	info("own SHUT_RD, client", c, false);
	T_REPORT("shutdown(c, SHUT_RDWR)", shutdown(c, SHUT_RDWR));
	settle(s, POLLRDHUP);
	info("own SHUT_RDWR, client", c, false);
	info("own SHUT_RDWR, server", s, false);
	close(c);
	close(s);

	// Closed by the peer: our side waits in CLOSE_WAIT until we close too.
	t_pair(family, &c, &s);
	T_REPORT("close(s)", close(s));
	settle(c, POLLRDHUP);
	info("peer closed, client", c, false);
	T_REPORT("shutdown(c, SHUT_WR)", shutdown(c, SHUT_WR));
	t_sleep_ms(QUIET_MS);
	info("peer closed, then own SHUT_WR", c, false);
	close(c);

	// Reset by the peer.
	t_pair(family, &c, &s);
	struct linger lg = { 1, 0 };

	if (setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) < 0)
		t_fatal("SO_LINGER");
	T_REPORT("close(s) with SO_LINGER 0", close(s));
	settle(c, POLLERR);
	info("reset by the peer, client", c, false);
	T_REPORT("recv(c)", recv(c, buf, sizeof(buf), 0));
	info("reset by the peer, after recv", c, false);
	close(c);
}

// A connect that waits for room in the backlog is a SYN_SENT socket.
static void in_progress(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 0, &a), c1, c2;

	info("listener", lfd, false);
	c1 = t_connect(&a);
	settle(lfd, POLLIN);
	c2 = t_socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK);
	info("fresh socket", c2, false);
	T_REPORT("non-blocking connect to a full listener",
		 connect(c2, (struct sockaddr *)&a.ss, a.len));
	t_sleep_ms(QUIET_MS);
	info("connect in progress", c2, false);
	close(c2);
	close(c1);
	close(lfd);
}

int main(void)
{
	t_start(60);
	lifecycle(AF_INET);
	lifecycle(AF_INET6);
	in_progress();
	return t_finish();
}
