// SPDX-License-Identifier: MIT
/*
 * The seccomp program checker and interpreter (src/preload/filter.c) against
 * the kernel: programs installed in forked children, the kernel's verdict on
 * a probe system call compared with ours, and its acceptance of programs
 * (valid and broken ones) compared with our check.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/audit.h>
#include <cmocka.h>

#include "preload/filter.h"

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "an AUDIT_ARCH for this machine"
#endif

/* The probe: a call the child makes only to be judged (its own calls are let through). */
#define PROBE SYS_getppid

enum { ARGS_LO = offsetof(struct seccomp_data, args) };

/* What the kernel did to the probe call. */
enum outcome_kind { RAN, FAILED, TRAPPED, KILLED, ZERO };
struct outcome {
	enum outcome_kind kind;
	int value;		/* errno, or the SIGSYS data */
};

static volatile sig_atomic_t trap_data = -1;

static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	trap_data = si->si_errno;
}

/* What our interpreter says the kernel will do. */
static struct outcome predict(uint32_t ret)
{
	uint32_t data = ret & SECCOMP_RET_DATA;

	switch (ret & SECCOMP_RET_ACTION_FULL) {
	case SECCOMP_RET_ALLOW:
	case SECCOMP_RET_LOG:
		return (struct outcome){ RAN, 0 };
	case SECCOMP_RET_ERRNO:
		if (!data)
			return (struct outcome){ ZERO, 0 };
		return (struct outcome){ FAILED, data > 4095 ? 4095 : (int)data };
	case SECCOMP_RET_TRAP:
		return (struct outcome){ TRAPPED, (int)data };
	case SECCOMP_RET_TRACE:
	case SECCOMP_RET_USER_NOTIF:
		/* No tracer, no listener: the call is skipped with ENOSYS. */
		return (struct outcome){ FAILED, ENOSYS };
	default:
		return (struct outcome){ KILLED, SIGSYS };
	}
}

/*
 * Install @body (behind a guard that lets every call but the probe through)
 * in a child, make the probe with @args, and say what happened. Fatal to
 * the test if the kernel refuses the program.
 */
static struct outcome kernel_verdict(const struct sock_filter *body, unsigned n,
				     const uint64_t args[6])
{
	struct sock_filter prog[4100];
	struct sock_fprog fp;
	struct outcome o = { KILLED, 0 };
	int pipefd[2], status;
	pid_t pid;

	assert_true(n + 3 <= 4096);
	prog[0] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, nr));
	prog[1] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROBE, 1, 0);
	prog[2] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	memcpy(prog + 3, body, n * sizeof(*body));
	fp.len = (unsigned short)(n + 3);
	fp.filter = prog;
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct sigaction sa = { .sa_sigaction = on_sigsys, .sa_flags = SA_SIGINFO };
		long r;

		close(pipefd[0]);
		sigaction(SIGSYS, &sa, NULL);
		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
		    syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp))
			_exit(100);
		errno = 0;
		r = syscall(PROBE, args[0], args[1], args[2], args[3], args[4], args[5]);
		if (trap_data >= 0)
			o = (struct outcome){ TRAPPED, trap_data };
		else if (r > 0)
			o = (struct outcome){ RAN, 0 };
		else if (r == 0)
			o = (struct outcome){ ZERO, 0 };
		else
			o = (struct outcome){ FAILED, errno };
		(void)!write(pipefd[1], &o, sizeof(o));
		_exit(0);
	}
	close(pipefd[1]);
	if (read(pipefd[0], &o, sizeof(o)) != (ssize_t)sizeof(o))
		o = (struct outcome){ KILLED, 0 };
	close(pipefd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 100)
		fail_msg("the kernel refused a program our check accepts");
	if (WIFSIGNALED(status))
		o = (struct outcome){ KILLED, WTERMSIG(status) };
	return o;
}

