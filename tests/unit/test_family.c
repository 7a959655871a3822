// SPDX-License-Identifier: MIT
/*
 * A listener's family (src/preload/family.c), across real forks: who is
 * last to close, how many closes the last one names, and those outside.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "preload/family.h"

/* Fork as the library does: the child holds what we hold. */
static pid_t t_fork(void)
{
	pid_t pid;

	shunt_family_fork();
	pid = fork();
	assert_true(pid >= 0);
	return pid;
}

/* In a child: exit 0 if @ok, else 1; in the parent: the child's code. */
static int t_wait(pid_t pid)
{
	int st = 0;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The last holder's close of @slot: counted, nobody left, @closes in all. */
static void t_last_close(int slot, uint32_t closes)
{
	struct shunt_family_leave lv = shunt_family_leave(slot, true);

	assert_true(lv.counted);
	assert_int_equal(lv.others, 0);
	assert_int_equal(lv.closes, closes);
}

/* A new listener's slot, then a fork: the child is in the family. */
static pid_t t_join_fork(int *slot)
{
	*slot = shunt_family_join(7);
	assert_true(*slot >= 0);
	return t_fork();
}

static void t_child_then_parent(void **state)
{
	struct shunt_family_leave lv;
	int slot;
	pid_t pid = t_join_fork(&slot);

	(void)state;
	if (pid == 0) {
		lv = shunt_family_leave(slot, true);
		_exit(lv.counted && lv.others == 1 && lv.closes == 1 ? 0 : 1);
	}
	assert_int_equal(t_wait(pid), 0);
	/* Last: it names both closes, the child's and its own. */
	t_last_close(slot, 2);
	/* Held no more: a second leave finds nothing. */
	lv = shunt_family_leave(slot, true);
	assert_false(lv.counted);
}

static void t_grandchild_and_shutdown(void **state)
{
	int slot;
	pid_t pid = t_join_fork(&slot);

	(void)state;
	if (pid == 0) {
		pid_t g = t_fork();

		if (g == 0)	/* three hold it: parent, child, grandchild */
			_exit(shunt_family_leave(slot, true).others == 2 ? 0 : 1);
		_exit(t_wait(g) == 0 && shunt_family_leave(slot, true).others == 1 ? 0 : 1);
	}
	assert_int_equal(t_wait(pid), 0);
	/* A shutdown is not counted among the closes, but the holder goes. */
	assert_false(shunt_family_leave(slot, false).counted);
	/* The slot is free again: a new listener's count starts afresh. */
	slot = shunt_family_join(7);
	assert_true(slot >= 0);
	t_last_close(slot, 1);
}

static void t_forsaken_and_unforked(void **state)
{
	int slot;
	pid_t pid = t_join_fork(&slot);

	(void)state;
	if (pid == 0) {
		/* An exec's new image: outside, its close not counted; the parent is alone. */
		shunt_family_forsake();
		_exit(shunt_family_leave(slot, true).counted ? 1 : 0);
	}
	assert_int_equal(t_wait(pid), 0);
	/* A fork that failed counts its child out again. */
	shunt_family_fork();
	shunt_family_unfork();
	t_last_close(slot, 1);
}

static void t_not_held(void **state)
{
	(void)state;
	assert_false(shunt_family_leave(SHUNT_FAMILY_NONE, true).counted);
	assert_false(shunt_family_leave(1 << 20, true).counted);
}

static void t_full_page(void **state)
{
	int slots[4096 / 8], n = 0, s;

	(void)state;
	while ((s = shunt_family_join(7)) != SHUNT_FAMILY_NONE) {
		assert_true(n < (int)(sizeof(slots) / sizeof(slots[0])));
		slots[n++] = s;
	}
	/* Earlier tests left every slot free: the page holds one per word. */
	assert_int_equal(n, 4096 / 8);
	for (int i = 0; i < n; i++)
		assert_int_equal(shunt_family_leave(slots[i], true).others, 0);
	assert_true(shunt_family_join(7) >= 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_child_then_parent),
		cmocka_unit_test(t_grandchild_and_shutdown),
		cmocka_unit_test(t_forsaken_and_unforked),
		cmocka_unit_test(t_not_held),
		cmocka_unit_test(t_full_page),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
