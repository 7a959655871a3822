// SPDX-License-Identifier: MIT
// Timeouts of poll, ppoll, select, pselect, epoll_wait, epoll_pwait and
// epoll_pwait2 on a set holding an idle TCP socket and a pipe: 0 returns at
// once, a timeout is honoured, no timeout waits for data, invalid timeouts are
// refused, and an empty set still sleeps.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

enum {
	LATER_MS = 30,
	TIMEOUT_MS = 100,
	LOW_MS = 95, // bounds for "about TIMEOUT_MS"
	HIGH_MS = 2000,
	AT_ONCE_MS = 100, // "returned at once" under a loaded machine
	FOREVER = -1,
};

struct scene {
	int c, s, rd, wr, ep;
};

static struct timespec *ts_of(int ms, struct timespec *ts)
{
	if (ms < 0)
		return NULL;
	*ts = (struct timespec){ ms / 1000, (ms % 1000) * 1000000L };
	return ts;
}

static int w_poll(struct scene *sc, int ms)
{
	struct pollfd p[2] = { { sc->c, POLLIN, 0 }, { sc->rd, POLLIN, 0 } };

	return poll(p, 2, ms);
}

static int w_ppoll(struct scene *sc, int ms)
{
	struct pollfd p[2] = { { sc->c, POLLIN, 0 }, { sc->rd, POLLIN, 0 } };
	struct timespec ts;

	return ppoll(p, 2, ts_of(ms, &ts), NULL);
}

static int w_select(struct scene *sc, int ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	fd_set rd;

	FD_ZERO(&rd);
	FD_SET(sc->c, &rd);
	FD_SET(sc->rd, &rd);
	return select((sc->c > sc->rd ? sc->c : sc->rd) + 1, &rd, NULL, NULL,
		      ms < 0 ? NULL : &tv);
}

static int w_pselect(struct scene *sc, int ms)
{
	struct timespec ts;
	fd_set rd;

	FD_ZERO(&rd);
	FD_SET(sc->c, &rd);
	FD_SET(sc->rd, &rd);
	return pselect((sc->c > sc->rd ? sc->c : sc->rd) + 1, &rd, NULL, NULL,
		       ts_of(ms, &ts), NULL);
}

static int w_epoll_wait(struct scene *sc, int ms)
{
	struct epoll_event ev[2];

	return epoll_wait(sc->ep, ev, 2, ms);
}

static int w_epoll_pwait(struct scene *sc, int ms)
{
	struct epoll_event ev[2];

	return epoll_pwait(sc->ep, ev, 2, ms, NULL);
}

static int w_epoll_pwait2(struct scene *sc, int ms)
{
	struct epoll_event ev[2];
	struct timespec ts;

	return epoll_pwait2(sc->ep, ev, 2, ts_of(ms, &ts), NULL);
}

static const struct api {
	const char *name;
	int (*wait)(struct scene *, int);
} apis[] = {
	{ "poll", w_poll },		{ "ppoll", w_ppoll },
	{ "select", w_select },		{ "pselect", w_pselect },
	{ "epoll_wait", w_epoll_wait }, { "epoll_pwait", w_epoll_pwait },
	{ "epoll_pwait2", w_epoll_pwait2 },
};

struct later {
	struct scene *sc;
	pthread_t th;
};

static void *send_later(void *arg)
{
	struct later *l = arg;

	t_sleep_ms(LATER_MS);
	t_send_all(l->sc->s, "data", 4);
	return NULL;
}

static void one_api(const struct api *a, struct scene *sc)
{
	char label[96], buf[8];
	struct later l = { .sc = sc };
	int64_t start, ms;

	snprintf(label, sizeof(label), "%s(idle, timeout 0)", a->name);
	start = t_now_ns();
	T_REPORT(label, a->wait(sc, 0));
	t_expect(t_elapsed_ms(start) < AT_ONCE_MS, "  returned at once");

	snprintf(label, sizeof(label), "%s(idle, timeout %d ms)", a->name, TIMEOUT_MS);
	start = t_now_ns();
	T_REPORT(label, a->wait(sc, TIMEOUT_MS));
	ms = t_elapsed_ms(start);
	t_expect(ms >= LOW_MS && ms <= HIGH_MS, "  elapsed within [%d, %d] ms", LOW_MS, HIGH_MS);

	snprintf(label, sizeof(label), "%s(no timeout), data after %d ms", a->name, LATER_MS);
	if (pthread_create(&l.th, NULL, send_later, &l))
		t_fatal("pthread_create");
	T_REPORT(label, a->wait(sc, FOREVER));
	pthread_join(l.th, NULL);
	T_REPORT_DATA("  recv(tcp_c)", recv(sc->c, buf, sizeof(buf), 0), buf);
}

