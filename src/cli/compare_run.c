// SPDX-License-Identifier: MIT
/*
 * One pass of shunt compare: the server in a process group of its own,
 * ready when one of its processes holds a listening TCP socket (read from
 * /proc, so no probe connection reaches it), then the client, timed, then
 * the server's whole group stopped so the next pass finds its port free.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/compare.h"

enum { STOP_GRACE_MS = 5000, POLL_MS = 20 };

/* Process groups started and not yet reaped, for shunt_compare_kill_all. */
static volatile pid_t live_groups[2];

void shunt_compare_kill_all(void)
{
	for (int i = 0; i < 2; i++)
		if (live_groups[i] > 0)
			kill(-live_groups[i], SIGKILL);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * Start @argv in a new process group with stdin from /dev/null and stdout
 * and stderr into @log; under shunt through `@self run`, with SHUNT_STATS
 * set to @stats. Returns the pid (also the group's id) or -errno.
 */
static pid_t spawn(const struct compare_opts *o, bool shunt, char **argv, const char *log,
		   const char *stats)
{
	char self[4096];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	size_t n = 0;
	pid_t pid;

	if (len < 0)
		return -errno;
	self[len] = 0;
	while (argv[n])
		n++;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		char *full[n + 8];
		size_t k = 0;
		int null = open("/dev/null", O_RDONLY);
		int out = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);

		setpgid(0, 0);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		if (null < 0 || out < 0 || dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
			_exit(126);
		/* The plain pass must not inherit a preload from whoever runs us. */
		unsetenv("LD_PRELOAD");
		unsetenv("SHUNT_STATS");
		if (shunt) {
			full[k++] = self;
			full[k++] = "run";
			if (o->socket) {
				full[k++] = "--socket";
				full[k++] = (char *)o->socket;
			}
			full[k++] = "--";
			setenv("SHUNT_STATS", stats, 1);
		}
		for (size_t i = 0; i < n; i++)
			full[k++] = argv[i];
		full[k] = NULL;
		execvp(full[0], full);
		dprintf(2, "shunt compare: cannot run %s: %s\n", full[0], strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	setpgid(pid, pid);	/* both sides, so no race with kill(-pid) */
	return pid;
}

/* Whether any process of group @pgid is alive (zombies are not). */
static bool group_alive(pid_t pgid)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	bool alive = false;

	if (!d)
		return false;
	while (!alive && (e = readdir(d))) {
		char path[300], buf[512], *p;
		int fd;
		ssize_t len;
		char state;
		long pgrp;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (len <= 0)
			continue;
		buf[len] = 0;
		p = strrchr(buf, ')');	/* the name may hold anything, even ") " */
		if (p && sscanf(p + 1, " %c %*d %ld", &state, &pgrp) == 2 && pgrp == pgid &&
		    state != 'Z' && state != 'X')
			alive = true;
	}
	closedir(d);
	return alive;
}

/* Socket inodes held by the processes of group @pgid. */
static size_t group_sockets(pid_t pgid, uint64_t *inodes, size_t max)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	size_t n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[300], buf[512], *p;
		DIR *fds;
		struct dirent *f;
		ssize_t len;
		long pgrp;
		int fd;

		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		len = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (len <= 0)
			continue;
		buf[len] = 0;
		p = strrchr(buf, ')');
		if (!p || sscanf(p + 1, " %*c %*d %ld", &pgrp) != 1 || pgrp != pgid)
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd", e->d_name);
		fds = opendir(path);
		if (!fds)
			continue;
		while ((f = readdir(fds)) && n < max) {
			char link[600], target[64];
			unsigned long long ino;

			snprintf(link, sizeof(link), "/proc/%s/fd/%s", e->d_name, f->d_name);
			len = readlink(link, target, sizeof(target) - 1);
			if (len <= 0)
				continue;
			target[len] = 0;
			if (sscanf(target, "socket:[%llu]", &ino) == 1)
				inodes[n++] = ino;
		}
		closedir(fds);
	}
	closedir(d);
	return n;
}

/* Whether one of @inodes is a listening TCP socket (on @port, unless 0). */
static bool listening(const uint64_t *inodes, size_t n, int port)
{
	static const char *const tables[] = { "/proc/net/tcp", "/proc/net/tcp6" };
	bool found = false;

	for (size_t t = 0; t < 2 && !found; t++) {
		FILE *f = fopen(tables[t], "re");
		char line[512];

		if (!f)
			continue;
		while (!found && fgets(line, sizeof(line), f)) {
			unsigned lport, st;
			unsigned long long ino;

			/* sl local:port remote:port st tx:rx tr:when retrnsmt uid timeout inode */
			if (sscanf(line, " %*s %*[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*s %*s %llu",
				   &lport, &st, &ino) != 3 || st != 0x0A)
				continue;
			if (port && (int)lport != port)
				continue;
			for (size_t i = 0; i < n; i++)
				if (inodes[i] == ino)
					found = true;
		}
		fclose(f);
	}
	return found;
}

