// SPDX-License-Identifier: MIT
// Queue sizes: FIONREAD/SIOCINQ after the peer sent N bytes, through peeks,
// partial reads and EOF; SIOCOUTQ drops to 0 once the peer has read; both on
// listeners and unconnected sockets.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static void report_ioctl(const char *label, int fd, unsigned long req)
{
	int v = -12345;
	long r;

	errno = T_ERRNO_SENTINEL;
	r = ioctl(fd, req, &v);
	if (r < 0 || errno != T_ERRNO_SENTINEL)
		t_report(label, r, errno);
	else
		printf("%s = %d\n", label, v);
}

// SIOCOUTQ counts bytes not yet acknowledged; wait for it to drain.
static void wait_outq_zero(const char *label, int fd)
{
	int64_t start = t_now_ns();
	int v = -1;

	while (t_elapsed_ms(start) < T_WAIT_MS) {
		if (ioctl(fd, SIOCOUTQ, &v) < 0)
			break;
		if (v == 0)
			break;
		t_sleep_ms(1);
	}
	t_expect(v == 0, "%s: SIOCOUTQ reaches 0", label);
}

int main(void)
{
	static char data[1000];
	char buf[1000];
	struct t_addr a;
	int c, s, lfd, fd;

	t_start(30);
	memset(data, 'q', sizeof(data));
	t_pair(AF_INET, &c, &s);
	report_ioctl("FIONREAD(s) empty", s, FIONREAD);
	report_ioctl("SIOCOUTQ(c) nothing sent", c, SIOCOUTQ);
	T_REPORT("send(c, 100)", send(c, data, 100, 0));
	t_wait_inq(s, 100);
	report_ioctl("FIONREAD(s)", s, FIONREAD);
	report_ioctl("SIOCINQ(s)", s, SIOCINQ);
	T_REPORT("recv(s, 30, MSG_PEEK)", recv(s, buf, 30, MSG_PEEK));
	report_ioctl("FIONREAD(s) after peek", s, FIONREAD);
	T_REPORT("recv(s, 30)", recv(s, buf, 30, 0));
	report_ioctl("FIONREAD(s) after reading 30", s, FIONREAD);
	T_REPORT("send(c, 1000)", send(c, data, 1000, 0));
	t_wait_inq(s, 1070);
	report_ioctl("FIONREAD(s) after 1000 more", s, FIONREAD);
	T_REPORT("recv(s, 1000)", recv(s, buf, 1000, 0));
	report_ioctl("FIONREAD(s)", s, FIONREAD);
	T_REPORT("recv(s, 1000)", recv(s, buf, 1000, 0));
	report_ioctl("FIONREAD(s) drained", s, FIONREAD);
	wait_outq_zero("after the peer read everything", c);
	report_ioctl("SIOCOUTQ(s) nothing sent", s, SIOCOUTQ);

	// The other direction, then EOF: the FIN is not counted.
	T_REPORT("send(s, 5)", send(s, data, 5, 0));
	T_REPORT("shutdown(s, SHUT_WR)", shutdown(s, SHUT_WR));
	t_wait_event(c, POLLRDHUP);
	report_ioctl("FIONREAD(c) 5 bytes then EOF", c, FIONREAD);
	T_REPORT("recv(c, 3)", recv(c, buf, 3, 0));
	report_ioctl("FIONREAD(c)", c, FIONREAD);
	T_REPORT("recv(c, 100)", recv(c, buf, 100, 0));
	report_ioctl("FIONREAD(c) at EOF", c, FIONREAD);
	T_REPORT("recv(c) at EOF", recv(c, buf, 100, 0));
	close(c);
	close(s);

	// Data left unread by a peer that went away with a reset.
	t_pair(AF_INET, &c, &s);
	T_REPORT("send(c, 7)", send(c, data, 7, 0));
	T_REPORT("send(s, 1)", send(s, data, 1, 0));
	t_wait_inq(s, 7);
	t_wait_inq(c, 1);
	close(c);
	t_wait_event(s, POLLERR);
	report_ioctl("FIONREAD(s) after the peer reset", s, FIONREAD);
	report_ioctl("SIOCOUTQ(s) after the peer reset", s, SIOCOUTQ);
	close(s);

	lfd = t_listen_loopback(AF_INET, 4, &a);
	report_ioctl("FIONREAD(listener)", lfd, FIONREAD);
	report_ioctl("SIOCOUTQ(listener)", lfd, SIOCOUTQ);
	close(lfd);
	fd = t_socket(AF_INET, SOCK_STREAM);
	report_ioctl("FIONREAD(unconnected)", fd, FIONREAD);
	report_ioctl("SIOCOUTQ(unconnected)", fd, SIOCOUTQ);
	close(fd);
	return t_finish();
}
