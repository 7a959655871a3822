// SPDX-License-Identifier: MIT
/*
 * A thread that moves to another network namespace (netns.h).
 */
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/sys.h"
#include "preload/netns.h"

static _Atomic bool left;

uint64_t shunt_netns_now(void)
{
	struct stat st;

	/* Through the gate: a filter that forbids the look costs the answer, 0. */
	if (shunt_syscall(SYS_newfstatat, AT_FDCWD, "/proc/thread-self/ns/net", &st, 0) < 0)
		return 0;
	return (uint64_t)st.st_ino;
}

void shunt_netns_moved(void)
{
	if (!atomic_exchange(&left, true))
		shunt_info("this process moved to another network namespace: the sockets it makes "
			   "from now on are the kernel's");
}

void shunt_netns_after(uint64_t before)
{
	uint64_t now = shunt_netns_now();

	/* Not knowing either side is as good as a move: the kernel is always right. */
	if (!before || !now || now != before)
		shunt_netns_moved();
}

bool shunt_netns_left(void)
{
	return atomic_load_explicit(&left, memory_order_relaxed);
}