static void odd_timeouts(struct scene *sc)
{
	struct pollfd p = { sc->c, POLLIN, 0 };
	struct epoll_event ev;
	struct later l = { .sc = sc };
	struct timespec ts;
	char buf[8];
	int64_t start, ms;

	T_REPORT("ppoll(tv_nsec = 1000000000)",
		 ppoll(&p, 1, &(struct timespec){ 0, 1000000000 }, NULL));
	T_REPORT("ppoll(tv_nsec = -1)", ppoll(&p, 1, &(struct timespec){ 0, -1 }, NULL));
	T_REPORT("ppoll(tv_sec = -1)", ppoll(&p, 1, &(struct timespec){ -1, 0 }, NULL));
	T_REPORT("epoll_pwait2(tv_nsec = 1000000000)",
		 epoll_pwait2(sc->ep, &ev, 1, &(struct timespec){ 0, 1000000000 }, NULL));
	T_REPORT("epoll_pwait2(tv_sec = -1)",
		 epoll_pwait2(sc->ep, &ev, 1, &(struct timespec){ -1, 0 }, NULL));

	// Any negative timeout is infinite for poll and epoll_wait.
	if (pthread_create(&l.th, NULL, send_later, &l))
		t_fatal("pthread_create");
	T_REPORT("poll(timeout -5), data later", poll(&p, 1, -5));
	pthread_join(l.th, NULL);
	recv(sc->c, buf, sizeof(buf), 0);
	if (pthread_create(&l.th, NULL, send_later, &l))
		t_fatal("pthread_create");
	T_REPORT("epoll_wait(timeout -7), data later", epoll_wait(sc->ep, &ev, 1, -7));
	pthread_join(l.th, NULL);
	recv(sc->c, buf, sizeof(buf), 0);

	// Sub-millisecond precision of the timespec variants.
	ts = (struct timespec){ 0, 30500000 };
	start = t_now_ns();
	T_REPORT("epoll_pwait2(idle, 30.5 ms)", epoll_pwait2(sc->ep, &ev, 1, &ts, NULL));
	ms = t_elapsed_ms(start);
	t_expect(ms >= 30 && ms <= HIGH_MS, "  elapsed within [30, %d] ms", HIGH_MS);
	start = t_now_ns();
	T_REPORT("ppoll(idle, 30.5 ms)", ppoll(&p, 1, &ts, NULL));
	ms = t_elapsed_ms(start);
	t_expect(ms >= 30 && ms <= HIGH_MS, "  elapsed within [30, %d] ms", HIGH_MS);
	t_expect(ts.tv_sec == 0 && ts.tv_nsec == 30500000, "  ppoll left its timespec alone");

	// Nothing to wait for still waits.
	start = t_now_ns();
	T_REPORT("poll(NULL, 0, 50)", poll(NULL, 0, 50));
	t_expect(t_elapsed_ms(start) >= 45, "  slept about 50 ms");
	start = t_now_ns();
	T_REPORT("select(0, NULL, NULL, NULL, 50 ms)",
		 select(0, NULL, NULL, NULL, &(struct timeval){ 0, 50000 }));
	t_expect(t_elapsed_ms(start) >= 45, "  slept about 50 ms");
	{
		int empty = epoll_create1(EPOLL_CLOEXEC);

		start = t_now_ns();
		T_REPORT("epoll_wait(empty set, 50)", epoll_wait(empty, &ev, 1, 50));
		t_expect(t_elapsed_ms(start) >= 45, "  slept about 50 ms");
		close(empty);
	}
}

int main(void)
{
	struct scene sc;
	struct epoll_event ev = { .events = EPOLLIN };
	int p[2];

	t_start(60);
	t_pair(AF_INET, &sc.c, &sc.s);
	if (pipe(p) < 0)
		t_fatal("pipe");
	sc.rd = p[0];
	sc.wr = p[1];
	sc.ep = epoll_create1(EPOLL_CLOEXEC);
	if (sc.ep < 0)
		t_fatal("epoll_create1");
	ev.data.u64 = 1;
	if (epoll_ctl(sc.ep, EPOLL_CTL_ADD, sc.c, &ev) < 0)
		t_fatal("epoll_ctl(ADD, tcp_c)");
	ev.data.u64 = 2;
	if (epoll_ctl(sc.ep, EPOLL_CTL_ADD, sc.rd, &ev) < 0)
		t_fatal("epoll_ctl(ADD, pipe)");
	for (size_t i = 0; i < sizeof(apis) / sizeof(apis[0]); i++)
		one_api(&apis[i], &sc);
	odd_timeouts(&sc);
	close(sc.ep);
	close(sc.c);
	close(sc.s);
	close(sc.rd);
	close(sc.wr);
	return t_finish();
}
