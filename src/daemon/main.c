// SPDX-License-Identifier: MIT
/* shuntd: options, the control socket, and the start of the event loop. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/circuit.h"
#include "common/log.h"
#include "daemon/shuntd.h"
#include "daemon/systemd.h"

#define DEFAULT_CONFIG "/etc/shunt/shuntd.conf"

uint64_t shuntd_new_id(struct shuntd *d)
{
	return ++d->next_id;
}

/*
 * Where this daemon's ids start. Processes that outlived a killed shuntd
 * still hold its ids (sessions named in circuit routes, circuits,
 * listeners) and send some of them to its successor: the ids of two
 * daemons must not meet. A random multiple of 2^24 below 2^44 leaves 2^24
 * ids to each daemon and fits the 48 bits a route has for a session.
 */
static uint64_t id_base(void)
{
	uint32_t r;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r))
		r = (uint32_t)time(NULL) ^ (uint32_t)getpid() << 12;
	return (uint64_t)(r & 0xfffff) << 24;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: shuntd [--socket PATH] [--ring-size BYTES] [--channel-slots N]\n"
		"              [--idle-exit SECONDS] [--socket-mode OCTAL] [--config FILE]\n"
		"              [--metrics ADDRESS] [--log LEVEL]\n"
		"\n"
		"The shunt daemon: authenticates processes running under shunt, matches\n"
		"their connect() calls with listeners, and hands both ends a shared-memory\n"
		"circuit. It is never on the data path.\n"
		"\n"
		"  --socket PATH        control socket (default /run/shunt/shuntd.sock)\n"
		"  --ring-size BYTES    bytes per ring direction, a power of two (default %u)\n"
		"  --channel-slots N    connections per channel, through which a client\n"
		"                       connects to a local listener without asking shuntd\n"
		"                       (docs/connect.md; %u to %u, default %u; 0: every\n"
		"                       connect asks shuntd)\n"
		"  --idle-exit SECONDS  exit after that long with no client (default: never)\n"
		"  --socket-mode OCTAL  permissions of the control socket (default 0666)\n"
		"  --config FILE        the policy: tenants, limits, rules (docs/policy.md;\n"
		"                       default $SHUNT_CONFIG, else /etc/shunt/shuntd.conf\n"
		"                       if it exists, else: one tenant per uid, connections\n"
		"                       within a tenant on shared memory, across on the kernel)\n"
		"  --metrics ADDRESS    serve metrics (Prometheus text format) on HOST:PORT\n"
		"                       or unix:PATH (default: the policy's [daemon] metrics)\n"
		"  --log LEVEL          quiet, error, warn, info or debug (default warn)\n",
		SHUNT_RING_DEFAULT, SHUNT_CHAN_SLOTS_MIN, SHUNT_CHAN_SLOTS_MAX,
		SHUNT_CHAN_SLOTS_DEFAULT);
}

