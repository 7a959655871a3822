// SPDX-License-Identifier: MIT
// Signals and the event calls: SIGALRM (the alarm timer) interrupts poll,
// ppoll, select, pselect, epoll_wait, epoll_pwait and epoll_pwait2 with EINTR,
// with or without SA_RESTART; the sigmask variants honour their mask both
// ways; an ignored SIGCHLD interrupts nothing; after SIGSTOP and SIGCONT
// epoll_wait fails with EINTR while poll and select carry on.
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
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

enum {
	WATCHDOG_S = 30,
	ALARM_MS = 50,	   // when the timer fires
	LONG_MS = 3000,	   // a wait the signal must cut short
	SHORT_MS = 150,	   // a wait that should time out
	QUIET_MS = 30,
	CMD_EXIT = 1,
};

static volatile sig_atomic_t handled;

static void on_signal(int sig)
{
	(void)sig;
	handled++;
}

static void handle(int sig, int flags)
{
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = flags };

	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) < 0)
		t_fatal("sigaction");
}

static void alarm_in(int ms)
{
	struct itimerval it = { .it_value = { ms / 1000, (ms % 1000) * 1000 } };

	if (setitimer(ITIMER_REAL, &it, NULL) < 0)
		t_fatal("setitimer");
}

struct scene {
	int c, s, rd, wr, ep;
};

// Each waits on tcp_c and a pipe for reading, `ms` at most; `mask` is
// passed to the variants that take one.
typedef int (*wait_fn)(struct scene *, int ms, const sigset_t *mask);

static int w_poll(struct scene *sc, int ms, const sigset_t *mask)
{
	struct pollfd p[2] = { { sc->c, POLLIN, 0 }, { sc->rd, POLLIN, 0 } };

	(void)mask;
	return poll(p, 2, ms);
}

static int w_ppoll(struct scene *sc, int ms, const sigset_t *mask)
{
	struct pollfd p[2] = { { sc->c, POLLIN, 0 }, { sc->rd, POLLIN, 0 } };
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	return ppoll(p, 2, &ts, mask);
}

static void fill(struct scene *sc, fd_set *rd)
{
	FD_ZERO(rd);
	FD_SET(sc->c, rd);
	FD_SET(sc->rd, rd);
}

static int w_select(struct scene *sc, int ms, const sigset_t *mask)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	fd_set rd;

	(void)mask;
	fill(sc, &rd);
	return select((sc->c > sc->rd ? sc->c : sc->rd) + 1, &rd, NULL, NULL, &tv);
}

static int w_pselect(struct scene *sc, int ms, const sigset_t *mask)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	fd_set rd;

	fill(sc, &rd);
	return pselect((sc->c > sc->rd ? sc->c : sc->rd) + 1, &rd, NULL, NULL, &ts, mask);
}

static int w_epoll_wait(struct scene *sc, int ms, const sigset_t *mask)
{
	struct epoll_event ev[2];

	(void)mask;
	return epoll_wait(sc->ep, ev, 2, ms);
}

static int w_epoll_pwait(struct scene *sc, int ms, const sigset_t *mask)
{
	struct epoll_event ev[2];

	return epoll_pwait(sc->ep, ev, 2, ms, mask);
}

static int w_epoll_pwait2(struct scene *sc, int ms, const sigset_t *mask)
{
	struct epoll_event ev[2];
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	return epoll_pwait2(sc->ep, ev, 2, &ts, mask);
}

static const struct api {
	const char *name;
	wait_fn wait;
	bool masked; // takes a signal mask
} apis[] = {
	{ "poll", w_poll, false },		 { "ppoll", w_ppoll, true },
	{ "select", w_select, false },		 { "pselect", w_pselect, true },
	{ "epoll_wait", w_epoll_wait, false },	 { "epoll_pwait", w_epoll_pwait, true },
	{ "epoll_pwait2", w_epoll_pwait2, true },
};
#define N_APIS (sizeof(apis) / sizeof(apis[0]))

static void scene_open(struct scene *sc)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int p[2];

	t_pair(AF_INET, &sc->c, &sc->s);
	if (pipe2(p, O_CLOEXEC) < 0)
		t_fatal("pipe2");
	sc->rd = p[0];
	sc->wr = p[1];
	sc->ep = epoll_create1(EPOLL_CLOEXEC);
	if (sc->ep < 0)
		t_fatal("epoll_create1");
	ev.data.u64 = 1;
	if (epoll_ctl(sc->ep, EPOLL_CTL_ADD, sc->c, &ev) < 0)
		t_fatal("epoll_ctl(tcp_c)");
	ev.data.u64 = 2;
	if (epoll_ctl(sc->ep, EPOLL_CTL_ADD, sc->rd, &ev) < 0)
		t_fatal("epoll_ctl(pipe)");
}

