// SPDX-License-Identifier: MIT
/* shunt daemon: run shuntd in the foreground with the given options. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

int shunt_cmd_daemon(int argc, char **argv)
{
	char daemon[4096];

	if (shunt_path_daemon(daemon, sizeof(daemon)) < 0) {
		fprintf(stderr, "shunt: shuntd not found next to this shunt (set SHUNT_DAEMON)\n");
		return 1;
	}
	argv[0] = "shuntd";
	(void)argc;
	execv(daemon, argv);
	fprintf(stderr, "shunt: cannot run %s: %s\n", daemon, strerror(errno));
	return 1;
}
