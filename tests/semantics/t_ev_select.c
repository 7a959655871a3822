// SPDX-License-Identifier: MIT
// select and pselect over TCP sockets mixed with kernel fds of every kind:
// the three sets per fd, EBADF and EINVAL, bits at or above nfds, fds above
// FD_SETSIZE in a larger bitmap, the timeout select writes back, wakeups.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <termios.h>
#include <unistd.h>

enum {
	LATER_MS = 30,
	BIG_FD = 1500,	   // above FD_SETSIZE
	BIG_WORDS = 2048 / (8 * sizeof(fd_mask)),
	WORD_BITS = 8 * sizeof(fd_mask),
};

// Bitmaps of any size, set by hand: FD_SET may be fortified and refuse
// fds >= FD_SETSIZE (t_ev_select_fortify shows that).
struct bits {
	fd_mask w[BIG_WORDS];
};

static void bit_set(struct bits *b, int fd)
{
	b->w[fd / WORD_BITS] |= (fd_mask)1 << (fd % WORD_BITS);
}

static bool bit_isset(const struct bits *b, int fd)
{
	return b->w[fd / WORD_BITS] & ((fd_mask)1 << (fd % WORD_BITS));
}

struct scene {
	int c, s, lfd, queued;
	struct t_addr la;
	struct t_kfds k;
};

struct entry {
	const char *name;
	int fd;
};

static int entries(const struct scene *sc, struct entry *e)
{
	int n = 0;

	e[n++] = (struct entry){ "tcp_c", sc->c };
	e[n++] = (struct entry){ "tcp_s", sc->s };
	e[n++] = (struct entry){ "listener", sc->lfd };
	for (int i = 0; i < T_KFD_COUNT; i++)
		e[n++] = (struct entry){ t_kfd_name(i), sc->k.fd[i] };
	return n;
}

// select() on every entry in the sets named by `which` ("rwx" letters).
static void select_all(const char *label, const struct scene *sc, const char *which,
		       struct timeval *tv)
{
	struct entry e[T_KFD_COUNT + 3];
	struct bits rd = { { 0 } }, wr = { { 0 } }, ex = { { 0 } };
	int n = entries(sc, e), maxfd = -1, r;

	for (int i = 0; i < n; i++) {
		if (strchr(which, 'r'))
			bit_set(&rd, e[i].fd);
		if (strchr(which, 'w'))
			bit_set(&wr, e[i].fd);
		if (strchr(which, 'x'))
			bit_set(&ex, e[i].fd);
		if (e[i].fd > maxfd)
			maxfd = e[i].fd;
	}
	errno = T_ERRNO_SENTINEL;
	r = select(maxfd + 1, (fd_set *)&rd, (fd_set *)&wr, (fd_set *)&ex, tv);
	t_report(label, r, errno);
	if (r < 0)
		return;
	for (int i = 0; i < n; i++)
		printf("  %-8s %c%c%c\n", e[i].name, bit_isset(&rd, e[i].fd) ? 'r' : '-',
		       bit_isset(&wr, e[i].fd) ? 'w' : '-', bit_isset(&ex, e[i].fd) ? 'x' : '-');
}

static void mixed(struct scene *sc)
{
	char buf[16];

	select_all("select(everything idle, rwx)", sc, "rwx", &(struct timeval){ 0, 0 });
	T_REPORT("send(tcp_s, \"hello\")", send(sc->s, "hello", 5, 0));
	t_kfds_ready(&sc->k);
	t_wait_inq(sc->c, 5);
	select_all("select(everything readable, rwx)", sc, "rwx", &(struct timeval){ 0, 0 });
	select_all("select(everything readable, r)", sc, "r", &(struct timeval){ 0, 0 });
	select_all("select(everything readable, x)", sc, "x", &(struct timeval){ 0, 0 });
	T_REPORT_DATA("recv(tcp_c)", recv(sc->c, buf, sizeof(buf), 0), buf);
	t_kfds_drain(&sc->k);
	select_all("select(drained again, r)", sc, "r", &(struct timeval){ 0, 0 });
}

