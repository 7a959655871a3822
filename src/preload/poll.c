// SPDX-License-Identifier: MIT
/*
 * poll, ppoll, select and pselect over shunt sockets, shunt epoll instances
 * and kernel descriptors together. Circuits are checked in user space,
 * kernel descriptors with a zero-timeout ppoll; after a short spin the
 * thread sleeps in one ppoll on the kernel descriptors plus the notice hub,
 * after arming the circuits so that their peers post notices. Under a
 * seccomp filter that keeps the hub from it, it sleeps in short naps.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/chan.h"
#include "preload/conn.h"
#include "preload/epoll.h"
#include "preload/fault.h"
#include "preload/fdtable.h"
#include "preload/file.h"
#include "preload/fork.h"
#include "preload/libc.h"
#include "preload/notice.h"
#include "preload/ops.h"
#include "preload/seccomp.h"
#include "preload/sock.h"
#include "preload/spin.h"
#include "preload/util.h"
#include "preload/wait.h"

/* The kernel's check, before it reads the array: more entries than the descriptor limit. */
static bool too_many(nfds_t n)
{
	struct rlimit rl;

	return getrlimit(RLIMIT_NOFILE, &rl) == 0 && n > rl.rlim_cur;
}

bool shunt_poll_has_ours(const struct pollfd *ufds, nfds_t n)
{
	struct pollfd chunk[64];

	/* A long array is checked against the limit first: it may not be that long at all. */
	if (n > 256 && too_many(n))
		return false;
	for (nfds_t at = 0; at < n; at += 64) {
		nfds_t k = n - at < 64 ? n - at : 64;

		/* One it cannot read is the kernel's to refuse (EINVAL or EFAULT, in its order). */
		if (shunt_get_user(chunk, ufds + at, k * sizeof(*chunk)))
			return false;
		for (nfds_t i = 0; i < k; i++)
			if (shunt_fdt_is_ours(chunk[i].fd))
				return true;
	}
	return false;
}

unsigned shunt_sock_poll_mask(struct shunt_sock *s, int fd)
{
	struct pollfd p = { fd, POLLIN | POLLOUT | POLLRDHUP | POLLPRI | POLLRDNORM | POLLWRNORM |
				POLLRDBAND | POLLWRBAND, 0 };
	struct timespec zero = { 0, 0 };
	unsigned mask;

	int st = shunt_sock_state(s);
	struct shunt_conn *c = s->conn;
	uint32_t setup;

	/*
	 * No state change here: epoll asks under the notice lock, and a change
	 * (a refused connect, a moved connection) is made by the next call on
	 * the socket. A connection that moved is the kernel socket's to report.
	 */
	if ((st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING) && c &&
	    !shunt_conn_moved(c)) {
		setup = atomic_load_explicit(&c->hdr->setup, memory_order_acquire);
		/* As shunt_sock_sync reads it: all but PENDING and REFUSED is established. */
		if (st == SHUNT_SOCK_CONNECTED || (setup != SHUNT_SETUP_PENDING &&
						  setup != SHUNT_SETUP_REFUSED))
			return shunt_conn_poll(c, shunt_sock_opt_rcvlowat(s));
		if (setup == SHUNT_SETUP_PENDING)
			return 0;
		/*
		 * Refused (the next call on the socket makes it unconnected):
		 * as tcp_done leaves it, closed with both sides shut, and the
		 * pending error.
		 */
		return POLLIN | POLLRDNORM | POLLRDHUP | POLLOUT | POLLWRNORM | POLLHUP | POLLERR;
	}
	/* Not a circuit (any more): the kernel half, plus a refused circuit's error. */
	mask = shunt_syscall(SYS_ppoll, &p, 1, &zero, NULL, 0) > 0 ? (unsigned)p.revents : 0;
	return mask | (atomic_load(&s->so_error) ? POLLERR : 0);
}

/* One application pollfd and what answers for it. */
struct entry {
	struct shunt_sock *sock;	/* a circuit socket, or NULL */
	struct shunt_epoll *ep;		/* a shunt epoll instance, or NULL */
	int kidx;			/* its kernel pollfd, or -1 */
	int didx;			/* a listener's doorbell pollfd, or -1 */
};

struct poll_set {
	struct pollfd *app;
	nfds_t n;
	struct entry *e;
	struct pollfd *k;		/* kernel pollfds, plus slots for the kick and the hub */
	int nk;
	bool has_circuits;
};

static bool is_circuit(struct shunt_sock *s)
{
	int st = shunt_sock_sync(s);

	return st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING ||
	       atomic_load(&s->so_error);
}

