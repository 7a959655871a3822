// SPDX-License-Identifier: MIT
// inetd: a server accepts, forks, the child dup2s the connection onto 0 and
// 1 and execs a handler (h_stream) that moves 100 MiB each way, checked
// byte by byte; with the library in the handler's environment the
// connection stays in shared memory across the exec (both ends' bytes, the
// handler's own stats line included), with stdio in the handler too (its
// stdin and stdout, and streams it fdopen()s on 0 and 1); a
// handler without LD_PRELOAD, and a statically linked one with the
// environment kept, still get every byte (on the kernel); a shell that runs
// cat keeps the connection in shared memory through both; a handler started
// by posix_spawn (file actions doing the dup2s) keeps it too (64 MiB each
// way: the byte counts prove it). An exec that fails leaves the connection
// as it was, and a listening socket carried across exec keeps the
// connections queued on it. (The handlers that cannot take the circuit,
// whose connection moves onto the kernel, are t_proc_exec_kernel: that
// needs companions, this does not.)
// shunt-expect: shm_connect>=7 shm_accept>=7 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=360M shm_rx_bytes>=360M
// t-timeout: 120
#include "t_harness.h"

#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

enum {
	BIG = 100 << 20,	// the raw handler's bytes each way
	SPAWNED = 64 << 20,	// the posix_spawn'ed handler's
	STDIO_BYTES = 8 << 20,	// the stdio handler's
	SEED_IN = 0xa11ce,	// as h_stream
	SEED_OUT = 0xb0b,
	CHUNK = 256 << 10,
	IMAGE_WATCHDOG_S = 110,
};

static char handler[4096], static_cat[4096];
static const char *self;

struct feed {
	int fd;
	uint64_t bytes;
	const char *before, *after;	// lines around the bytes, or NULL
	bool shut;			// shutdown(SHUT_WR) after the bytes
	pthread_t th;
};

static void *feed(void *arg)
{
	static unsigned char buf[CHUNK];
	struct feed *f = arg;

	if (f->before)
		t_send_all(f->fd, f->before, strlen(f->before));
	for (uint64_t off = 0; off < f->bytes; off += CHUNK) {
		size_t n = f->bytes - off < CHUNK ? (size_t)(f->bytes - off) : CHUNK;

		t_stream_fill(SEED_IN, off, buf, n);
		t_send_all(f->fd, buf, n);
	}
	if (f->after)
		t_send_all(f->fd, f->after, strlen(f->after));
	if (f->shut && shutdown(f->fd, SHUT_WR) < 0)
		t_fatal("shutdown");
	return NULL;
}

// Read exactly @len bytes of text into @out (NUL-terminated).
static void recv_line(int fd, char *out, size_t len)
{
	t_recv_all(fd, out, len);
	out[len] = 0;
}

// The handler's answer: @bytes of stream B, then EOF. True if exactly that.
static bool answer(int fd, uint64_t bytes)
{
	static unsigned char buf[CHUNK];
	uint64_t off = 0;
	bool ok = true;

	while (off < bytes) {
		size_t want = bytes - off < CHUNK ? (size_t)(bytes - off) : CHUNK;
		ssize_t r = recv(fd, buf, want, 0);

		if (r <= 0)
			return false;
		ok = ok && t_stream_check(SEED_OUT, off, buf, (size_t)r) < 0;
		off += (uint64_t)r;
	}
	return ok;
}

// In a fork child: the connection onto 0 and 1, then exec the handler.
static void exec_handler(int s, const char *mode, uint64_t bytes, bool preloaded)
{
	char n[32];
	char *argv[] = { handler, (char *)mode, n, NULL };

	snprintf(n, sizeof(n), "%llu", (unsigned long long)bytes);
	if (dup2(s, STDIN_FILENO) < 0 || dup2(s, STDOUT_FILENO) < 0)
		t_fatal("dup2");
	close(s);
	execve(handler, argv, preloaded ? environ : t_env_unpreloaded());
	_exit(127);
}

