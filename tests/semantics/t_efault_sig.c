// SPDX-License-Identifier: MIT
// The program's own SIGSEGV and SIGBUS, with a library that catches faults
// in its own copies: every way of setting a disposition (sigaction, signal,
// bsd_signal, ssignal, sysv_signal, sigset, sigignore, siginterrupt,
// syscall(SYS_rt_sigaction)) reads back what the kernel would hold; a fault
// outside the library reaches the program's handler with its siginfo, mask,
// stack and one-shot semantics; a default or ignored disposition kills the
// process with the signal (core dump included), as without the library.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

// sigset, sigignore and siginterrupt are deprecated, and still called.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

__sighandler_t bsd_signal(int sig, __sighandler_t handler);
__sighandler_t ssignal(int sig, __sighandler_t handler);
__sighandler_t sysv_signal(int sig, __sighandler_t handler);

// The kernel's struct sigaction on x86-64, for syscall(SYS_rt_sigaction).
struct ksigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};

static void *restorer_glibc;	// what glibc's sigaction gives the kernel
static char *page;		// one page, PROT_NONE unless a handler opens it
static sigjmp_buf jb;
static volatile sig_atomic_t hits;
static volatile int h_sig, h_code, h_addr_ok, h_self_blocked, h_usr1_blocked, h_on_alt;
static char *alt;
static size_t alt_size;

static void h_plain(int sig)
{
	(void)sig;
}

static void h_other(int sig)
{
	(void)sig;
}

// Records what the kernel handed over, then leaves by siglongjmp.
static void h_info(int sig, siginfo_t *si, void *uc)
{
	sigset_t now;
	char here;

	(void)uc;
	hits++;
	h_sig = si->si_signo == sig ? sig : -1;
	h_code = si->si_code;
	h_addr_ok = si->si_addr == (void *)page;
	sigprocmask(SIG_SETMASK, NULL, &now);
	h_self_blocked = sigismember(&now, sig);
	h_usr1_blocked = sigismember(&now, SIGUSR1);
	h_on_alt = alt && &here >= alt && &here < alt + alt_size;
	siglongjmp(jb, 1);
}

// Opens the page and returns: the faulting access runs again and succeeds.
static void h_open(int sig)
{
	(void)sig;
	hits++;
	mprotect(page, 4096, PROT_READ | PROT_WRITE);
}

static const char *name_of(void *h)
{
	if (h == (void *)SIG_DFL)
		return "SIG_DFL";
	if (h == (void *)SIG_IGN)
		return "SIG_IGN";
	if (h == (void *)SIG_HOLD)
		return "SIG_HOLD";
	if (h == (void *)SIG_ERR)
		return "SIG_ERR";
	if (h == (void *)h_plain)
		return "h_plain";
	if (h == (void *)h_other)
		return "h_other";
	if (h == (void *)h_info)
		return "h_info";
	if (h == (void *)h_open)
		return "h_open";
	return "unknown";
}

static const char *restorer_of(void *r)
{
	return !r ? "none" : r == restorer_glibc ? "glibc" : "other";
}

static void show(const char *label, int sig)
{
	struct sigaction o;

	memset(&o, 0xa5, sizeof(o));
	if (sigaction(sig, NULL, &o) < 0)
		t_fatal("sigaction query");
	printf("  %s: %s flags %#x mask %#lx restorer %s\n", label, name_of((void *)o.sa_handler),
	       (unsigned)o.sa_flags, o.sa_mask.__val[0], restorer_of((void *)o.sa_restorer));
}

static void set(int sig, void *handler, int flags, int masked)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = (__sighandler_t)handler;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	if (masked)
		sigaddset(&sa.sa_mask, masked);
	if (sigaction(sig, &sa, NULL) < 0)
		t_fatal("sigaction");
}

