// SPDX-License-Identifier: MIT
// Negative SO_RCVTIMEO / SO_SNDTIMEO: the kernel stores "do not wait" and
// reads it back as {0, 0}, like "no timeout": blocking calls then fail with
// EAGAIN at once instead of waiting. Both spellings of the options, and
// sockets that inherit the timeout from their listener.
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <linux/time_types.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

enum { CHUNK = 65536 };

static void show(const char *what, int fd, int name)
{
	struct timeval tv = { -7, -7 };
	socklen_t len = sizeof(tv);

	if (getsockopt(fd, SOL_SOCKET, name, &tv, &len))
		t_fatal("getsockopt");
	printf("%s reads back {%ld, %ld}\n", what, (long)tv.tv_sec, (long)tv.tv_usec);
}

static void *send_late(void *arg)
{
	t_sleep_ms(50);
	t_send_all(*(int *)arg, "late", 4);
	return NULL;
}

// Fill the send side, non-blocking, until even one byte is refused.
static void fill(int c)
{
	static char buf[CHUNK];

	t_set_nonblock(c, true);
	while (send(c, buf, sizeof(buf), 0) > 0)
		;
	while (send(c, buf, 1, 0) > 0)
		;
	t_set_nonblock(c, false);
}

static void receive_side(void)
{
	struct timeval neg = { -1, 0 }, none = { 0, 0 }, bad = { 0, -1 }, negus = { -3, 500000 };
	struct __kernel_sock_timeval neg64 = { -2, 0 };
	char buf[16];
	pthread_t th;
	int c, s;

	t_pair(AF_INET, &c, &s);
	T_REPORT("SO_RCVTIMEO {-1, 0}", setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &neg, sizeof(neg)));
	show("SO_RCVTIMEO {-1, 0}", s, SO_RCVTIMEO);
	T_REPORT("blocking recv on empty", recv(s, buf, sizeof(buf), 0));
	T_REPORT("blocking read on empty", read(s, buf, sizeof(buf)));
	T_REPORT("blocking recv MSG_WAITALL", recv(s, buf, sizeof(buf), MSG_WAITALL));
	t_send_all(c, "hi", 2);
	t_wait_inq(s, 2);
	T_REPORT_DATA("recv with data there", recv(s, buf, sizeof(buf), 0), buf);

	T_REPORT("SO_RCVTIMEO {0, -1}", setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &bad, sizeof(bad)));
	T_REPORT("recv still never waits", recv(s, buf, sizeof(buf), 0));
	T_REPORT("SO_RCVTIMEO {-3, 500000}",
		 setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &negus, sizeof(negus)));
	T_REPORT("recv", recv(s, buf, sizeof(buf), 0));

	T_REPORT("SO_RCVTIMEO {0, 0}", setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none)));
	if (pthread_create(&th, NULL, send_late, &c))
		t_fatal("pthread_create");
	T_REPORT_DATA("blocking recv waits again", recv(s, buf, sizeof(buf), 0), buf);
	pthread_join(th, NULL);

	T_REPORT("SO_RCVTIMEO_NEW {-2, 0}",
		 setsockopt(s, SOL_SOCKET, SO_RCVTIMEO_NEW, &neg64, sizeof(neg64)));
	show("SO_RCVTIMEO_NEW {-2, 0}", s, SO_RCVTIMEO);
	T_REPORT("blocking recv on empty", recv(s, buf, sizeof(buf), 0));
	close(c);
	close(s);
}

static void send_side(void)
{
	struct timeval neg = { -5, 0 };
	struct __kernel_sock_timeval neg64 = { -1, 999999 }, none64 = { 0, 0 };
	int c, s;

	t_pair(AF_INET, &c, &s);
	fill(c);
	T_REPORT("SO_SNDTIMEO {-5, 0}", setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &neg, sizeof(neg)));
	show("SO_SNDTIMEO {-5, 0}", c, SO_SNDTIMEO);
	T_REPORT("blocking send on a full buffer", send(c, "x", 1, 0));
	T_REPORT("blocking write on a full buffer", write(c, "x", 1));
	T_REPORT("SO_SNDTIMEO_NEW {0, 0}",
		 setsockopt(c, SOL_SOCKET, SO_SNDTIMEO_NEW, &none64, sizeof(none64)));
	T_REPORT("SO_SNDTIMEO_NEW {-1, 999999}",
		 setsockopt(c, SOL_SOCKET, SO_SNDTIMEO_NEW, &neg64, sizeof(neg64)));
	T_REPORT("blocking send on a full buffer", send(c, "x", 1, 0));
	close(c);
	close(s);
}

// An accepted socket inherits its listener's timeout, "do not wait" too.
static void inherited(void)
{
	struct timeval neg = { -1, 0 };
	struct t_addr a;
	char buf[8];
	int lfd, c, s;

	lfd = t_listen_loopback(AF_INET, 4, &a);
	T_REPORT("listener SO_RCVTIMEO {-1, 0}",
		 setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &neg, sizeof(neg)));
	c = t_connect(&a);
	t_wait_event(lfd, POLLIN);
	s = t_accept(lfd);
	show("accepted socket's SO_RCVTIMEO", s, SO_RCVTIMEO);
	T_REPORT("blocking recv on the accepted socket", recv(s, buf, sizeof(buf), 0));
	close(c);
	close(s);
	close(lfd);
}

int main(void)
{
	t_start(10);
	receive_side();
	send_side();
	inherited();
	return t_finish();
}
