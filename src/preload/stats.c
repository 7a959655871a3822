// SPDX-License-Identifier: MIT
/* Per-process transport counters, reported as JSON at exit when asked. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sys.h"
#include "preload/conn.h"
#include "preload/fdtable.h"
#include "preload/sock.h"
#include "preload/stats.h"
#include "preload/util.h"

struct shunt_stats shunt_stats;

static char stats_path[4096];	/* written once by init */
static _Atomic int kept_fd = -1;	/* the report's file, opened early (seccomp) */

void shunt_stats_saw_fd(int fd)
{
	int m = atomic_load_explicit(&shunt_stats.max_fd, memory_order_relaxed);

	while (fd > m && !atomic_compare_exchange_weak(&shunt_stats.max_fd, &m, fd))
		;
}

/* The report's file, appended to by every process of a run. */
static int open_report(void)
{
	return (int)shunt_syscall(SYS_openat, AT_FDCWD, stats_path,
				  O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

static int by_address(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;

	return x < y ? -1 : x > y;
}

/* Add the bytes of every connection still open to *@tx and *@rx, each socket once. */
static void open_bytes(uint64_t *tx, uint64_t *rx)
{
	size_t n = 0, cap = (size_t)shunt_stats.max_fd + 1;
	struct shunt_sock **v = malloc(cap * sizeof(*v));

	if (!v)
		return;
	for (int i = 0; i <= shunt_stats.max_fd; i++) {
		struct shunt_sock *s = shunt_fdt_get(i);

		if (s)
			v[n++] = s;
	}
	qsort(v, n, sizeof(*v), by_address);
	for (size_t i = 0; i < n; i++) {
		struct shunt_sock *s = v[i];

		if ((i == 0 || v[i - 1] != s) && shunt_sock_state(s) == SHUNT_SOCK_CONNECTED &&
		    s->conn) {
			*tx += shunt_conn_tx_bytes(s->conn);
			*rx += shunt_conn_rx_bytes(s->conn);
		}
	}
	for (size_t i = 0; i < n; i++)
		shunt_sock_put(v[i]);
	free(v);
}

static void report(void)
{
	uint64_t tx = shunt_stats.shm_tx_bytes, rx = shunt_stats.shm_rx_bytes;
	/* Through the gate: a seccomp filter may forbid getpid, we know it anyway. */
	long pid = shunt_syscall(SYS_getpid);
	char line[800];
	int fd, n;

	if (pid < 0)
		pid = (long)shunt_pid;
	/* Connections still open at exit count too, once each (dup'ed descriptors share one). */
	open_bytes(&tx, &rx);
	n = snprintf(line, sizeof(line),
		     "{\"pid\":%ld,\"shm_connect\":%llu,\"shm_accept\":%llu,"
		     "\"kernel_connect\":%llu,\"kernel_accept\":%llu,"
		     "\"shm_tx_bytes\":%llu,\"shm_rx_bytes\":%llu,"
		     "\"fallback_nodaemon\":%llu,\"fallback_error\":%llu,"
		     "\"fallback_policy\":%llu,\"fallback_limit\":%llu,\"policy_refused\":%llu,"
		     "\"fallback_seccomp\":%llu,\"fallback_late\":%llu,\"late_waits\":%llu,"
		     "\"kernel_unlistened\":%llu,\"trim_idle\":%llu,\"trim_read\":%llu,"
		     "\"accept_asks\":%llu,\"ctl_asks\":%llu,\"recycled\":%llu,"
		     "\"recycled_fresh\":%llu}\n",
		     pid, (unsigned long long)shunt_stats.shm_connect,
		     (unsigned long long)shunt_stats.shm_accept,
		     (unsigned long long)shunt_stats.kernel_connect,
		     (unsigned long long)shunt_stats.kernel_accept,
		     (unsigned long long)tx, (unsigned long long)rx,
		     (unsigned long long)shunt_stats.fallback_nodaemon,
		     (unsigned long long)shunt_stats.fallback_error,
		     (unsigned long long)shunt_stats.fallback_policy,
		     (unsigned long long)shunt_stats.fallback_limit,
		     (unsigned long long)shunt_stats.policy_refused,
		     (unsigned long long)shunt_stats.fallback_seccomp,
		     (unsigned long long)shunt_stats.fallback_late,
		     (unsigned long long)shunt_stats.late_waits,
		     (unsigned long long)shunt_stats.kernel_unlistened,
		     (unsigned long long)shunt_stats.trim_idle,
		     (unsigned long long)shunt_stats.trim_read,
		     (unsigned long long)shunt_stats.accept_asks,
		     (unsigned long long)shunt_stats.ctl_asks,
		     (unsigned long long)shunt_stats.recycled,
		     (unsigned long long)shunt_stats.recycled_fresh);
	fd = atomic_load(&kept_fd);
	if (fd < 0)
		fd = open_report();
	if (fd < 0)
		return;
	(void)!shunt_syscall(SYS_write, fd, line, (size_t)n);
	if (fd != atomic_load(&kept_fd))
		shunt_close_internal(fd);
}

void shunt_stats_keep_open(void)
{
	int fd;

	if (!stats_path[0] || atomic_load(&kept_fd) >= 0)
		return;
	fd = open_report();
	if (fd >= 0)
		atomic_store(&kept_fd, shunt_fd_hide(fd));
}

void shunt_stats_init(void)
{
	const char *p = getenv("SHUNT_STATS");

	if (!p || !*p || strlen(p) >= sizeof(stats_path))
		return;
	strcpy(stats_path, p);
	atexit(report);
}
