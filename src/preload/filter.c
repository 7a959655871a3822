// SPDX-License-Identifier: MIT
/*
 * A seccomp program checker and interpreter: the kernel's checks
 * (bpf_check_classic, then seccomp_check_filter) and its semantics (the
 * classic program as net/core/filter.c turns it into eBPF), nothing more.
 *
 * Why not libpcap's bpf_filter(): it loads words from its "packet" in
 * network byte order, while a seccomp program loads the fields of struct
 * seccomp_data in the machine's own (swapping every word first would fix
 * that, not the rest); it shifts by X >= 32 its own way where the kernel
 * masks the count; it runs instructions seccomp forbids (extensions, byte
 * and indirect loads, MOD) instead of refusing them; and it would be one
 * more library loaded into every program run under shunt. The subset the
 * kernel accepts for seccomp is small enough to check whole here, and
 * tests/unit/test_filter.c compares this file's verdicts with the kernel's
 * own, from filters installed in forked children.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "preload/filter.h"

/* The kernel's limit on one program (BPF_MAXINSNS) and its scratch memory. */
enum {
	MAX_INSNS = 4096,
	MEM_WORDS = 16,
	DATA_LEN = (int)sizeof(struct seccomp_data),
};

_Static_assert(BPF_MAXINSNS == MAX_INSNS, "the kernel's limit");
_Static_assert(BPF_MEMWORDS == MEM_WORDS, "the kernel's scratch memory");
_Static_assert(sizeof(struct seccomp_data) == 64, "seccomp_data as the kernel loads it");

/* Both conditional targets of a jump at @pc lie inside the program. */
static bool targets_ok(const struct sock_filter *f, unsigned pc, unsigned len)
{
	return pc + f->jt + 1 < len && pc + f->jf + 1 < len;
}

/*
 * bpf_check_classic's per-instruction checks, restricted to the codes
 * seccomp_check_filter lets through (any other code fails one or the other).
 */
static int check_insn(const struct sock_filter *f, unsigned pc, unsigned len)
{
	switch (f->code) {
	case BPF_LD | BPF_W | BPF_ABS:
		/* seccomp: aligned, inside seccomp_data (so never an extension). */
		return f->k >= (uint32_t)DATA_LEN || (f->k & 3) ? -EINVAL : 0;
	case BPF_LD | BPF_W | BPF_LEN:
	case BPF_LDX | BPF_W | BPF_LEN:
	case BPF_RET | BPF_K:
	case BPF_RET | BPF_A:
	case BPF_ALU | BPF_ADD | BPF_K:
	case BPF_ALU | BPF_ADD | BPF_X:
	case BPF_ALU | BPF_SUB | BPF_K:
	case BPF_ALU | BPF_SUB | BPF_X:
	case BPF_ALU | BPF_MUL | BPF_K:
	case BPF_ALU | BPF_MUL | BPF_X:
	case BPF_ALU | BPF_DIV | BPF_X:
	case BPF_ALU | BPF_AND | BPF_K:
	case BPF_ALU | BPF_AND | BPF_X:
	case BPF_ALU | BPF_OR | BPF_K:
	case BPF_ALU | BPF_OR | BPF_X:
	case BPF_ALU | BPF_XOR | BPF_K:
	case BPF_ALU | BPF_XOR | BPF_X:
	case BPF_ALU | BPF_LSH | BPF_X:
	case BPF_ALU | BPF_RSH | BPF_X:
	case BPF_ALU | BPF_NEG:
	case BPF_LD | BPF_IMM:
	case BPF_LDX | BPF_IMM:
	case BPF_MISC | BPF_TAX:
	case BPF_MISC | BPF_TXA:
		return 0;
	case BPF_ALU | BPF_DIV | BPF_K:
		return f->k == 0 ? -EINVAL : 0;
	case BPF_ALU | BPF_LSH | BPF_K:
	case BPF_ALU | BPF_RSH | BPF_K:
		return f->k >= 32 ? -EINVAL : 0;
	case BPF_LD | BPF_MEM:
	case BPF_LDX | BPF_MEM:
	case BPF_ST:
	case BPF_STX:
		return f->k >= MEM_WORDS ? -EINVAL : 0;
	case BPF_JMP | BPF_JA:
		/* Forward only, and not past the end. */
		return f->k >= len - pc - 1 ? -EINVAL : 0;
	case BPF_JMP | BPF_JEQ | BPF_K:
	case BPF_JMP | BPF_JEQ | BPF_X:
	case BPF_JMP | BPF_JGE | BPF_K:
	case BPF_JMP | BPF_JGE | BPF_X:
	case BPF_JMP | BPF_JGT | BPF_K:
	case BPF_JMP | BPF_JGT | BPF_X:
	case BPF_JMP | BPF_JSET | BPF_K:
	case BPF_JMP | BPF_JSET | BPF_X:
		return targets_ok(f, pc, len) ? 0 : -EINVAL;
	default:
		return -EINVAL;
	}
}

