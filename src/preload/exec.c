// SPDX-License-Identifier: MIT
/*
 * Connections across exec: kept on their circuits for a new image that
 * runs the library too (an exec ticket at shuntd, claimed by the new image
 * at start), moved onto the kernel for one that cannot take them.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "common/lock.h"
#include "common/log.h"
#include "common/reach.h"
#include "common/sys.h"
#include "preload/conn.h"
#include "preload/control.h"
#include "preload/exec.h"
#include "preload/family.h"
#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/fork.h"
#include "preload/handoff.h"
#include "preload/inherited.h"
#include "preload/libc.h"
#include "preload/notice.h"
#include "preload/ops.h"
#include "preload/sock.h"
#include "preload/stats.h"
#include "preload/stdstream.h"
#include "preload/util.h"

enum { WHY_LEN = 4400, PATH_LEN = 4096 };

/* ---- before exec: will the new image take the connections? ---- */

/* The value of @name in environment @envp, or NULL. */
static const char *env_get(char *const *envp, const char *name)
{
	size_t n = strlen(name);

	for (; envp && *envp; envp++)
		if (!strncmp(*envp, name, n) && (*envp)[n] == '=')
			return *envp + n + 1;
	return NULL;
}

/* Whether LD_PRELOAD value @list names this library (by file, or by name for a bare name). */
static bool preloads_us(const char *list)
{
	Dl_info info;
	struct stat me, st;
	const char *base;
	char item[PATH_LEN];

	if (!list || !dladdr((void *)shunt_exec_prepare, &info) || !info.dli_fname ||
	    stat(info.dli_fname, &me) < 0)
		return false;
	base = strrchr(info.dli_fname, '/');
	base = base ? base + 1 : info.dli_fname;
	/* ld.so splits LD_PRELOAD at spaces and colons. */
	while (*list) {
		size_t n = strcspn(list, " :");

		if (n && n < sizeof(item)) {
			memcpy(item, list, n);
			item[n] = 0;
			if (strchr(item, '/') ? stat(item, &st) == 0 && st.st_dev == me.st_dev &&
						  st.st_ino == me.st_ino
					      : !strcmp(item, base))
				return true;
		}
		list += n;
		list += strspn(list, " :");
	}
	return false;
}

/* The file the exec of @t will run, in @out; false if we cannot tell. */
static bool target_file(const struct shunt_exec_target *t, char *out, size_t n)
{
	if (t->dirfd != AT_FDCWD && (t->at_flags & AT_EMPTY_PATH) && (!t->path || !*t->path))
		return (size_t)snprintf(out, n, "/proc/self/fd/%d", t->dirfd) < n;
	if (!t->path)
		return false;
	if (t->dirfd != AT_FDCWD && t->path[0] != '/')
		return (size_t)snprintf(out, n, "/proc/self/fd/%d/%s", t->dirfd, t->path) < n;
	if (t->search)
		return shunt_reach_resolve(t->path, getenv("PATH"), out, n);
	return (size_t)snprintf(out, n, "%s", t->path) < n;
}

/*
 * Why the new image of @t cannot take our circuits over, in @why, or false
 * when it can: its environment preloads this library, does not switch it
 * off, names the same shuntd, and the file is one the loader preloads into.
 */
static bool cannot_take(const struct shunt_exec_target *t, char *why, size_t n)
{
	const char *off = env_get(t->envp, "SHUNT_DISABLE");
	const char *sock = env_get(t->envp, "SHUNT_SOCKET");
	char file[PATH_LEN];

	if (!sock || !*sock)
		sock = "/run/shunt/shuntd.sock";
	if (!preloads_us(env_get(t->envp, "LD_PRELOAD")))
		snprintf(why, n, "its environment does not preload libshunt");
	else if (off && *off && strcmp(off, "0"))
		snprintf(why, n, "its environment sets SHUNT_DISABLE");
	else if (strcmp(sock, shunt_ctl_path()))
		snprintf(why, n, "its environment names another shuntd (SHUNT_SOCKET)");
	else if (!target_file(t, file, sizeof(file)))
		return false;	/* a file we cannot find: the exec will say why */
	else if (shunt_reach_foreign(file))
		snprintf(why, n, "%s is a program of another kind, which the loader will not "
			 "preload libshunt into", file);
	else if (!shunt_reach_why(file, why, n))
		return false;
	return true;
}

/* ---- before exec: keep or move ---- */

struct candidate {
	struct shunt_sock *s;		/* a reference held */
	int fd;				/* one descriptor of it that survives exec */
	bool listener;
};

