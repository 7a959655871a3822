// SPDX-License-Identifier: MIT
// Implementation of the t_* helpers declared in t_harness.h. Scene-setting
// helpers are fatal on failure; the calls under test are never made here.
#include "t_harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

// Set by t_expect from any thread, read once by t_finish.
static atomic_bool failed;
static volatile sig_atomic_t sigpipe_count;

static void on_alarm(int sig)
{
	static const char msg[] = "FATAL: watchdog expired (a call hung)\n";

	(void)sig;
	// Only async-signal-safe calls here; stdout is line buffered, so no
	// complete line is lost by _exit.
	(void)!write(STDOUT_FILENO, msg, sizeof(msg) - 1);
	(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
	_exit(T_FAIL);
}

void t_watchdog(unsigned seconds)
{
	struct sigaction sa = { .sa_handler = on_alarm };

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) < 0)
		t_fatal("sigaction(SIGALRM)");
	alarm(seconds);
}

void t_start(unsigned watchdog_s)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	t_watchdog(watchdog_s);
}

void t_nofile_at_least(unsigned long n)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		t_fatal("getrlimit(RLIMIT_NOFILE)");
	if (rl.rlim_cur >= n)
		return;
	if (rl.rlim_max < n)
		t_skip("needs %lu descriptors, the hard limit is %lu", n, (unsigned long)rl.rlim_max);
	rl.rlim_cur = n;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		t_fatal("setrlimit(RLIMIT_NOFILE, %lu)", n);
}

void t_nofile_exactly(unsigned long n, struct rlimit *old)
{
	struct rlimit rl = { n, n };
	char label[64];

	if (getrlimit(RLIMIT_NOFILE, old) < 0)
		t_fatal("getrlimit(RLIMIT_NOFILE)");
	if (old->rlim_max < n)
		t_skip("needs a hard descriptor limit of %lu, it is %lu", n,
		       (unsigned long)old->rlim_max);
	snprintf(label, sizeof(label), "setrlimit(RLIMIT_NOFILE, %lu:%lu)", n, n);
	T_REPORT(label, setrlimit(RLIMIT_NOFILE, &rl));
}

int t_fill_up(int *fds, int cap)
{
	int n = 0, fd;

	while (n < cap && (fd = open("/dev/null", O_RDONLY)) >= 0)
		fds[n++] = fd;
	printf("filled up: %s\n", n < cap ? t_errname(errno) : "room to spare");
	return n;
}

int t_finish(void)
{
	fflush(stdout);
	return atomic_load(&failed) ? T_FAIL : T_PASS;
}

void t_fatal(const char *fmt, ...)
{
	int err = errno;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (err) {
		printf("FATAL: %s: %s\n", msg, t_errname(err));
		fflush(stdout);
		fprintf(stderr, "FATAL: %s: %s\n", msg, strerror(err));
	} else {
		printf("FATAL: %s\n", msg);
		fflush(stdout);
		fprintf(stderr, "FATAL: %s\n", msg);
	}
	exit(T_FAIL);
}

void t_skip(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "SKIP: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	exit(T_SKIP);
}

bool t_expect(bool ok, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (ok) {
		printf("%s\n", msg);
	} else {
		printf("FAIL: %s\n", msg);
		fprintf(stderr, "FAIL: %s\n", msg);
		atomic_store(&failed, true);
	}
	return ok;
}

const char *t_errname(int err)
{
	static _Thread_local char buf[32];
	const char *name = strerrorname_np(err);

	if (name)
		return name;
	snprintf(buf, sizeof(buf), "E#%d", err);
	return buf;
}

void t_report(const char *label, long ret, int err)
{
	if (ret == -1)
		printf("%s = -1 %s\n", label, t_errname(err));
	else if (err != T_ERRNO_SENTINEL)
		printf("%s = %ld (errno changed to %s on success)\n", label, ret,
		       t_errname(err));
	else
		printf("%s = %ld\n", label, ret);
}

void t_report_fd(const char *label, long ret, int err)
{
	if (ret < 0 || err != T_ERRNO_SENTINEL) {
		t_report(label, ret, err);
		return;
	}
	printf("%s = fd\n", label);
}

