// SPDX-License-Identifier: MIT
/* The holders' lock: exclusion, deadlines, and an owner that died holding it. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/lock.h"

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void t_free_lock_is_taken_and_released(void **state)
{
	_Atomic uint32_t w = 0;
	bool other;

	(void)state;
	assert_int_equal(shunt_lock(&w, 42, 0, &other), 0);
	assert_true(other);			/* never held by 42 before */
	assert_int_equal(atomic_load(&w), 42 | SHUNT_LOCK_HELD);
	assert_false(shunt_lock_try(&w, 43, &other));
	shunt_unlock(&w, 42);
	assert_int_equal(atomic_load(&w), 42);	/* free, 42 the last owner */
	/* 42 again: nobody else came between, its cached positions are good. */
	assert_true(shunt_lock_try(&w, 42, &other));
	assert_false(other);
	shunt_unlock(&w, 42);
	/* 43 now: someone else had it. */
	assert_true(shunt_lock_try(&w, 43, &other));
	assert_true(other);
	shunt_unlock(&w, 43);
}

static void t_deadline_bounds_the_wait(void **state)
{
	_Atomic uint32_t w = (uint32_t)getpid() | SHUNT_LOCK_HELD;	/* held by a live process: us */
	int64_t start = now_ns();
	bool other;

	(void)state;
	assert_int_equal(shunt_lock_wait(&w, 12345, start + 30 * 1000000, &other), -ETIMEDOUT);
	assert_true(now_ns() - start >= 30 * 1000000);
	/* The waiter said it sleeps there, so an unlock will wake. */
	assert_true(atomic_load(&w) & SHUNT_LOCK_WAITERS);
}

static void t_dead_owner_is_replaced(void **state)
{
	_Atomic uint32_t w;
	bool other;
	pid_t child = fork();
	int status;

	(void)state;
	if (child == 0)
		_exit(0);
	assert_true(child > 0);
	waitpid(child, &status, 0);
	/* A process that died holding the lock: the next one takes it over. */
	atomic_store(&w, (uint32_t)child | SHUNT_LOCK_HELD);
	assert_int_equal(shunt_lock_wait(&w, (uint32_t)getpid(), now_ns() + 5000000000LL, &other),
			 0);
	assert_true(other);
	assert_int_equal(atomic_load(&w) & SHUNT_LOCK_OWNER, (uint32_t)getpid());
}

struct counter {
	_Atomic uint32_t lock;
	uint64_t value;			/* only under lock */
};

static void *bump(void *arg)
{
	struct counter *c = arg;

	for (int i = 0; i < 100000; i++) {
		bool other;

		assert_int_equal(shunt_lock(&c->lock, (uint32_t)getpid(), 0, &other), 0);
		c->value++;
		shunt_unlock(&c->lock, (uint32_t)getpid());
	}
	return NULL;
}

static void t_threads_exclude_each_other(void **state)
{
	struct counter c = { 0 };
	pthread_t th[4];

	(void)state;
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, bump, &c);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	assert_int_equal(c.value, 400000);
	assert_int_equal(atomic_load(&c.lock) & (SHUNT_LOCK_HELD | SHUNT_LOCK_WAITERS), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_free_lock_is_taken_and_released),
		cmocka_unit_test(t_deadline_bounds_the_wait),
		cmocka_unit_test(t_dead_owner_is_replaced),
		cmocka_unit_test(t_threads_exclude_each_other),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