static int parse(int argc, char **argv, struct shuntd_config *cfg)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "ring-size", required_argument, NULL, 'r' },
		{ "channel-slots", required_argument, NULL, 'C' },
		{ "idle-exit", required_argument, NULL, 'i' },
		{ "socket-mode", required_argument, NULL, 'm' },
		{ "log", required_argument, NULL, 'l' },
		{ "config", required_argument, NULL, 'c' },
		{ "metrics", required_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	enum shunt_log_level level = shunt_log_parse(getenv("SHUNT_LOG"), SHUNT_LOG_WARN);
	int c;

	while ((c = getopt_long(argc, argv, "s:r:C:i:m:l:c:M:h", opts, NULL)) != -1) {
		char *end = NULL;

		switch (c) {
		case 's':
			cfg->socket_path = optarg;
			break;
		case 'r':
			cfg->ring_size = (uint32_t)strtoul(optarg, &end, 0);
			if (*end || !shunt_circuit_ring_size_ok(cfg->ring_size)) {
				fprintf(stderr, "shuntd: --ring-size %s: must be a power of two "
					"between %u and %u\n", optarg, SHUNT_RING_MIN, SHUNT_RING_MAX);
				return -1;
			}
			break;
		case 'C':
			cfg->chan_slots = (uint32_t)strtoul(optarg, &end, 0);
			if (*end || (cfg->chan_slots && (cfg->chan_slots < SHUNT_CHAN_SLOTS_MIN ||
							 cfg->chan_slots > SHUNT_CHAN_SLOTS_MAX))) {
				fprintf(stderr, "shuntd: --channel-slots %s: 0, or between %u and %u\n",
					optarg, SHUNT_CHAN_SLOTS_MIN, SHUNT_CHAN_SLOTS_MAX);
				return -1;
			}
			break;
		case 'i':
			cfg->idle_exit_ms = (int)(strtod(optarg, &end) * 1000);
			if (*end || cfg->idle_exit_ms < 0) {
				fprintf(stderr, "shuntd: --idle-exit %s: not a number of seconds\n", optarg);
				return -1;
			}
			break;
		case 'm':
			cfg->socket_mode = (mode_t)strtoul(optarg, &end, 8);
			if (*end) {
				fprintf(stderr, "shuntd: --socket-mode %s: not an octal mode\n", optarg);
				return -1;
			}
			break;
		case 'l':
			level = shunt_log_parse(optarg, (enum shunt_log_level)-1);
			if (level == (enum shunt_log_level)-1) {
				fprintf(stderr, "shuntd: --log %s: use quiet, error, warn, info or debug\n",
					optarg);
				return -1;
			}
			break;
		case 'c':
			cfg->config_path = optarg;
			break;
		case 'M':
			cfg->metrics = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return -1;
	}
	shunt_log_setup("shuntd", level);
	return 0;
}

/* Make the directory of the socket if missing (one level, like /run/shunt). */
static int make_socket_dir(const char *path)
{
	char buf[sizeof(((struct sockaddr_un *)0)->sun_path)];
	char *dir;

	snprintf(buf, sizeof(buf), "%s", path);
	dir = dirname(buf);
	if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		shunt_err("cannot create %s: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * Remove the control socket's file if it is still ours: if the lock file
 * was removed by hand, a newer daemon may have bound the path since, and
 * its clients must still find it.
 */
static void remove_socket_file(const struct shuntd *d)
{
	struct stat st;

	if (stat(d->cfg.socket_path, &st) == 0 && st.st_dev == d->socket_dev &&
	    st.st_ino == d->socket_ino)
		unlink(d->cfg.socket_path);
}

/*
 * One daemon per socket path: PATH.lock, locked for as long as this daemon
 * lives (the kernel lets go of it however the daemon dies). Two daemons
 * starting at once cannot both replace a dead one's socket file.
 */
static int lock_socket_path(const char *path)
{
	char lock[sizeof(((struct sockaddr_un *)0)->sun_path) + 8];
	int fd;

	snprintf(lock, sizeof(lock), "%s.lock", path);
	fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		shunt_err("cannot open %s: %s", lock, strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK)
			shunt_err("another shuntd already serves %s (it holds %s)", path, lock);
		else
			shunt_err("cannot lock %s: %s", lock, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;	/* kept open, never closed: the lock is the daemon's life */
}

/*
 * The control socket systemd made (shuntd.socket), if it passed one: its
 * path replaces --socket. The file is systemd's: socket_dev stays 0, so it
 * is not removed at exit. 1 when adopted, 0 when none was passed, -1 on error.
 */
static int adopt_control_socket(struct shuntd *d)
{
	static char passed[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd = shuntd_systemd_listen_fd(passed, sizeof(passed));

	if (fd == -ENOENT)
		return 0;
	if (fd < 0)
		return -1;
	if (strcmp(passed, d->cfg.socket_path))
		shunt_info("serving %s, the socket systemd passed, not %s", passed,
			   d->cfg.socket_path);
	d->cfg.socket_path = passed;
	if (lock_socket_path(passed) < 0) {
		close(fd);
		return -1;
	}
	d->listen_fd = fd;
	return 1;
}

static int open_control_socket(struct shuntd *d)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	const char *path = d->cfg.socket_path;
	struct stat st;
	int fd, probe;

	switch (adopt_control_socket(d)) {
	case 1:
		return 0;
	case -1:
		return -1;
	}
	if (strlen(path) >= sizeof(sun.sun_path)) {
		shunt_err("socket path %s is too long (at most %zu bytes)", path,
			  sizeof(sun.sun_path) - 1);
		return -1;
	}
	strcpy(sun.sun_path, path);
	if (make_socket_dir(path) < 0 || lock_socket_path(path) < 0)
		return -1;
	/*
	 * A live daemon answers (one that does not lock, or of another
	 * namespace sharing the file); a dead one's socket file, which refuses
	 * connections, is replaced.
	 */
	probe = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (probe >= 0 && connect(probe, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
		close(probe);
		shunt_err("another shuntd already serves %s", path);
		return -1;
	}
	if (probe >= 0)
		close(probe);
	unlink(path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		shunt_err("socket: %s", strerror(errno));
		return -1;
	}
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		shunt_err("cannot bind %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	chmod(path, d->cfg.socket_mode);
	if (stat(path, &st) == 0) {
		d->socket_dev = st.st_dev;
		d->socket_ino = st.st_ino;
	}
	if (listen(fd, 256) < 0) {
		shunt_err("listen on %s: %s", path, strerror(errno));
		close(fd);
		unlink(path);
		return -1;
	}
	d->listen_fd = fd;
	return 0;
}

/*
 * The daemon holds a few descriptors per link and listener, and with
 * companions two per circuit: lift the limit as far as the kernel allows
 * (fs.nr_open, with CAP_SYS_RESOURCE), else the soft limit to the hard one.
 */
static void raise_nofile(void)
{
	struct rlimit rl;
	unsigned long nr_open = 0;
	FILE *f = fopen("/proc/sys/fs/nr_open", "re");

	if (f) {
		if (fscanf(f, "%lu", &nr_open) != 1)
			nr_open = 0;
		fclose(f);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (nr_open > rl.rlim_max) {
		struct rlimit more = { nr_open, nr_open };

		if (setrlimit(RLIMIT_NOFILE, &more) == 0)
			return;
	}
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static uint64_t own_netns(void)
{
	struct stat st;

	return stat("/proc/self/ns/net", &st) == 0 ? st.st_ino : 0;
}

int main(int argc, char **argv)
{
	static struct shuntd d;
	int r;

	d.cfg = (struct shuntd_config){
		.socket_path = "/run/shunt/shuntd.sock",
		.ring_size = SHUNT_RING_DEFAULT,
		.chan_slots = SHUNT_CHAN_SLOTS_DEFAULT,
		.idle_exit_ms = -1,
		.socket_mode = 0666,
	};
	if (getenv("SHUNT_SOCKET") && *getenv("SHUNT_SOCKET"))
		d.cfg.socket_path = getenv("SHUNT_SOCKET");
	if (getenv("SHUNT_CONFIG") && *getenv("SHUNT_CONFIG"))
		d.cfg.config_path = getenv("SHUNT_CONFIG");
	else if (access(DEFAULT_CONFIG, F_OK) == 0)
		d.cfg.config_path = DEFAULT_CONFIG;
	d.metrics_fd = -1;
	d.next_id = id_base();
	if (parse(argc, argv, &d.cfg) < 0)
		return 2;
	/* A policy that does not parse is not guessed at: shuntd does not start. */
	if (shuntd_policy_load(&d) < 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	shuntd_crash_init();
	if (shuntd_efd_init() < 0)
		return 1;
	raise_nofile();
	d.netns_self = own_netns();
	shuntd_socket_init(d.netns_self);
	shunt_map_init(&d.sessions);
	shunt_map_init(&d.listeners);
	shunt_map_init(&d.ports);
	shunt_map_init(&d.circuits);
	shunt_map_init(&d.channels);
	shunt_map_init(&d.tickets);
	shunt_list_init(&d.tickets_orphaned);
	shunt_list_init(&d.tickets_unwatched);
	shunt_list_init(&d.family_waiting);
	shunt_list_init(&d.journals_awake);
	shunt_list_init(&d.adopt_pending);
	shunt_list_init(&d.warm_channels);
	if (shuntd_netns_init(&d) < 0)
		return 1;
	/* Without it every connect asks, as before: worth a warning, not an exit. */
	r = shuntd_directory_init();
	if (r < 0)
		shunt_warn("no directories of listened ports (%s): every connect asks",
			   strerror(-r));
	if (open_control_socket(&d) < 0)
		return 1;
	if (shuntd_loop_init(&d) < 0 || shuntd_metrics_init(&d) < 0) {
		remove_socket_file(&d);
		return 1;
	}
	shunt_info("serving %s (ring %u bytes)", d.cfg.socket_path, d.cfg.ring_size);
	/* Type=notify: ready once the socket is served and the policy is loaded. */
	shuntd_systemd_notify("READY=1");
	r = shuntd_loop_run(&d);
	shuntd_systemd_notify("STOPPING=1");
	remove_socket_file(&d);
	/* Every exit says why (crash.c for the fatal signals). */
	shunt_warn("exiting: %s", d.stop_reason[0] ? d.stop_reason : "the event loop ended");
	return r < 0 ? 1 : 0;
}