void t_report_data(const char *label, long ret, int err, const void *buf)
{
	if (ret < 0 || err != T_ERRNO_SENTINEL) {
		t_report(label, ret, err);
		if (ret < 0)
			return;
	}
	printf("%s = %ld \"%.*s\"\n", label, ret, (int)ret, (const char *)buf);
}

int t_socket(int family, int type)
{
	int fd = socket(family, type, 0);

	if (fd < 0)
		t_fatal("socket(%d, %#x)", family, type);
	return fd;
}

void t_addr_make(struct t_addr *a, const char *ip, uint16_t port)
{
	memset(a, 0, sizeof(*a));
	if (strchr(ip, ':')) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&a->ss;

		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		if (inet_pton(AF_INET6, ip, &s6->sin6_addr) != 1)
			t_fatal("inet_pton(%s)", ip);
		a->len = sizeof(*s6);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&a->ss;

		s4->sin_family = AF_INET;
		s4->sin_port = htons(port);
		if (inet_pton(AF_INET, ip, &s4->sin_addr) != 1)
			t_fatal("inet_pton(%s)", ip);
		a->len = sizeof(*s4);
	}
}

uint16_t t_addr_port(const struct t_addr *a)
{
	if (a->ss.ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
	return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
}

const char *t_addr_host(const struct t_addr *a, char *buf, size_t size)
{
	const void *src;

	switch (a->ss.ss_family) {
	case AF_INET:
		src = &((const struct sockaddr_in *)&a->ss)->sin_addr;
		break;
	case AF_INET6:
		src = &((const struct sockaddr_in6 *)&a->ss)->sin6_addr;
		break;
	default:
		snprintf(buf, size, "<family %d>", a->ss.ss_family);
		return buf;
	}
	if (!inet_ntop(a->ss.ss_family, src, buf, size))
		snprintf(buf, size, "<inet_ntop failed>");
	return buf;
}

bool t_addr_eq(const struct t_addr *a, const struct t_addr *b)
{
	if (a->ss.ss_family != b->ss.ss_family || a->len != b->len)
		return false;
	if (a->ss.ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)&a->ss;
		const struct sockaddr_in *y = (const void *)&b->ss;

		return x->sin_port == y->sin_port &&
		       x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss.ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)&a->ss;
		const struct sockaddr_in6 *y = (const void *)&b->ss;

		return x->sin6_port == y->sin6_port &&
		       x->sin6_scope_id == y->sin6_scope_id &&
		       !memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr));
	}
	return false;
}

struct t_addr t_sockname(int fd)
{
	struct t_addr a = { .len = sizeof(a.ss) };

	if (getsockname(fd, (struct sockaddr *)&a.ss, &a.len) < 0)
		t_fatal("getsockname(%d)", fd);
	return a;
}

struct t_addr t_peername(int fd)
{
	struct t_addr a = { .len = sizeof(a.ss) };

	if (getpeername(fd, (struct sockaddr *)&a.ss, &a.len) < 0)
		t_fatal("getpeername(%d)", fd);
	return a;
}

int t_listen_on(int family, const char *ip, int backlog, struct t_addr *bound)
{
	struct t_addr a;
	int fd = t_socket(family, SOCK_STREAM | SOCK_CLOEXEC);

	t_addr_make(&a, ip, 0);
	if (a.ss.ss_family != family)
		t_fatal("t_listen_on: %s is not of family %d", ip, family);
	if (bind(fd, (struct sockaddr *)&a.ss, a.len) < 0)
		t_fatal("bind(%s:0)", ip);
	if (listen(fd, backlog) < 0)
		t_fatal("listen(%s)", ip);
	if (bound)
		*bound = t_sockname(fd);
	return fd;
}

int t_listen_loopback(int family, int backlog, struct t_addr *bound)
{
	return t_listen_on(family, family == AF_INET6 ? "::1" : "127.0.0.1",
			   backlog, bound);
}