static bool survives_exec(int fd)
{
	long flags = shunt_syscall(SYS_fcntl, fd, F_GETFD);

	return flags >= 0 && !(flags & FD_CLOEXEC);
}

enum { DUP2_MAX = 64 };

/*
 * Every shunt socket a descriptor of which survives exec, once each; for a
 * spawn, also those its file actions duplicate (they reach the child).
 */
static size_t collect(struct candidate **out, bool spawn)
{
	size_t high = shunt_fdt_high(), n = 0, cap = 0, nextra = 0;
	struct candidate *v = NULL;
	int extra[DUP2_MAX];

	if (spawn)
		nextra = shunt_handoff_dup2_sources(extra, DUP2_MAX);
	for (size_t k = 0; k < high + nextra; k++) {
		int fd = k < high ? (int)k : extra[k - high];
		struct shunt_sock *s;
		size_t i;
		int st;

		if (!shunt_fdt_is_ours(fd) || (k < high && !survives_exec(fd)))
			continue;
		s = shunt_fdt_get(fd);
		if (!s)
			continue;
		for (i = 0; i < n && v[i].s != s; i++)
			;
		st = shunt_sock_sync(s);
		if (i < n || !((st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING) ||
			       (st == SHUNT_SOCK_LISTENING && s->listener))) {
			shunt_sock_put(s);
			continue;
		}
		if (n == cap) {
			struct candidate *more = realloc(v, (cap ? 2 * cap : 8) * sizeof(*v));

			if (!more) {
				shunt_sock_put(s);
				break;
			}
			v = more;
			cap = cap ? 2 * cap : 8;
		}
		v[n++] = (struct candidate){ s, fd, st == SHUNT_SOCK_LISTENING };
	}
	*out = v;
	return n;
}