static void scene_close(struct scene *sc)
{
	close(sc->c);
	close(sc->s);
	close(sc->rd);
	close(sc->wr);
	close(sc->ep);
}

// SIGALRM while blocked in each call, handled with `flags`.
static void interrupted(struct scene *sc, int flags, const char *how)
{
	char label[128];

	handle(SIGALRM, flags);
	for (size_t i = 0; i < N_APIS; i++) {
		int64_t start = t_now_ns();

		handled = 0;
		alarm_in(ALARM_MS);
		snprintf(label, sizeof(label), "%s, SIGALRM %s", apis[i].name, how);
		T_REPORT(label, apis[i].wait(sc, LONG_MS, NULL));
		printf("  handler ran %d time(s), returned before the timeout: %s\n", (int)handled,
		       t_elapsed_ms(start) < LONG_MS ? "yes" : "no");
	}
	t_watchdog(WATCHDOG_S); // the watchdog's own SIGALRM handler again
}

static bool blocked(int sig)
{
	sigset_t cur;

	sigprocmask(SIG_BLOCK, NULL, &cur);
	return sigismember(&cur, sig);
}

static void masks(struct scene *sc)
{
	sigset_t block_usr1, none, old;
	char label[128];

	sigemptyset(&none);
	sigemptyset(&block_usr1);
	sigaddset(&block_usr1, SIGUSR1);
	handle(SIGUSR1, 0);

	// The call's mask blocks a signal that arrives during the call: it
	// times out, and the handler runs once the thread's mask is back.
	for (size_t i = 0; i < N_APIS; i++) {
		sigset_t block_alrm;
		int64_t start;
		int r, err;

		if (!apis[i].masked)
			continue;
		sigemptyset(&block_alrm);
		sigaddset(&block_alrm, SIGALRM);
		handled = 0;
		handle(SIGALRM, 0);
		alarm_in(ALARM_MS);
		start = t_now_ns();
		errno = T_ERRNO_SENTINEL;
		r = apis[i].wait(sc, SHORT_MS, &block_alrm);
		err = errno;
		snprintf(label, sizeof(label), "%s(mask blocks SIGALRM), SIGALRM during the call",
			 apis[i].name);
		t_report(label, r, err);
		printf("  handler ran %d time(s), waited the whole timeout: %s\n", (int)handled,
		       t_elapsed_ms(start) >= SHORT_MS - 5 ? "yes" : "no");
		t_watchdog(WATCHDOG_S);
	}

	// The thread blocks SIGUSR1 and one is pending: a mask that unblocks it
	// interrupts at once; the thread's mask is back afterwards.
	sigprocmask(SIG_BLOCK, &block_usr1, &old);
	for (size_t i = 0; i < N_APIS; i++) {
		int64_t start;

		if (!apis[i].masked)
			continue;
		handled = 0;
		raise(SIGUSR1);
		start = t_now_ns();
		snprintf(label, sizeof(label), "%s(empty mask), SIGUSR1 pending and blocked",
			 apis[i].name);
		T_REPORT(label, apis[i].wait(sc, LONG_MS, &none));
		printf("  handler ran %d time(s), at once: %s, SIGUSR1 blocked again: %s\n",
		       (int)handled, t_elapsed_ms(start) < LONG_MS / 2 ? "yes" : "no",
		       blocked(SIGUSR1) ? "yes" : "no");
	}

	// A NULL mask changes nothing: the pending signal stays pending.
	handled = 0;
	raise(SIGUSR1);
	T_REPORT("ppoll(NULL mask), SIGUSR1 pending and blocked", w_ppoll(sc, QUIET_MS, NULL));
	T_REPORT("epoll_pwait(NULL mask), SIGUSR1 pending and blocked",
		 w_epoll_pwait(sc, QUIET_MS, NULL));
	printf("  handler ran %d time(s)\n", (int)handled);
	sigprocmask(SIG_SETMASK, &old, NULL);
	printf("  after unblocking: handler ran %d time(s)\n", (int)handled);
}