int t_connect(const struct t_addr *to)
{
	int fd = t_socket(to->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC);

	if (connect(fd, (const struct sockaddr *)&to->ss, to->len) < 0)
		t_fatal("connect");
	return fd;
}

int t_accept(int lfd)
{
	int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);

	if (fd < 0)
		t_fatal("accept");
	return fd;
}

void t_pair(int family, int *client, int *server)
{
	struct t_addr a;
	int lfd = t_listen_loopback(family, 1, &a);

	*client = t_connect(&a);
	*server = t_accept(lfd);
	close(lfd);
}

void t_set_nonblock(int fd, bool on)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		t_fatal("fcntl(F_GETFL)");
	fl = on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK);
	if (fcntl(fd, F_SETFL, fl) < 0)
		t_fatal("fcntl(F_SETFL)");
}

bool t_is_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		t_fatal("fcntl(F_GETFL)");
	return fl & O_NONBLOCK;
}

short t_poll1(int fd, short events, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = events };
	int n;

	do
		n = poll(&p, 1, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		t_fatal("poll");
	return n ? p.revents : 0;
}

const char *t_poll_str(short revents)
{
	static const struct {
		short bit;
		const char *name;
	} names[] = {
		{ POLLIN, "POLLIN" },	    { POLLPRI, "POLLPRI" },
		{ POLLOUT, "POLLOUT" },	    { POLLERR, "POLLERR" },
		{ POLLHUP, "POLLHUP" },	    { POLLNVAL, "POLLNVAL" },
		{ POLLRDNORM, "POLLRDNORM" }, { POLLRDBAND, "POLLRDBAND" },
		{ POLLWRNORM, "POLLWRNORM" }, { POLLWRBAND, "POLLWRBAND" },
		{ POLLMSG, "POLLMSG" },	    { POLLRDHUP, "POLLRDHUP" },
	};
	static char buf[256];
	size_t i;

	buf[0] = '\0';
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(revents & names[i].bit))
			continue;
		if (buf[0])
			strcat(buf, "|");
		strcat(buf, names[i].name);
		revents &= ~names[i].bit;
	}
	if (revents)
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%#x",
			 buf[0] ? "|" : "", (unsigned short)revents);
	if (!buf[0])
		strcpy(buf, "0");
	return buf;
}

void t_wait_inq(int fd, int n)
{
	int64_t start = t_now_ns();
	int avail = 0;

	for (;;) {
		if (ioctl(fd, FIONREAD, &avail) < 0)
			t_fatal("ioctl(FIONREAD)");
		if (avail >= n)
			return;
		if (t_elapsed_ms(start) > T_WAIT_MS) {
			errno = 0;
			t_fatal("waited %d ms for %d bytes, have %d", T_WAIT_MS,
				n, avail);
		}
		// Any data at all wakes poll; then poll again at a short
		// interval until the rest has arrived.
		if (avail == 0)
			t_poll1(fd, POLLIN, 100);
		else
			t_sleep_ms(1);
	}
}

short t_wait_event(int fd, short events)
{
	short r = t_poll1(fd, events, T_WAIT_MS);

	if (!r) {
		errno = 0;
		t_fatal("no %s within %d ms", t_poll_str(events), T_WAIT_MS);
	}
	return r;
}

void t_send_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;

	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			t_fatal("send(%zu)", n);
		p += w;
		n -= (size_t)w;
	}
}

void t_recv_all(int fd, void *buf, size_t n)
{
	char *p = buf;

	while (n) {
		ssize_t r = recv(fd, p, n, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r == 0)
			errno = 0;
		if (r <= 0)
			t_fatal("recv(%zu)%s", n, r == 0 ? ": early EOF" : "");
		p += r;
		n -= (size_t)r;
	}
}

int64_t t_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void t_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000,
			       .tv_nsec = (long)(ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int64_t t_elapsed_ms(int64_t start_ns)
{
	return (t_now_ns() - start_ns) / 1000000;
}

static void on_sigpipe(int sig)
{
	(void)sig;
	sigpipe_count++;
}

void t_count_sigpipe(void)
{
	struct sigaction sa = { .sa_handler = on_sigpipe };

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGPIPE, &sa, NULL) < 0)
		t_fatal("sigaction(SIGPIPE)");
}

