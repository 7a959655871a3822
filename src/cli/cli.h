/* SPDX-License-Identifier: MIT */
/* The shunt command: one file per subcommand, dispatched from main.c's table. */
#ifndef SHUNT_CLI_H
#define SHUNT_CLI_H

#include <stddef.h>

struct shunt_cmd {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv);	/* argv[0] is the subcommand */
};

int shunt_cmd_run(int argc, char **argv);
int shunt_cmd_daemon(int argc, char **argv);
int shunt_cmd_status(int argc, char **argv);
int shunt_cmd_policy(int argc, char **argv);
int shunt_cmd_compare(int argc, char **argv);

/*
 * Where things are. Each honours an environment override (SHUNT_LIB,
 * SHUNT_DAEMON, SHUNT_PLOT), then looks relative to this executable (the
 * build tree, then the installed layout wherever it was moved), then at
 * the path configured at build time. Return 0 and the path in @buf, or
 * -errno (-ENOENT: nowhere).
 */
int shunt_path_lib(char *buf, size_t n);
int shunt_path_daemon(char *buf, size_t n);
int shunt_path_plot(char *buf, size_t n);
/*
 * The control socket: SHUNT_SOCKET; /run/shunt/shuntd.sock for root, and
 * for other users when a daemon answers there; else per user.
 */
void shunt_path_socket(char *buf, size_t n);

/* Connect to shuntd's control socket: fd, or -errno. */
int shunt_daemon_connect(const char *path);

#endif