/*
 * check_load_and_stores: no scratch word is read on any path before it is
 * written. Like the kernel, the state flowing past an instruction is
 * intersected with what every jump to the next one carried (a return falls
 * through too: the kernel's walk does not stop at it either).
 */
static int check_memory(const struct sock_filter *insns, unsigned len)
{
	uint16_t masks[MAX_INSNS], valid = 0;

	memset(masks, 0xff, len * sizeof(masks[0]));
	for (unsigned pc = 0; pc < len; pc++) {
		const struct sock_filter *f = &insns[pc];

		valid &= masks[pc];
		switch (f->code) {
		case BPF_ST:
		case BPF_STX:
			valid |= (uint16_t)(1u << f->k);
			break;
		case BPF_LD | BPF_MEM:
		case BPF_LDX | BPF_MEM:
			if (!(valid & (1u << f->k)))
				return -EINVAL;
			break;
		case BPF_JMP | BPF_JA:
			masks[pc + 1 + f->k] &= valid;
			valid = 0xffff;
			break;
		case BPF_JMP | BPF_JEQ | BPF_K:
		case BPF_JMP | BPF_JEQ | BPF_X:
		case BPF_JMP | BPF_JGE | BPF_K:
		case BPF_JMP | BPF_JGE | BPF_X:
		case BPF_JMP | BPF_JGT | BPF_K:
		case BPF_JMP | BPF_JGT | BPF_X:
		case BPF_JMP | BPF_JSET | BPF_K:
		case BPF_JMP | BPF_JSET | BPF_X:
			masks[pc + 1 + f->jt] &= valid;
			masks[pc + 1 + f->jf] &= valid;
			valid = 0xffff;
			break;
		}
	}
	return 0;
}

int shunt_filter_check(const struct sock_filter *insns, unsigned len)
{
	if (!insns || len == 0 || len > MAX_INSNS)
		return -EINVAL;
	for (unsigned pc = 0; pc < len; pc++)
		if (check_insn(&insns[pc], pc, len) < 0)
			return -EINVAL;
	/* The last instruction returns, so no path runs off the end. */
	if (insns[len - 1].code != (BPF_RET | BPF_K) && insns[len - 1].code != (BPF_RET | BPF_A))
		return -EINVAL;
	return check_memory(insns, len);
}

/* The 32-bit word at byte @k of @sd, in the machine's byte order, as the kernel loads it. */
static uint32_t load(const struct seccomp_data *sd, uint32_t k, unsigned *seen)
{
	uint32_t w;

	if (k < offsetof(struct seccomp_data, arch))
		*seen |= SHUNT_FILTER_SAW_NR;
	else if (k < offsetof(struct seccomp_data, instruction_pointer))
		*seen |= SHUNT_FILTER_SAW_ARCH;
	else if (k < offsetof(struct seccomp_data, args))
		*seen |= SHUNT_FILTER_SAW_IP;
	else
		*seen |= SHUNT_FILTER_SAW_ARGS;
	memcpy(&w, (const char *)sd + k, sizeof(w));
	return w;
}

static bool jump_taken(uint16_t code, uint32_t a, uint32_t v)
{
	switch (BPF_OP(code)) {
	case BPF_JEQ:
		return a == v;
	case BPF_JGE:
		return a >= v;
	case BPF_JGT:
		return a > v;
	default:	/* BPF_JSET */
		return (a & v) != 0;
	}
}

