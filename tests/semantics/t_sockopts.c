// SPDX-License-Identifier: MIT
// Socket options accepted and read back on fresh, listening, connected and
// accepted sockets: TCP_NODELAY, keepalive, buffer sizes (doubled), linger,
// type/domain/protocol, SO_ACCEPTCONN, inheritance, SO_RCVLOWAT, TCP_INFO.
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void get(const char *who, int fd, int level, int opt, const char *name)
{
	int v = -12345;
	socklen_t len = sizeof(v);

	errno = T_ERRNO_SENTINEL;
	if (getsockopt(fd, level, opt, &v, &len) < 0)
		printf("%s %s: getsockopt = -1 %s\n", who, name, t_errname(errno));
	else
		printf("%s %s = %d (len %u)\n", who, name, v, (unsigned)len);
}

static void set(const char *who, int fd, int level, int opt, const char *name, int v)
{
	char label[128];

	snprintf(label, sizeof(label), "%s setsockopt(%s, %d)", who, name, v);
	T_REPORT(label, setsockopt(fd, level, opt, &v, sizeof(v)));
}

#define GET(who, fd, level, opt) get(who, fd, level, opt, #opt)
#define SET(who, fd, level, opt, v) set(who, fd, level, opt, #opt, v)

static void identity(const char *who, int fd)
{
	GET(who, fd, SOL_SOCKET, SO_TYPE);
	GET(who, fd, SOL_SOCKET, SO_DOMAIN);
	GET(who, fd, SOL_SOCKET, SO_PROTOCOL);
	GET(who, fd, SOL_SOCKET, SO_ACCEPTCONN);
	GET(who, fd, SOL_SOCKET, SO_ERROR);
}

static void linger_opt(const char *who, int fd)
{
	struct linger lg = { -1, -1 };
	socklen_t len = sizeof(lg);

	if (getsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &len) < 0)
		printf("%s SO_LINGER: getsockopt = -1 %s\n", who, t_errname(errno));
	else
		printf("%s SO_LINGER = {%d, %d} (len %u)\n", who, lg.l_onoff,
		       lg.l_linger, (unsigned)len);
}

static void tcp_state(const char *who, int fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0)
		printf("%s TCP_INFO: -1 %s\n", who, t_errname(errno));
	else
		printf("%s TCP_INFO tcpi_state = %u\n", who, ti.tcpi_state);
}

// Defaults on a fresh socket (before any traffic could autotune them).
static void defaults(void)
{
	int fd = t_socket(AF_INET, SOCK_STREAM);

	identity("fresh", fd);
	GET("fresh", fd, IPPROTO_TCP, TCP_NODELAY);
	GET("fresh", fd, SOL_SOCKET, SO_KEEPALIVE);
	GET("fresh", fd, IPPROTO_TCP, TCP_KEEPIDLE);
	GET("fresh", fd, IPPROTO_TCP, TCP_KEEPINTVL);
	GET("fresh", fd, IPPROTO_TCP, TCP_KEEPCNT);
	GET("fresh", fd, SOL_SOCKET, SO_RCVBUF);
	GET("fresh", fd, SOL_SOCKET, SO_SNDBUF);
	GET("fresh", fd, SOL_SOCKET, SO_RCVLOWAT);
	GET("fresh", fd, SOL_SOCKET, SO_REUSEPORT);
	GET("fresh", fd, SOL_SOCKET, SO_OOBINLINE);
	GET("fresh", fd, IPPROTO_IP, IP_TOS);
	GET("fresh", fd, IPPROTO_IP, IP_TTL);
	linger_opt("fresh", fd);
	tcp_state("fresh", fd);
	close(fd);

	fd = t_socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK);
	GET("fresh v6 nonblock", fd, SOL_SOCKET, SO_TYPE);
	GET("fresh v6 nonblock", fd, SOL_SOCKET, SO_DOMAIN);
	GET("fresh v6 nonblock", fd, SOL_SOCKET, SO_PROTOCOL);
	close(fd);
}

// Set on a connected socket, read back.
static void connected(int c)
{
	struct linger lg = { .l_onoff = 1, .l_linger = 5 };

	SET("c", c, IPPROTO_TCP, TCP_NODELAY, 1);
	GET("c", c, IPPROTO_TCP, TCP_NODELAY);
	SET("c", c, IPPROTO_TCP, TCP_NODELAY, 0);
	GET("c", c, IPPROTO_TCP, TCP_NODELAY);
	SET("c", c, SOL_SOCKET, SO_KEEPALIVE, 1);
	GET("c", c, SOL_SOCKET, SO_KEEPALIVE);
	SET("c", c, IPPROTO_TCP, TCP_KEEPIDLE, 60);
	GET("c", c, IPPROTO_TCP, TCP_KEEPIDLE);
	SET("c", c, IPPROTO_TCP, TCP_KEEPINTVL, 7);
	GET("c", c, IPPROTO_TCP, TCP_KEEPINTVL);
	SET("c", c, IPPROTO_TCP, TCP_KEEPCNT, 3);
	GET("c", c, IPPROTO_TCP, TCP_KEEPCNT);
	SET("c", c, IPPROTO_TCP, TCP_KEEPIDLE, 0);
	SET("c", c, SOL_SOCKET, SO_RCVBUF, 65536);
	GET("c", c, SOL_SOCKET, SO_RCVBUF);
	SET("c", c, SOL_SOCKET, SO_SNDBUF, 65536);
	GET("c", c, SOL_SOCKET, SO_SNDBUF);
	SET("c", c, SOL_SOCKET, SO_RCVBUF, 1);
	GET("c", c, SOL_SOCKET, SO_RCVBUF);
	SET("c", c, SOL_SOCKET, SO_SNDBUF, 1);
	GET("c", c, SOL_SOCKET, SO_SNDBUF);
	T_REPORT("c setsockopt(SO_LINGER, {1, 5})",
		 setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)));
	linger_opt("c", c);
	T_REPORT("c setsockopt(SO_LINGER, short optlen)",
		 setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, 4));
	SET("c", c, IPPROTO_IP, IP_TOS, 0x10);
	GET("c", c, IPPROTO_IP, IP_TOS);
	identity("c", c);
	tcp_state("c", c);
}