/* Ours and the kernel's verdict on @body for a probe with @args. */
static void compare(const struct sock_filter *body, unsigned n, const uint64_t args[6])
{
	struct sock_filter prog[4100];
	struct seccomp_data sd = { .nr = PROBE, .arch = ARCH };
	struct outcome want, got;
	unsigned seen;

	prog[0] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, nr));
	prog[1] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PROBE, 1, 0);
	prog[2] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	memcpy(prog + 3, body, n * sizeof(*body));
	memcpy(sd.args, args, sizeof(sd.args));
	assert_int_equal(shunt_filter_check(prog, n + 3), 0);
	want = predict(shunt_filter_run(prog, n + 3, &sd, &seen));
	got = kernel_verdict(body, n, args);
	if (want.kind != got.kind || want.value != got.value)
		fail_msg("verdicts differ: ours kind %d value %d, the kernel's kind %d value %d",
			 want.kind, want.value, got.kind, got.value);
}

/* The low 16 bits of A as SIGSYS data: every bit of a computation is seen. */
#define TRAP_A								\
	BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xffff),			\
	BPF_STMT(BPF_ALU | BPF_OR | BPF_K, SECCOMP_RET_TRAP),		\
	BPF_STMT(BPF_RET | BPF_A, 0)

static const uint64_t no_args[6];

static void t_shifts_by_x_use_five_bits(void **state)
{
	(void)state;
	for (uint32_t count = 0; count < 70; count += 3) {
		struct sock_filter lsh[] = {
			BPF_STMT(BPF_LDX | BPF_IMM, count),
			BPF_STMT(BPF_LD | BPF_IMM, 0x00012345),
			BPF_STMT(BPF_ALU | BPF_LSH | BPF_X, 0),
			BPF_STMT(BPF_ALU | BPF_RSH | BPF_K, 8),
			TRAP_A,
		};
		struct sock_filter rsh[] = {
			BPF_STMT(BPF_LDX | BPF_IMM, count),
			BPF_STMT(BPF_LD | BPF_IMM, 0xfedcba98),
			BPF_STMT(BPF_ALU | BPF_RSH | BPF_X, 0),
			TRAP_A,
		};

		compare(lsh, sizeof(lsh) / sizeof(lsh[0]), no_args);
		compare(rsh, sizeof(rsh) / sizeof(rsh[0]), no_args);
	}
}

static void t_division_by_zero_returns_zero(void **state)
{
	struct sock_filter div0[] = {
		BPF_STMT(BPF_LDX | BPF_IMM, 0),
		BPF_STMT(BPF_LD | BPF_IMM, 100),
		BPF_STMT(BPF_ALU | BPF_DIV | BPF_X, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 7),
	};
	struct sock_filter div[] = {
		BPF_STMT(BPF_LDX | BPF_IMM, 7),
		BPF_STMT(BPF_LD | BPF_IMM, 100),
		BPF_STMT(BPF_ALU | BPF_DIV | BPF_X, 0),
		TRAP_A,
	};

	(void)state;
	compare(div0, 4, no_args);	/* returns 0: KILL_THREAD */
	compare(div, 6, no_args);
}

static void t_arguments_halves_and_unsigned_compares(void **state)
{
	/* Like OpenSSH's SC_ALLOW_ARG on a 64-bit argument, and a "negative" immediate. */
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARGS_LO + 8),
		BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 0x80000000u, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARGS_LO + 12),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | 11),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_LD | BPF_W | BPF_LEN, 0),
		BPF_STMT(BPF_ALU | BPF_NEG, 0),
		TRAP_A,
	};
	const uint64_t cases[][6] = {
		{ 0, 0x180000001ull }, { 0, 0x80000001ull }, { 0, 0x7fffffffull },
		{ 0, 0x280000001ull }, { 0, 0xffffffffffffffffull },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		compare(prog, sizeof(prog) / sizeof(prog[0]), cases[i]);
}

