// SPDX-License-Identifier: MIT
// cat from stdin to stdout, statically linked: a program the library can
// never be loaded into, exec'd by t_proc_exec_handler. Not a test of its own.
#include <unistd.h>

int main(void)
{
	static char buf[64 << 10];
	ssize_t n;

	while ((n = read(STDIN_FILENO, buf, sizeof(buf))) > 0) {
		for (ssize_t off = 0; off < n;) {
			ssize_t w = write(STDOUT_FILENO, buf + off, (size_t)(n - off));

			if (w <= 0)
				return 2;
			off += w;
		}
	}
	return n < 0;
}
