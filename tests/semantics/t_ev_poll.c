// SPDX-License-Identifier: MIT
// poll and ppoll over TCP sockets mixed with kernel fds of every kind (pipe,
// timerfd, eventfd, signalfd, file, /dev/null, unix and UDP sockets, pty,
// epoll): revents of each entry, negative and closed fds, duplicates, and a
// blocking call woken by whichever member becomes ready.
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
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define POLL_ALL (POLLIN | POLLPRI | POLLOUT | POLLRDHUP)

enum {
	LATER_MS = 30, // a helper thread acts this long after the call started
	SET_MAX = 32,
};

struct set {
	struct pollfd p[SET_MAX];
	const char *name[SET_MAX];
	int n;
};

static void add(struct set *s, const char *name, int fd, short events)
{
	if (s->n == SET_MAX)
		t_fatal("set full");
	s->name[s->n] = name;
	s->p[s->n++] = (struct pollfd){ .fd = fd, .events = events, .revents = 0x5a5a };
}

static void print_set(const char *label, int ret, int err, const struct set *s)
{
	if (ret < 0) {
		printf("%s = -1 %s\n", label, t_errname(err));
		return;
	}
	printf("%s = %d\n", label, ret);
	for (int i = 0; i < s->n; i++)
		printf("  %-8s %s\n", s->name[i], t_poll_str(s->p[i].revents));
}

static void do_poll(const char *label, struct set *s, int timeout_ms)
{
	int r;

	errno = 0;
	r = poll(s->p, (nfds_t)s->n, timeout_ms);
	print_set(label, r, errno, s);
}

static void do_ppoll(const char *label, struct set *s, const struct timespec *ts)
{
	int r;

	errno = 0;
	r = ppoll(s->p, (nfds_t)s->n, ts, NULL);
	print_set(label, r, errno, s);
}

// A TCP pair, a listener with one connection queued, and the kernel fds.
struct scene {
	int c, s, lfd, queued;
	struct t_addr la;
	struct t_kfds k;
};

static void build(struct set *s, const struct scene *sc, short events)
{
	s->n = 0;
	add(s, "tcp_c", sc->c, events);
	add(s, "tcp_s", sc->s, events);
	add(s, "listener", sc->lfd, events);
	for (int i = 0; i < T_KFD_COUNT; i++)
		add(s, t_kfd_name(i), sc->k.fd[i], events);
}

static void mixed(struct scene *sc)
{
	struct set s;
	char buf[16];

	build(&s, sc, POLL_ALL);
	do_poll("poll(everything idle, all events)", &s, 0);
	build(&s, sc, 0);
	do_poll("poll(everything idle, no events)", &s, 0);

	T_REPORT("send(tcp_s, \"hello\")", send(sc->s, "hello", 5, 0));
	t_kfds_ready(&sc->k);
	t_wait_inq(sc->c, 5);
	build(&s, sc, POLL_ALL);
	do_poll("poll(everything readable, all events)", &s, 0);
	build(&s, sc, POLLIN);
	do_ppoll("ppoll(everything readable, POLLIN)", &s, &(struct timespec){ 0, 0 });
	build(&s, sc, POLLOUT);
	do_poll("poll(everything readable, POLLOUT)", &s, 0);
	build(&s, sc, POLLPRI);
	do_poll("poll(everything readable, POLLPRI)", &s, 0);
	T_REPORT_DATA("recv(tcp_c)", recv(sc->c, buf, sizeof(buf), 0), buf);
	t_kfds_drain(&sc->k);
	build(&s, sc, POLLIN);
	do_poll("poll(drained again, POLLIN)", &s, 0);
}

// Negative fds are skipped, closed ones give POLLNVAL, an fd may appear
// several times with different events, and revents is always written.
static void odd_entries(struct scene *sc)
{
	struct set s = { .n = 0 };
	int dead = fcntl(sc->c, F_DUPFD_CLOEXEC, 900);

	if (dead < 0)
		t_fatal("F_DUPFD");
	close(dead);
	T_REPORT("send(tcp_s, \"x\")", send(sc->s, "x", 1, 0));
	t_wait_inq(sc->c, 1);
	add(&s, "tcp_c/IN", sc->c, POLLIN);
	add(&s, "negative", -1, POLLIN);
	add(&s, "tcp_c/OUT", sc->c, POLLOUT);
	add(&s, "closed", dead, POLLIN);
	add(&s, "-tcp_c", ~sc->c, POLLIN);
	add(&s, "tcp_c/0", sc->c, 0);
	add(&s, "pipe/IN", sc->k.fd[T_KFD_PIPE_RD], POLLIN);
	add(&s, "tcp_c/IN", sc->c, POLLIN);
	do_poll("poll(duplicates, negative and closed fds)", &s, 0);
	s.n = 0;
	add(&s, "negative", -1, POLLIN);
	add(&s, "-tcp_c", ~sc->c, POLLIN);
	do_poll("poll(only negative fds, 50 ms)", &s, 50);
	recv(sc->c, (char[1]){ 0 }, 1, 0);
}