static int set_build(struct poll_set *ps, struct pollfd *fds, nfds_t n)
{
	ps->app = fds;
	ps->n = n;
	ps->nk = 0;
	ps->has_circuits = false;
	ps->e = calloc(n ? n : 1, sizeof(*ps->e));
	ps->k = calloc(2 * n + 2, sizeof(*ps->k));
	if (!ps->e || !ps->k) {
		free(ps->e);
		free(ps->k);
		return -ENOMEM;
	}
	for (nfds_t i = 0; i < n; i++) {
		struct shunt_file *f = shunt_fdt_get_file(fds[i].fd);
		struct shunt_sock *s = f && f->kind == SHUNT_FILE_SOCK ? (struct shunt_sock *)f : NULL;
		struct entry *e = &ps->e[i];

		e->kidx = e->didx = -1;
		if (s && is_circuit(s)) {
			e->sock = s;
			ps->has_circuits = true;
			continue;
		}
		e->kidx = ps->nk;
		ps->k[ps->nk++] = (struct pollfd){ fds[i].fd, fds[i].events, 0 };
		if (f && f->kind == SHUNT_FILE_EPOLL) {
			/* Its kernel readiness must now show what sits on its ready list. */
			e->ep = (struct shunt_epoll *)f;
			shunt_epoll_expose(e->ep);
			ps->has_circuits = true;
			continue;
		}
		/* A shunt listener is readable when either backlog holds a connection. */
		if (s && shunt_sock_state(s) == SHUNT_SOCK_LISTENING && s->bells >= 0 &&
		    (fds[i].events & (POLLIN | POLLRDNORM))) {
			e->didx = ps->nk;
			ps->k[ps->nk++] = (struct pollfd){ s->bells, POLLIN, 0 };
		}
		if (f)
			shunt_file_put(f);
	}
	return 0;
}

static void set_free(struct poll_set *ps)
{
	for (nfds_t i = 0; i < ps->n; i++) {
		if (ps->e[i].sock)
			shunt_sock_put(ps->e[i].sock);
		if (ps->e[i].ep)
			shunt_file_put(&ps->e[i].ep->f);
	}
	free(ps->e);
	free(ps->k);
}

/* Fill in revents from the circuits and the last kernel poll; count them. */
static int set_collect(struct poll_set *ps)
{
	int count = 0;

	for (nfds_t i = 0; i < ps->n; i++) {
		struct entry *e = &ps->e[i];
		short want = ps->app[i].events | POLLERR | POLLHUP | POLLNVAL;
		short rev = 0;

		if (e->sock && e->kidx < 0 && shunt_sock_sync(e->sock) == SHUNT_SOCK_KERNEL) {
			/* Its connection moved onto the kernel: from now on the kernel waits for it. */
			struct timespec zero = { 0, 0 };

			e->kidx = ps->nk;
			ps->k[ps->nk++] = (struct pollfd){ ps->app[i].fd, ps->app[i].events, 0 };
			shunt_syscall(SYS_ppoll, &ps->k[e->kidx], 1, &zero, NULL, 0);
		}
		if (e->sock && e->kidx < 0)
			rev = (short)(shunt_sock_poll_mask(e->sock, ps->app[i].fd) & want);
		if (e->kidx >= 0)
			rev |= ps->k[e->kidx].revents;
		if (e->didx >= 0 && (ps->k[e->didx].revents & POLLIN))
			rev |= (short)(ps->app[i].events & (POLLIN | POLLRDNORM));
		if (e->ep && (rev & POLLIN) && !shunt_epoll_readable(e->ep))
			rev &= (short)~(POLLIN | POLLRDNORM);	/* only stale entries made it look ready */
		else if (e->ep && shunt_epoll_ready_now(e->ep))
			rev |= (short)(ps->app[i].events & (POLLIN | POLLRDNORM));
		ps->app[i].revents = rev;
		count += rev != 0;
	}
	return count;
}

enum {
	NAP_MIN_NS = 50 * 1000,		/* naps, when the hub cannot be slept on */
	NAP_MAX_NS = 2 * 1000 * 1000,
};