int t_sigpipes(void)
{
	return sigpipe_count;
}

void t_chan_open(struct t_chan *c)
{
	int p[2];

	if (pipe2(p, O_CLOEXEC) < 0)
		t_fatal("pipe2");
	c->rd = p[0];
	c->wr = p[1];
}

void t_chan_put(struct t_chan *c, uint32_t v)
{
	if (write(c->wr, &v, sizeof(v)) != (ssize_t)sizeof(v))
		t_fatal("t_chan_put");
}

uint32_t t_chan_get(struct t_chan *c)
{
	uint32_t v;
	ssize_t r;

	do
		r = read(c->rd, &v, sizeof(v));
	while (r < 0 && errno == EINTR);
	if (r != (ssize_t)sizeof(v)) {
		if (r == 0)
			errno = EPIPE;
		t_fatal("t_chan_get");
	}
	return v;
}

pid_t t_fork(void)
{
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid < 0)
		t_fatal("fork");
	return pid;
}

int t_wait_child(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			t_fatal("waitpid");
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	return 128 + WTERMSIG(st);
}

uint64_t t_mix64(uint64_t x)
{
	// splitmix64 finaliser
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

uint64_t t_rand(uint64_t *state)
{
	*state += 0x9e3779b97f4a7c15ULL;
	return t_mix64(*state);
}

static inline uint64_t stream_word(uint64_t seed, uint64_t i)
{
	return t_mix64(seed + i * 0x9e3779b97f4a7c15ULL);
}

void t_stream_fill(uint64_t seed, uint64_t off, void *buf, size_t n)
{
	unsigned char *p = buf;
	uint64_t i = off / 8, w;
	size_t skip = off % 8, take;

	while (n) {
		w = stream_word(seed, i++);
		if (skip == 0 && n >= 8) {
			memcpy(p, &w, 8);
			p += 8;
			n -= 8;
			continue;
		}
		take = 8 - skip < n ? 8 - skip : n;
		memcpy(p, (unsigned char *)&w + skip, take);
		p += take;
		n -= take;
		skip = 0;
	}
}

int64_t t_stream_check(uint64_t seed, uint64_t off, const void *buf, size_t n)
{
	const unsigned char *p = buf;
	unsigned char tmp[4096];
	size_t done = 0, k, j;

	while (done < n) {
		k = n - done < sizeof(tmp) ? n - done : sizeof(tmp);
		t_stream_fill(seed, off + done, tmp, k);
		if (memcmp(tmp, p + done, k)) {
			for (j = 0; tmp[j] == p[done + j]; j++)
				;
			return (int64_t)(off + done + j);
		}
		done += k;
	}
	return -1;
}

uint64_t t_fnv1a(uint64_t h, const void *buf, size_t n)
{
	const unsigned char *p = buf;

	while (n--) {
		h ^= *p++;
		h *= 0x100000001b3ULL;
	}
	return h;
}

uint64_t t_env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);
	char *end;
	uint64_t v;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno)
		t_fatal("%s=%s", name, s);
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end) {
		errno = EINVAL;
		t_fatal("%s=%s: expected a number with optional K/M/G", name, s);
	}
	return v;
}

