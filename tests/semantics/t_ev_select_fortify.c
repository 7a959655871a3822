// SPDX-License-Identifier: MIT
// Built with -O2 -D_FORTIFY_SOURCE=2: FD_SET, FD_ISSET and FD_CLR on an fd
// outside [0, FD_SETSIZE) abort the program the way glibc does (shown in
// children, so the trace goes on), poll on more entries than the array holds
// aborts in __poll_chk, and within the limits select, pselect, poll and ppoll
// (through __poll_chk/__ppoll_chk) see TCP sockets up to fd FD_SETSIZE - 1.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#if !defined(_FORTIFY_SOURCE) || _FORTIFY_SOURCE < 2 || !defined(__OPTIMIZE__)
#error "t_ev_select_fortify must be built with -O2 -D_FORTIFY_SOURCE=2 (see meson.build)"
#endif

enum {
	HIGH_FD = 1500,
};

// Not constants to the compiler, so the macros check at run time.
static volatile int v_high = HIGH_FD, v_neg = -1, v_setsize = FD_SETSIZE,
		    v_last = FD_SETSIZE - 1;
static volatile nfds_t v_two = 2, v_three = 3;
static volatile size_t v_sixteen = 16;

enum misuse {
	SET_HIGH,
	ISSET_HIGH,
	CLR_HIGH,
	SET_NEGATIVE,
	SET_SETSIZE,
	SET_LAST,
	POLL_OVERRUN,
	PPOLL_OVERRUN,
	POLL_EXACT,
};

static const char *const misuse_name[] = {
	[SET_HIGH] = "FD_SET(1500)",
	[ISSET_HIGH] = "FD_ISSET(1500)",
	[CLR_HIGH] = "FD_CLR(1500)",
	[SET_NEGATIVE] = "FD_SET(-1)",
	[SET_SETSIZE] = "FD_SET(FD_SETSIZE)",
	[SET_LAST] = "FD_SET(FD_SETSIZE - 1)",
	[POLL_OVERRUN] = "poll(struct pollfd[2], 3)",
	[PPOLL_OVERRUN] = "ppoll(struct pollfd[2], 3)",
	[POLL_EXACT] = "poll(struct pollfd[2], 2)",
};

static int misuse(enum misuse m)
{
	struct pollfd p[2] = { { .fd = -1 }, { .fd = -1 } };
	fd_set set;
	int r = 0;

	FD_ZERO(&set);
	switch (m) {
	case SET_HIGH:
		FD_SET(v_high, &set);
		break;
	case ISSET_HIGH:
		r = FD_ISSET(v_high, &set);
		break;
	case CLR_HIGH:
		FD_CLR(v_high, &set);
		break;
	case SET_NEGATIVE:
		FD_SET(v_neg, &set);
		break;
	case SET_SETSIZE:
		FD_SET(v_setsize, &set);
		break;
	case SET_LAST:
		FD_SET(v_last, &set);
		r = !FD_ISSET(v_last, &set);
		break;
	case POLL_OVERRUN:
		r = poll(p, v_three, 0);
		break;
	case PPOLL_OVERRUN:
		r = ppoll(p, v_three, &(struct timespec){ 0, 0 }, NULL);
		break;
	case POLL_EXACT:
		r = poll(p, v_two, 0);
		break;
	}
	return r;
}

// The text between "*** " and " ***" in glibc's fatal message, e.g.
// "buffer overflow detected"; other lines on stderr are ignored.
static const char *fortify_message(char *err)
{
	char *start = strstr(err, "*** "), *end;

	if (!start || !(end = strstr(start + 4, " ***")))
		return "(none)";
	*end = '\0';
	return start + 4;
}

