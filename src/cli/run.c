// SPDX-License-Identifier: MIT
/*
 * shunt run: start a program with libshunt preloaded, making sure a daemon
 * answers first (starting one for this user if none does). If no daemon can
 * be had, the program still runs, on the kernel.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/reach.h"

enum { EMBEDDED_IDLE_EXIT_S = 10 };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shunt run [--socket PATH] [--no-daemon] [--] PROGRAM [ARGS...]\n"
		"\n"
		"Run PROGRAM with its TCP connections to other shunt processes on this host\n"
		"carried over shared memory; every other socket stays with the kernel.\n"
		"If no shuntd answers at the control socket, one is started for you and\n"
		"exits %d s after its last client.\n"
		"\n"
		"  --socket PATH  control socket (default: $SHUNT_SOCKET, /run/shunt/shuntd.sock\n"
		"                 for root, else $XDG_RUNTIME_DIR/shunt/shuntd.sock)\n"
		"  --no-daemon    do not start a daemon; without one, sockets use the kernel\n"
		"\n"
		"Environment for the program: SHUNT_LOG=quiet|error|warn|info|debug,\n"
		"SHUNT_DISABLE=1 (everything on the kernel), SHUNT_SPIN_US=N (most microseconds\n"
		"a wait spins, when spinning pays; 0: never),\n"
		"SHUNT_STATS=FILE (append per-process transport counters as JSON at exit).\n",
		EMBEDDED_IDLE_EXIT_S);
}

static int daemon_answers(const char *path)
{
	int fd = shunt_daemon_connect(path);

	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

/* The per-user socket directory is private; the system one is made by shuntd. */
static void make_private_dir(const char *path)
{
	char buf[4096];

	snprintf(buf, sizeof(buf), "%s", path);
	mkdir(dirname(buf), 0700);
}

/* Start shuntd detached (double fork, so it is nobody's child) and wait for it. */
static int start_daemon(const char *path, char *why, size_t whylen)
{
	char daemon[4096];
	pid_t pid;
	int status;

	if (shunt_path_daemon(daemon, sizeof(daemon)) < 0) {
		snprintf(why, whylen, "shuntd not found next to this shunt (set SHUNT_DAEMON)");
		return -1;
	}
	make_private_dir(path);
	pid = fork();
	if (pid < 0) {
		snprintf(why, whylen, "fork: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		const char *log = getenv("SHUNT_DAEMON_LOG");
		char idle[16];
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		int err = log && *log ? open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : null;

		setsid();
		if (fork() != 0)
			_exit(0);
		dup2(null, 0);
		dup2(null, 1);
		dup2(err >= 0 ? err : null, 2);
		unsetenv("LD_PRELOAD");
		snprintf(idle, sizeof(idle), "%d", EMBEDDED_IDLE_EXIT_S);
		execl(daemon, "shuntd", "--socket", path, "--idle-exit", idle, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, &status, 0);
	for (int i = 0; i < 600; i++) {
		struct timespec ts = { 0, 5 * 1000 * 1000 };

		if (daemon_answers(path))
			return 0;
		nanosleep(&ts, NULL);
	}
	snprintf(why, whylen, "%s did not answer within 3 s (SHUNT_DAEMON_LOG=FILE shows why)",
		 daemon);
	return -1;
}

static int prepend_preload(const char *lib)
{
	const char *old = getenv("LD_PRELOAD");
	char *v;
	int r;

	if (!old || !*old)
		return setenv("LD_PRELOAD", lib, 1);
	if (strstr(old, lib))
		return 0;
	if (asprintf(&v, "%s:%s", lib, old) < 0)
		return -1;
	r = setenv("LD_PRELOAD", v, 1);
	free(v);
	return r;
}

int shunt_cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "no-daemon", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char path[4096], lib[4096], why[4352], unreached[8448];
	int no_daemon = 0, c;

	shunt_path_socket(path, sizeof(path));
	/* '+': stop at the program's name; its options are its own. */
	while ((c = getopt_long(argc, argv, "+s:nh", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			snprintf(path, sizeof(path), "%s", optarg);
			break;
		case 'n':
			no_daemon = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	if (shunt_path_lib(lib, sizeof(lib)) < 0) {
		fprintf(stderr, "shunt: libshunt.so not found next to this shunt (set SHUNT_LIB); "
				"running %s on the kernel\n", argv[optind]);
	} else {
		if (!daemon_answers(path) && !no_daemon && start_daemon(path, why, sizeof(why)) < 0)
			fprintf(stderr, "shunt: no daemon at %s and none could be started: %s; "
					"sockets will use the kernel\n", path, why);
		if (prepend_preload(lib) < 0 || setenv("SHUNT_SOCKET", path, 1) < 0) {
			fprintf(stderr, "shunt: cannot set the environment: %s\n", strerror(errno));
			return 1;
		}
		/* Run it all the same: it works, only without shared memory. */
		if (shunt_reach_check(argv[optind], unreached, sizeof(unreached)))
			fprintf(stderr, "shunt: %s\n", unreached);
	}
	execvp(argv[optind], argv + optind);
	fprintf(stderr, "shunt: cannot run %s: %s\n", argv[optind], strerror(errno));
	return errno == ENOENT ? 127 : 126;
}