const char *t_epoll_str(uint32_t events)
{
	static const struct {
		uint32_t bit;
		const char *name;
	} names[] = {
		{ EPOLLIN, "EPOLLIN" },		{ EPOLLPRI, "EPOLLPRI" },
		{ EPOLLOUT, "EPOLLOUT" },	{ EPOLLERR, "EPOLLERR" },
		{ EPOLLHUP, "EPOLLHUP" },
		{ EPOLLRDNORM, "EPOLLRDNORM" }, { EPOLLRDBAND, "EPOLLRDBAND" },
		{ EPOLLWRNORM, "EPOLLWRNORM" }, { EPOLLWRBAND, "EPOLLWRBAND" },
		{ EPOLLMSG, "EPOLLMSG" },	{ EPOLLRDHUP, "EPOLLRDHUP" },
		{ EPOLLEXCLUSIVE, "EPOLLEXCLUSIVE" }, { EPOLLWAKEUP, "EPOLLWAKEUP" },
		{ EPOLLONESHOT, "EPOLLONESHOT" }, { EPOLLET, "EPOLLET" },
	};
	static _Thread_local char buf[256];
	size_t i, len = 0;

	buf[0] = '\0';
	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!(events & names[i].bit))
			continue;
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s",
					len ? "|" : "", names[i].name);
		events &= ~names[i].bit;
	}
	if (events)
		snprintf(buf + len, sizeof(buf) - len, "%s%#x", len ? "|" : "", events);
	else if (!len)
		strcpy(buf, "0");
	return buf;
}

const char *t_select1_str(int fd, int timeout_ms)
{
	static _Thread_local char buf[32];
	struct timeval tv = { .tv_sec = timeout_ms / 1000,
			      .tv_usec = (timeout_ms % 1000) * 1000 };
	fd_set rd, wr, ex;
	int n;

	if (fd < 0 || fd >= FD_SETSIZE) {
		errno = EBADF;
		t_fatal("t_select1_str: fd %d outside an fd_set", fd);
	}
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_ZERO(&ex);
	FD_SET(fd, &rd);
	FD_SET(fd, &wr);
	FD_SET(fd, &ex);
	n = select(fd + 1, &rd, &wr, &ex, timeout_ms < 0 ? NULL : &tv);
	if (n < 0) {
		snprintf(buf, sizeof(buf), "-1 %s", t_errname(errno));
		return buf;
	}
	snprintf(buf, sizeof(buf), "%c%c%c", FD_ISSET(fd, &rd) ? 'r' : '-',
		 FD_ISSET(fd, &wr) ? 'w' : '-', FD_ISSET(fd, &ex) ? 'x' : '-');
	return buf;
}

static int event_cmp(const void *a, const void *b)
{
	const struct epoll_event *x = a, *y = b;

	if (x->data.u64 != y->data.u64)
		return x->data.u64 < y->data.u64 ? -1 : 1;
	return (x->events > y->events) - (x->events < y->events);
}

int t_epoll_wait_sorted(int epfd, struct epoll_event *evs, int max, int timeout_ms)
{
	int n;

	do
		n = epoll_wait(epfd, evs, max, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		t_fatal("epoll_wait");
	qsort(evs, (size_t)n, sizeof(*evs), event_cmp);
	return n;
}

pid_t t_spawn_unpreloaded(const char *self, char *const argv[])
{
	extern char **environ;
	size_t n = 0, i, j = 0;
	char **env;
	pid_t pid;

	while (environ[n])
		n++;
	env = calloc(n + 1, sizeof(*env));
	if (!env)
		t_fatal("calloc");
	for (i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11))
			env[j++] = environ[i];
	pid = t_fork();
	if (pid == 0) {
		execve(self, argv, env);
		fprintf(stderr, "execve(%s): %s\n", self, strerror(errno));
		_exit(127);
	}
	free(env);
	return pid;
}

const char *t_self_path(const char *argv0)
{
	return strchr(argv0, '/') ? argv0 : "/proc/self/exe";
}

const char *t_kfd_name(enum t_kfd which)
{
	static const char *const names[T_KFD_COUNT] = {
		[T_KFD_PIPE_RD] = "pipe_rd",   [T_KFD_PIPE_WR] = "pipe_wr",
		[T_KFD_TIMERFD] = "timerfd",   [T_KFD_EVENTFD] = "eventfd",
		[T_KFD_SIGNALFD] = "signalfd", [T_KFD_FILE] = "file",
		[T_KFD_DEVNULL] = "devnull",   [T_KFD_UNIX] = "unix",
		[T_KFD_UDP] = "udp",	       [T_KFD_PTY] = "pty",
		[T_KFD_EPOLL] = "epoll",
	};

	return which < T_KFD_COUNT ? names[which] : "?";
}

