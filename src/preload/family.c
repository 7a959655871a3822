// SPDX-License-Identifier: MIT
/* A listener's family: its holders forked from one another, counted in a page they share. */
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/mman.h>

#include "preload/family.h"

enum {
	PAGE = 4096,
	SLOTS = PAGE / sizeof(uint64_t),
	HOLDERS_MASK = 0xffffffffu,	/* a slot's low half: holders; high half: counted closes */
};
#define ONE_CLOSE (1ull << 32)

/*
 * MAP_SHARED and anonymous: every process forked after it was made maps the
 * same page, none other can. Made at the first registration; a fork child
 * finds it made. NULL if mmap failed.
 */
static _Atomic uint64_t *page;
static pthread_once_t page_once = PTHREAD_ONCE_INIT;
/* The slots this process holds: what a fork counts again for the child. Private memory. */
static _Atomic uint64_t held[SLOTS / 64];
/* Each held slot's listener at shuntd, written before its bit is set. */
static _Atomic uint64_t listener_of[SLOTS];

static void make_page(void)
{
	void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	page = p == MAP_FAILED ? NULL : p;
}

/* Whether this process held @slot until now; it no longer does. */
static bool unhold(int slot)
{
	uint64_t bit;

	if (slot < 0 || slot >= (int)SLOTS)
		return false;
	bit = 1ull << (slot % 64);
	return atomic_fetch_and_explicit(&held[slot / 64], ~bit, memory_order_relaxed) & bit;
}

int shunt_family_join(uint64_t listener)
{
	pthread_once(&page_once, make_page);
	if (!page)
		return SHUNT_FAMILY_NONE;
	for (int i = 0; i < (int)SLOTS; i++) {
		uint64_t w = atomic_load_explicit(&page[i], memory_order_relaxed);

		/* Free: nobody holds it (what closes it counted belongs to a listener gone). */
		if ((w & HOLDERS_MASK) == 0 &&
		    atomic_compare_exchange_strong_explicit(&page[i], &w, 1, memory_order_acq_rel,
							    memory_order_relaxed)) {
			atomic_store_explicit(&listener_of[i], listener, memory_order_relaxed);
			/* Release: pairs with each_held's acquire, which reads the id. */
			atomic_fetch_or_explicit(&held[i / 64], 1ull << (i % 64),
						 memory_order_release);
			return i;
		}
	}
	return SHUNT_FAMILY_NONE;
}

/*
 * One holder fewer in @slot, and one counted close more if @counted; the
 * slot's word after it, or 0 if it counted no holder (then nothing changed).
 */
static uint64_t drop(int slot, bool counted)
{
	uint64_t w = atomic_load_explicit(&page[slot], memory_order_relaxed), next;

	do {
		if ((w & HOLDERS_MASK) == 0)
			return 0;
		next = w - 1 + (counted ? ONE_CLOSE : 0);
		/*
		 * acq_rel: a holder that finds itself last sees every close
		 * counted before its own, each counted before its message was
		 * sent (control.c), and tells shuntd how many to read first.
		 */
	} while (!atomic_compare_exchange_weak_explicit(&page[slot], &w, next,
							memory_order_acq_rel, memory_order_relaxed));
	return next;
}

struct shunt_family_leave shunt_family_leave(int slot, bool counted)
{
	struct shunt_family_leave lv = { 0 };
	uint64_t w;

	if (!page || !unhold(slot))
		return lv;
	w = drop(slot, counted);
	/* 0: not counted where it should have been; it waits, as a lone holder does. */
	if (!counted || !w)
		return lv;
	lv.counted = true;
	lv.others = (uint32_t)(w & HOLDERS_MASK);
	lv.closes = (uint32_t)(w >> 32);
	return lv;
}

bool shunt_family_held(void)
{
	for (int i = 0; page && i < (int)(SLOTS / 64); i++)
		if (atomic_load_explicit(&held[i], memory_order_relaxed))
			return true;
	return false;
}

void shunt_family_each_held(void (*fn)(int slot, uint64_t listener))
{
	for (int i = 0; page && i < (int)(SLOTS / 64); i++) {
		uint64_t bits = atomic_load_explicit(&held[i], memory_order_acquire);

		while (bits) {
			int slot = i * 64 + __builtin_ctzll(bits);

			bits &= bits - 1;
			fn(slot, atomic_load_explicit(&listener_of[slot], memory_order_relaxed));
		}
	}
}

static void add_holder(int slot, uint64_t listener)
{
	(void)listener;
	atomic_fetch_add_explicit(&page[slot], 1, memory_order_relaxed);
}

static void drop_holder(int slot, uint64_t listener)
{
	(void)listener;
	drop(slot, false);
}

static void forsake(int slot, uint64_t listener)
{
	(void)listener;
	shunt_family_leave(slot, false);	/* no close counted: it still holds it */
}

void shunt_family_fork(void)
{
	shunt_family_each_held(add_holder);
}

void shunt_family_unfork(void)
{
	shunt_family_each_held(drop_holder);
}

void shunt_family_forsake(void)
{
	shunt_family_each_held(forsake);
}
