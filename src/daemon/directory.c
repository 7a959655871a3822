// SPDX-License-Identifier: MIT
/*
 * The directory (include/shunt/directory.h): which ports shuntd knows a
 * listener on, published read-only to every process so that a connect no
 * listener could take is left to the kernel without a question.
 * A count per port and kind says when a bit may be cleared.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "common/addr.h"
#include "common/log.h"
#include "daemon/shuntd.h"
#include "shunt/directory.h"

static struct shunt_directory *dir;	/* shuntd's writable mapping */
static int dir_fd = -1;
static uint32_t *count_any, *count_wide;	/* listeners per port */

int shuntd_directory_init(void)
{
	void *map;
	int fd;

	count_any = calloc(65536, sizeof(*count_any));
	count_wide = calloc(65536, sizeof(*count_wide));
	if (!count_any || !count_wide)
		return -ENOMEM;
	fd = shuntd_memfd_published("shunt-directory", shunt_directory_size(), &map);
	if (fd < 0)
		return fd;
	dir = map;
	dir->magic = SHUNT_DIRECTORY_MAGIC;
	dir->version = SHUNT_DIRECTORY_VERSION;
	dir_fd = fd;
	return 0;
}

int shuntd_directory_fd(void)
{
	return dir_fd;
}

static void count(uint32_t *counts, _Atomic uint64_t *bits, uint16_t port, int delta)
{
	uint64_t bit = 1ull << (port % 64);

	counts[port] += (uint32_t)delta;
	if (delta > 0 && counts[port] == 1)
		atomic_fetch_or_explicit(&bits[port / 64], bit, memory_order_release);
	else if (delta < 0 && counts[port] == 0)
		atomic_fetch_and_explicit(&bits[port / 64], ~bit, memory_order_release);
}

void shuntd_directory_listener(const struct shunt_wire_addr *addr, int delta)
{
	if (!dir)
		return;
	count(count_any, dir->any, addr->port, delta);
	if (!shunt_addr_is_loopback(addr))
		count(count_wide, dir->wide, addr->port, delta);
}

void shuntd_directory_channel(uint64_t listener)
{
	if (!dir)
		return;
	/* Before the CONNECT reply that lets the client queue in it. */
	atomic_fetch_add_explicit(&dir->chan_epoch[listener % SHUNT_DIRECTORY_EPOCHS], 1,
				  memory_order_release);
}