// A child that exits when told: its SIGCHLD (default: ignored) must not
// interrupt anything. Forked before any socket exists.
struct reaper {
	pid_t pid;
	struct t_chan cmd;
};

static void reaper_start(struct reaper *r)
{
	t_chan_open(&r->cmd);
	r->pid = t_fork();
	if (r->pid == 0) {
		close(r->cmd.wr);
		t_chan_get(&r->cmd);
		_exit(0);
	}
	close(r->cmd.rd);
}

struct later {
	struct scene *sc;
	struct reaper *r;
	pthread_t th;
};

static void *child_exit_then_data(void *arg)
{
	struct later *l = arg;

	t_sleep_ms(QUIET_MS);
	t_chan_put(&l->r->cmd, CMD_EXIT);
	t_sleep_ms(2 * QUIET_MS);
	t_send_all(l->sc->s, "late", 4);
	return NULL;
}

static void sigchld(struct scene *sc, struct reaper *r)
{
	struct later l = { .sc = sc, .r = r };
	char buf[8];

	signal(SIGCHLD, SIG_DFL);
	if (pthread_create(&l.th, NULL, child_exit_then_data, &l))
		t_fatal("pthread_create");
	T_REPORT("poll, a child exits (SIGCHLD default), then data", w_poll(sc, LONG_MS, NULL));
	pthread_join(l.th, NULL);
	T_REPORT_DATA("  recv(tcp_c)", recv(sc->c, buf, sizeof(buf), 0), buf);
	printf("  child exit status %d\n", t_wait_child(r->pid));
}

// ---- stop and continue: a child waits in each call in turn

struct stopee {
	pid_t pid;
	struct t_chan ready, go;
};

static void stopee_main(struct stopee *st)
{
	struct scene sc;
	char label[96];

	t_watchdog(WATCHDOG_S); // alarms do not survive fork
	close(st->ready.rd);
	close(st->go.wr);
	// Its own connection, made after the fork.
	scene_open(&sc);
	close(sc.rd);
	sc.rd = st->go.rd; // the parent's "carry on" byte arrives here
	{
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 2 };

		if (epoll_ctl(sc.ep, EPOLL_CTL_ADD, sc.rd, &ev) < 0)
			t_fatal("epoll_ctl(go)");
	}
	for (size_t i = 0; i < N_APIS; i++) {
		t_chan_put(&st->ready, (uint32_t)i);
		snprintf(label, sizeof(label), "child: %s across SIGSTOP and SIGCONT",
			 apis[i].name);
		T_REPORT(label, apis[i].wait(&sc, LONG_MS, NULL));
		// The parent's byte: wait for it if the call ended early.
		t_chan_get(&st->go);
	}
	exit(t_finish()); // exit, not _exit: the library reports its counters at exit
}

static void stopee_start(struct stopee *st)
{
	t_chan_open(&st->ready);
	t_chan_open(&st->go);
	st->pid = t_fork();
	if (st->pid == 0)
		stopee_main(st);
	close(st->ready.wr);
	close(st->go.rd);
}

static void stop_continue(struct stopee *st)
{
	for (size_t i = 0; i < N_APIS; i++) {
		int status;

		if (t_chan_get(&st->ready) != i)
			t_fatal("child out of step");
		t_wait_asleep(st->pid, st->pid, QUIET_MS);
		kill(st->pid, SIGSTOP);
		if (waitpid(st->pid, &status, WUNTRACED) < 0 || !WIFSTOPPED(status))
			t_fatal("child did not stop");
		kill(st->pid, SIGCONT);
		if (waitpid(st->pid, &status, WCONTINUED) < 0 || !WIFCONTINUED(status))
			t_fatal("child did not continue");
		t_sleep_ms(QUIET_MS);
		t_chan_put(&st->go, 1);
	}
	printf("child exit status %d\n", t_wait_child(st->pid));
}

int main(void)
{
	struct scene sc;
	struct reaper r;
	struct stopee st;

	t_start(WATCHDOG_S);
	// Children first, before any socket exists.
	reaper_start(&r);
	stopee_start(&st);
	printf("-- stop and continue\n");
	stop_continue(&st);

	scene_open(&sc);
	printf("-- interrupted\n");
	interrupted(&sc, 0, "without SA_RESTART");
	interrupted(&sc, SA_RESTART, "with SA_RESTART");
	printf("-- masks\n");
	masks(&sc);
	printf("-- SIGCHLD\n");
	sigchld(&sc, &r);
	scene_close(&sc);
	return t_finish();
}