static void t_scratch_memory_and_registers(void **state)
{
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARGS_LO),
		BPF_STMT(BPF_ST, 3),
		BPF_STMT(BPF_MISC | BPF_TAX, 0),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARGS_LO + 16),
		BPF_STMT(BPF_ALU | BPF_MUL | BPF_X, 0),
		BPF_STMT(BPF_STX, 15),
		BPF_STMT(BPF_LDX | BPF_MEM, 3),
		BPF_STMT(BPF_ALU | BPF_SUB | BPF_X, 0),
		BPF_STMT(BPF_ALU | BPF_XOR | BPF_K, 0x5a5a),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_X, 0, 1, 0),
		BPF_STMT(BPF_LD | BPF_MEM, 15),
		BPF_STMT(BPF_ALU | BPF_ADD | BPF_K, 0x10001),
		TRAP_A,
	};
	const uint64_t cases[][6] = { { 3, 0, 9 }, { 0xffff, 0, 0xfff1 }, { 0x12345678, 0, 2 } };

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		compare(prog, sizeof(prog) / sizeof(prog[0]), cases[i]);
}

static void t_actions_as_the_kernel_takes_them(void **state)
{
	static const uint32_t rets[] = {
		SECCOMP_RET_ALLOW, SECCOMP_RET_LOG, SECCOMP_RET_ERRNO | 0, SECCOMP_RET_ERRNO | 13,
		SECCOMP_RET_ERRNO | 0xffff, SECCOMP_RET_TRAP | 0x1234, SECCOMP_RET_TRACE | 5,
		SECCOMP_RET_USER_NOTIF, SECCOMP_RET_KILL_THREAD, SECCOMP_RET_KILL_PROCESS,
		0x7ffe0000u, 0x00060000u, 0x12345678u,
	};

	(void)state;
	for (size_t i = 0; i < sizeof(rets) / sizeof(rets[0]); i++) {
		struct sock_filter prog[] = { BPF_STMT(BPF_RET | BPF_K, rets[i]) };

		compare(prog, 1, no_args);
	}
}

/* A small deterministic generator (xorshift). */
static uint64_t rnd_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return (uint32_t)(rnd_state >> 16);
}

static const uint16_t alu_ops[] = { BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV, BPF_AND, BPF_OR,
				    BPF_XOR, BPF_LSH, BPF_RSH };
static const uint16_t jmp_ops[] = { BPF_JEQ, BPF_JGE, BPF_JGT, BPF_JSET };

/* An interesting immediate: small, a boundary, or anything. */
static uint32_t imm(void)
{
	static const uint32_t edges[] = { 0, 1, 2, 31, 32, 33, 0x7fffffff, 0x80000000u,
					  0xffffffffu, 0xffff, 0x10000 };

	switch (rnd() % 3) {
	case 0:
		return edges[rnd() % (sizeof(edges) / sizeof(edges[0]))];
	case 1:
		return rnd() % 64;
	default:
		return rnd();
	}
}

/*
 * A random valid body of @n instructions (the last computes a TRAP_A):
 * loads of the number and arguments (never the instruction pointer, which
 * the library cannot know either), arithmetic, scratch words written before
 * they are read, forward jumps.
 */