/* Give exec ticket @ticket a hold on @c's socket: 0 or -errno. */
static int keep(uint64_t ticket, struct candidate *c)
{
	struct shunt_sock *s = c->s;
	uint32_t flags;
	int r;

	pthread_mutex_lock(&s->lock);
	if (c->listener) {
		r = s->listener ? shunt_ctl_exec_keep(ticket, c->fd, 0, 0, s->listener, 0) : -ENOENT;
	} else if (!s->conn || shunt_conn_moved(s->conn)) {
		r = -ENOENT;
	} else {
		flags = s->connect_report == SHUNT_CONNECT_PENDING ? SHUNT_EXEC_CONNECT_PENDING : 0;
		r = shunt_ctl_exec_keep(ticket, c->fd, s->conn->circuit, s->conn->end, 0, flags);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/*
 * @envp with SHUNT_EXEC_KEPT_ENV set (once, at the end), for the new image
 * to claim its ticket at start; NULL without memory, and then the new image
 * starts lazily and the ticket lapses with the process.
 */
static char **env_marked(char *const *envp)
{
	static char mark[] = SHUNT_EXEC_KEPT_ENV "=1";
	size_t n = 0, k = 0;
	char **v;

	while (envp && envp[n])
		n++;
	v = malloc((n + 2) * sizeof(*v));
	if (!v)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(envp[i], mark, sizeof(SHUNT_EXEC_KEPT_ENV)))
			v[k++] = envp[i];
	v[k++] = mark;
	v[k] = NULL;
	return v;
}

struct shunt_exec_undo shunt_exec_prepare(const struct shunt_exec_target *t)
{
	char why[WHY_LEN], file[PATH_LEN];
	struct candidate *v = NULL;
	uint64_t ticket = 0;
	size_t n, nconn = 0, kept = 0;
	int saved = errno, r = 0;
	/* A clone(CLONE_VM) child runs here in our memory: our session and locks are not its. */
	bool shared_vm = !t->spawn && (uint32_t)shunt_syscall(SYS_getpid) != shunt_pid;

	if (shared_vm) {
		shunt_handoff_exec();
		errno = saved;
		return (struct shunt_exec_undo){ 0, false, NULL };
	}
	/* The new program inherits the program's own descriptor limit (fdlimit.c). */
	shunt_fdlimit_exec();
	/* A fork child's sockets are handed on as its own, once its claim is answered. */
	shunt_fork_settle();
	shunt_fork_freeze();
	/*
	 * The new image keeps our listeners outside our family (it cannot
	 * map the family's page); so do we if the exec fails, which is only
	 * a wait more at our close.
	 */
	if (!t->spawn)
		shunt_family_forsake();
	n = collect(&v, t->spawn);
	for (size_t i = 0; i < n; i++)
		nconn += !v[i].listener;
	if (!n)
		goto out;
	if (!target_file(t, file, sizeof(file)))
		snprintf(file, sizeof(file), "%s", t->path ? t->path : "?");
	if (!cannot_take(t, why, sizeof(why))) {
		r = shunt_ctl_exec(t->spawn ? SHUNT_EXEC_SPAWN : SHUNT_EXEC_IMAGE, &ticket);
		if (r < 0)
			snprintf(why, sizeof(why), "shuntd gave no exec ticket (%s)", strerror(-r));
	}
	for (size_t i = 0; i < n; i++) {
		if (ticket && keep(ticket, &v[i]) == 0) {
			kept += !v[i].listener;
			continue;
		}
		/* A listener needs no move: the new program registers it anew, or not. */
		if (!v[i].listener)
			shunt_sock_downgrade(v[i].s, v[i].fd);
	}
	if (ticket && kept)
		shunt_info("%s of %s: %zu connection%s stay%s in shared memory for the new program",
			   t->spawn ? "spawn" : "exec", file, kept, kept == 1 ? "" : "s",
			   kept == 1 ? "s" : "");
	if (kept < nconn)
		shunt_info("%s of %s: %s; %zu connection%s move%s onto the kernel",
			   t->spawn ? "spawn" : "exec", file,
			   ticket ? "shuntd would not keep them" : why, nconn - kept,
			   nconn - kept == 1 ? "" : "s", nconn - kept == 1 ? "s" : "");
out:
	for (size_t i = 0; i < n; i++)
		shunt_sock_put(v[i].s);
	free(v);
	errno = saved;
	return (struct shunt_exec_undo){ ticket, true, ticket ? env_marked(t->envp) : NULL };
}

void shunt_exec_failed(struct shunt_exec_undo u)
{
	int saved = errno;

	free(u.envp);
	if (u.ticket)
		shunt_ctl_exec_done(u.ticket, 0);
	if (u.frozen)
		shunt_fork_thaw();
	errno = saved;
}

void shunt_exec_spawned(struct shunt_exec_undo u, pid_t pid)
{
	int saved = errno;

	free(u.envp);
	/* Before the fork lock goes: the next spawn's ticket must find this one bound. */
	if (u.ticket)
		shunt_ctl_exec_done(u.ticket, pid > 0 ? pid : 0);
	if (u.frozen)
		shunt_fork_thaw();
	errno = saved;
}

/* ---- in the new image: take them over ---- */

/* An inherited TCP socket. */
struct inherited {
	int fd;
	uint64_t inode;
	bool used;
};

/*
 * Whether @fd is a TCP socket (in @ino its inode) that may be a circuit
 * kept for us: a circuit's kernel socket is a companion in repair mode, or,
 * without companions, one the kernel never connected. A listener may be
 * one a ticket kept too. An ordinary kernel connection is none of these.
 */
static bool maybe_kept(int fd, bool *hint)
{
	int domain = 0, type = 0, proto = 0, repair = 0;
	struct tcp_info ti = { 0 };
	socklen_t len = sizeof(int), tl = sizeof(ti);

	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) < 0 ||
	    (domain != AF_INET && domain != AF_INET6))
		return false;
	len = sizeof(int);
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM)
		return false;
	len = sizeof(int);
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) < 0 ||
	    proto != IPPROTO_TCP)
		return false;
	len = sizeof(int);
	if (SHUNT_LIBC(getsockopt)(fd, IPPROTO_TCP, TCP_REPAIR, &repair, &len) == 0 && repair)
		*hint = true;
	else if (SHUNT_LIBC(getsockopt)(fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 &&
		 (ti.tcpi_state == TCP_CLOSE || ti.tcpi_state == TCP_LISTEN))
		*hint = true;
	return true;
}

/* The inherited TCP sockets among @socks, and whether any may be kept for us. */
static size_t scan(const struct shunt_inherited *socks, size_t nsocks, struct inherited **out,
		   bool *hint)
{
	struct inherited *v = nsocks ? malloc(nsocks * sizeof(*v)) : NULL;
	size_t n = 0;

	*out = v;
	for (size_t i = 0; v && i < nsocks; i++)
		if (maybe_kept(socks[i].fd, hint))
			v[n++] = (struct inherited){ socks[i].fd, socks[i].ino, false };
	return n;
}

static int64_t timeo_us(int fd, int name)
{
	struct timeval tv;
	socklen_t len = sizeof(tv);

	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, name, &tv, &len) < 0 || tv.tv_sec < 0)
		return 0;
	return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