// The child's half of inetd: by fork, dup2 and exec, or by posix_spawn
// with file actions doing the dup2s (the child is then the spawn's).
static pid_t start_handler(int lfd, int c, int s, const char *mode, uint64_t bytes,
			   bool preloaded, bool spawn)
{
	char n[32];
	char *argv[] = { handler, (char *)mode, n, NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int r;

	if (!spawn) {
		pid = t_fork_tied(IMAGE_WATCHDOG_S);
		if (pid == 0) {
			close(lfd);
			close(c);
			exec_handler(s, mode, bytes, preloaded);
		}
		return pid;
	}
	snprintf(n, sizeof(n), "%llu", (unsigned long long)bytes);
	if (posix_spawn_file_actions_init(&fa) ||
	    posix_spawn_file_actions_adddup2(&fa, s, STDIN_FILENO) ||
	    posix_spawn_file_actions_adddup2(&fa, s, STDOUT_FILENO) ||
	    posix_spawn_file_actions_addclose(&fa, s) ||
	    posix_spawn_file_actions_addclose(&fa, lfd) ||
	    posix_spawn_file_actions_addclose(&fa, c))
		t_fatal("posix_spawn_file_actions");
	fflush(stdout);
	r = posix_spawn(&pid, handler, &fa, NULL, argv, preloaded ? environ : t_env_unpreloaded());
	posix_spawn_file_actions_destroy(&fa);
	if (r) {
		errno = r;
		t_fatal("posix_spawn");
	}
	return pid;
}

static void inetd_by(const char *mode, uint64_t bytes, bool preloaded, bool spawn)
{
	bool stdio = !strcmp(mode, "stdio") || !strcmp(mode, "fdopen");
	struct feed f = { .bytes = bytes };
	struct t_addr a;
	char line[128], want[128];
	int lfd, c, s, st;
	bool ok;
	pid_t pid;

	printf("inetd%s, handler %s%s, %llu bytes each way:\n", spawn ? " by posix_spawn" : "",
	       mode, preloaded ? "" : " without LD_PRELOAD", (unsigned long long)bytes);
	lfd = t_listen_loopback(AF_INET, 4, &a);
	c = t_connect(&a);
	s = t_accept(lfd);
	pid = start_handler(lfd, c, s, mode, bytes, preloaded, spawn);
	close(s);
	close(lfd);
	f.fd = c;
	if (stdio) {
		f.before = "hello handler\n";
		f.after = "that was all\n";
	}
	if (pthread_create(&f.th, NULL, feed, &f))
		t_fatal("pthread_create");
	ok = true;
	if (stdio) {
		// The report line is fixed-size: "handler read N bytes, checksum X\n".
		unsigned char *all = malloc(bytes);
		uint64_t sum;

		if (!all)
			t_fatal("malloc");
		t_stream_fill(SEED_IN, 0, all, bytes);
		sum = t_fnv1a(T_FNV_OFFSET, all, bytes);
		free(all);
		snprintf(want, sizeof(want), "handler read %llu bytes, checksum %016llx\n",
			 (unsigned long long)bytes, (unsigned long long)sum);
		recv_line(c, line, strlen(want));
		ok = !strcmp(line, want);
		printf("  the handler's printf: %s", ok ? line : "(wrong)\n");
	}
	ok = answer(c, bytes) && ok;
	if (stdio) {
		recv_line(c, line, 4);
		ok = ok && !strcmp(line, "bye\n");
	}
	pthread_join(f.th, NULL);
	st = t_wait_child(pid);
	t_expect(ok && st == 0, "  every byte right both ways, handler exit status %d", st);
	printf("  then the client sees: %s\n", t_peer_sees(c, T_WAIT_MS));
	close(c);
}

// cat, through the client's bytes and back: a shell that runs it (as a
// child, holding the connection meanwhile), or a static program.
static void cat_handler(bool shell)
{
	char *sh_argv[] = { "sh", "-c", "cat", NULL };
	char *st_argv[] = { static_cat, NULL };
	struct feed f = { .bytes = STDIO_BYTES, .shut = true };
	struct t_addr a;
	int lfd, c, s, st;
	bool ok;
	pid_t pid;

	printf("inetd, handler %s, %d bytes through it:\n",
	       shell ? "sh -c cat" : "a statically linked cat", STDIO_BYTES);
	lfd = t_listen_loopback(AF_INET, 4, &a);
	c = t_connect(&a);
	s = t_accept(lfd);
	pid = t_fork_tied(IMAGE_WATCHDOG_S);
	if (pid == 0) {
		close(lfd);
		close(c);
		if (dup2(s, STDIN_FILENO) < 0 || dup2(s, STDOUT_FILENO) < 0)
			t_fatal("dup2");
		close(s);
		if (shell)
			execvp("sh", sh_argv);
		else
			execve(static_cat, st_argv, environ);
		_exit(127);
	}
	close(s);
	close(lfd);
	f.fd = c;
	if (pthread_create(&f.th, NULL, feed, &f))
		t_fatal("pthread_create");
	{
		static unsigned char buf[CHUNK];
		uint64_t off = 0;
		ssize_t r;

		ok = true;
		while ((r = recv(c, buf, sizeof(buf), 0)) > 0) {
			ok = ok && t_stream_check(SEED_IN, off, buf, (size_t)r) < 0;
			off += (uint64_t)r;
		}
		ok = ok && r == 0 && off == STDIO_BYTES;
	}
	pthread_join(f.th, NULL);
	st = t_wait_child(pid);
	t_expect(ok && st == 0, "  every byte came back, then EOF (status %d)", st);
	close(c);
}

static void inetd(const char *mode, uint64_t bytes, bool preloaded)
{
	inetd_by(mode, bytes, preloaded, false);
}

// An exec that fails (no such file) leaves the connection as it was: the
// child goes on using it itself, then execs the handler for real.
static __attribute__((unused)) void exec_fails(void)
{
	char *argv[] = { "nonexistent", NULL };
	char buf[16];
	int lfd, c, s, st;
	struct t_addr a;
	pid_t pid;

	printf("an exec that fails, then one that works:\n");
	lfd = t_listen_loopback(AF_INET, 4, &a);
	c = t_connect(&a);
	s = t_accept(lfd);
	pid = t_fork_tied(IMAGE_WATCHDOG_S);
	if (pid == 0) {
		char path[4200];
		int r;

		close(lfd);
		close(c);
		snprintf(path, sizeof(path), "%s.nonexistent", handler);
		r = execve(path, argv, environ);
		// Still ours, as before: talk, then the real handler.
		t_recv_all(s, buf, 5);
		t_send_all(s, r < 0 && errno == ENOENT ? "ENOENT" : "other!", 6);
		exec_handler(s, "raw", 1 << 20, true);
	}
	close(s);
	close(lfd);
	t_send_all(c, "hello", 5);
	recv_line(c, buf, 6);
	printf("  the child, after its failed exec, says: %s\n", buf);
	{
		struct feed f = { .fd = c, .bytes = 1 << 20 };

		feed(&f);
	}
	t_expect(answer(c, 1 << 20), "  then the handler moved every byte");
	st = t_wait_child(pid);
	t_expect(st == 0, "  handler exit status %d", st);
	close(c);
}

// --accept FD: the new image of a server that exec'd itself with its
// listening socket; a client is already queued on it.
static int image_accept(int lfd)
{
	char buf[8];
	int s = t_accept(lfd);

	t_recv_all(s, buf, 6);
	t_send_all(s, buf, 6);
	close(s);
	close(lfd);
	return memcmp(buf, "queued", 6) ? 2 : 0;
}

// A server execs itself holding its listening socket while a client waits
// in its accept queue: the new image accepts it.
static __attribute__((unused)) void listener_across_exec(void)
{
	char fdarg[16], buf[8];
	char *argv[] = { (char *)self, "--accept", fdarg, NULL };
	struct t_addr a;
	int lfd, c, st;
	pid_t pid;

	printf("a listener carried across exec, a connection queued on it:\n");
	lfd = t_listen_loopback(AF_INET, 4, &a);
	c = t_connect(&a);
	t_send_all(c, "queued", 6);
	pid = t_fork_tied(IMAGE_WATCHDOG_S);
	if (pid == 0) {
		close(c);
		if (fcntl(lfd, F_SETFD, 0) < 0)
			t_fatal("fcntl(F_SETFD)");
		snprintf(fdarg, sizeof(fdarg), "%d", lfd);
		execve(self, argv, environ);
		_exit(127);
	}
	close(lfd);
	t_recv_all(c, buf, 6);
	st = t_wait_child(pid);
	t_expect(st == 0 && !memcmp(buf, "queued", 6),
		 "  the new image accepted it and echoed (status %d)", st);
	printf("  then the client sees: %s\n", t_peer_sees(c, T_WAIT_MS));
	close(c);
}

int main(int argc, char **argv)
{
	char *slash;

	t_start(115);
	self = t_self_path(argv[0]);
	if (argc == 3 && !strcmp(argv[1], "--accept"))
		return image_accept(atoi(argv[2]));
	snprintf(handler, sizeof(handler), "%s", self);
	slash = strrchr(handler, '/');
	if (!slash || (size_t)(slash - handler) + sizeof("/h_stream") > sizeof(handler))
		t_skip("cannot tell where h_stream is from %s", self);
	strcpy(slash + 1, "h_stream");
	snprintf(static_cat, sizeof(static_cat), "%s", handler);
	strcpy(strrchr(static_cat, '/') + 1, "h_static_cat");

#ifdef T_EXEC_TO_KERNEL
	/* t_proc_exec_kernel: handlers that cannot take the circuit; it moves onto the kernel. */
	inetd("plain", 4 << 20, false);
	inetd_by("plain", 4 << 20, false, true);
	cat_handler(false);
#else
	inetd("raw", BIG, true);
	inetd("stdio", STDIO_BYTES, true);
	inetd("fdopen", STDIO_BYTES, true);
	inetd_by("raw", SPAWNED, true, true);
	cat_handler(true);
	exec_fails();
	listener_across_exec();
#endif
	return t_finish();
}
