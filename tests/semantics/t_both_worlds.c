// SPDX-License-Identifier: MIT
// Peers without the preload: this program's listener serves a client that
// runs without LD_PRELOAD, and its client talks to such a server. Under shunt
// both connections must take the kernel path and still work.
// shunt-expect: shm_connect==0 shm_accept==0 kernel_connect>=1 kernel_accept>=1
// shunt-expect: shm_tx_bytes==0 shm_rx_bytes==0
#include "t_harness.h"

#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

enum {
	XFER = 1 << 20,
	SEED_UP = 0xabc,   // towards the listener
	SEED_DOWN = 0xdef, // back to the connector
	EXIT_PRELOADED = 3,
};

// Sends XFER bytes of one stream and checks XFER bytes of another.
static bool exchange(int fd, uint64_t send_seed, uint64_t recv_seed, bool send_first)
{
	static unsigned char buf[XFER];
	bool ok;

	if (send_first) {
		t_stream_fill(send_seed, 0, buf, XFER);
		t_send_all(fd, buf, XFER);
	}
	t_recv_all(fd, buf, XFER);
	ok = t_stream_check(recv_seed, 0, buf, XFER) < 0;
	if (!send_first) {
		t_stream_fill(send_seed, 0, buf, XFER);
		t_send_all(fd, buf, XFER);
	}
	return ok;
}

// A child must really run without the library: say so with an exit code.
static void check_no_preload(void)
{
	char line[4096];
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strstr(line, "libshunt")) {
			fprintf(stderr, "child: libshunt is still mapped\n");
			exit(EXIT_PRELOADED);
		}
	}
	fclose(f);
}

// --server FD: listen, report the port on FD, serve one connection.
static int run_server(int report_fd)
{
	struct t_addr a;
	uint32_t port;
	int lfd, s;
	bool ok;

	check_no_preload();
	lfd = t_listen_loopback(AF_INET, 1, &a);
	port = t_addr_port(&a);
	if (write(report_fd, &port, sizeof(port)) != sizeof(port))
		t_fatal("report port");
	s = t_accept(lfd);
	ok = exchange(s, SEED_DOWN, SEED_UP, false);
	close(s);
	close(lfd);
	return ok ? 0 : 2;
}

// --client FD: read a port from FD, connect, exchange.
static int run_client(int port_fd)
{
	struct t_addr a;
	uint32_t port;
	bool ok;
	int c;

	check_no_preload();
	if (read(port_fd, &port, sizeof(port)) != sizeof(port))
		t_fatal("read port");
	t_addr_make(&a, "127.0.0.1", (uint16_t)port);
	c = t_connect(&a);
	ok = exchange(c, SEED_UP, SEED_DOWN, true);
	close(c);
	return ok ? 0 : 2;
}

// Start this program (self) again in `mode` without LD_PRELOAD, handing it fd.
static pid_t spawn_plain(const char *self, const char *mode, int fd)
{
	char fdarg[16];
	char **env;
	size_t n = 0, i, j = 0;
	pid_t pid;

	while (environ[n])
		n++;
	env = calloc(n + 1, sizeof(*env));
	if (!env)
		t_fatal("calloc");
	for (i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11))
			env[j++] = environ[i];
	snprintf(fdarg, sizeof(fdarg), "%d", fd);
	pid = t_fork();
	if (pid == 0) {
		char *argv[] = { (char *)self, (char *)mode, fdarg, NULL };

		execve(self, argv, env);
		fprintf(stderr, "execve(%s): %s\n", self, strerror(errno));
		_exit(127);
	}
	free(env);
	return pid;
}

int main(int argc, char **argv)
{
	struct t_addr a;
	int srv_pipe[2], cli_pipe[2], lfd, s, c, st;
	pid_t server, client;
	const char *self;
	uint32_t port;

	t_start(60);
	if (argc == 3 && !strcmp(argv[1], "--server"))
		return run_server(atoi(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "--client"))
		return run_client(atoi(argv[2]));

	// Both children are started before this process creates any socket.
	if (pipe(srv_pipe) || pipe(cli_pipe))
		t_fatal("pipe");
	// argv[0] rather than /proc/self/exe, which is the dynamic loader when
	// a launcher starts us as `ld.so PROGRAM`; the driver passes a path.
	self = strchr(argv[0], '/') ? argv[0] : "/proc/self/exe";
	server = spawn_plain(self, "--server", srv_pipe[1]);
	client = spawn_plain(self, "--client", cli_pipe[0]);
	close(srv_pipe[1]);
	close(cli_pipe[0]);

	// Our listener, their client.
	lfd = t_listen_loopback(AF_INET, 1, &a);
	port = t_addr_port(&a);
	if (write(cli_pipe[1], &port, sizeof(port)) != sizeof(port))
		t_fatal("write port");
	s = t_accept(lfd);
	t_expect(exchange(s, SEED_DOWN, SEED_UP, false),
		 "plain client -> our listener: 1 MiB each way, content matches");
	close(s);
	close(lfd);
	st = t_wait_child(client);
	t_expect(st == 0, "plain client exit status %d", st);

	// Our client, their listener.
	if (read(srv_pipe[0], &port, sizeof(port)) != sizeof(port))
		t_fatal("read port");
	t_addr_make(&a, "127.0.0.1", (uint16_t)port);
	c = t_connect(&a);
	t_expect(exchange(c, SEED_UP, SEED_DOWN, true),
		 "our client -> plain server: 1 MiB each way, content matches");
	close(c);
	st = t_wait_child(server);
	t_expect(st == 0, "plain server exit status %d", st);
	return t_finish();
}