static unsigned random_body(struct sock_filter *p, unsigned n)
{
	unsigned written = 0, i;
	bool jumped = false;

	for (i = 0; i + 3 < n; i++) {
		unsigned left = n - 3 - i;	/* instructions after this one, before TRAP_A */

		switch (rnd() % 9) {
		case 0: {
			static const uint32_t offs[] = { 0, 4, 16, 20, 24, 28, 32, 36, 40, 44, 48,
							 52, 56, 60 };

			p[i] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
							    offs[rnd() % 14]);
			break;
		}
		case 1: {
			uint16_t op = alu_ops[rnd() % 9];
			uint32_t k = imm();

			if (rnd() % 2) {
				p[i] = (struct sock_filter)BPF_STMT(BPF_ALU | op | BPF_X, 0);
				break;
			}
			if (op == BPF_DIV && !k)
				k = 3;
			if ((op == BPF_LSH || op == BPF_RSH) && k >= 32)
				k %= 32;
			p[i] = (struct sock_filter)BPF_STMT(BPF_ALU | op | BPF_K, k);
			break;
		}
		case 2:
			p[i] = (struct sock_filter)BPF_STMT(rnd() % 2 ? BPF_LD | BPF_IMM :
							    BPF_LDX | BPF_IMM, imm());
			break;
		case 3:
			p[i] = (struct sock_filter)BPF_STMT(BPF_MISC | (rnd() % 2 ? BPF_TAX : BPF_TXA), 0);
			break;
		case 4: {
			unsigned k = rnd() % 16;

			p[i] = (struct sock_filter)BPF_STMT(rnd() % 2 ? BPF_ST : BPF_STX, k);
			written |= 1u << k;
			break;
		}
		case 5:
			/* Only words written on every path: before any jump. */
			if (written && !jumped) {
				unsigned k;

				do
					k = rnd() % 16;
				while (!(written & (1u << k)));
				p[i] = (struct sock_filter)BPF_STMT(rnd() % 2 ? BPF_LD | BPF_MEM :
								    BPF_LDX | BPF_MEM, k);
			} else {
				p[i] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_NEG, 0);
			}
			break;
		case 6:
		case 7: {
			uint8_t jt = (uint8_t)(rnd() % (left + 1 < 256 ? left + 1 : 256));
			uint8_t jf = (uint8_t)(rnd() % (left + 1 < 256 ? left + 1 : 256));

			p[i] = (struct sock_filter)BPF_JUMP(BPF_JMP | jmp_ops[rnd() % 4] |
							    (rnd() % 2 ? BPF_X : BPF_K), imm(), jt, jf);
			jumped = true;	/* what a jump target may read is not tracked here */
			break;
		}
		default:
			if (rnd() % 4 == 0) {
				p[i] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K,
								    SECCOMP_RET_ERRNO | (rnd() % 200));
			} else {
				p[i] = (struct sock_filter)BPF_STMT(BPF_JMP | BPF_JA, rnd() % (left + 1));
				jumped = true;
			}
			break;
		}
	}
	p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xffff);
	p[i++] = (struct sock_filter)BPF_STMT(BPF_ALU | BPF_OR | BPF_K, SECCOMP_RET_TRAP);
	p[i++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_A, 0);
	return i;
}

static void t_random_programs_agree_with_the_kernel(void **state)
{
	(void)state;
	for (int round = 0; round < 400; round++) {
		struct sock_filter body[64];
		unsigned n = random_body(body, 4 + rnd() % 60);
		uint64_t args[6];

		for (int a = 0; a < 6; a++)
			args[a] = (uint64_t)imm() << (rnd() % 2 ? 32 : 0) | imm();
		compare(body, n, args);
	}
}

/* Whether the kernel accepts @p as a filter (installed in a child, then dropped). */
static bool kernel_accepts(const struct sock_filter *p, unsigned n)
{
	struct sock_filter prog[4100];
	struct sock_fprog fp = { .len = (unsigned short)(n + 3), .filter = prog };
	int status;
	pid_t pid;

	/* Behind a guard that always lets the child's exit through. */
	prog[0] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
					      offsetof(struct seccomp_data, nr));
	prog[1] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit, 0, 1);
	prog[2] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	memcpy(prog + 3, p, n * sizeof(*p));
	pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		long r;

		if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
			_exit(3);
		r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp);
		/* exit, not exit_group: the guard lets only that one through for sure. */
		syscall(SYS_exit, r == 0 ? 0 : errno == EINVAL ? 1 : 2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) < 2);
	return WEXITSTATUS(status) == 0;
}

