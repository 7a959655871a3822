// SPDX-License-Identifier: MIT
// A service whose seccomp filters forbid what the library talks to shuntd
// with, stacked as systemd stacks them: a first one makes socket(AF_UNIX)
// fail with EAFNOSUPPORT (RestrictAddressFamilies=AF_INET AF_INET6), a
// second one kills sendmsg and recvmsg (SystemCallFilter=). Its connection
// made before the filters goes on both ways; the connection it makes
// afterwards, and the one it accepts afterwards, go through the kernel and
// work as well.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect>=2 kernel_accept>=2
// shunt-expect: fallback_seccomp>=1 shm_tx_bytes>=100K
#include <sys/mman.h>

#include "t_seccomp.h"

enum { BULK = 64 << 10 };

struct shared {
	struct t_addr service, peer;
};

static struct shared *sh;
static struct t_chan peer_up, service_up, filtered, service_done;

// Echo what comes on one connection until EOF, then say how much it was.
static void echo(int fd, const char *who)
{
	char buf[4096];
	size_t total = 0;
	ssize_t r;

	while ((r = read(fd, buf, sizeof(buf))) > 0) {
		t_send_all(fd, buf, (size_t)r);
		total += (size_t)r;
	}
	printf("%s: echoed %zu bytes, then %s\n", who, total, r ? "an error" : "EOF");
	close(fd);
}

static void peer(void *arg)
{
	int lfd;

	(void)arg;
	lfd = t_listen_loopback(AF_INET, 8, &sh->peer);
	t_chan_put(&peer_up, 1);
	echo(t_accept(lfd), "peer (first connection)");
	echo(t_accept(lfd), "peer (connection made after the filter)");
}

// Send BULK bytes of a stream and read them back, checking every one.
static void round_trip(int fd, uint64_t seed, const char *what)
{
	static char out[BULK], in[BULK];

	t_stream_fill(seed, 0, out, sizeof(out));
	t_send_all(fd, out, sizeof(out));
	t_recv_all(fd, in, sizeof(in));
	t_expect(t_stream_check(seed, 0, in, sizeof(in)) < 0, "%s: %d bytes there and back, all right",
		 what, BULK);
}

static void service(void *arg)
{
	struct t_filter f;
	char buf[8];
	int lfd, fd, late, in;

	(void)arg;
	t_chan_get(&peer_up);
	lfd = t_listen_loopback(AF_INET, 8, &sh->service);
	fd = t_connect(&sh->peer);
	t_chan_put(&service_up, 1);
	t_f_begin(&f);
	t_f_rule_arg(&f, SYS_socket, 0, AF_UNIX, SECCOMP_RET_ERRNO | EAFNOSUPPORT);
	t_f_end(&f, SECCOMP_RET_ALLOW);
	t_f_install(&f, false);
	t_f_begin(&f);
	t_f_rule(&f, SYS_sendmsg, SECCOMP_RET_KILL_PROCESS);
	t_f_rule(&f, SYS_recvmsg, SECCOMP_RET_KILL_PROCESS);
	t_f_end(&f, SECCOMP_RET_ALLOW);
	t_f_install(&f, true);
	printf("service: filters installed\n");
	t_chan_put(&filtered, 1);
	round_trip(fd, 1, "service, first connection");
	T_REPORT("service: close", close(fd));
	T_REPORT("service: socket(AF_UNIX)", socket(AF_UNIX, SOCK_STREAM, 0));
	late = t_connect(&sh->peer);
	printf("service: connected after the filter\n");
	round_trip(late, 2, "service, connection made after the filter");
	T_REPORT("service: close late", close(late));
	in = T_REPORT_FD("service: accept after the filter", accept(lfd, NULL, NULL));
	T_REPORT_DATA("service: read", read(in, buf, 5), buf);
	T_REPORT("service: write", write(in, "pong!", 5));
	T_REPORT("service: close in", close(in));
	t_chan_put(&service_done, 1);
}

int main(void)
{
	struct t_child p, s;
	char buf[8];
	int fd;

	t_start(60);
	sh = t_shared_alloc(sizeof(*sh));
	t_chan_open(&peer_up);
	t_chan_open(&service_up);
	t_chan_open(&filtered);
	t_chan_open(&service_done);
	t_child_start(&p, "peer", peer, NULL);
	t_child_start(&s, "service", service, NULL);
	t_chan_get(&service_up);
	t_chan_get(&filtered);
	fd = t_connect(&sh->service);
	T_REPORT("main: write", write(fd, "ping!", 5));
	T_REPORT_DATA("main: read", read(fd, buf, 5), buf);
	T_REPORT("main: close", close(fd));
	t_chan_get(&service_done);
	t_child_end(&s);
	t_child_end(&p);
	return t_finish();
}
