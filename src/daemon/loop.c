// SPDX-License-Identifier: MIT
/* shuntd's event loop: the control socket, every session, and idle exit. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sys.h"
#include "daemon/shuntd.h"

/* Tags for the daemon's own descriptors; sessions are tagged with themselves. */
static char tag_listen, tag_signal, tag_metrics;
static int signal_fd = -1;

int shuntd_loop_watch(struct shuntd *d, int fd, void *tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = tag };

	return epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

int shuntd_loop_watch_out(struct shuntd *d, int fd, void *tag, bool out)
{
	struct epoll_event ev = { .events = out ? EPOLLOUT : EPOLLIN, .data.ptr = tag };

	return epoll_ctl(d->epfd, EPOLL_CTL_MOD, fd, &ev) < 0 ? -errno : 0;
}

void shuntd_loop_unwatch(struct shuntd *d, int fd)
{
	epoll_ctl(d->epfd, EPOLL_CTL_DEL, fd, NULL);
}

void shuntd_loop_bury(struct shuntd *d, void *obj)
{
	if (d->ngraves == d->graves_cap) {
		size_t cap = d->graves_cap ? d->graves_cap * 2 : 16;
		void **g = realloc(d->graves, cap * sizeof(*g));

		/* Better a few bytes leaked than an event handled on freed memory. */
		if (!g)
			return;
		d->graves = g;
		d->graves_cap = cap;
	}
	d->graves[d->ngraves++] = obj;
}

/* The batch is done: nothing can name what went during it any more. */
static void empty_graves(struct shuntd *d)
{
	while (d->ngraves)
		free(d->graves[--d->ngraves]);
}

int shuntd_loop_init(struct shuntd *d)
{
	sigset_t set;

	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (d->epfd < 0) {
		shunt_err("epoll_create1: %s", strerror(errno));
		return -1;
	}
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal_fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (signal_fd < 0 || shuntd_loop_watch(d, signal_fd, &tag_signal) < 0 ||
	    shuntd_loop_watch(d, d->listen_fd, &tag_listen) < 0) {
		shunt_err("cannot set up the event loop: %s", strerror(errno));
		return -1;
	}
	return 0;
}

int shuntd_loop_run(struct shuntd *d)
{
	int64_t idle_since = shunt_sys_now_ms();

	while (!d->stopping) {
		struct epoll_event evs[64];
		int timeout = -1;
		int n;

		if (d->cfg.idle_exit_ms >= 0 && d->sessions.len == 0) {
			int64_t left = idle_since + d->cfg.idle_exit_ms - shunt_sys_now_ms();

			if (left <= 0) {
				snprintf(d->stop_reason, sizeof(d->stop_reason),
					 "no client for %d ms (--idle-exit)", d->cfg.idle_exit_ms);
				break;
			}
			timeout = (int)left;
		}
		/* TCP_DEFER_ACCEPT: deferred circuits are looked at while there are any. */
		timeout = shuntd_sooner(timeout, shuntd_listener_next_tick(d));
		/* Journals are read on a tick while entries keep coming. */
		timeout = shuntd_sooner(timeout, shuntd_journal_next_tick(d));
		/* Channels' connections that last get their companions. */
		timeout = shuntd_sooner(timeout, shuntd_chan_next_tick(d));
		/* Channels gone quiet give their freed slots' pages back. */
		timeout = shuntd_sooner(timeout, shuntd_chan_pages_next_tick(d));
		/*
		 * Fork tickets whose parent went before naming the child are let
		 * go; children that have not claimed their ticket are watched.
		 */
		timeout = shuntd_sooner(timeout, shuntd_fork_next_tick(d));
		/* A family's last close stops waiting for closes that never came. */
		timeout = shuntd_sooner(timeout, shuntd_family_next_tick(d));
		n = epoll_wait(d->epfd, evs, 64, timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			snprintf(d->stop_reason, sizeof(d->stop_reason), "epoll_wait failed: %s",
				 strerror(errno));
			return -1;
		}
		for (int i = 0; i < n; i++) {
			void *tag = evs[i].data.ptr;

			if (tag == &tag_listen) {
				shuntd_session_accept(d);
			} else if (tag == &tag_signal) {
				struct signalfd_siginfo si;

				if (read(signal_fd, &si, sizeof(si)) != sizeof(si))
					continue;
				if (si.ssi_signo == SIGHUP) {
					shunt_info("SIGHUP: reading the policy again");
					shuntd_policy_load(d);
					continue;
				}
				snprintf(d->stop_reason, sizeof(d->stop_reason), "signal %u (SIG%s) from pid %u",
					 si.ssi_signo, sigabbrev_np((int)si.ssi_signo) ?: "?", si.ssi_pid);
				d->stopping = true;
			} else if (tag == &tag_metrics) {
				shuntd_metrics_accept(d);
			} else if (*(int *)tag == SHUNTD_WATCH_GONE) {
				continue;	/* closed by an earlier event of this batch */
			} else if (*(int *)tag == SHUNTD_WATCH_METRICS) {
				shuntd_metrics_input(d, tag);
			} else if (*(int *)tag == SHUNTD_WATCH_TICKET) {
				shuntd_fork_ticket_exited(d, tag);
			} else if (*(int *)tag == SHUNTD_WATCH_NETNS) {
				shuntd_netns_input(d);
			} else if (*(int *)tag == SHUNTD_WATCH_EXEC_TIMER) {
				shuntd_exec_expired(d, shunt_container_of(tag, struct session,
									  timer_watch));
			} else if (*(int *)tag == SHUNTD_WATCH_JOURNAL) {
				shuntd_journal_kicked(d, tag);
			} else {
				shuntd_session_input(d, tag);
			}
		}
		shuntd_listener_tick(d);
		shuntd_journal_tick(d);
		shuntd_chan_tick(d);
		shuntd_chan_pages_tick(d);
		shuntd_fork_tick(d);
		shuntd_family_tick(d);
		empty_graves(d);
		if (d->sessions.len)
			idle_since = shunt_sys_now_ms();
	}
	free(d->graves);
	d->graves = NULL;
	d->graves_cap = 0;
	return 0;
}

int shuntd_loop_watch_metrics(struct shuntd *d, int fd)
{
	return shuntd_loop_watch(d, fd, &tag_metrics);
}
