// SPDX-License-Identifier: MIT
/*
 * shuntd's directory, read without asking. It is mapped once and every
 * later session's directory replaces it at the same address (MAP_FIXED),
 * so a reader never touches an unmapped page; between sessions it is
 * marked stale and not read. Nothing in it is trusted beyond a hint: a bit
 * that is wrong either way costs a question or a connection on the kernel,
 * never a wrong answer.
 */
#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "common/addr.h"
#include "common/memfd.h"
#include "preload/directory.h"
#include "preload/util.h"
#include "shunt/directory.h"

static const struct shunt_directory *_Atomic dir;	/* set once, then reused */
static _Atomic bool dir_valid;

int shunt_directory_install(int memfd)
{
	const struct shunt_directory *old = atomic_load(&dir);
	const struct shunt_directory *d;
	void *p;
	int r;

	atomic_store(&dir_valid, false);
	r = shunt_memfd_map(memfd, shunt_directory_size(), PROT_READ, old, &p);
	if (r < 0)
		goto out;
	d = p;
	if (!old)
		atomic_store(&dir, d);
	if (d->magic != SHUNT_DIRECTORY_MAGIC || d->version != SHUNT_DIRECTORY_VERSION)
		r = -EPROTO;
	else
		atomic_store(&dir_valid, true);
out:
	shunt_close_reply(memfd);
	return r;
}

void shunt_directory_drop(void)
{
	atomic_store(&dir_valid, false);
}

bool shunt_directory_nobody_listens(const struct shunt_wire_addr *dst)
{
	const struct shunt_directory *d = atomic_load_explicit(&dir, memory_order_acquire);
	const _Atomic uint64_t *bits;

	if (!d || !atomic_load_explicit(&dir_valid, memory_order_acquire))
		return false;
	/* Only loopback reaches a listener bound to loopback; a wildcard destination is loopback. */
	bits = shunt_addr_is_loopback(dst) || shunt_addr_is_any(dst) ? d->any : d->wide;
	return !(atomic_load_explicit(&bits[dst->port / 64], memory_order_acquire) &
		 (1ull << (dst->port % 64)));
}

uint32_t shunt_directory_chan_epoch(uint64_t listener)
{
	const struct shunt_directory *d = atomic_load_explicit(&dir, memory_order_acquire);

	if (!d || !atomic_load_explicit(&dir_valid, memory_order_acquire))
		return 0;
	/* Pairs with shuntd's release as it made the channel, before the client could queue. */
	return atomic_load_explicit(&d->chan_epoch[listener % SHUNT_DIRECTORY_EPOCHS],
				    memory_order_acquire);
}

uint32_t shunt_directory_listener_holders(uint64_t listener)
{
	const struct shunt_directory *d = atomic_load_explicit(&dir, memory_order_acquire);
	uint64_t entry;

	if (!d || !atomic_load_explicit(&dir_valid, memory_order_acquire))
		return 0;
	entry = atomic_load_explicit(&d->holds[listener % SHUNT_DIRECTORY_EPOCHS],
				     memory_order_acquire);
	return shunt_directory_holders(entry, listener);
}