void t_kfds_open(struct t_kfds *k)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int p[2], one = 1;
	sigset_t set;

	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		t_fatal("pipe2");
	k->fd[T_KFD_PIPE_RD] = p[0];
	k->fd[T_KFD_PIPE_WR] = p[1];
	k->fd[T_KFD_TIMERFD] = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (k->fd[T_KFD_TIMERFD] < 0)
		t_fatal("timerfd_create");
	k->fd[T_KFD_EVENTFD] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (k->fd[T_KFD_EVENTFD] < 0)
		t_fatal("eventfd");
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		t_fatal("sigprocmask");
	k->fd[T_KFD_SIGNALFD] = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (k->fd[T_KFD_SIGNALFD] < 0)
		t_fatal("signalfd");
	k->fd[T_KFD_FILE] = memfd_create("t_kfds", MFD_CLOEXEC);
	if (k->fd[T_KFD_FILE] < 0)
		t_fatal("memfd_create");
	k->fd[T_KFD_DEVNULL] = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (k->fd[T_KFD_DEVNULL] < 0)
		t_fatal("open(/dev/null)");
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, p) < 0)
		t_fatal("socketpair");
	k->fd[T_KFD_UNIX] = p[0];
	k->unix_peer = p[1];
	k->fd[T_KFD_UDP] = t_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK);
	if (bind(k->fd[T_KFD_UDP], (struct sockaddr *)&sin, sizeof(sin)) < 0)
		t_fatal("bind(udp)");
	k->fd[T_KFD_PTY] = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (k->fd[T_KFD_PTY] < 0 || grantpt(k->fd[T_KFD_PTY]) < 0 ||
	    unlockpt(k->fd[T_KFD_PTY]) < 0)
		t_fatal("posix_openpt");
	if (ioctl(k->fd[T_KFD_PTY], TIOCPKT, &one) < 0)
		t_fatal("ioctl(TIOCPKT)");
	t_set_nonblock(k->fd[T_KFD_PTY], true);
	k->pty_slave = open(ptsname(k->fd[T_KFD_PTY]), O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (k->pty_slave < 0)
		t_fatal("open(pty slave)");
	k->fd[T_KFD_EPOLL] = epoll_create1(EPOLL_CLOEXEC);
	if (k->fd[T_KFD_EPOLL] < 0)
		t_fatal("epoll_create1");
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		t_fatal("pipe2");
	k->inner_rd = p[0];
	k->inner_wr = p[1];
	ev.data.fd = k->inner_rd;
	if (epoll_ctl(k->fd[T_KFD_EPOLL], EPOLL_CTL_ADD, k->inner_rd, &ev) < 0)
		t_fatal("epoll_ctl(ADD, pipe)");
}

void t_kfds_ready(struct t_kfds *k)
{
	struct itimerspec its = { .it_value = { 0, 1000 } };
	uint64_t one = 1;
	struct sockaddr_in self;
	socklen_t len = sizeof(self);

	if (write(k->fd[T_KFD_PIPE_WR], "p", 1) != 1 || write(k->inner_wr, "i", 1) != 1)
		t_fatal("write(pipe)");
	if (timerfd_settime(k->fd[T_KFD_TIMERFD], 0, &its, NULL) < 0)
		t_fatal("timerfd_settime");
	if (write(k->fd[T_KFD_EVENTFD], &one, sizeof(one)) != sizeof(one))
		t_fatal("write(eventfd)");
	if (kill(getpid(), SIGUSR2) < 0)
		t_fatal("kill(SIGUSR2)");
	if (write(k->unix_peer, "u", 1) != 1)
		t_fatal("write(unix)");
	if (getsockname(k->fd[T_KFD_UDP], (struct sockaddr *)&self, &len) < 0 ||
	    sendto(k->fd[T_KFD_UDP], "d", 1, 0, (struct sockaddr *)&self, len) != 1)
		t_fatal("sendto(udp)");
	if (tcflush(k->pty_slave, TCIFLUSH) < 0)
		t_fatal("tcflush(pty)");
	// The timer expires asynchronously; the rest is there already.
	t_wait_event(k->fd[T_KFD_TIMERFD], POLLIN);
}

