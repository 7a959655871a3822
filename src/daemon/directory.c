// SPDX-License-Identifier: MIT
/*
 * The directories (include/shunt/directory.h): which ports shuntd knows a
 * listener on, published read-only so that a connect no listener could take
 * is left to the kernel without a question. One per network namespace, made
 * when a session there first says HELLO and let go with the namespace's
 * view: what listens on loopback in one namespace is nobody else's
 * business, as the kernel's own tables (/proc/net/tcp) are per namespace.
 * A listener bound to a wildcard or non-loopback address may be reached
 * from any namespace with a route to it, so those are in every directory.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/addr.h"
#include "common/log.h"
#include "daemon/shuntd.h"
#include "shunt/directory.h"

struct ns_directory {
	int fd;
	struct shunt_directory *map;	/* shuntd's writable mapping */
};

/* Listeners per port bound to a wildcard or non-loopback address, any namespace. */
static uint32_t *count_wide;

int shuntd_directory_init(void)
{
	count_wide = calloc(65536, sizeof(*count_wide));
	return count_wide ? 0 : -ENOMEM;
}

static void set_bit(_Atomic uint64_t *bits, uint16_t port, bool on)
{
	uint64_t bit = 1ull << (port % 64);

	if (on)
		atomic_fetch_or_explicit(&bits[port / 64], bit, memory_order_release);
	else
		atomic_fetch_and_explicit(&bits[port / 64], ~bit, memory_order_release);
}

/* The directory of namespace @inode, if a session there has one. */
static struct shunt_directory *dir_of(struct shuntd *d, uint64_t inode)
{
	struct netns *ns = shunt_map_get(&d->netns, inode);

	return ns && ns->dir ? ns->dir->map : NULL;
}

/* How many sessions hold @l, into its entry of @dir. */
static void publish_holds(struct shunt_directory *dir, const struct listener *l)
{
	const struct shunt_list *pos;
	uint32_t n = 0;

	shunt_list_for_each(pos, &l->holds)
		n++;
	atomic_store_explicit(&dir->holds[l->id % SHUNT_DIRECTORY_EPOCHS],
			      shunt_directory_hold(l->id, n), memory_order_release);
}

/* A directory for @ns as things stand: every wide port, and the ports listened on in @ns. */
static struct ns_directory *dir_make(struct shuntd *d, struct netns *ns)
{
	struct ns_directory *nd = calloc(1, sizeof(*nd));
	struct listener *l;
	uint64_t key;
	size_t it = 0;
	void *map;

	if (!nd)
		return NULL;
	nd->fd = shuntd_memfd_published("shunt-directory", shunt_directory_size(), &map);
	if (nd->fd < 0) {
		shunt_warn("no directory of listened ports (%s): every connect asks",
			   strerror(-nd->fd));
		free(nd);
		return NULL;
	}
	nd->map = map;
	nd->map->magic = SHUNT_DIRECTORY_MAGIC;
	nd->map->version = SHUNT_DIRECTORY_VERSION;
	for (uint32_t port = 0; port < 65536; port++)
		if (count_wide[port])
			set_bit(nd->map->wide, (uint16_t)port, true);
	while ((l = shunt_map_next(&d->listeners, &it, &key)))
		if (l->netns == ns->inode) {
			set_bit(nd->map->any, l->addr.port, true);
			publish_holds(nd->map, l);
		}
	return nd;
}

int shuntd_directory_fd(struct shuntd *d, struct netns *ns)
{
	if (!count_wide || !ns)
		return -1;
	if (!ns->dir)
		ns->dir = dir_make(d, ns);
	return ns->dir ? ns->dir->fd : -1;
}

void shuntd_directory_ns_gone(struct netns *ns)
{
	if (!ns->dir)
		return;
	munmap(ns->dir->map, shunt_directory_size());
	close(ns->dir->fd);
	free(ns->dir);
	ns->dir = NULL;
}

/* Whether another listener than @l listens on its port in its namespace. */
static bool port_taken(struct shuntd *d, const struct listener *l)
{
	for (const struct listener *o = shuntd_listeners_on_port(d, l->addr.port); o;
	     o = o->port_next)
		if (o != l && o->netns == l->netns)
			return true;
	return false;
}

void shuntd_directory_listener(struct shuntd *d, const struct listener *l, int delta)
{
	struct shunt_directory *own = dir_of(d, l->netns);
	uint16_t port = l->addr.port;

	if (!count_wide)
		return;
	if (own && (delta > 0 || !port_taken(d, l)))
		set_bit(own->any, port, delta > 0);
	if (shunt_addr_is_loopback(&l->addr))
		return;
	count_wide[port] += (uint32_t)delta;
	if ((delta > 0 && count_wide[port] == 1) || (delta < 0 && count_wide[port] == 0)) {
		struct netns *ns;
		uint64_t key;
		size_t it = 0;

		while ((ns = shunt_map_next(&d->netns, &it, &key)))
			if (ns->dir)
				set_bit(ns->dir->map->wide, port, delta > 0);
	}
}

void shuntd_directory_channel(struct shuntd *d, const struct listener *l)
{
	struct shunt_directory *own = dir_of(d, l->netns);

	/* Before the CONNECT reply that lets the client queue in it. */
	if (own)
		atomic_fetch_add_explicit(&own->chan_epoch[l->id % SHUNT_DIRECTORY_EPOCHS], 1,
					  memory_order_release);
}

void shuntd_directory_holds(struct shuntd *d, const struct listener *l)
{
	struct shunt_directory *own = dir_of(d, l->netns);

	/* Before the reply that made the holder (a FORK's ticket): its child reads it. */
	if (own)
		publish_holds(own, l);
}