/* A holders' lock of our end still held under our pid: by a thread of the image that exec'd. */
static void unlock_stale(_Atomic uint32_t *word)
{
	uint32_t v = atomic_load(word);

	if ((v & SHUNT_LOCK_HELD) && (v & SHUNT_LOCK_OWNER) == shunt_pid)
		shunt_unlock(word, shunt_pid);
}

/*
 * A socket for circuit end @c, kept with flags @flags, on descriptors
 * @fds[0..n) (one open file: they share it). The socket's options are the
 * kernel socket's, which every option call set.
 */
static void rebuild(struct shunt_conn *c, uint32_t flags, const struct inherited *fds, size_t n)
{
	int fd = fds[0].fd, domain = AF_INET, lowat = 1;
	socklen_t len = sizeof(domain);
	struct linger lg = { 0, 0 };
	long fl = shunt_syscall(SYS_fcntl, fd, F_GETFL);
	uint32_t setup = atomic_load(&c->hdr->setup);
	struct shunt_sock *s;

	SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
	s = shunt_sock_new(domain, fl >= 0 && (fl & O_NONBLOCK));
	if (!s) {
		shunt_conn_close(c, false);
		return;
	}
	atomic_store(&s->rcvtimeo_us, timeo_us(fd, SO_RCVTIMEO));
	atomic_store(&s->sndtimeo_us, timeo_us(fd, SO_SNDTIMEO));
	len = sizeof(lowat);
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, &len) == 0 && lowat > 0)
		atomic_store(&s->rcvlowat, lowat);
	len = sizeof(lg);
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0)
		atomic_store(&s->linger_abort, lg.l_onoff && !lg.l_linger);
	/* No thread of this image holds any: a downgrade cut short by the exec held all four. */
	unlock_stale(&c->me->tx_lock);
	unlock_stale(&c->me->rx_lock);
	unlock_stale(&c->peer->tx_lock);
	unlock_stale(&c->peer->rx_lock);
	s->conn = c;
	shunt_sock_opts_to_circuit(s);
	shunt_notice_bind(c, s);
	s->connect_report = flags & SHUNT_EXEC_CONNECT_PENDING ? SHUNT_CONNECT_PENDING
							       : SHUNT_CONNECT_DONE;
	/* Still in the backlog's SYN queue: shunt_sock_sync follows it from here. */
	atomic_store_explicit(&s->state, setup == SHUNT_SETUP_ESTABLISHED ? SHUNT_SOCK_CONNECTED
									   : SHUNT_SOCK_CONNECTING,
			      memory_order_release);
	for (size_t i = 0; i < n; i++) {
		shunt_fdt_set(fds[i].fd, &s->f);
		shunt_stats_saw_fd(fds[i].fd);
	}
	shunt_sock_put(s);
}

void shunt_exec_adopt(const struct shunt_inherited *socks, size_t nsocks)
{
	struct inherited *v, *same;
	bool hint = false;
	size_t n = scan(socks, nsocks, &v, &hint), taken = 0, lost = 0;
	int r;

	if (!hint)
		goto out;
	r = shunt_ctl_exec_claim();
	/* The descriptors of one socket, found by its inode: at most all of them. */
	same = r > 0 ? malloc((n ? n : 1) * sizeof(*same)) : NULL;
	if (!same)
		goto out;
	for (;;) {
		struct shunt_grant g;
		struct shunt_conn *c;
		uint64_t ino;
		uint32_t flags;
		size_t k = 0;
		int err;

		r = shunt_ctl_exec_next(&g, &ino, &flags);
		if (r != SHUNT_OK)
			break;
		c = shunt_conn_open(&g, &err);
		if (!c) {
			/* We cannot serve it: let go, so that it ends rather than hangs. */
			shunt_ctl_close(g.msg.circuit, g.msg.end, true);
			lost++;
			continue;
		}
		for (size_t i = 0; i < n; i++)
			if (v[i].inode == ino && !v[i].used) {
				v[i].used = true;
				same[k++] = v[i];
			}
		if (!k) {
			/*
			 * Not ours after all: closed on the way (a spawn's file
			 * action, a raw close before the exec). This is its close.
			 */
			shunt_conn_close(c, false);
			continue;
		}
		rebuild(c, flags, same, k);
		taken++;
	}
	free(same);
	if (taken)
		shunt_stdio_adopt();
	if (taken || lost)
		shunt_info("took over %zu connection%s kept in shared memory across exec%s", taken,
			   taken == 1 ? "" : "s", lost ? "; some could not be mapped, and end" : "");
out:
	free(v);
}
