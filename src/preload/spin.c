// SPDX-License-Identifier: MIT
/*
 * Spinning only while it can pay: a learned budget per thread, the peer's
 * CPU, and a periodic yield that gives our CPU to whoever needs it
 * (docs/waiting.md has the reasoning and the measurements).
 */
#include <sched.h>
#include <stdlib.h>

#include "preload/spin.h"
#include "preload/util.h"
#include "preload/wait.h"

enum {
	DEFAULT_CAP_NS = 50 * 1000,
	/*
	 * Spins shorter than this need no look at the machine's load: a
	 * ping-pong between two idle CPUs answers within a microsecond.
	 */
	QUICK_NS = 2 * 1000,
	/*
	 * While spinning, offer the CPU this often. A sched_yield() with
	 * nobody else runnable here returns at once; otherwise the one who
	 * needs our CPU (often the very peer we wait for) runs now, not after
	 * the whole budget, and we learn that the CPU is contended.
	 */
	YIELD_EVERY_NS = 8 * 1000,
	/* After the spin, at most this many yields before sleeping. */
	YIELDS = 16,
	/* A yield that took longer than this ran someone else. */
	YIELD_SLOW_NS = 4 * 1000,
	/* A gap this long between two clock readings: we may have been preempted. */
	GAP_NS = 10 * 1000,
	/* A budget below this is no budget. */
	MIN_BUDGET_NS = 1000,
	/* Added to what paying spins take, for the budget. */
	SLACK_NS = 4 * 1000,
	/* With no budget, a probe spin every 2^k waits, k growing to this. */
	PROBE_MAX_SHIFT = 8,
};

static int64_t cap_ns = DEFAULT_CAP_NS;	/* written once by init */

/* What this thread's recent spins taught it. */
struct lesson {
	int64_t budget;			/* how long a spin may go; -1: not learned yet */
	int64_t took;			/* how long the spins that paid took, on average */
	uint32_t missed;		/* the last 32 spins, a bit set for each that did not pay */
	uint32_t crowded;		/* the last 32, a bit set for each where another ran here */
	unsigned probe_shift;		/* with no budget: probe every 2^probe_shift waits */
	unsigned since_probe;
};

static _Thread_local struct lesson lesson = { .budget = -1 };

void shunt_spin_init(void)
{
	const char *s = getenv("SHUNT_SPIN_US");

	if (s && *s)
		cap_ns = strtoll(s, NULL, 10) * 1000;
	if (cap_ns < 0)
		cap_ns = 0;
}

static uint32_t my_cpu_word(void)
{
	int cpu = sched_getcpu();	/* rseq or the vDSO: no system call */

	return cpu >= 0 ? (uint32_t)cpu + 1 : 0;
}

void shunt_spin_publish(_Atomic uint32_t *word)
{
	uint32_t v = my_cpu_word();

	/* A hint, read by the peer's waiters: no ordering, and no write when unchanged. */
	if (atomic_load_explicit(word, memory_order_relaxed) != v)
		atomic_store_explicit(word, v, memory_order_relaxed);
}

/* The peer last said it runs on our CPU: it cannot be running now, and needs it. */
static bool peer_here(const struct shunt_spin *s)
{
	uint32_t p;

	if (!s->peer_cpu)
		return false;
	p = atomic_load_explicit(s->peer_cpu, memory_order_relaxed);
	return p && p == my_cpu_word();
}

void shunt_spin_begin(struct shunt_spin *s, int64_t now, const _Atomic uint32_t *peer_cpu)
{
	struct lesson *l = &lesson;
	int64_t b;

	if (l->budget < 0)
		l->budget = cap_ns;
	b = l->budget;
	s->probing = false;
	if (!b && cap_ns && ++l->since_probe >= 1u << l->probe_shift) {
		/* Now and then spin anyway, or what changed would never be learned. */
		l->since_probe = 0;
		b = cap_ns;
		s->probing = true;
	}
	s->start = s->last = now;
	s->budget = b < cap_ns ? b : cap_ns;
	/* The first offer comes early: a peer waiting for our CPU gets it soon. */
	s->next_yield = now + QUICK_NS;
	s->peer_cpu = peer_cpu;
	s->contended = false;
	s->yields = 0;
	s->mode = !s->budget ? SPIN_AFTER : peer_here(s) ? SPIN_YIELD : SPIN_PAUSE;
}