void t_kfds_drain(struct t_kfds *k)
{
	char buf[256];
	uint64_t v;
	struct signalfd_siginfo si;
	struct itimerspec off = { { 0, 0 }, { 0, 0 } };

	while (read(k->fd[T_KFD_PIPE_RD], buf, sizeof(buf)) > 0)
		;
	while (read(k->inner_rd, buf, sizeof(buf)) > 0)
		;
	if (timerfd_settime(k->fd[T_KFD_TIMERFD], 0, &off, NULL) < 0)
		t_fatal("timerfd_settime");
	(void)!read(k->fd[T_KFD_TIMERFD], &v, sizeof(v));
	(void)!read(k->fd[T_KFD_EVENTFD], &v, sizeof(v));
	while (read(k->fd[T_KFD_SIGNALFD], &si, sizeof(si)) > 0)
		;
	while (read(k->fd[T_KFD_UNIX], buf, sizeof(buf)) > 0)
		;
	while (recv(k->fd[T_KFD_UDP], buf, sizeof(buf), 0) > 0)
		;
	while (read(k->fd[T_KFD_PTY], buf, sizeof(buf)) > 0)
		;
}

void t_kfds_close(struct t_kfds *k)
{
	for (int i = 0; i < T_KFD_COUNT; i++)
		close(k->fd[i]);
	close(k->unix_peer);
	close(k->pty_slave);
	close(k->inner_rd);
	close(k->inner_wr);
}

// The state letter of a thread from /proc, '?' if unreadable.
static char thread_state(pid_t pid, pid_t tid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = '\0';
	p = strrchr(buf, ')'); // the name may hold spaces and parentheses
	return p && p[1] == ' ' ? p[2] : '?';
}

void t_wait_asleep(pid_t pid, pid_t tid, unsigned quiet_ms)
{
	int64_t start = t_now_ns();

	for (;;) {
		if (thread_state(pid, tid) == 'S') {
			t_sleep_ms(quiet_ms);
			if (thread_state(pid, tid) == 'S')
				return;
		}
		if (t_elapsed_ms(start) > T_WAIT_MS) {
			errno = 0;
			t_fatal("thread %d never blocked", (int)tid);
		}
		t_sleep_ms(1);
	}
}

pid_t t_fork_tied(unsigned watchdog_s)
{
	pid_t parent = getpid(), pid = t_fork();

	if (pid)
		return pid;
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		t_fatal("prctl(PR_SET_PDEATHSIG)");
	// The parent may have gone before prctl took effect.
	if (getppid() != parent)
		_exit(T_FAIL);
	t_watchdog(watchdog_s);
	return 0;
}

char **t_env_unpreloaded(void)
{
	extern char **environ;
	size_t n = 0, i, j = 0;
	char **env;

	while (environ[n])
		n++;
	env = calloc(n + 1, sizeof(*env));
	if (!env)
		t_fatal("calloc");
	for (i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11))
			env[j++] = environ[i];
	return env;
}

bool t_preloaded(void)
{
	char line[4096];
	bool found = false;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		t_fatal("fopen(/proc/self/maps)");
	while (!found && fgets(line, sizeof(line), f))
		found = strstr(line, "libshunt") != NULL;
	fclose(f);
	return found;
}

bool t_fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

void t_send_fd(int usock, int fd, char tag)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { .iov_base = &tag, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c;

	memset(&u, 0, sizeof(u));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	if (sendmsg(usock, &mh, MSG_NOSIGNAL) != 1)
		t_fatal("sendmsg(SCM_RIGHTS)");
}

int t_recv_fd(int usock, char *tag)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	char t;
	struct iovec iov = { .iov_base = &t, .iov_len = 1 };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = u.buf, .msg_controllen = sizeof(u.buf) };
	struct cmsghdr *c;
	ssize_t r;
	int fd;

	do
		r = recvmsg(usock, &mh, MSG_CMSG_CLOEXEC);
	while (r < 0 && errno == EINTR);
	if (r != 1)
		t_fatal("recvmsg(SCM_RIGHTS) = %zd", r);
	c = CMSG_FIRSTHDR(&mh);
	if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(sizeof(int))) {
		errno = 0;
		t_fatal("recvmsg: no descriptor came with the message");
	}
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	if (tag)
		*tag = t;
	return fd;
}