uint32_t shunt_filter_run(const struct sock_filter *insns, unsigned len,
			  const struct seccomp_data *sd, unsigned *seen)
{
	/* Every scratch word is written before it is read (check_memory). */
	uint32_t a = 0, x = 0, mem[MEM_WORDS] = { 0 };

	*seen = 0;
	/* Jumps only go forward: at most @len steps. */
	for (unsigned pc = 0; pc < len; pc++) {
		const struct sock_filter *f = &insns[pc];
		uint32_t k = f->k;

		switch (f->code) {
		case BPF_LD | BPF_W | BPF_ABS:
			a = load(sd, k, seen);
			break;
		case BPF_LD | BPF_W | BPF_LEN:
			a = DATA_LEN;
			break;
		case BPF_LDX | BPF_W | BPF_LEN:
			x = DATA_LEN;
			break;
		case BPF_LD | BPF_IMM:
			a = k;
			break;
		case BPF_LDX | BPF_IMM:
			x = k;
			break;
		case BPF_LD | BPF_MEM:
			a = mem[k];
			break;
		case BPF_LDX | BPF_MEM:
			x = mem[k];
			break;
		case BPF_ST:
			mem[k] = a;
			break;
		case BPF_STX:
			mem[k] = x;
			break;
		case BPF_MISC | BPF_TAX:
			x = a;
			break;
		case BPF_MISC | BPF_TXA:
			a = x;
			break;
		case BPF_ALU | BPF_ADD | BPF_K: a += k; break;
		case BPF_ALU | BPF_ADD | BPF_X: a += x; break;
		case BPF_ALU | BPF_SUB | BPF_K: a -= k; break;
		case BPF_ALU | BPF_SUB | BPF_X: a -= x; break;
		case BPF_ALU | BPF_MUL | BPF_K: a *= k; break;
		case BPF_ALU | BPF_MUL | BPF_X: a *= x; break;
		case BPF_ALU | BPF_DIV | BPF_K: a /= k; break;	/* k != 0: checked */
		case BPF_ALU | BPF_DIV | BPF_X:
			/* The kernel's conversion: dividing by zero returns 0 at once. */
			if (!x)
				return 0;
			a /= x;
			break;
		case BPF_ALU | BPF_AND | BPF_K: a &= k; break;
		case BPF_ALU | BPF_AND | BPF_X: a &= x; break;
		case BPF_ALU | BPF_OR | BPF_K: a |= k; break;
		case BPF_ALU | BPF_OR | BPF_X: a |= x; break;
		case BPF_ALU | BPF_XOR | BPF_K: a ^= k; break;
		case BPF_ALU | BPF_XOR | BPF_X: a ^= x; break;
		case BPF_ALU | BPF_LSH | BPF_K: a <<= k; break;	/* k < 32: checked */
		case BPF_ALU | BPF_RSH | BPF_K: a >>= k; break;
		/* A 32-bit eBPF shift uses the low five bits of its count. */
		case BPF_ALU | BPF_LSH | BPF_X: a <<= (x & 31); break;
		case BPF_ALU | BPF_RSH | BPF_X: a >>= (x & 31); break;
		case BPF_ALU | BPF_NEG: a = -a; break;
		case BPF_JMP | BPF_JA:
			pc += k;
			break;
		case BPF_JMP | BPF_JEQ | BPF_K:
		case BPF_JMP | BPF_JGE | BPF_K:
		case BPF_JMP | BPF_JGT | BPF_K:
		case BPF_JMP | BPF_JSET | BPF_K:
			pc += jump_taken(f->code, a, k) ? f->jt : f->jf;
			break;
		case BPF_JMP | BPF_JEQ | BPF_X:
		case BPF_JMP | BPF_JGE | BPF_X:
		case BPF_JMP | BPF_JGT | BPF_X:
		case BPF_JMP | BPF_JSET | BPF_X:
			pc += jump_taken(f->code, a, x) ? f->jt : f->jf;
			break;
		case BPF_RET | BPF_K:
			return k;
		case BPF_RET | BPF_A:
			return a;
		default:
			/* Not a checked program: the most restrictive answer. */
			return SECCOMP_RET_KILL_PROCESS;
		}
	}
	return SECCOMP_RET_KILL_PROCESS;	/* unreachable for a checked program */
}
