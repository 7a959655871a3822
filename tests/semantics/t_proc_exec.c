// SPDX-License-Identifier: MIT
// A connection inherited across exec keeps working in the new image, with
// or without the preload (environment kept, LD_PRELOAD removed, or cleared
// as by `env -i`), through every member of the exec family: bytes the peer
// sent before the exec and nobody read are the new image's first bytes.
// With FD_CLOEXEC the exec closes it (EOF, or a reset when data was unread).
// inetd: accept, fork, dup2 onto 0 and 1, exec a handler (this program, or
// cat) that talks through stdin and stdout.
// shunt-needs: companions
// shunt-expect: shm_connect>=18 shm_accept>=18 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1
// t-timeout: 90
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

enum {
	FIRST = 20000,	     // sent before the exec, read after it
	SECOND = 1 << 20,    // sent after it
	CAT_BYTES = 3 << 20, // through cat
	IMAGE_WATCHDOG_S = 60,
	EXIT_BAD_DATA = 2,
	EXIT_PRELOADED = 3,
	EXIT_STILL_OPEN = 4,
	EXIT_MARKED = 5,
};

static const char *self;

// ---- the new images

// The mark with which shunt has a new image claim what it kept is not the program's.
static bool marked(void)
{
	return getenv("SHUNT_EXEC_TICKET") != NULL;
}

// --talk FD PLAIN: the conversation on FD; PLAIN=1: must run without the library.
static int image_talk(int fd, int plain)
{
	if (plain && t_preloaded())
		return EXIT_PRELOADED;
	if (marked())
		return EXIT_MARKED;
	return t_talk_holder(fd, fd, FIRST) ? 0 : EXIT_BAD_DATA;
}

// --stdio PLAIN: the conversation on stdin and stdout (an inetd handler).
static int image_stdio(int plain)
{
	if (plain && t_preloaded())
		return EXIT_PRELOADED;
	if (marked())
		return EXIT_MARKED;
	return t_talk_holder(STDIN_FILENO, STDOUT_FILENO, FIRST) ? 0 : EXIT_BAD_DATA;
}

// --closed FD RD: FD must be gone; stay alive until RD reaches EOF.
static int image_closed(int fd, int rd)
{
	char b;
	bool open = t_fd_open(fd);

	while (read(rd, &b, 1) > 0)
		;
	return open ? EXIT_STILL_OPEN : 0;
}

// ---- exec variants

enum env_kind { ENV_KEPT, ENV_UNPRELOADED, ENV_EMPTY };

static char **env_of(enum env_kind k)
{
	static char *empty[] = { NULL };

	switch (k) {
	case ENV_KEPT:
		return environ;
	case ENV_UNPRELOADED:
		return t_env_unpreloaded();
	default:
		return empty;
	}
}

static const char *env_name(enum env_kind k)
{
	return k == ENV_KEPT ? "environment kept" : k == ENV_UNPRELOADED ? "without LD_PRELOAD"
									 : "empty environment";
}

enum how { EXECVE, EXECV, EXECVP, EXECL, EXECLP, EXECLE, EXECVPE, FEXECVE, EXECVEAT };

static const struct variant {
	const char *name;
	enum how how;
	enum env_kind env;
} variants[] = {
	{ "execve", EXECVE, ENV_KEPT },
	{ "execve", EXECVE, ENV_UNPRELOADED },
	{ "execve", EXECVE, ENV_EMPTY },
	{ "execv", EXECV, ENV_KEPT },
	{ "execvp", EXECVP, ENV_KEPT },
	{ "execl", EXECL, ENV_KEPT },
	{ "execlp", EXECLP, ENV_KEPT },
	{ "execle", EXECLE, ENV_UNPRELOADED },
	{ "execvpe", EXECVPE, ENV_KEPT },
	{ "fexecve", FEXECVE, ENV_KEPT },
	{ "fexecve", FEXECVE, ENV_UNPRELOADED },
	{ "execveat(AT_EMPTY_PATH)", EXECVEAT, ENV_EMPTY },
};