static void limits(struct scene *sc)
{
	struct rlimit rl;
	struct pollfd *big;
	nfds_t n;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		t_fatal("getrlimit");
	n = rl.rlim_cur + 1;
	big = calloc(n, sizeof(*big));
	if (!big)
		t_fatal("calloc");
	for (nfds_t i = 0; i < n; i++)
		big[i].fd = -1;
	big[0] = (struct pollfd){ .fd = sc->c, .events = POLLOUT };
	T_REPORT("poll(nfds = RLIMIT_NOFILE + 1)", poll(big, n, 0));
	T_REPORT("poll(nfds = RLIMIT_NOFILE)", poll(big, n - 1, 0));
	printf("  tcp_c %s\n", t_poll_str(big[0].revents));
	T_REPORT("poll(NULL, 0, 0)", poll(NULL, 0, 0));
	free(big);
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

static void later_start(struct later *l, void (*act)(struct scene *), struct scene *sc)
{
	*l = (struct later){ .act = act, .sc = sc };
	if (pthread_create(&l->th, NULL, later_main, l))
		t_fatal("pthread_create");
}

static void later_join(struct later *l)
{
	pthread_join(l->th, NULL);
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

static void act_timer(struct scene *sc)
{
	struct itimerspec its = { .it_value = { 0, 1000 } };

	if (timerfd_settime(sc->k.fd[T_KFD_TIMERFD], 0, &its, NULL) < 0)
		t_fatal("timerfd_settime");
}

static void act_eventfd(struct scene *sc)
{
	uint64_t v = 7;

	if (write(sc->k.fd[T_KFD_EVENTFD], &v, sizeof(v)) != sizeof(v))
		t_fatal("write(eventfd)");
}

static void act_signal(struct scene *sc)
{
	(void)sc;
	if (kill(getpid(), SIGUSR2) < 0)
		t_fatal("kill");
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

// The waiting set: tcp_c and the listener for reading, the idle kernel fds.
static void wake_by(const char *what, void (*act)(struct scene *), struct scene *sc,
		    bool use_ppoll)
{
	static const int kinds[] = { T_KFD_PIPE_RD, T_KFD_TIMERFD, T_KFD_EVENTFD,
				     T_KFD_SIGNALFD, T_KFD_EPOLL };
	struct later l;
	struct set s = { .n = 0 };
	char label[128];
	int r, err;

	add(&s, "tcp_c", sc->c, POLLIN | POLLRDHUP);
	add(&s, "listener", sc->lfd, POLLIN);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
		add(&s, t_kfd_name(kinds[i]), sc->k.fd[kinds[i]], POLLIN);
	later_start(&l, act, sc);
	errno = 0;
	if (use_ppoll)
		r = ppoll(s.p, (nfds_t)s.n, NULL, NULL);
	else
		r = poll(s.p, (nfds_t)s.n, T_WAIT_MS);
	err = errno;
	later_join(&l);
	snprintf(label, sizeof(label), "%s woken by %s", use_ppoll ? "ppoll(no timeout)" : "poll",
		 what);
	print_set(label, r, err, &s);
}

static void wakeups(struct scene *sc)
{
	char buf[16];

	for (int pp = 0; pp < 2; pp++) {
		wake_by("tcp data", act_tcp, sc, pp);
		T_REPORT_DATA("recv(tcp_c)", recv(sc->c, buf, sizeof(buf), 0), buf);
		wake_by("a pipe write", act_pipe, sc, pp);
		t_kfds_drain(&sc->k);
		wake_by("a pipe inside the epoll fd", act_inner, sc, pp);
		t_kfds_drain(&sc->k);
		wake_by("a timerfd expiry", act_timer, sc, pp);
		t_kfds_drain(&sc->k);
		wake_by("an eventfd write", act_eventfd, sc, pp);
		t_kfds_drain(&sc->k);
		wake_by("a signal for the signalfd", act_signal, sc, pp);
		t_kfds_drain(&sc->k);
		wake_by("a connection to the listener", act_connect, sc, pp);
		close(t_accept(sc->lfd));
		close(sc->queued);
	}
	wake_by("the peer's close", act_close, sc, false);
}

int main(void)
{
	struct scene sc;

	t_start(30);
	signal(SIGPIPE, SIG_IGN);
	t_kfds_open(&sc.k); // blocks SIGUSR2 before any thread exists
	t_pair(AF_INET, &sc.c, &sc.s);
	sc.lfd = t_listen_loopback(AF_INET, 4, &sc.la);
	sc.queued = t_connect(&sc.la);
	t_wait_event(sc.lfd, POLLIN);
	mixed(&sc);
	odd_entries(&sc);
	limits(&sc);
	close(t_accept(sc.lfd));
	close(sc.queued);
	wakeups(&sc);
	close(sc.c);
	close(sc.lfd);
	t_kfds_close(&sc.k);
	return t_finish();
}