static void t_check_agrees_with_the_kernel(void **state)
{
	(void)state;
	for (int round = 0; round < 600; round++) {
		struct sock_filter p[64];
		unsigned n = random_body(p, 4 + rnd() % 60);
		int breakages = (int)(rnd() % 3);

		/* Break it in a way or two the kernel's checks are about. */
		for (int b = 0; b < breakages; b++) {
			struct sock_filter *f = &p[rnd() % n];

			switch (rnd() % 8) {
			case 0: f->code = (uint16_t)rnd(); break;
			case 1: f->code = (uint16_t)(rnd() % 0x100); break;
			case 2: f->k = rnd() % 70; break;
			case 3: f->jt = (uint8_t)rnd(); break;
			case 4: f->jf = (uint8_t)rnd(); break;
			case 5: *f = (struct sock_filter)BPF_STMT(BPF_LD | BPF_MEM, rnd() % 18); break;
			case 6: n = 1 + rnd() % n; break;
			default: f->k = rnd(); break;
			}
		}
		struct sock_filter guarded[67] = {
			BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
			BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit, 0, 1),
			BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		};

		memcpy(guarded + 3, p, n * sizeof(*p));
		bool ours = shunt_filter_check(guarded, n + 3) == 0, kernel = kernel_accepts(p, n);

		if (ours != kernel)
			fail_msg("round %d: our check says %d, the kernel %d", round, ours, kernel);
	}
}

static void t_check_refuses_what_seccomp_refuses(void **state)
{
	struct sock_filter halfword[] = { BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 0),
					  BPF_STMT(BPF_RET | BPF_A, 0) };
	struct sock_filter unaligned[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 2),
					   BPF_STMT(BPF_RET | BPF_A, 0) };
	struct sock_filter past[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 64),
				      BPF_STMT(BPF_RET | BPF_A, 0) };
	struct sock_filter unwritten[] = { BPF_STMT(BPF_LD | BPF_MEM, 0),
					   BPF_STMT(BPF_RET | BPF_A, 0) };
	struct sock_filter no_ret[] = { BPF_STMT(BPF_LD | BPF_IMM, 0) };
	struct sock_filter mod[] = { BPF_STMT(BPF_ALU | BPF_MOD | BPF_K, 3),
				     BPF_STMT(BPF_RET | BPF_A, 0) };

	(void)state;
	assert_int_equal(shunt_filter_check(halfword, 2), -EINVAL);
	assert_int_equal(shunt_filter_check(unaligned, 2), -EINVAL);
	assert_int_equal(shunt_filter_check(past, 2), -EINVAL);
	assert_int_equal(shunt_filter_check(unwritten, 2), -EINVAL);
	assert_int_equal(shunt_filter_check(no_ret, 1), -EINVAL);
	assert_int_equal(shunt_filter_check(mod, 2), -EINVAL);
	assert_int_equal(shunt_filter_check(NULL, 2), -EINVAL);
	assert_int_equal(shunt_filter_check(mod, 0), -EINVAL);
	for (unsigned i = 0; i < 2; i++) {
		assert_false(kernel_accepts(halfword, 2));
		assert_false(kernel_accepts(unwritten, 2));
	}
}

static void t_seen_says_what_was_read(void **state)
{
	struct sock_filter ip[] = { BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 8),
				    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),
				    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW) };
	struct seccomp_data sd = { .nr = 1 };
	unsigned seen;

	(void)state;
	assert_int_equal(shunt_filter_check(ip, 3), 0);
	assert_int_equal(shunt_filter_run(ip, 3, &sd, &seen), SECCOMP_RET_ALLOW);
	assert_int_equal(seen, SHUNT_FILTER_SAW_IP | SHUNT_FILTER_SAW_NR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_shifts_by_x_use_five_bits),
		cmocka_unit_test(t_division_by_zero_returns_zero),
		cmocka_unit_test(t_arguments_halves_and_unsigned_compares),
		cmocka_unit_test(t_scratch_memory_and_registers),
		cmocka_unit_test(t_actions_as_the_kernel_takes_them),
		cmocka_unit_test(t_random_programs_agree_with_the_kernel),
		cmocka_unit_test(t_check_agrees_with_the_kernel),
		cmocka_unit_test(t_check_refuses_what_seccomp_refuses),
		cmocka_unit_test(t_seen_says_what_was_read),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
