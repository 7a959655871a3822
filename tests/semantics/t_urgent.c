// SPDX-License-Identifier: MIT
// Urgent data (MSG_OOB) on a connection that began in shared memory: the
// peer sees it as urgent (poll's POLLPRI, select's exceptional set,
// SIOCATMARK, recv(MSG_OOB)), apart from the stream, inline with
// SO_OOBINLINE, and the connection goes on carrying data both ways.
// shunt-expect: shm_connect>=1 shm_accept>=1 shm_tx_bytes>=3 shm_rx_bytes>=3
// shunt-needs: companions
#include "t_harness.h"

#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

static void at_mark(const char *label, int fd)
{
	int mark = -1;

	T_REPORT(label, ioctl(fd, SIOCATMARK, &mark));
	printf("  at the mark: %d\n", mark);
}

static void exceptional(int fd)
{
	fd_set ex;
	struct timeval tv = { 2, 0 };

	FD_ZERO(&ex);
	FD_SET(fd, &ex);
	T_REPORT("select(exceptfds)", select(fd + 1, NULL, NULL, &ex, &tv));
	printf("  exceptional: %d\n", FD_ISSET(fd, &ex) ? 1 : 0);
}

int main(void)
{
	char buf[64];
	int c, s, on = 1;

	t_start(30);
	t_pair(AF_INET, &c, &s);

	/* Ordinary bytes first: the connection is in shared memory. */
	T_REPORT("send(c, \"abc\")", send(c, "abc", 3, 0));
	t_wait_inq(s, 3);
	T_REPORT_DATA("recv(s, 64)", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("recv(s, MSG_OOB) with none", recv(s, buf, 1, MSG_OOB | MSG_DONTWAIT));
	at_mark("SIOCATMARK with none", s);

	/* One urgent byte behind two ordinary ones. */
	T_REPORT("send(c, \"de\")", send(c, "de", 2, 0));
	T_REPORT("send(c, \"!\", MSG_OOB)", send(c, "!", 1, MSG_OOB));
	printf("poll(s, POLLPRI) = %s\n", t_poll_str(t_poll1(s, POLLPRI, 2000)));
	exceptional(s);
	at_mark("SIOCATMARK before the bytes ahead of it", s);
	T_REPORT_DATA("recv(s, 64): up to the mark", recv(s, buf, sizeof(buf), 0), buf);
	at_mark("SIOCATMARK at it", s);
	T_REPORT_DATA("recv(s, MSG_OOB)", recv(s, buf, 1, MSG_OOB), buf);
	T_REPORT("recv(s, MSG_OOB) again", recv(s, buf, 1, MSG_OOB | MSG_DONTWAIT));

	/*
	 * The stream goes on, both ways; the urgent byte is not in it. (SIOCINQ
	 * says 0 until a read steps over the mark: waited for by poll.)
	 */
	T_REPORT("send(c, \"fg\")", send(c, "fg", 2, 0));
	t_wait_event(s, POLLIN);
	T_REPORT_DATA("recv(s, 64)", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("send(s, \"back\")", send(s, "back", 4, 0));
	t_wait_inq(c, 4);
	T_REPORT_DATA("recv(c, 64)", recv(c, buf, sizeof(buf), 0), buf);

	/* With SO_OOBINLINE the urgent byte stays in the stream, still marked. */
	T_REPORT("setsockopt(s, SO_OOBINLINE)", setsockopt(s, SOL_SOCKET, SO_OOBINLINE, &on,
							   sizeof(on)));
	T_REPORT("send(c, \"h\")", send(c, "h", 1, 0));
	T_REPORT("send(c, \"X\", MSG_OOB)", send(c, "X", 1, MSG_OOB));
	t_wait_inq(s, 2);
	T_REPORT_DATA("recv(s, 64): up to the mark", recv(s, buf, sizeof(buf), 0), buf);
	at_mark("SIOCATMARK at the inline byte", s);
	T_REPORT_DATA("recv(s, 64): the inline byte", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("recv(s, MSG_OOB) when inline", recv(s, buf, 1, MSG_OOB | MSG_DONTWAIT));

	/* And the other way. */
	T_REPORT("send(s, \"?\", MSG_OOB)", send(s, "?", 1, MSG_OOB));
	printf("poll(c, POLLPRI) = %s\n", t_poll_str(t_poll1(c, POLLPRI, 2000)));
	T_REPORT_DATA("recv(c, MSG_OOB)", recv(c, buf, 1, MSG_OOB), buf);

	T_REPORT("shutdown(c, SHUT_WR)", shutdown(c, SHUT_WR));
	t_wait_event(s, POLLIN);
	T_REPORT("recv(s): EOF", recv(s, buf, sizeof(buf), 0));
	close(c);
	close(s);
	return t_finish();
}