static int kernel_poll(struct poll_set *ps, int nk, const struct timespec *ts,
		       const sigset_t *mask)
{
	if (!nk && ts && !ts->tv_sec && !ts->tv_nsec)
		return 0;
	if (!ts || ts->tv_sec || ts->tv_nsec)
		shunt_chan_let_go();
	long r = shunt_syscall(SYS_ppoll, ps->k, nk, ts, mask, mask ? _NSIG / 8 : 0);

	/* A filter that allows poll(2) and not ppoll (the program calls poll()). */
	if (r < 0 && errno == SHUNT_SYS_DENIED && !mask) {
		int64_t ms = ts ? ts->tv_sec * 1000 + (ts->tv_nsec + 999999) / 1000000 : -1;

		r = shunt_syscall(SYS_poll, ps->k, nk, ms > INT_MAX ? INT_MAX : ms);
	}
	/* Nothing of the kernel's to watch (a select() on circuits only): a nap will do. */
	if (r < 0 && errno == SHUNT_SYS_DENIED && !nk && ts)
		return shunt_sys_nap(ts->tv_sec * 1000000000 + ts->tv_nsec);
	return r < 0 ? -errno : (int)r;
}

/*
 * Whether sleeping on the notice hub works here: it must be drained with
 * epoll_wait (a ready hub would otherwise wake us at once, forever) and the
 * thread needs its kick descriptor. A seccomp filter may forbid either.
 */
static bool hub_sleep_ok(int hub, int kick)
{
	if (hub < 0 || kick < 0)
		return false;
	return !shunt_seccomp_active() || shunt_seccomp_allows(SYS_epoll_wait, hub, 0, 32, 0);
}

/* Announce (or withdraw) this thread as a sleeper on every circuit of the set. */
static void arm(struct poll_set *ps, int delta)
{
	for (nfds_t i = 0; i < ps->n; i++) {
		struct shunt_sock *s = ps->e[i].sock;
		struct shunt_conn *c;

		if (!s || !(c = s->conn))
			continue;
		/* W1: as in shunt_wait_end, seq_cst pairs with shunt_wake's fence. */
		atomic_fetch_add_explicit(&c->me->evented, (uint32_t)delta, memory_order_seq_cst);
	}
	shunt_notice_sleepers(delta);
}

/* poll over the library's own array @fds. */
static int poll_run(struct pollfd *fds, nfds_t n, int64_t timeout_ns, const sigset_t *mask)
{
	int64_t start = shunt_now_ns(), nap = NAP_MIN_NS;
	int64_t deadline = timeout_ns >= 0 ? start + timeout_ns : -1;
	struct timespec zero = { 0, 0 };
	struct shunt_spin sp;
	struct poll_set ps;

	/* A fork child sleeps on its own routes (fork.h). */
	shunt_fork_settle();
	bool hub_fired = false, spinning;
	int r, count;

	r = set_build(&ps, fds, n);
	if (r < 0)
		return r;
	/* Not with a signal mask: a signal it lets through must find us asleep. */
	spinning = ps.has_circuits && !mask && timeout_ns != 0;
	if (spinning)
		shunt_spin_begin(&sp, start, NULL);
	for (unsigned round = 0;; round++) {
		int64_t now;

		/* While spinning, ask the kernel only now and then: it costs a syscall. */
		if (round == 0 || !(round % 32) || !ps.has_circuits) {
			r = kernel_poll(&ps, ps.nk, &zero, NULL);
			if (r < 0)
				break;
		}
		shunt_notice_drain(hub_fired);
		hub_fired = false;
		count = set_collect(&ps);
		if (count || timeout_ns == 0) {
			r = count;
			break;
		}
		now = shunt_now_ns();
		if (deadline >= 0 && now >= deadline) {
			r = 0;
			break;
		}
		if (spinning && shunt_spin_go_on(&sp)) {
			shunt_cpu_relax();
			continue;
		}
		if (spinning) {
			shunt_spin_end(&sp, false);
			spinning = false;
		}
		/* Sleep: kernel descriptors plus the notice hub, after arming the circuits. */
		struct timespec left, *lp = NULL;
		int nk = ps.nk, hub = ps.has_circuits ? shunt_notice_hub() : -1;
		/* Listed before the drain below: a drain after it kicks us (see notice.c). */
		int kick = hub >= 0 ? shunt_notice_kick_begin() : -1;
		/* Without the hub, circuits are looked at again after a nap. */
		bool napping = ps.has_circuits && !hub_sleep_ok(hub, kick);

		if (napping)
			hub = -1;
		if (kick >= 0 && !napping)
			ps.k[nk++] = (struct pollfd){ kick, POLLIN, 0 };
		if (hub >= 0)
			ps.k[nk++] = (struct pollfd){ hub, POLLIN, 0 };
		arm(&ps, 1);
		shunt_notice_drain(false);
		count = set_collect(&ps);
		if (!count) {
			int64_t l = deadline >= 0 ? deadline - shunt_now_ns() : INT64_MAX;

			if (napping && l > nap)
				l = nap;
			if (l != INT64_MAX) {
				if (l < 0)
					l = 0;
				left.tv_sec = l / 1000000000;
				left.tv_nsec = l % 1000000000;
				lp = &left;
			}
			r = kernel_poll(&ps, nk, lp, mask);
			hub_fired = hub >= 0 && (ps.k[nk - 1].revents & POLLIN);
			if (napping)
				nap = nap * 2 < NAP_MAX_NS ? nap * 2 : NAP_MAX_NS;
		}
		arm(&ps, -1);
		if (kick >= 0)
			shunt_notice_kick_end(kick);
		if (count) {
			/* Ready before we slept: the kernel entries still need a fresh look. */
			r = kernel_poll(&ps, ps.nk, &zero, NULL);
			if (r >= 0)
				r = set_collect(&ps);
			break;
		}
		if (r < 0)
			break;		/* EINTR: poll is never restarted */
		shunt_notice_drain(hub_fired);
		hub_fired = false;
		count = set_collect(&ps);
		if (count) {
			r = count;
			break;
		}
	}
	if (spinning)
		shunt_spin_end(&sp, r > 0);
	set_free(&ps);
	return r;
}