static void errors(struct scene *sc)
{
	struct bits set;
	fd_set none;
	int dead = fcntl(sc->c, F_DUPFD_CLOEXEC, 900);
	const char *which[] = { "readfds", "writefds", "exceptfds" };

	if (dead < 0)
		t_fatal("F_DUPFD");
	close(dead);
	for (int i = 0; i < 3; i++) {
		char label[96];

		memset(&set, 0, sizeof(set));
		bit_set(&set, sc->c);
		bit_set(&set, dead);
		snprintf(label, sizeof(label), "select(tcp_c + a closed fd in %s)", which[i]);
		T_REPORT(label, select(dead + 1, i == 0 ? (fd_set *)&set : NULL,
				       i == 1 ? (fd_set *)&set : NULL,
				       i == 2 ? (fd_set *)&set : NULL, &(struct timeval){ 0, 0 }));
		printf("  tcp_c bit after the error: %d\n", bit_isset(&set, sc->c));
	}
	// The closed fd at or above nfds is not looked at.
	memset(&set, 0, sizeof(set));
	bit_set(&set, sc->c);
	bit_set(&set, dead);
	T_REPORT("select(nfds = tcp_c + 1, closed fd above nfds in writefds)",
		 select(sc->c + 1, NULL, (fd_set *)&set, NULL, &(struct timeval){ 0, 0 }));
	FD_ZERO(&none);
	T_REPORT("select(nfds = -1)", select(-1, &none, NULL, NULL, &(struct timeval){ 0, 0 }));
	T_REPORT("select(tv_sec = -1)", select(0, NULL, NULL, NULL, &(struct timeval){ -1, 0 }));
	T_REPORT("select(tv_usec = -1)", select(0, NULL, NULL, NULL, &(struct timeval){ 0, -1 }));
	T_REPORT("pselect(tv_nsec = 1000000000)",
		 pselect(0, NULL, NULL, NULL, &(struct timespec){ 0, 1000000000 }, NULL));
	T_REPORT("pselect(tv_sec = -1)",
		 pselect(0, NULL, NULL, NULL, &(struct timespec){ -1, 0 }, NULL));
}

// The kernel reads and writes back whole words: bits at or above nfds are
// cleared in the last word it looks at and left alone in the words after.
static void beyond_nfds(struct scene *sc)
{
	struct bits wr;
	int fd = sc->c, same = fd + 1, far = 1000;

	if (fd / WORD_BITS != same / WORD_BITS)
		t_fatal("tcp_c is the last fd of its word");
	memset(&wr, 0, sizeof(wr));
	bit_set(&wr, fd);
	bit_set(&wr, same);
	bit_set(&wr, far);
	T_REPORT("select(nfds = tcp_c + 1, writefds = {tcp_c, tcp_c + 1, 1000})",
		 select(fd + 1, NULL, (fd_set *)&wr, NULL, &(struct timeval){ 0, 0 }));
	printf("  tcp_c %d, tcp_c + 1 (same word, not polled) %d, 1000 (later word) %d\n",
	       bit_isset(&wr, fd), bit_isset(&wr, same), bit_isset(&wr, far));
}