static void queries(int sig)
{
	struct sigaction sa, old;
	struct ksigaction k;
	__sighandler_t prev;

	printf("-- queries, signal %d\n", sig);
	show("at start", sig);
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = h_info;
	// 0x1000 is no flag: the kernel drops it.
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | 0x1000;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGUSR1);
	sigaddset(&sa.sa_mask, SIGKILL);
	memset(&old, 0x5a, sizeof(old));
	T_REPORT("sigaction(SA_SIGINFO|SA_ONSTACK|SA_NODEFER|0x1000, mask USR1|KILL)",
		 sigaction(sig, &sa, &old));
	printf("  old: %s flags %#x\n", name_of((void *)old.sa_handler), (unsigned)old.sa_flags);
	show("now", sig);
	prev = signal(sig, h_plain);
	printf("  signal(h_plain) returned %s\n", name_of((void *)prev));
	show("after signal", sig);
	prev = bsd_signal(sig, h_other);
	printf("  bsd_signal(h_other) returned %s\n", name_of((void *)prev));
	prev = ssignal(sig, h_plain);
	printf("  ssignal(h_plain) returned %s\n", name_of((void *)prev));
	prev = sysv_signal(sig, h_other);
	printf("  sysv_signal(h_other) returned %s\n", name_of((void *)prev));
	show("after sysv_signal", sig);
	T_REPORT("siginterrupt(1)", siginterrupt(sig, 1));
	show("after siginterrupt(1)", sig);
	prev = signal(sig, h_plain);
	printf("  signal(h_plain) returned %s\n", name_of((void *)prev));
	show("signal after siginterrupt(1)", sig);
	T_REPORT("siginterrupt(0)", siginterrupt(sig, 0));
	show("after siginterrupt(0)", sig);
	prev = sigset(sig, SIG_HOLD);
	printf("  sigset(SIG_HOLD) returned %s\n", name_of((void *)prev));
	prev = sigset(sig, SIG_HOLD);
	printf("  sigset(SIG_HOLD) again returned %s\n", name_of((void *)prev));
	prev = sigset(sig, h_other);
	printf("  sigset(h_other) returned %s\n", name_of((void *)prev));
	show("after sigset", sig);
	T_REPORT("sigignore", sigignore(sig));
	show("after sigignore", sig);
	prev = signal(sig, SIG_ERR);
	printf("  signal(SIG_ERR) returned %s, %s\n", name_of((void *)prev), t_errname(errno));

	memset(&k, 0x77, sizeof(k));
	T_REPORT("rt_sigaction(query)", syscall(SYS_rt_sigaction, sig, NULL, &k, 8));
	printf("  kernel view: %s flags %#lx mask %#llx restorer %s\n", name_of(k.handler),
	       k.flags, (unsigned long long)k.mask, restorer_of(k.restorer));
	T_REPORT("rt_sigaction(sigsetsize 4)", syscall(SYS_rt_sigaction, sig, NULL, &k, 4));
	T_REPORT("rt_sigaction(act unmapped)", syscall(SYS_rt_sigaction, sig, page, NULL, 8));
	k = (struct ksigaction){ (void *)h_plain, 0xffffffffffffffffUL, NULL, ~0ULL };
	T_REPORT("rt_sigaction(all flags, no restorer, oact unmapped)",
		 syscall(SYS_rt_sigaction, sig, &k, page, 8));
	show("after it", sig);
	set(sig, SIG_DFL, 0, 0);
	show("back to default", sig);
}

// Fault on the page: the handler decides what happens.
static void touch(void)
{
	*(volatile char *)page = 1;
}

static void handlers(void)
{
	stack_t ss;

	printf("-- a fault outside the library reaches the program's handler\n");
	set(SIGSEGV, (void *)h_info, SA_SIGINFO, SIGUSR1);
	if (!sigsetjmp(jb, 1))
		touch();
	printf("  SA_SIGINFO: hits %d signo %d code %d addr %s SEGV blocked %d USR1 blocked %d\n",
	       (int)hits, h_sig, h_code, h_addr_ok ? "right" : "wrong", h_self_blocked,
	       h_usr1_blocked);
	set(SIGSEGV, (void *)h_info, SA_SIGINFO | SA_NODEFER, 0);
	if (!sigsetjmp(jb, 1))
		touch();
	printf("  SA_NODEFER: hits %d SEGV blocked %d\n", (int)hits, h_self_blocked);

	alt_size = 64 << 10;
	alt = malloc(alt_size);
	ss = (stack_t){ .ss_sp = alt, .ss_size = alt_size };
	if (!alt || sigaltstack(&ss, NULL) < 0)
		t_fatal("sigaltstack");
	set(SIGSEGV, (void *)h_info, SA_SIGINFO | SA_ONSTACK, 0);
	if (!sigsetjmp(jb, 1))
		touch();
	printf("  SA_ONSTACK: hits %d on the alternate stack %d\n", (int)hits, h_on_alt);
	set(SIGSEGV, (void *)h_info, SA_SIGINFO, 0);
	if (!sigsetjmp(jb, 1))
		touch();
	printf("  without SA_ONSTACK: hits %d on the alternate stack %d\n", (int)hits, h_on_alt);

	set(SIGSEGV, (void *)h_open, SA_RESETHAND, 0);
	touch();
	printf("  SA_RESETHAND: hits %d, the access went through\n", (int)hits);
	show("after SA_RESETHAND ran", SIGSEGV);
	mprotect(page, 4096, PROT_NONE);

	// A SIGSEGV someone sends: the handler, with the sender's si_code.
	set(SIGSEGV, (void *)h_info, SA_SIGINFO, 0);
	if (!sigsetjmp(jb, 1))
		raise(SIGSEGV);
	printf("  raise: hits %d code %d\n", (int)hits, h_code);
	set(SIGSEGV, SIG_IGN, 0, 0);
	T_REPORT("raise(SIGSEGV) ignored", raise(SIGSEGV));

	// SIGBUS: a mapping past the end of its file.
	{
		int fd = memfd_create("t_efault_sig", 0);
		char *m;

		if (fd < 0 || ftruncate(fd, 4096) < 0)
			t_fatal("memfd");
		m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			t_fatal("mmap");
		char *none = page;

		set(SIGBUS, (void *)h_info, SA_SIGINFO, 0);
		page = m + 4096;
		if (!sigsetjmp(jb, 1))
			(void)*(volatile char *)page;
		printf("  SIGBUS: hits %d signo %d code %d addr %s\n", (int)hits, h_sig, h_code,
		       h_addr_ok ? "right" : "wrong");
		page = none;
		munmap(m, 8192);
		close(fd);
		set(SIGBUS, SIG_DFL, 0, 0);
	}
	set(SIGSEGV, SIG_DFL, 0, 0);
}

