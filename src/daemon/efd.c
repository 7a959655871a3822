// SPDX-License-Identifier: MIT
/*
 * The eventfds shuntd shares with processes: listeners' doorbells (with
 * their holders), channels' bells (with the channel's client and the
 * listener's holders), journals' kicks and links' eventfds (with their
 * process). Each is one open file, so any of them can
 * clear its O_NONBLOCK for shuntd too, and fill its counter or empty it:
 * shuntd, one thread for every process, never waits on one.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/uio.h>

#include "common/log.h"
#include "daemon/shuntd.h"

enum {
	GUARD_NS = 2 * 1000 * 1000,	/* the longest a guarded call may wait */
};

/* A timer whose signal ends a call that waits (no SA_RESTART): set once, at start. */
static timer_t guard;
static bool have_guard;

static void on_guard(int sig)
{
	(void)sig;
}

int shuntd_efd_init(void)
{
	struct sigaction sa;
	struct sigevent sev;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_guard;
	sigemptyset(&sa.sa_mask);
	memset(&sev, 0, sizeof(sev));
	/* shuntd is one thread: the process's signal is that thread's. */
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGRTMIN;
	if (sigaction(SIGRTMIN, &sa, NULL) < 0 || timer_create(CLOCK_MONOTONIC, &sev, &guard) < 0) {
		shunt_err("cannot set up the guard timer of shared eventfds: %s", strerror(errno));
		return -1;
	}
	have_guard = true;
	return 0;
}

static void arm(long ns)
{
	struct itimerspec it = { .it_value = { 0, ns } };

	timer_settime(guard, 0, &it, NULL);
}

/* A read or write of 8 bytes that waits at most GUARD_NS, whatever the file's O_NONBLOCK. */
static ssize_t guarded(int efd, uint64_t *v, bool write_it)
{
	ssize_t r;

	if (have_guard)
		arm(GUARD_NS);
	r = write_it ? write(efd, v, sizeof(*v)) : read(efd, v, sizeof(*v));
	if (have_guard)
		arm(0);
	return r;
}

bool shuntd_efd_take(int efd)
{
	uint64_t v;
	struct iovec io = { &v, sizeof(v) };
	struct pollfd p = { efd, POLLIN, 0 };
	ssize_t r = preadv2(efd, &io, 1, -1, RWF_NOWAIT);

	if (r == sizeof(v))
		return true;
	if (r >= 0 || (errno != EOPNOTSUPP && errno != EINVAL))
		return false;
	/* A kernel whose eventfd knows no RWF_NOWAIT: look first, and never wait long. */
	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) && guarded(efd, &v, false) == sizeof(v);
}

void shuntd_efd_ring(int efd)
{
	uint64_t one = 1;
	struct pollfd p = { efd, POLLOUT, 0 };

	/*
	 * A counter that cannot take one more is readable already: its
	 * sleepers wake without us. The guard covers a holder that fills it
	 * between our look and our write.
	 */
	if (poll(&p, 1, 0) == 1 && (p.revents & POLLOUT))
		(void)guarded(efd, &one, true);
}

uint32_t shuntd_efd_take_some(int efd, uint32_t max)
{
	uint32_t n = 0;

	while (n < max && shuntd_efd_take(efd))
		n++;
	return n;
}

void shuntd_efd_give_back(int efd, uint32_t taken, uint32_t owed)
{
	for (uint32_t i = 0; i < taken && i < owed; i++)
		shuntd_efd_ring(efd);
}