int shunt_op_poll(struct pollfd *ufds, nfds_t n, int64_t timeout_ns, const sigset_t *mask)
{
	struct pollfd *fds;
	int r;

	/* do_sys_poll: the limit, then the whole array read in, before anything else. */
	if (too_many(n))
		return -EINVAL;
	fds = malloc((n ? n : 1) * sizeof(*fds));
	if (!fds)
		return -ENOMEM;
	r = shunt_get_user(fds, ufds, n * sizeof(*fds));
	if (r == 0)
		r = poll_run(fds, n, timeout_ns, mask);
	/* Every revents goes back, even after EINTR; one it cannot write is EFAULT. */
	for (nfds_t i = 0; r != -EFAULT && r != -ENOMEM && i < n; i++)
		if (shunt_put_user(&ufds[i].revents, &fds[i].revents, sizeof(fds[i].revents)))
			r = -EFAULT;
	free(fds);
	return r;
}

int shunt_op_select(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, int64_t timeout_ns,
		    const sigset_t *mask, int64_t *left_ns)
{
	int64_t start = shunt_now_ns();
	struct pollfd *p;
	nfds_t n = 0;
	int r, count = 0;

	if (nfds < 0)
		return -EINVAL;
	p = calloc(nfds ? (size_t)nfds : 1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;

		if (rd && FD_ISSET(fd, rd))
			ev |= POLLIN | POLLRDNORM | POLLRDBAND;
		if (wr && FD_ISSET(fd, wr))
			ev |= POLLOUT | POLLWRNORM | POLLWRBAND;
		if (ex && FD_ISSET(fd, ex))
			ev |= POLLPRI;
		if (ev)
			p[n++] = (struct pollfd){ fd, ev, 0 };
	}
	r = poll_run(p, n, timeout_ns, mask);
	if (r >= 0) {
		for (nfds_t i = 0; i < n; i++)
			if (p[i].revents & POLLNVAL)
				r = -EBADF;
	}
	if (r >= 0) {
		/* The kernel's POLLIN_SET, POLLOUT_SET and POLLEX_SET. */
		for (nfds_t i = 0; i < n; i++) {
			int fd = p[i].fd;
			short rev = p[i].revents;

			if (rd && FD_ISSET(fd, rd) && !(rev & (POLLIN | POLLRDNORM | POLLRDBAND |
							      POLLHUP | POLLERR)))
				FD_CLR(fd, rd);
			else if (rd && FD_ISSET(fd, rd))
				count++;
			if (wr && FD_ISSET(fd, wr) && !(rev & (POLLOUT | POLLWRNORM | POLLWRBAND |
							      POLLERR)))
				FD_CLR(fd, wr);
			else if (wr && FD_ISSET(fd, wr))
				count++;
			if (ex && FD_ISSET(fd, ex) && !(rev & POLLPRI))
				FD_CLR(fd, ex);
			else if (ex && FD_ISSET(fd, ex))
				count++;
		}
		r = count;
		/* The kernel writes whole words back: bits past nfds in the last one read 0. */
		for (int fd = nfds; fd % (8 * (int)sizeof(long)); fd++) {
			if (rd)
				FD_CLR(fd, rd);
			if (wr)
				FD_CLR(fd, wr);
			if (ex)
				FD_CLR(fd, ex);
		}
	}
	if (left_ns && timeout_ns >= 0) {
		int64_t l = timeout_ns - (shunt_now_ns() - start);

		*left_ns = l > 0 ? l : 0;
	}
	free(p);
	return r;
}
