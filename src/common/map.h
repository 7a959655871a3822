/* SPDX-License-Identifier: MIT */
/*
 * A hash map from non-zero 64-bit keys to pointers: open addressing, linear
 * probing, deletion by backward shift (no tombstones). Not thread-safe; the
 * daemon's single event loop owns its maps.
 */
#ifndef SHUNT_MAP_H
#define SHUNT_MAP_H

#include <stddef.h>
#include <stdint.h>

struct shunt_map {
	uint64_t *keys;		/* 0 marks an empty slot */
	void **vals;
	size_t cap;		/* power of two, or 0 before the first put */
	size_t len;
};

void shunt_map_init(struct shunt_map *m);
void shunt_map_free(struct shunt_map *m);

/* The value stored under @key, or NULL. */
void *shunt_map_get(const struct shunt_map *m, uint64_t key);

/* Store @val under @key (non-zero), replacing any previous value: 0 or -ENOMEM. */
int shunt_map_put(struct shunt_map *m, uint64_t key, void *val);

/* Remove @key; returns the value it had, or NULL. */
void *shunt_map_del(struct shunt_map *m, uint64_t key);

/*
 * Iterate: start with *@pos = 0; returns the next value and its key, or NULL
 * at the end. The map must not change during the iteration.
 */
void *shunt_map_next(const struct shunt_map *m, size_t *pos, uint64_t *key);

#endif