/* Offer our CPU once; whether someone else ran meanwhile. */
static bool yield_ran_another(struct shunt_spin *s)
{
	int64_t before = shunt_now_ns();

	/* Through the gate: a filter may forbid it, and a spin does as well. */
	if (shunt_syscall(SYS_sched_yield) < 0)
		shunt_cpu_relax();
	s->last = shunt_now_ns();
	return s->last - before > YIELD_SLOW_NS;
}

/*
 * The budget is spent (or there was none): yield while someone else runs
 * on our CPU when we do (the peer, if it waits for this CPU, answers
 * meanwhile), at most YIELDS times. A yield that comes straight back means
 * nobody here needs the CPU, and the caller had better sleep. Also when the
 * machine has more runnable threads than CPUs: sleeping then instead
 * (issue 11's first design) measured slower everywhere (docs/waiting.md).
 */
static bool after_budget(struct shunt_spin *s)
{
	s->mode = SPIN_AFTER;
	if (s->yields >= YIELDS)
		return false;
	s->yields++;
	if (!yield_ran_another(s)) {
		s->yields = YIELDS;
		return false;
	}
	s->contended = true;
	return true;
}

bool shunt_spin_go_on(struct shunt_spin *s)
{
	int64_t now, elapsed;

	if (s->mode == SPIN_AFTER)
		return after_budget(s);
	now = shunt_now_ns();
	elapsed = now - s->start;
	if (elapsed >= s->budget)
		return after_budget(s);
	/*
	 * Within the budget. Yield instead of spinning once someone else
	 * showed it wants our CPU: the peer said it runs here (it cannot be
	 * running, then), a yield ran another thread, or we were preempted
	 * (a gap between two readings; one that a yield does not confirm was
	 * the hypervisor's or an interrupt's, and the spin goes on).
	 */
	if (s->mode == SPIN_PAUSE && (now - s->last > GAP_NS || peer_here(s) ||
				       now >= s->next_yield)) {
		s->last = now;
		if (yield_ran_another(s)) {
			s->mode = SPIN_YIELD;
			s->contended = true;
			return true;	/* whoever ran may have answered: look */
		}
		s->next_yield = s->last + YIELD_EVERY_NS;
		return true;
	}
	s->last = now;
	if (s->mode == SPIN_YIELD && yield_ran_another(s))
		s->contended = true;
	return true;
}

void shunt_spin_end(struct shunt_spin *s, bool ready)
{
	struct lesson *l = &lesson;
	int64_t took = s->last - s->start, want;

	if (!cap_ns)
		return;
	l->crowded = l->crowded << 1 | s->contended;
	if (s->contended) {
		/*
		 * Someone else needed our CPU. Once that is the rule rather
		 * than a hiccup (an interrupt, the hypervisor), spin less and
		 * yield sooner.
		 */
		l->missed = l->missed << 1 | 1;
		if (__builtin_popcount(l->crowded & 0xff) >= 4) {
			l->budget /= 2;
			if (l->budget < MIN_BUDGET_NS)
				l->budget = 0;
		}
		if (s->probing && l->probe_shift < PROBE_MAX_SHIFT)
			l->probe_shift++;
		return;
	}
	if (ready) {
		/*
		 * It paid. Allow a few times what paying spins take (a peer
		 * that answers in 2 us now and then takes 10): sleeping once
		 * when a spin would have paid costs a wake-up, tens of us.
		 */
		l->missed <<= 1;
		l->took = l->took ? l->took + (took - l->took) / 8 : took;
		want = 4 * (l->took > took ? l->took : took) + SLACK_NS;
		if (want > cap_ns)
			want = cap_ns;
		if (l->budget < want || !s->probing)
			l->budget = want > l->budget ? want : l->budget - (l->budget - want) / 8;
		if (s->probing)
			l->probe_shift = 0;
		return;
	}
	/*
	 * The whole budget, and nobody needed the CPU: the peer is slow
	 * (it thinks, or waits for someone else). Once most recent spins
	 * went that way, stop spinning for it, but probe now and then.
	 */
	l->missed = l->missed << 1 | 1;
	if (s->probing) {
		if (l->probe_shift < PROBE_MAX_SHIFT)
			l->probe_shift++;
	} else if (__builtin_popcount(l->missed & 0xff) >= 6) {
		l->budget = 0;
	}
}
