/* SPDX-License-Identifier: MIT */
/*
 * shunt compare: one server and one client, run on the kernel and then
 * under shunt. compare.c drives it, compare_run.c runs one pass,
 * compare_report.c prints both passes side by side or as JSON.
 */
#ifndef SHUNT_CLI_COMPARE_H
#define SHUNT_CLI_COMPARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct compare_opts {
	char **server;			/* NULL-terminated argv */
	char **client;
	const char *socket;		/* --socket for shunt run, or NULL */
	const char *workdir;		/* logs and SHUNT_STATS files */
	int port;			/* the server is ready when it listens here; 0: any port */
	double wait_s;			/* how long the server may take to listen */
	double timeout_s;		/* how long the client may take */
};

/* SHUNT_STATS counters summed over the lines of one file (one per process). */
struct compare_counters {
	unsigned processes;
	uint64_t shm_connect, shm_accept, kernel_connect, kernel_accept;
	uint64_t shm_tx_bytes, shm_rx_bytes;
};

struct compare_pass {
	bool shunt;
	bool ran;			/* the server listened and the client was started */
	char why[512];			/* when !ran, or the client was killed at its timeout */
	int status;			/* the client's wait status */
	bool timed_out;
	double seconds;			/* the client's wall-clock time */
	char *output;			/* its stdout and stderr, as one terminal shows them */
	size_t output_len;
	char *server_log;		/* the server's stdout and stderr, kept for failures */
	size_t server_log_len;
	struct compare_counters client, server;
};

/*
 * Run the server, wait for it to listen, run the client to its end and
 * stop the server's process group: on the kernel, or (@p->shunt) both
 * under `shunt run`. Fills @p (output buffers are malloc'd; free with
 * shunt_compare_pass_free). Returns 0 when the client ran (whatever its
 * exit status), -errno when it could not be started or the server did not
 * listen (@p->why says which).
 */
int shunt_compare_pass(const struct compare_opts *o, struct compare_pass *p);
void shunt_compare_pass_free(struct compare_pass *p);

/* Stop every process the passes started; for SIGINT/SIGTERM handlers. */
void shunt_compare_kill_all(void);

/* Human-readable, both passes side by side, @width columns. */
void shunt_compare_print(const struct compare_opts *o, const struct compare_pass p[2], int width);
/* One JSON object with both passes (docs: shunt(1)). */
void shunt_compare_json(FILE *f, const struct compare_opts *o, const struct compare_pass p[2]);

#endif
