// SPDX-License-Identifier: MIT
/*
 * Start of the library, once per process (pthread_once, from the
 * constructor or whichever wrapper runs first), and what a fork child must
 * redo. SHUNT_DISABLE=1 turns every socket into a plain kernel socket.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "preload/control.h"
#include "preload/exec.h"
#include "preload/fdtable.h"
#include "preload/fork.h"
#include "preload/handoff.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/notice.h"
#include "preload/ops.h"
#include "preload/stats.h"
#include "preload/util.h"
#include "preload/wait.h"

_Atomic bool shunt_ready;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static bool enabled;		/* written once by init */

bool shunt_enabled(void)
{
	return enabled;
}

static void init(void)
{
	const char *off = getenv("SHUNT_DISABLE");

	shunt_pid = (uint32_t)getpid();
	shunt_libc_resolve();
	shunt_log_setup("shunt", shunt_log_parse(getenv("SHUNT_LOG"), SHUNT_LOG_WARN));
	enabled = !(off && *off && strcmp(off, "0"));
	if (enabled && shunt_fdt_init() < 0)
		enabled = false;
	shunt_ctl_init();
	shunt_wait_init();
	shunt_stats_init();
	pthread_atfork(shunt_fork_prepare, shunt_fork_parent, shunt_fork_child);
	atomic_store_explicit(&shunt_ready, true, memory_order_release);
	/*
	 * Connections the program before an exec kept in shared memory for us
	 * (their ticket is claimed by the first session, so first), then
	 * listening sockets this program was started with (socket activation,
	 * an exec).
	 */
	if (enabled) {
		shunt_exec_adopt();
		shunt_handoff_inherited();
	}
}

void shunt_init(void)
{
	pthread_once(&init_once, init);
}

__attribute__((constructor)) static void shunt_constructor(void)
{
	shunt_init();
}
