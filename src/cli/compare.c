// SPDX-License-Identifier: MIT
/*
 * shunt compare: run a server and a client on the kernel, then both under
 * shunt, in one go, and show the client's own output of both runs side by
 * side with the time each took and what went over shared memory; --json
 * for scripts, --plot FILE.png for a picture (compare-plot.py, matplotlib).
 *
 *   shunt compare [OPTIONS] -- SERVER [ARGS...] -- CLIENT [ARGS...]
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/compare.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shunt compare [OPTIONS] -- SERVER [ARGS...] -- CLIENT [ARGS...]\n"
		"\n"
		"Run SERVER, wait until it listens on a TCP port, run CLIENT to its end and\n"
		"stop SERVER: first on the kernel, then both under shunt run. Print CLIENT's\n"
		"output of both runs side by side, the time it took in each, and how many\n"
		"bytes went over shared memory (its SHUNT_STATS counters).\n"
		"\n"
		"  --json          print one JSON object instead (both outputs, times, counters)\n"
		"  --plot FILE     also draw the times and the throughput lines to FILE (PNG;\n"
		"                  needs python3 with matplotlib)\n"
		"  --port PORT     SERVER is ready when it listens on PORT (default: any port)\n"
		"  --wait SECONDS  how long SERVER may take to listen (default 10)\n"
		"  --timeout SECONDS  how long CLIENT may run before it is killed (default 600)\n"
		"  --socket PATH   the control socket for shunt run (default as shunt run)\n"
		"\n"
		"SERVER is stopped with SIGTERM (SIGKILL 5 s later) after each run.\n"
		"Exit status: 0 when CLIENT exited 0 in both runs, 1 otherwise, 2 for usage.\n");
}

static void on_signal(int sig)
{
	shunt_compare_kill_all();
	signal(sig, SIG_DFL);
	raise(sig);
}

static int terminal_width(void)
{
	struct winsize ws;
	const char *env = getenv("COLUMNS");

	if (env && atoi(env) > 0)
		return atoi(env);
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	return 160;
}

static int plot(const struct compare_opts *o, const struct compare_pass p[2], const char *png)
{
	char script[4096], json[4096];
	pid_t pid;
	int status;
	FILE *f;

	if (shunt_path_plot(script, sizeof(script)) < 0) {
		fprintf(stderr, "shunt compare: compare-plot.py not found next to this shunt "
				"(set SHUNT_PLOT); no plot\n");
		return -1;
	}
	snprintf(json, sizeof(json), "%s/compare.json", o->workdir);
	f = fopen(json, "we");
	if (!f) {
		fprintf(stderr, "shunt compare: cannot write %s: %s\n", json, strerror(errno));
		return -1;
	}
	shunt_compare_json(f, o, p);
	fclose(f);
	pid = fork();
	if (pid == 0) {
		unsetenv("LD_PRELOAD");
		/*
		 * Debian's python3, where python3-matplotlib puts matplotlib, before
		 * PATH's; named in full, since Python finds its library from argv[0].
		 */
		execl("/usr/bin/python3", "/usr/bin/python3", script, json, png, (char *)NULL);
		execlp("python3", "python3", script, json, png, (char *)NULL);
		fprintf(stderr, "shunt compare: cannot run python3 for --plot: %s\n", strerror(errno));
		_exit(127);
	}
	status = -1;
	if (pid > 0)
		waitpid(pid, &status, 0);
	unlink(json);
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "shunt compare: no plot written to %s\n", png);
		return -1;
	}
	return 0;
}

static int number(const char *opt, const char *arg, double min, double *v)
{
	char *end;

	*v = strtod(arg, &end);
	if (*end || end == arg || *v < min) {
		fprintf(stderr, "shunt compare: %s %s: not a number of at least %g\n", opt, arg, min);
		return -1;
	}
	return 0;
}

int shunt_cmd_compare(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "plot", required_argument, NULL, 'p' },
		{ "port", required_argument, NULL, 'P' },
		{ "wait", required_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 't' },
		{ "socket", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct compare_opts o = { .wait_s = 10, .timeout_s = 600 };
	struct compare_pass p[2] = { { .shunt = false }, { .shunt = true } };
	const char *png = NULL;
	char workdir[] = "/tmp/shunt-compare-XXXXXX";
	bool json = false;
	int c, r = 0, sep;
	double v;

	/* '+': the server's and client's options are their own. */
	while ((c = getopt_long(argc, argv, "+jp:P:w:t:s:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = true;
			break;
		case 'p':
			png = optarg;
			break;
		case 'P':
			if (number("--port", optarg, 1, &v) < 0 || v > 65535 || v != (int)v)
				return 2;
			o.port = (int)v;
			break;
		case 'w':
			if (number("--wait", optarg, 0, &o.wait_s) < 0)
				return 2;
			break;
		case 't':
			if (number("--timeout", optarg, 0, &o.timeout_s) < 0)
				return 2;
			break;
		case 's':
			o.socket = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	/* getopt took the first "--"; the second separates the client. */
	for (sep = optind; sep < argc && strcmp(argv[sep], "--"); sep++)
		;
	if (optind >= sep || sep + 1 >= argc || strcmp(argv[optind - 1], "--")) {
		fprintf(stderr, "shunt compare: give -- SERVER [ARGS...] -- CLIENT [ARGS...]\n\n");
		usage(stderr);
		return 2;
	}
	argv[sep] = NULL;
	o.server = argv + optind;
	o.client = argv + sep + 1;
	if (!mkdtemp(workdir)) {
		fprintf(stderr, "shunt compare: cannot make %s: %s\n", workdir, strerror(errno));
		return 1;
	}
	o.workdir = workdir;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	signal(SIGHUP, on_signal);

	for (int i = 0; i < 2; i++) {
		if (!json)
			fprintf(stderr, "shunt compare: %s run...\n", i ? "shunt" : "plain");
		shunt_compare_pass(&o, &p[i]);
		if (!p[i].ran || p[i].timed_out || !WIFEXITED(p[i].status) ||
		    WEXITSTATUS(p[i].status))
			r = 1;
	}
	if (json)
		shunt_compare_json(stdout, &o, p);
	else
		shunt_compare_print(&o, p, terminal_width());
	fflush(stdout);
	if (png && plot(&o, p, png) < 0)
		r = 1;
	shunt_compare_pass_free(&p[0]);
	shunt_compare_pass_free(&p[1]);
	rmdir(workdir);
	return r;
}