static void errors(int c)
{
	int v = 1;
	socklen_t len;
	char small[1] = { 0x55 };

	T_REPORT("setsockopt(TCP_NODELAY, optlen 1)",
		 setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &v, 1));
	T_REPORT("setsockopt(SOL_SOCKET, 12345)",
		 setsockopt(c, SOL_SOCKET, 12345, &v, sizeof(v)));
	T_REPORT("getsockopt(SOL_SOCKET, 12345)",
		 getsockopt(c, SOL_SOCKET, 12345, &v, &(socklen_t){ sizeof(v) }));
	T_REPORT("getsockopt(IPPROTO_TCP, 12345)",
		 getsockopt(c, IPPROTO_TCP, 12345, &v, &(socklen_t){ sizeof(v) }));
	T_REPORT("setsockopt(SO_RCVBUF, NULL)",
		 setsockopt(c, SOL_SOCKET, SO_RCVBUF, NULL, sizeof(v)));
	len = 1;
	T_REPORT("getsockopt(SO_TYPE, optlen 1)",
		 getsockopt(c, SOL_SOCKET, SO_TYPE, small, &len));
	printf("getsockopt(SO_TYPE, optlen 1): len = %u, byte = %d\n", (unsigned)len,
	       small[0]);
	len = (socklen_t)-1;
	T_REPORT("getsockopt(SO_TYPE, optlen -1)",
		 getsockopt(c, SOL_SOCKET, SO_TYPE, &v, &len));
	T_REPORT("setsockopt(SO_TYPE)", setsockopt(c, SOL_SOCKET, SO_TYPE, &v, sizeof(v)));
}

// SO_RCVLOWAT: poll reports POLLIN only once that many bytes are queued.
static void rcvlowat(int c, int s)
{
	char buf[16];

	SET("s", s, SOL_SOCKET, SO_RCVLOWAT, 5);
	GET("s", s, SOL_SOCKET, SO_RCVLOWAT);
	T_REPORT("send(c, \"abc\")", send(c, "abc", 3, 0));
	t_wait_inq(s, 3);
	printf("poll(s, POLLIN) with 3 of 5 = %s\n", t_poll_str(t_poll1(s, POLLIN, 50)));
	T_REPORT("send(c, \"de\")", send(c, "de", 2, 0));
	t_wait_inq(s, 5);
	printf("poll(s, POLLIN) with 5 of 5 = %s\n", t_poll_str(t_poll1(s, POLLIN, 1000)));
	T_REPORT_DATA("recv(s)", recv(s, buf, sizeof(buf), 0), buf);
}

int main(void)
{
	struct t_addr a;
	int lfd, c, s;

	t_start(30);
	defaults();

	// Listener options, and what accepted sockets inherit.
	lfd = t_listen_loopback(AF_INET, 4, &a);
	identity("listener", lfd);
	tcp_state("listener", lfd);
	SET("listener", lfd, IPPROTO_TCP, TCP_NODELAY, 1);
	SET("listener", lfd, SOL_SOCKET, SO_KEEPALIVE, 1);
	SET("listener", lfd, IPPROTO_TCP, TCP_KEEPIDLE, 77);
	SET("listener", lfd, SOL_SOCKET, SO_RCVBUF, 100000);
	c = t_connect(&a);
	s = t_accept(lfd);
	GET("accepted", s, IPPROTO_TCP, TCP_NODELAY);
	GET("accepted", s, SOL_SOCKET, SO_KEEPALIVE);
	GET("accepted", s, IPPROTO_TCP, TCP_KEEPIDLE);
	GET("accepted", s, SOL_SOCKET, SO_RCVBUF);
	identity("accepted", s);
	tcp_state("accepted", s);
	GET("connector", c, IPPROTO_TCP, TCP_NODELAY);
	GET("connector", c, SOL_SOCKET, SO_KEEPALIVE);
	close(c);
	close(s);
	close(lfd);

	t_pair(AF_INET, &c, &s);
	connected(c);
	errors(c);
	close(c);
	close(s);

	t_pair(AF_INET, &c, &s);
	rcvlowat(c, s);
	close(c);
	close(s);
	return t_finish();
}