// fds above FD_SETSIZE work with a bitmap large enough for them.
static void big_fds(struct scene *sc)
{
	int bc = fcntl(sc->c, F_DUPFD_CLOEXEC, BIG_FD);
	int bp = fcntl(sc->k.fd[T_KFD_PIPE_RD], F_DUPFD_CLOEXEC, BIG_FD + 100);
	struct bits rd, wr;
	int n = (bc > bp ? bc : bp) + 1;

	if (bc < 0 || bp < 0)
		t_fatal("F_DUPFD");
	memset(&rd, 0, sizeof(rd));
	memset(&wr, 0, sizeof(wr));
	bit_set(&rd, bc);
	bit_set(&rd, bp);
	bit_set(&wr, bc);
	T_REPORT("select(tcp_c and pipe_rd duplicated above FD_SETSIZE, idle)",
		 select(n, (fd_set *)&rd, (fd_set *)&wr, NULL, &(struct timeval){ 0, 0 }));
	printf("  tcp_c r%d w%d, pipe_rd r%d\n", bit_isset(&rd, bc), bit_isset(&wr, bc),
	       bit_isset(&rd, bp));
	T_REPORT("send(tcp_s, \"big\")", send(sc->s, "big", 3, 0));
	if (write(sc->k.fd[T_KFD_PIPE_WR], "p", 1) != 1)
		t_fatal("write(pipe)");
	t_wait_inq(sc->c, 3);
	memset(&rd, 0, sizeof(rd));
	bit_set(&rd, bc);
	bit_set(&rd, bp);
	T_REPORT("select(the same, both readable)",
		 select(n, (fd_set *)&rd, NULL, NULL, &(struct timeval){ 0, 0 }));
	printf("  tcp_c r%d, pipe_rd r%d\n", bit_isset(&rd, bc), bit_isset(&rd, bp));
	recv(sc->c, (char[8]){ 0 }, 8, 0);
	t_kfds_drain(&sc->k);
	close(bc);
	close(bp);
}

// select writes back the time not slept; pselect leaves its timespec alone.
static void written_back(struct scene *sc)
{
	struct timeval tv = { 5, 0 };
	struct timespec ts = { 5, 0 };
	fd_set wr;

	FD_ZERO(&wr);
	FD_SET(sc->c, &wr);
	T_REPORT("select(tcp_c writable, 5 s)", select(sc->c + 1, NULL, &wr, NULL, &tv));
	t_expect(tv.tv_sec == 4 && tv.tv_usec > 0 && tv.tv_usec < 1000000,
		 "  timeval written back: 4 s < left < 5 s");
	FD_ZERO(&wr);
	FD_SET(sc->c, &wr);
	T_REPORT("pselect(tcp_c writable, 5 s)", pselect(sc->c + 1, NULL, &wr, NULL, &ts, NULL));
	t_expect(ts.tv_sec == 5 && ts.tv_nsec == 0, "  timespec unchanged");
	tv = (struct timeval){ 0, 20000 };
	FD_ZERO(&wr);
	FD_SET(sc->c, &wr);
	T_REPORT("select(tcp_c for reading, 20 ms)", select(sc->c + 1, &wr, NULL, NULL, &tv));
	printf("  timeval after the timeout = {%ld, %ld}\n", (long)tv.tv_sec, (long)tv.tv_usec);
	ts = (struct timespec){ 0, 20000000 };
	FD_ZERO(&wr);
	FD_SET(sc->c, &wr);
	T_REPORT("pselect(tcp_c for reading, 20 ms)",
		 pselect(sc->c + 1, &wr, NULL, NULL, &ts, NULL));
	printf("  timespec after the timeout = {%ld, %ld}\n", (long)ts.tv_sec, ts.tv_nsec);
	// tv_usec above a second is normalised, not refused.
	tv = (struct timeval){ 0, 1500000 };
	FD_ZERO(&wr);
	FD_SET(sc->c, &wr);
	T_REPORT("select(tcp_c writable, {0, 1500000})", select(sc->c + 1, NULL, &wr, NULL, &tv));
	t_expect(tv.tv_sec == 1 && tv.tv_usec > 0 && tv.tv_usec < 500000,
		 "  timeval written back normalised: 1 s < left < 1.5 s");
}

// ---- a blocking call woken by one member of the set

struct later {
	void (*act)(struct scene *);
	struct scene *sc;
	pthread_t th;
};

static void *later_main(void *arg)
{
	struct later *l = arg;

	t_sleep_ms(LATER_MS);
	l->act(l->sc);
	return NULL;
}

static void act_tcp(struct scene *sc)
{
	t_send_all(sc->s, "wake", 4);
}

static void act_pipe(struct scene *sc)
{
	if (write(sc->k.fd[T_KFD_PIPE_WR], "w", 1) != 1)
		t_fatal("write(pipe)");
}