// In the child: exec this program with argv through variant v; never returns.
static void exec_via(const struct variant *v, char *const argv[])
{
	char **env = env_of(v->env);
	int fd;

	switch (v->how) {
	case EXECVE:
		execve(self, argv, env);
		break;
	case EXECV:
		execv(self, argv);
		break;
	case EXECVP:
		execvp(self, argv);
		break;
	case EXECL:
		execl(self, argv[0], argv[1], argv[2], argv[3], (char *)NULL);
		break;
	case EXECLP:
		execlp(self, argv[0], argv[1], argv[2], argv[3], (char *)NULL);
		break;
	case EXECLE:
		execle(self, argv[0], argv[1], argv[2], argv[3], (char *)NULL, env);
		break;
	case EXECVPE:
		execvpe(self, argv, env);
		break;
	case FEXECVE:
	case EXECVEAT:
		// An ELF image runs from a close-on-exec descriptor.
		fd = open(self, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			break;
		if (v->how == FEXECVE)
			fexecve(fd, argv, env);
		else
			execveat(fd, "", argv, env, AT_EMPTY_PATH);
		break;
	}
	fprintf(stderr, "%s(%s): %s\n", v->name, self, strerror(errno));
	_exit(127);
}

static void report_holder(int st, bool talked)
{
	t_expect(talked && st == 0, "  every byte right both ways, image exit status %d", st);
}

// The peer sends FIRST bytes; the child execs with the socket inherited;
// the new image reads them and the two go on talking.
static void exec_one(const struct variant *v)
{
	char fdarg[16], plain[2] = { v->env == ENV_KEPT ? '0' : '1', 0 };
	char *argv[] = { (char *)self, "--talk", fdarg, plain, NULL };
	int c, s, st;
	bool ok;
	pid_t pid;

	printf("%s, %s, unread bytes waiting:\n", v->name, env_name(v->env));
	t_pair(AF_INET, &c, &s);
	t_talk_peer_first(s, FIRST);
	t_wait_inq(c, FIRST);
	pid = t_fork_tied(IMAGE_WATCHDOG_S);
	if (pid == 0) {
		close(s);
		if (fcntl(c, F_SETFD, 0) < 0)
			t_fatal("fcntl(F_SETFD)");
		snprintf(fdarg, sizeof(fdarg), "%d", c);
		exec_via(v, argv);
	}
	close(c);
	ok = t_talk_peer_rest(s, FIRST, SECOND);
	st = t_wait_child(pid);
	report_holder(st, ok);
	printf("  then the peer sees: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(s);
}

// FD_CLOEXEC kept: the exec closes the socket, the image never has it.
static void exec_cloexec(enum env_kind env, bool unread)
{
	char fdarg[16], rdarg[16];
	char *argv[] = { (char *)self, "--closed", fdarg, rdarg, NULL };
	int c, s, p[2], st;
	pid_t pid;

	printf("execve, %s, FD_CLOEXEC set, %s:\n", env_name(env),
	       unread ? "bytes unread" : "nothing unread");
	t_pair(AF_INET, &c, &s);
	if (pipe(p) < 0)
		t_fatal("pipe");
	if (unread) {
		T_REPORT("  peer send", send(s, "never read", 10, 0));
		t_wait_inq(c, 10);
	}
	pid = t_fork_tied(IMAGE_WATCHDOG_S);
	if (pid == 0) {
		close(s);
		close(p[1]);
		snprintf(fdarg, sizeof(fdarg), "%d", c);
		snprintf(rdarg, sizeof(rdarg), "%d", p[0]);
		execve(self, argv, env_of(env));
		_exit(127);
	}
	close(c);
	close(p[0]);
	// The new image is alive (it waits for the pipe) and holds nothing.
	printf("  peer sees: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(p[1]);
	st = t_wait_child(pid);
	t_expect(st == 0, "  the image has no such descriptor (exit status %d)", st);
	T_REPORT("  peer send(MSG_NOSIGNAL)", send(s, "x", 1, MSG_NOSIGNAL));
	close(s);
}

// ---- inetd

struct cat_feed {
	int fd;
	pthread_t th;
};

static void *feed_cat(void *arg)
{
	struct cat_feed *f = arg;
	static unsigned char buf[64 << 10];

	for (uint64_t off = 0; off < CAT_BYTES; off += sizeof(buf)) {
		t_stream_fill(0xca7, off, buf, sizeof(buf));
		t_send_all(f->fd, buf, sizeof(buf));
	}
	if (shutdown(f->fd, SHUT_WR) < 0)
		t_fatal("shutdown");
	return NULL;
}

// Read to EOF: true if exactly CAT_BYTES of the fed stream came back.
static bool cat_back(int fd)
{
	static unsigned char buf[64 << 10];
	uint64_t off = 0;
	bool ok = true;
	ssize_t r;

	while ((r = recv(fd, buf, sizeof(buf), 0)) > 0) {
		ok = ok && t_stream_check(0xca7, off, buf, (size_t)r) < 0;
		off += (uint64_t)r;
	}
	return ok && r == 0 && off == CAT_BYTES;
}

static void inetd(const char *handler, enum env_kind env)
{
	bool cat = !strcmp(handler, "cat");
	char plain[2] = { env == ENV_KEPT ? '0' : '1', 0 };
	char *self_argv[] = { (char *)self, "--stdio", plain, NULL };
	char *cat_argv[] = { "cat", NULL };
	struct t_addr a;
	struct cat_feed f;
	int lfd, c, s, st;
	bool ok;
	pid_t pid;

	printf("inetd: accept, fork, dup2 onto 0 and 1, exec %s, %s:\n", handler,
	       env_name(env));
	lfd = t_listen_loopback(AF_INET, 4, &a);
	c = t_connect(&a);
	if (!cat)
		t_talk_peer_first(c, FIRST);
	s = t_accept(lfd);
	pid = t_fork_tied(IMAGE_WATCHDOG_S);
	if (pid == 0) {
		if (dup2(s, STDIN_FILENO) < 0 || dup2(s, STDOUT_FILENO) < 0)
			t_fatal("dup2");
		close(s);
		close(lfd);
		close(c);
		if (cat)
			execvpe("cat", cat_argv, env_of(env));
		else
			execve(self, self_argv, env_of(env));
		fprintf(stderr, "exec %s: %s\n", handler, strerror(errno));
		_exit(127);
	}
	close(s);
	close(lfd);
	if (cat) {
		f.fd = c;
		if (pthread_create(&f.th, NULL, feed_cat, &f))
			t_fatal("pthread_create");
		ok = cat_back(c);
		pthread_join(f.th, NULL);
		st = t_wait_child(pid);
		t_expect(ok && st == 0, "  cat sent back all %d bytes, then EOF (status %d)",
			 CAT_BYTES, st);
	} else {
		ok = t_talk_peer_rest(c, FIRST, SECOND);
		st = t_wait_child(pid);
		report_holder(st, ok);
		printf("  then the client sees: %s\n", t_peer_sees(c, T_WAIT_MS));
	}
	close(c);
}

int main(int argc, char **argv)
{
	t_start(85);
	self = t_self_path(argv[0]);
	if (argc == 4 && !strcmp(argv[1], "--talk"))
		return image_talk(atoi(argv[2]), atoi(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "--stdio"))
		return image_stdio(atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "--closed"))
		return image_closed(atoi(argv[2]), atoi(argv[3]));

	for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++)
		exec_one(&variants[i]);
	exec_cloexec(ENV_KEPT, false);
	exec_cloexec(ENV_UNPRELOADED, true);
	inetd("this program", ENV_KEPT);
	inetd("this program", ENV_UNPRELOADED);
	inetd("cat", ENV_KEPT);
	inetd("cat", ENV_EMPTY);
	return t_finish();
}