int t_kill_child(pid_t pid)
{
	if (kill(pid, SIGKILL) < 0)
		t_fatal("kill(SIGKILL)");
	return t_wait_child(pid);
}

void *t_shared_alloc(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		t_fatal("mmap(MAP_SHARED, %zu)", n);
	return p;
}

const char *t_peer_sees(int fd, int wait_ms)
{
	static _Thread_local char buf[32];
	char b;
	ssize_t r;

	if (!t_poll1(fd, POLLIN, wait_ms))
		return "nothing";
	r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	if (r > 0)
		return "data";
	if (r == 0)
		return "EOF";
	snprintf(buf, sizeof(buf), "-1 %s", t_errname(errno));
	return buf;
}

enum {
	TALK_SEED_DOWN = 0x7a1c, // peer to holder
	TALK_SEED_UP = 0x7a1d,	 // holder to peer
	TALK_CHUNK = 64 << 10,
};

void t_talk_peer_first(int fd, size_t first)
{
	static unsigned char buf[T_TALK_FIRST_MAX];

	if (first > sizeof(buf)) {
		errno = EINVAL;
		t_fatal("t_talk_peer_first(%zu): more than T_TALK_FIRST_MAX", first);
	}
	t_stream_fill(TALK_SEED_DOWN, 0, buf, first);
	t_send_all(fd, buf, first);
}

// Receive n bytes of stream `seed` from `off`; false if any differs.
static bool talk_recv_check(int fd, uint64_t seed, uint64_t off, uint64_t n)
{
	unsigned char *buf = malloc(TALK_CHUNK);
	bool ok = true;

	if (!buf)
		t_fatal("malloc");
	while (n) {
		size_t k = n < TALK_CHUNK ? n : TALK_CHUNK;

		t_recv_all(fd, buf, k);
		ok = ok && t_stream_check(seed, off, buf, k) < 0;
		off += k;
		n -= k;
	}
	free(buf);
	return ok;
}

static void talk_send(int fd, uint64_t seed, uint64_t off, uint64_t n)
{
	unsigned char *buf = malloc(TALK_CHUNK);

	if (!buf)
		t_fatal("malloc");
	while (n) {
		size_t k = n < TALK_CHUNK ? n : TALK_CHUNK;

		t_stream_fill(seed, off, buf, k);
		t_send_all(fd, buf, k);
		off += k;
		n -= k;
	}
	free(buf);
}

bool t_talk_peer_rest(int fd, size_t first, size_t second)
{
	uint64_t len = second;
	char done[4];
	bool ok = talk_recv_check(fd, TALK_SEED_UP, 0, first);

	t_send_all(fd, &len, sizeof(len));
	talk_send(fd, TALK_SEED_DOWN, first, second);
	t_recv_all(fd, done, sizeof(done));
	return ok && !memcmp(done, "done", 4);
}

bool t_talk_holder(int rd, int wr, size_t first)
{
	uint64_t len;
	bool ok = talk_recv_check(rd, TALK_SEED_DOWN, 0, first);

	talk_send(wr, TALK_SEED_UP, 0, first);
	t_recv_all(rd, &len, sizeof(len));
	ok = talk_recv_check(rd, TALK_SEED_DOWN, first, len) && ok;
	t_send_all(wr, "done", 4);
	return ok;
}

long t_dir_entries(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	long n = 0;

	if (!d)
		t_fatal("opendir %s", path);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

long t_status_field(const char *path, const char *field)
{
	FILE *f = fopen(path, "r");
	size_t len = strlen(field);
	char line[256];
	long v = -1;

	if (!f)
		t_fatal("fopen %s", path);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, len) && line[len] == ':' &&
		    sscanf(line + len + 1, "%ld", &v) == 1)
			break;
	fclose(f);
	return v;
}