// What kills a child, and how.
static void deaths(void)
{
	static const char *const what[] = {
		"default disposition, a fault",
		"ignored, a fault",
		"sysv_signal handler: once, then the default",
		"handler resets to SIG_DFL and returns",
		"default disposition, kill(SIGSEGV)",
		"SIGSEGV blocked, a fault",
		"default disposition, SIGBUS fault",
	};
	char dir[] = "/tmp/t_efault_sigXXXXXX";

	printf("-- deaths\n");
	if (!mkdtemp(dir))
		t_fatal("mkdtemp");
	for (unsigned i = 0; i < sizeof(what) / sizeof(what[0]); i++) {
		struct rlimit unlimited = { RLIM_INFINITY, RLIM_INFINITY };
		char core[64];
		pid_t pid = t_fork();
		int st;

		if (pid == 0) {
			sigset_t blocked;

			// Core dumps where the kernel writes them, in a directory of our own.
			if (chdir(dir) < 0 || setrlimit(RLIMIT_CORE, &unlimited) < 0)
				_exit(2);
			switch (i) {
			case 0:
				touch();
				break;
			case 1:
				signal(SIGSEGV, SIG_IGN);
				touch();
				break;
			case 2:
				sysv_signal(SIGSEGV, h_open);
				touch();
				mprotect(page, 4096, PROT_NONE);
				printf("  child: the first fault was handled\n");
				fflush(stdout);
				touch();
				break;
			case 3:
				signal(SIGSEGV, (__sighandler_t)(void *)h_plain);
				signal(SIGSEGV, SIG_DFL);
				touch();
				break;
			case 4:
				kill(getpid(), SIGSEGV);
				break;
			case 5:
				set(SIGSEGV, (void *)h_info, SA_SIGINFO, 0);
				sigemptyset(&blocked);
				sigaddset(&blocked, SIGSEGV);
				sigprocmask(SIG_BLOCK, &blocked, NULL);
				touch();
				break;
			case 6: {
				int fd = memfd_create("t_efault_sig", 0);
				char *m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);

				(void)*(volatile char *)(m + 4096);
				break;
			}
			}
			_exit(0);
		}
		while (waitpid(pid, &st, 0) < 0)
			if (errno != EINTR)
				t_fatal("waitpid");
		if (WIFSIGNALED(st))
			printf("  %s: killed by signal %d%s\n", what[i], WTERMSIG(st),
			       WCOREDUMP(st) ? " (core dumped)" : "");
		else
			printf("  %s: exit %d\n", what[i], WEXITSTATUS(st));
		snprintf(core, sizeof(core), "%s/core", dir);
		unlink(core);
		snprintf(core, sizeof(core), "%s/core.%d", dir, (int)pid);
		unlink(core);
	}
	rmdir(dir);
}

int main(void)
{
	struct sigaction sa;
	char buf[8];
	int c, s;

	t_start(60);
	t_pair(AF_INET, &c, &s);
	T_REPORT("send(tcp_c, \"ping\")", send(c, "ping", 4, 0));
	T_REPORT_DATA("recv(tcp_s)", recv(s, buf, sizeof(buf), 0), buf);

	// glibc's restorer, as the kernel has it for a signal the library leaves alone.
	set(SIGUSR2, (void *)h_plain, 0, 0);
	sigaction(SIGUSR2, NULL, &sa);
	restorer_glibc = (void *)sa.sa_restorer;
	set(SIGUSR2, SIG_DFL, 0, 0);

	page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		t_fatal("mmap");
	queries(SIGSEGV);
	queries(SIGBUS);
	handlers();
	deaths();

	close(c);
	close(s);
	return t_finish();
}