// Run one misuse in a child whose stderr we read: how it ended, and whether
// glibc's fortify message was printed.
static void in_child(enum misuse m)
{
	char err[512];
	int pipefd[2], st;
	ssize_t n, len = 0;
	pid_t pid;

	if (pipe2(pipefd, O_CLOEXEC) < 0)
		t_fatal("pipe2");
	pid = t_fork();
	if (pid == 0) {
		dup2(pipefd[1], STDERR_FILENO);
		// glibc writes the message to stderr, not to the terminal.
		setenv("LIBC_FATAL_STDERR_", "1", 1);
		signal(SIGABRT, SIG_DFL);
		_exit(misuse(m));
	}
	close(pipefd[1]);
	while (len < (ssize_t)sizeof(err) - 1 &&
	       (n = read(pipefd[0], err + len, sizeof(err) - 1 - (size_t)len)) > 0)
		len += n;
	err[len] = '\0';
	close(pipefd[0]);
	if (waitpid(pid, &st, 0) < 0)
		t_fatal("waitpid");
	if (WIFSIGNALED(st))
		printf("%s in a child: killed by SIG%s, stderr \"%s\"\n", misuse_name[m],
		       sigabbrev_np(WTERMSIG(st)), fortify_message(err));
	else
		printf("%s in a child: exit %d\n", misuse_name[m], WEXITSTATUS(st));
}

// The last fd an fd_set holds, a TCP socket: select, pselect and the
// checked poll variants.
static void within_limits(void)
{
	struct pollfd p[2];
	fd_set rd, wr;
	char buf[16];
	int c, s, hc;

	_Static_assert(sizeof(buf) == 16, "v_sixteen is its size");

	t_pair(AF_INET, &c, &s);
	hc = fcntl(c, F_DUPFD_CLOEXEC, FD_SETSIZE - 1);
	t_expect(hc == FD_SETSIZE - 1, "tcp_c duplicated to fd FD_SETSIZE - 1");
	FD_ZERO(&rd);
	FD_ZERO(&wr);
	FD_SET(hc, &rd);
	FD_SET(hc, &wr);
	T_REPORT("select(FD_SETSIZE, tcp_c at FD_SETSIZE - 1, idle)",
		 select(FD_SETSIZE, &rd, &wr, NULL, &(struct timeval){ 0, 0 }));
	printf("  r%d w%d\n", FD_ISSET(hc, &rd), FD_ISSET(hc, &wr));
	T_REPORT("send(tcp_s, \"fortified\")", send(s, "fortified", 9, 0));
	FD_ZERO(&rd);
	FD_SET(hc, &rd);
	T_REPORT("pselect(FD_SETSIZE, tcp_c at FD_SETSIZE - 1, no timeout)",
		 pselect(FD_SETSIZE, &rd, NULL, NULL, NULL, NULL));
	printf("  r%d\n", FD_ISSET(hc, &rd));
	p[0] = (struct pollfd){ .fd = hc, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = s, .events = POLLIN };
	T_REPORT("poll(struct pollfd[2], 2 at run time), via __poll_chk",
		 poll(p, v_two, T_WAIT_MS));
	printf("  tcp_c %s,", t_poll_str(p[0].revents));
	printf(" tcp_s %s\n", t_poll_str(p[1].revents));
	p[0].revents = p[1].revents = 0;
	T_REPORT("ppoll(struct pollfd[2], 2 at run time), via __ppoll_chk",
		 ppoll(p, v_two, &(struct timespec){ 0, 0 }, NULL));
	printf("  tcp_c %s,", t_poll_str(p[0].revents));
	printf(" tcp_s %s\n", t_poll_str(p[1].revents));
	T_REPORT_DATA("recv(tcp_c, char[16]), via __recv_chk", recv(hc, buf, v_sixteen, 0), buf);
	close(hc);
	close(c);
	close(s);
}

int main(void)
{
	t_start(30);
	// The children first, before any socket exists.
	for (enum misuse m = SET_HIGH; m <= POLL_EXACT; m++)
		in_child(m);
	within_limits();
	return t_finish();
}
