// SPDX-License-Identifier: MIT
/* A hash map from non-zero 64-bit keys to pointers (linear probing). */
#include <errno.h>
#include <stdlib.h>

#include "common/map.h"

static size_t slot_of(uint64_t key, size_t cap)
{
	/* Fibonacci hashing spreads sequential ids across the table. */
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

void shunt_map_init(struct shunt_map *m)
{
	m->keys = NULL;
	m->vals = NULL;
	m->cap = 0;
	m->len = 0;
}

void shunt_map_free(struct shunt_map *m)
{
	free(m->keys);
	free(m->vals);
	shunt_map_init(m);
}

static size_t find(const struct shunt_map *m, uint64_t key)
{
	size_t i = slot_of(key, m->cap);

	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	return i;
}

void *shunt_map_get(const struct shunt_map *m, uint64_t key)
{
	if (!m->cap || !key)
		return NULL;
	size_t i = find(m, key);

	return m->keys[i] ? m->vals[i] : NULL;
}

static int grow(struct shunt_map *m)
{
	struct shunt_map bigger = { .cap = m->cap ? m->cap * 2 : 16 };

	bigger.keys = calloc(bigger.cap, sizeof(*bigger.keys));
	bigger.vals = calloc(bigger.cap, sizeof(*bigger.vals));
	if (!bigger.keys || !bigger.vals) {
		shunt_map_free(&bigger);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->keys[i])
			continue;
		size_t j = find(&bigger, m->keys[i]);

		bigger.keys[j] = m->keys[i];
		bigger.vals[j] = m->vals[i];
	}
	bigger.len = m->len;
	shunt_map_free(m);
	*m = bigger;
	return 0;
}

int shunt_map_put(struct shunt_map *m, uint64_t key, void *val)
{
	if (!key)
		return -EINVAL;
	if ((m->len + 1) * 4 > m->cap * 3) {
		int r = grow(m);

		if (r < 0)
			return r;
	}
	size_t i = find(m, key);

	if (!m->keys[i]) {
		m->keys[i] = key;
		m->len++;
	}
	m->vals[i] = val;
	return 0;
}

void *shunt_map_del(struct shunt_map *m, uint64_t key)
{
	if (!m->cap || !key)
		return NULL;
	size_t i = find(m, key);
	void *val = m->vals[i];

	if (!m->keys[i])
		return NULL;
	/* Backward shift: move later entries of the cluster into the hole. */
	for (size_t j = i;;) {
		m->keys[i] = 0;
		m->vals[i] = NULL;
		for (;;) {
			j = (j + 1) & (m->cap - 1);
			if (!m->keys[j])
				goto done;
			size_t home = slot_of(m->keys[j], m->cap);

			/* Leave j if its home lies cyclically in (i, j]. */
			if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
				continue;
			break;
		}
		m->keys[i] = m->keys[j];
		m->vals[i] = m->vals[j];
		i = j;
	}
done:
	m->len--;
	return val;
}

void *shunt_map_next(const struct shunt_map *m, size_t *pos, uint64_t *key)
{
	for (; *pos < m->cap; (*pos)++) {
		if (m->keys[*pos]) {
			*key = m->keys[*pos];
			return m->vals[(*pos)++];
		}
	}
	return NULL;
}