/* Read all of @path into a malloc'd, NUL-terminated buffer. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "re");
	char *buf = NULL;
	size_t cap = 0, n = 0, r;

	*len = 0;
	if (!f)
		return calloc(1, 1);
	do {
		if (cap - n < 4096) {
			char *p = realloc(buf, cap + 65536);

			if (!p)
				break;
			buf = p;
			cap += 65536;
		}
		r = fread(buf + n, 1, cap - n - 1, f);
		n += r;
	} while (r > 0);
	fclose(f);
	if (!buf)
		return calloc(1, 1);
	buf[n] = 0;
	*len = n;
	return buf;
}

static uint64_t field(const char *line, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(line, pat);
	return p ? strtoull(p + strlen(pat), NULL, 10) : 0;
}

/* Sum the SHUNT_STATS lines of @path (libshunt's stats.c writes them). */
static void read_counters(const char *path, struct compare_counters *c)
{
	FILE *f = fopen(path, "re");
	char line[1024];

	memset(c, 0, sizeof(*c));
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (!strstr(line, "\"pid\":"))
			continue;
		c->processes++;
		c->shm_connect += field(line, "shm_connect");
		c->shm_accept += field(line, "shm_accept");
		c->kernel_connect += field(line, "kernel_connect");
		c->kernel_accept += field(line, "kernel_accept");
		c->shm_tx_bytes += field(line, "shm_tx_bytes");
		c->shm_rx_bytes += field(line, "shm_rx_bytes");
	}
	fclose(f);
}

/*
 * Wait for @pid (a child) up to @timeout_s (<0: for ever); its wait status
 * in *@status. Returns 0 when it exited, -ETIMEDOUT.
 */
static int wait_child(pid_t pid, double timeout_s, int *status)
{
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	double end = now_s() + timeout_s;

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid || (r < 0 && errno != EINTR)) {
			if (pidfd >= 0)
				close(pidfd);
			return 0;
		}
		if (timeout_s >= 0 && now_s() >= end) {
			if (pidfd >= 0)
				close(pidfd);
			return -ETIMEDOUT;
		}
		if (pidfd >= 0) {
			struct pollfd p = { pidfd, POLLIN, 0 };
			double left = timeout_s < 0 ? 1.0 : end - now_s();

			poll(&p, 1, left > 1.0 ? 1000 : (int)(left * 1000) + 1);
		} else {
			sleep_ms(POLL_MS);
		}
	}
}

/*
 * Stop group @pgid whose leader is @pid: SIGTERM, as an operator would,
 * so servers exit through their own handlers (and libshunt writes its
 * counters); SIGKILL for what is left after the grace period.
 */
static void stop_group(pid_t pid, pid_t pgid)
{
	int status;
	double end;

	kill(-pgid, SIGTERM);
	if (wait_child(pid, STOP_GRACE_MS / 1000.0, &status) < 0) {
		kill(-pgid, SIGKILL);
		wait_child(pid, -1, &status);
	}
	end = now_s() + STOP_GRACE_MS / 1000.0;
	while (group_alive(pgid) && now_s() < end)
		sleep_ms(POLL_MS);
	if (group_alive(pgid))
		kill(-pgid, SIGKILL);
	while (group_alive(pgid))
		sleep_ms(POLL_MS);
}

int shunt_compare_pass(const struct compare_opts *o, struct compare_pass *p)
{
	const char *mode = p->shunt ? "shunt" : "plain";
	char slog[4096], clog[4096], sstats[4096], cstats[4096];
	uint64_t inodes[1024];
	pid_t server, client;
	double start, end;
	int status, r = 0;

	snprintf(slog, sizeof(slog), "%s/server-%s.log", o->workdir, mode);
	snprintf(clog, sizeof(clog), "%s/client-%s.log", o->workdir, mode);
	snprintf(sstats, sizeof(sstats), "%s/server-%s.stats", o->workdir, mode);
	snprintf(cstats, sizeof(cstats), "%s/client-%s.stats", o->workdir, mode);

	server = spawn(o, p->shunt, o->server, slog, sstats);
	if (server < 0) {
		snprintf(p->why, sizeof(p->why), "cannot start the server: %s", strerror(-server));
		return server;
	}
	live_groups[0] = server;
	end = now_s() + o->wait_s;
	for (;;) {
		if (listening(inodes, group_sockets(server, inodes, 1024), o->port))
			break;
		if (waitpid(server, &status, WNOHANG) == server) {
			live_groups[0] = 0;
			snprintf(p->why, sizeof(p->why), "the server exited (%s %d) before it listened%s",
				 WIFEXITED(status) ? "status" : "signal",
				 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status),
				 o->port ? " on the --port given" : "");
			r = -ECHILD;
			goto out;
		}
		if (now_s() >= end) {
			snprintf(p->why, sizeof(p->why), "the server did not listen on %s within %.1f s "
				 "(--wait)", o->port ? "the --port given" : "any TCP port", o->wait_s);
			r = -ETIMEDOUT;
			goto stop_server;
		}
		sleep_ms(POLL_MS);
	}

	start = now_s();
	client = spawn(o, p->shunt, o->client, clog, cstats);
	if (client < 0) {
		snprintf(p->why, sizeof(p->why), "cannot start the client: %s", strerror(-client));
		r = client;
		goto stop_server;
	}
	live_groups[1] = client;
	if (wait_child(client, o->timeout_s, &p->status) < 0) {
		p->timed_out = true;
		snprintf(p->why, sizeof(p->why), "the client was killed after %.0f s (--timeout)",
			 o->timeout_s);
		kill(-client, SIGKILL);
		wait_child(client, -1, &p->status);
	}
	p->seconds = now_s() - start;
	/* What it left running in its group (a daemonised helper) goes too. */
	if (group_alive(client))
		kill(-client, SIGKILL);
	live_groups[1] = 0;
	p->ran = true;

stop_server:
	stop_group(server, server);
	live_groups[0] = 0;
out:
	p->output = slurp(clog, &p->output_len);
	p->server_log = slurp(slog, &p->server_log_len);
	read_counters(cstats, &p->client);
	read_counters(sstats, &p->server);
	unlink(slog);
	unlink(clog);
	unlink(sstats);
	unlink(cstats);
	return r;
}

void shunt_compare_pass_free(struct compare_pass *p)
{
	free(p->output);
	free(p->server_log);
	p->output = p->server_log = NULL;
}
