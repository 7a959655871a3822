// SPDX-License-Identifier: MIT
// Children made without fork(): posix_spawn and posix_spawnp with the
// connection dup2'ed onto fds 0 and 1 by file actions, vfork, and clone with
// CLONE_VM|CLONE_VFORK (what posix_spawn does inside), each exec'ing this
// program, which talks through stdin and stdout, with or without the preload.
// Bytes the peer sent before the spawn are the child's first. A dup2 in a
// vfork child changes the child's descriptors only, though it shares the
// parent's memory. (A raw clone system call, which no library function
// makes and shunt cannot see, is left out: see docs/differences.md.)
// shunt-needs: companions
// shunt-expect: shm_connect>=7 shm_accept>=7 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

enum {
	FIRST = 20000,
	SECOND = 1 << 20,
	CHILD_WATCHDOG_S = 30,
	EXIT_BAD_DATA = 2,
	EXIT_PRELOADED = 3,
	CLONE_STACK = 256 << 10,
};

static const char *self;

// --stdio PLAIN: the conversation on stdin and stdout.
static int image_stdio(int plain)
{
	if (plain && t_preloaded())
		return EXIT_PRELOADED;
	return t_talk_holder(STDIN_FILENO, STDOUT_FILENO, FIRST) ? 0 : EXIT_BAD_DATA;
}

enum how { BY_SPAWN, BY_SPAWNP, BY_SPAWN_CLOSEFROM, BY_VFORK, BY_CLONE_VFORK };

struct job {
	enum how how;
	bool plain; // the child runs without LD_PRELOAD
	int c;	    // the connection to hand over
	char *argv[4];
	char **env;
};

static int clone_child(void *arg)
{
	struct job *j = arg;

	// Shares our memory until execve: only raw descriptor calls here.
	if (dup2(j->c, STDIN_FILENO) < 0 || dup2(j->c, STDOUT_FILENO) < 0)
		_exit(126);
	execve(self, j->argv, j->env);
	_exit(127);
}

static pid_t start(struct job *j)
{
	posix_spawn_file_actions_t fa;
	pid_t pid = -1;
	int r;

	switch (j->how) {
	case BY_SPAWN:
	case BY_SPAWNP:
	case BY_SPAWN_CLOSEFROM:
		if (posix_spawn_file_actions_init(&fa) ||
		    posix_spawn_file_actions_adddup2(&fa, j->c, STDIN_FILENO) ||
		    posix_spawn_file_actions_adddup2(&fa, j->c, STDOUT_FILENO))
			t_fatal("posix_spawn_file_actions");
		if (j->how == BY_SPAWN_CLOSEFROM &&
		    posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1))
			t_fatal("posix_spawn_file_actions_addclosefrom_np");
		fflush(stdout);
		r = j->how == BY_SPAWNP ? posix_spawnp(&pid, self, &fa, NULL, j->argv, j->env)
				     : posix_spawn(&pid, self, &fa, NULL, j->argv, j->env);
		posix_spawn_file_actions_destroy(&fa);
		if (r) {
			errno = r;
			t_fatal("posix_spawn");
		}
		return pid;
	case BY_VFORK:
		fflush(stdout);
		pid = vfork();
		if (pid == 0) {
			if (dup2(j->c, STDIN_FILENO) < 0 || dup2(j->c, STDOUT_FILENO) < 0)
				_exit(126);
			execve(self, j->argv, j->env);
			_exit(127);
		}
		break;
	case BY_CLONE_VFORK: {
		char *stack = malloc(CLONE_STACK);

		if (!stack)
			t_fatal("malloc");
		fflush(stdout);
		pid = clone(clone_child, stack + CLONE_STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, j);
		free(stack);
		break;
	}
	}
	if (pid < 0)
		t_fatal("start child");
	return pid;
}

static const char *how_name(enum how h)
{
	static const char *const names[] = {
		[BY_SPAWN] = "posix_spawn, file actions dup2 onto 0 and 1",
		[BY_SPAWNP] = "posix_spawnp, file actions dup2 onto 0 and 1",
		[BY_SPAWN_CLOSEFROM] = "posix_spawn, dup2 onto 0 and 1, closefrom(3)",
		[BY_VFORK] = "vfork, dup2 onto 0 and 1, execve",
		[BY_CLONE_VFORK] = "clone(CLONE_VM|CLONE_VFORK), dup2 onto 0 and 1, execve",
	};

	return names[h];
}

static void spawn_one(enum how how, bool plain)
{
	struct job j = { .how = how, .plain = plain };
	int s, st;
	bool ok;
	pid_t pid;

	printf("%s, %s:\n", how_name(how), plain ? "without LD_PRELOAD" : "environment kept");
	t_pair(AF_INET, &j.c, &s);
	t_talk_peer_first(s, FIRST);
	t_wait_inq(j.c, FIRST);
	j.argv[0] = (char *)self;
	j.argv[1] = "--stdio";
	j.argv[2] = plain ? "1" : "0";
	j.env = plain ? t_env_unpreloaded() : environ;
	pid = start(&j);
	close(j.c);
	ok = t_talk_peer_rest(s, FIRST, SECOND);
	st = t_wait_child(pid);
	t_expect(ok && st == 0, "  every byte right both ways, child exit status %d", st);
	printf("  then the peer sees: %s\n", t_peer_sees(s, T_WAIT_MS));
	// Our own stdin is /dev/null still: the child's dup2 was its own.
	T_REPORT("  parent getsockopt(0, SO_TYPE)",
		 getsockopt(STDIN_FILENO, SOL_SOCKET, SO_TYPE, &(int){ 0 },
			    &(socklen_t){ sizeof(int) }));
	T_REPORT("  parent read(0)", read(STDIN_FILENO, &(char){ 0 }, 1));
	close(s);
}

int main(int argc, char **argv)
{
	int nul;

	t_start(60);
	self = t_self_path(argv[0]);
	if (argc == 3 && !strcmp(argv[1], "--stdio"))
		return image_stdio(atoi(argv[2]));

	// A known stdin, to show that the children's dup2 onto it stay theirs.
	nul = open("/dev/null", O_RDONLY);
	if (nul < 0 || dup2(nul, STDIN_FILENO) < 0)
		t_fatal("/dev/null onto stdin");
	close(nul);
	spawn_one(BY_SPAWN, false);
	spawn_one(BY_SPAWN, true);
	spawn_one(BY_SPAWNP, false);
	spawn_one(BY_SPAWN_CLOSEFROM, true);
	spawn_one(BY_VFORK, false);
	spawn_one(BY_VFORK, true);
	spawn_one(BY_CLONE_VFORK, false);
	return t_finish();
}