static void act_inner(struct scene *sc)
{
	if (write(sc->k.inner_wr, "i", 1) != 1)
		t_fatal("write(inner pipe)");
}

static void act_pty(struct scene *sc)
{
	tcflush(sc->k.pty_slave, TCIFLUSH);
}

static void act_connect(struct scene *sc)
{
	sc->queued = t_connect(&sc->la);
}

static void act_close(struct scene *sc)
{
	close(sc->s);
	sc->s = -1;
}

static void wake_by(const char *what, void (*act)(struct scene *), struct scene *sc,
		    bool use_pselect)
{
	static const int kinds[] = { T_KFD_PIPE_RD, T_KFD_EPOLL, T_KFD_PTY };
	struct entry e[8];
	int n = 0, maxfd = -1, r, err;
	struct later l = { .act = act, .sc = sc };
	fd_set rd, ex;
	char label[128];

	e[n++] = (struct entry){ "tcp_c", sc->c };
	e[n++] = (struct entry){ "listener", sc->lfd };
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		e[n++] = (struct entry){ t_kfd_name(kinds[i]), sc->k.fd[kinds[i]] };
	FD_ZERO(&rd);
	FD_ZERO(&ex);
	for (int i = 0; i < n; i++) {
		FD_SET(e[i].fd, &rd);
		FD_SET(e[i].fd, &ex);
		if (e[i].fd > maxfd)
			maxfd = e[i].fd;
	}
	if (pthread_create(&l.th, NULL, later_main, &l))
		t_fatal("pthread_create");
	errno = T_ERRNO_SENTINEL;
	if (use_pselect)
		r = pselect(maxfd + 1, &rd, NULL, &ex, NULL, NULL);
	else
		r = select(maxfd + 1, &rd, NULL, &ex, NULL);
	err = errno;
	pthread_join(l.th, NULL);
	snprintf(label, sizeof(label), "%s(no timeout) woken by %s",
		 use_pselect ? "pselect" : "select", what);
	t_report(label, r, err);
	if (r < 0)
		return;
	for (int i = 0; i < n; i++)
		printf("  %-8s %c-%c\n", e[i].name, FD_ISSET(e[i].fd, &rd) ? 'r' : '-',
		       FD_ISSET(e[i].fd, &ex) ? 'x' : '-');
}

static void wakeups(struct scene *sc)
{
	char buf[16];

	for (int ps = 0; ps < 2; ps++) {
		wake_by("tcp data", act_tcp, sc, ps);
		T_REPORT_DATA("recv(tcp_c)", recv(sc->c, buf, sizeof(buf), 0), buf);
		wake_by("a pipe write", act_pipe, sc, ps);
		t_kfds_drain(&sc->k);
		wake_by("a pipe inside the epoll fd", act_inner, sc, ps);
		t_kfds_drain(&sc->k);
		wake_by("a pty flush (exception)", act_pty, sc, ps);
		t_kfds_drain(&sc->k);
		wake_by("a connection to the listener", act_connect, sc, ps);
		close(t_accept(sc->lfd));
		close(sc->queued);
	}
	wake_by("the peer's close", act_close, sc, false);
}

int main(void)
{
	struct scene sc;

	t_start(30);
	t_nofile_at_least(BIG_FD + 200);
	signal(SIGPIPE, SIG_IGN);
	t_kfds_open(&sc.k);
	t_pair(AF_INET, &sc.c, &sc.s);
	sc.lfd = t_listen_loopback(AF_INET, 4, &sc.la);
	sc.queued = t_connect(&sc.la);
	t_wait_event(sc.lfd, POLLIN);
	mixed(&sc);
	close(t_accept(sc.lfd));
	close(sc.queued);
	errors(&sc);
	beyond_nfds(&sc);
	big_fds(&sc);
	written_back(&sc);
	wakeups(&sc);
	close(sc.c);
	close(sc.lfd);
	t_kfds_close(&sc.k);
	return t_finish();
}
