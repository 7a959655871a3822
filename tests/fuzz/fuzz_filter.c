// SPDX-License-Identifier: MIT
/*
 * Fuzz target: the seccomp program checker and interpreter of the library
 * (src/preload/filter.c). The input is a struct seccomp_data (64 bytes)
 * followed by instructions (8 bytes each); every input is checked, and a
 * program that passes is run.
 *
 * Oracles, beyond ASan/UBSan: the check is a pure function of the program;
 * a program that passes has every jump inside it and ends in a return; a
 * run that did not read the instruction pointer (or the arguments) gives
 * the same answer whatever they are, which is what lets the library trust
 * a verdict that did not depend on what it cannot know.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "preload/filter.h"

static void die(const char *what)
{
	fprintf(stderr, "fuzz_filter: %s\n", what);
	abort();
}

#define CHECK(cond, what) do { if (!(cond)) die(what); } while (0)

static void check_shape(const struct sock_filter *p, unsigned n)
{
	for (unsigned pc = 0; pc < n; pc++) {
		if (p[pc].code == (BPF_JMP | BPF_JA))
			CHECK(pc + 1 + (uint64_t)p[pc].k < n, "a checked JA leaves the program");
		else if (BPF_CLASS(p[pc].code) == BPF_JMP)
			CHECK(pc + 1 + p[pc].jt < n && pc + 1 + p[pc].jf < n,
			      "a checked jump leaves the program");
	}
	CHECK(BPF_CLASS(p[n - 1].code) == BPF_RET, "a checked program does not end in a return");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sock_filter prog[4096 + 1];
	struct seccomp_data sd, other;
	unsigned n, seen, seen2;
	uint32_t r;
	int ok;

	if (size < sizeof(sd))
		return 0;
	memcpy(&sd, data, sizeof(sd));
	n = (unsigned)((size - sizeof(sd)) / sizeof(struct sock_filter));
	if (n > 4096 + 1)
		n = 4096 + 1;
	memcpy(prog, data + sizeof(sd), n * sizeof(struct sock_filter));
	ok = shunt_filter_check(prog, n);
	CHECK(ok == 0 || ok == -22, "check returned something but 0 or -EINVAL");
	CHECK(shunt_filter_check(prog, n) == ok, "check is not a function of the program");
	if (ok)
		return 0;
	CHECK(n >= 1 && n <= 4096, "a checked program of impossible length");
	check_shape(prog, n);
	r = shunt_filter_run(prog, n, &sd, &seen);
	CHECK(!(seen & ~0xfu), "seen has unknown bits");
	other = sd;
	other.instruction_pointer = ~sd.instruction_pointer;
	if (!(seen & SHUNT_FILTER_SAW_IP))
		CHECK(shunt_filter_run(prog, n, &other, &seen2) == r,
		      "the answer changed with an instruction pointer it did not read");
	other = sd;
	for (int i = 0; i < 6; i++)
		other.args[i] = ~sd.args[i] * 3 + 1;
	if (!(seen & SHUNT_FILTER_SAW_ARGS))
		CHECK(shunt_filter_run(prog, n, &other, &seen2) == r,
		      "the answer changed with arguments it did not read");
	return 0;
}
