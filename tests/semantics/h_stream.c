// SPDX-License-Identifier: MIT
// An inetd-style handler, exec'd by t_proc_exec_handler with its connection
// on stdin and stdout: not a test of its own. Its exit status says whether
// every byte was right.
//   h_stream raw BYTES    read BYTES of stream A from fd 0 with read(2),
//                         then write BYTES of stream B to fd 1 with write(2)
//   h_stream stdio BYTES  the same through stdio: a header line read with
//                         fgets, the bytes with fread, a report line with
//                         printf, the answer with fwrite (flushed at exit)
//   h_stream fdopen BYTES as stdio, on streams of its own: fdopen(0, "r"),
//                         fdopen(1, "w")
//   h_stream plain ...    as raw, and the library must not be loaded
#include "t_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	SEED_IN = 0xa11ce,
	SEED_OUT = 0xb0b,
	CHUNK = 256 << 10,
	EXIT_BAD_DATA = 2,
	EXIT_PRELOADED = 3,
	EXIT_USAGE = 4,
};

static unsigned char buf[CHUNK];

static bool raw(uint64_t bytes)
{
	bool ok = true;

	for (uint64_t off = 0; off < bytes;) {
		size_t want = bytes - off < CHUNK ? (size_t)(bytes - off) : CHUNK;
		ssize_t r = read(STDIN_FILENO, buf, want);

		if (r <= 0)
			return false;
		ok = ok && t_stream_check(SEED_IN, off, buf, (size_t)r) < 0;
		off += (uint64_t)r;
	}
	for (uint64_t off = 0; off < bytes; off += CHUNK) {
		size_t n = bytes - off < CHUNK ? (size_t)(bytes - off) : CHUNK;

		t_stream_fill(SEED_OUT, off, buf, n);
		t_send_all(STDOUT_FILENO, buf, n);
	}
	return ok;
}

static bool with_stdio(FILE *in, FILE *out, uint64_t bytes)
{
	char line[128];
	uint64_t sum = T_FNV_OFFSET;
	bool ok;

	if (!fgets(line, sizeof(line), in) || strcmp(line, "hello handler\n"))
		return false;
	for (uint64_t off = 0; off < bytes;) {
		size_t want = bytes - off < CHUNK ? (size_t)(bytes - off) : CHUNK;
		size_t r = fread(buf, 1, want, in);

		if (!r)
			return false;
		if (t_stream_check(SEED_IN, off, buf, r) >= 0)
			return false;
		sum = t_fnv1a(sum, buf, r);
		off += r;
	}
	ok = fgets(line, sizeof(line), in) && !strcmp(line, "that was all\n");
	fprintf(out, "handler read %llu bytes, checksum %016llx\n", (unsigned long long)bytes,
		(unsigned long long)sum);
	for (uint64_t off = 0; off < bytes; off += CHUNK) {
		size_t n = bytes - off < CHUNK ? (size_t)(bytes - off) : CHUNK;

		t_stream_fill(SEED_OUT, off, buf, n);
		if (fwrite(buf, 1, n, out) != n)
			return false;
	}
	fprintf(out, "bye\n");
	return ok;	/* flushed by exit */
}

int main(int argc, char **argv)
{
	uint64_t bytes;

	t_watchdog(120);
	if (argc != 3)
		return EXIT_USAGE;
	bytes = strtoull(argv[2], NULL, 10);
	if (!strcmp(argv[1], "raw"))
		return raw(bytes) ? 0 : EXIT_BAD_DATA;
	if (!strcmp(argv[1], "plain"))
		return t_preloaded() ? EXIT_PRELOADED : raw(bytes) ? 0 : EXIT_BAD_DATA;
	if (!strcmp(argv[1], "stdio"))
		return with_stdio(stdin, stdout, bytes) ? 0 : EXIT_BAD_DATA;
	if (!strcmp(argv[1], "fdopen")) {
		FILE *in = fdopen(STDIN_FILENO, "r"), *out = fdopen(STDOUT_FILENO, "w");

		if (!in || !out)
			return EXIT_USAGE;
		return with_stdio(in, out, bytes) ? 0 : EXIT_BAD_DATA;
	}
	return EXIT_USAGE;
}
