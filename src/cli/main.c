// SPDX-License-Identifier: MIT
/* shunt: the command line, a table of subcommands. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const struct shunt_cmd cmds[] = {
	{ "run", "run a program with its TCP sockets on shared memory", shunt_cmd_run },
	{ "daemon", "run shuntd, the per-host daemon, in the foreground", shunt_cmd_daemon },
	{ "status", "show connections, listeners and processes using shunt", shunt_cmd_status },
	{ "policy", "explain which policy rule decides a connection", shunt_cmd_policy },
	{ "compare", "run a server and client on the kernel, then under shunt, side by side",
	  shunt_cmd_compare },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: shunt <command> [options]\n\n"
		   "shunt moves unmodified programs' TCP connections between processes on\n"
		   "this host onto shared memory, and leaves every other socket to the kernel.\n\n"
		   "commands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %-8s %s\n", cmds[i].name, cmds[i].summary);
	fprintf(f, "\n'shunt <command> --help' describes each.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(argv[1], cmds[i].name))
			return cmds[i].run(argc - 1, argv + 1);
	fprintf(stderr, "shunt: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
