/* SPDX-License-Identifier: MIT */
/* Process-wide start of the library: once, from the constructor or the first call. */
#ifndef SHUNT_INIT_H
#define SHUNT_INIT_H

#include <stdatomic.h>
#include <stdbool.h>

extern _Atomic bool shunt_ready;

void shunt_init(void);

/* Every wrapper starts here: a load and a predictable branch once started. */
static inline void shunt_ensure_init(void)
{
	if (__builtin_expect(!atomic_load_explicit(&shunt_ready, memory_order_acquire), 0))
		shunt_init();
}

/* Mark a function as part of the interface the application sees. */
#define SHUNT_EXPORT __attribute__((visibility("default")))

#endif
