// SPDX-License-Identifier: MIT
/*
 * Exported wrappers of every way a program sets or reads a signal's
 * disposition. For SIGSEGV and SIGBUS, whose kernel disposition is the
 * library's handler (fault.c), they build what glibc would hand the kernel
 * and apply it to the program's recorded disposition; glibc's signal(),
 * sysv_signal(), sigset() and the rest reach the kernel without an
 * interposable sigaction, so each is redone here. Other signals go to the
 * C library untouched.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "preload/fault.h"
#include "preload/init.h"
#include "preload/libc.h"

int __sigaction(int sig, const struct sigaction *act, struct sigaction *oact);
__sighandler_t bsd_signal(int sig, __sighandler_t handler);
__sighandler_t ssignal(int sig, __sighandler_t handler);
__sighandler_t sysv_signal(int sig, __sighandler_t handler);
__sighandler_t __sysv_signal(int sig, __sighandler_t handler);
__sighandler_t sigset(int sig, __sighandler_t disp);
int sigignore(int sig);
int siginterrupt(int sig, int interrupt);

enum {
	K_SA_RESTORER = 0x04000000,
	K_SA_INTERRUPT = 0x20000000,	/* glibc's sysv_signal asks for it; the kernel drops it */
	KSIGSET_BYTES = 8,
};

/* glibc's _sigintr for our two signals: siginterrupt(sig, 1) makes signal() drop SA_RESTART. */
static _Atomic unsigned sigintr;

/*
 * Dormant (init.h), the library keeps no signal: the C library answers
 * without starting it. The start takes SIGSEGV and SIGBUS over as the
 * kernel has them then, so a change to those two is made in a section
 * the start waits for (shunt_dormant_enter).
 */
static bool dormant_enter(int sig)
{
	return sig == SIGSEGV || sig == SIGBUS ? shunt_dormant_enter() : shunt_dormant();
}

static void dormant_leave(int sig)
{
	if (sig == SIGSEGV || sig == SIGBUS)
		shunt_dormant_leave();
}

/* glibc's __libc_sigaction, over the program's recorded disposition. */
static int fault_sigaction(int sig, const struct sigaction *act, struct sigaction *oact)
{
	struct shunt_ksigaction k, ok;

	if (act) {
		k.handler = (void *)act->sa_handler;
		k.flags = (unsigned long)(long)act->sa_flags | K_SA_RESTORER;
		k.restorer = shunt_fault_restorer();
		memcpy(&k.mask, &act->sa_mask, KSIGSET_BYTES);
	}
	shunt_fault_kaction(sig, act ? &k : NULL, oact ? &ok : NULL);
	if (oact) {
		oact->sa_handler = (__sighandler_t)ok.handler;
		memset(&oact->sa_mask, 0, sizeof(oact->sa_mask));
		memcpy(&oact->sa_mask, &ok.mask, KSIGSET_BYTES);
		oact->sa_flags = (int)ok.flags;
		oact->sa_restorer = (void (*)(void))ok.restorer;
	}
	return 0;
}

SHUNT_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *oact)
{
	if (dormant_enter(sig)) {
		int r = SHUNT_LIBC(sigaction)(sig, act, oact);

		dormant_leave(sig);
		return r;
	}
	shunt_ensure_init();
	if (!shunt_fault_sig(sig))
		return SHUNT_LIBC(sigaction)(sig, act, oact);
	return fault_sigaction(sig, act, oact);
}

SHUNT_EXPORT int __sigaction(int sig, const struct sigaction *act, struct sigaction *oact)
{
	return sigaction(sig, act, oact);
}

/* glibc's __bsd_signal (signal, bsd_signal, ssignal): the signal masked in its handler, SA_RESTART. */
SHUNT_EXPORT __sighandler_t signal(int sig, __sighandler_t handler)
{
	struct sigaction act, oact;

	if (dormant_enter(sig)) {
		__sighandler_t r = SHUNT_LIBC(signal)(sig, handler);

		dormant_leave(sig);
		return r;
	}
	shunt_ensure_init();
	if (!shunt_fault_sig(sig))
		return SHUNT_LIBC(signal)(sig, handler);
	if (handler == SIG_ERR) {
		errno = EINVAL;
		return SIG_ERR;
	}
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	sigaddset(&act.sa_mask, sig);
	act.sa_flags = atomic_load(&sigintr) & (1u << sig) ? 0 : SA_RESTART;
	fault_sigaction(sig, &act, &oact);
	return oact.sa_handler;
}

SHUNT_EXPORT __sighandler_t bsd_signal(int sig, __sighandler_t handler)
{
	return signal(sig, handler);
}

SHUNT_EXPORT __sighandler_t ssignal(int sig, __sighandler_t handler)
{
	return signal(sig, handler);
}

/* glibc's __sysv_signal: one-shot, not masked in its handler, interrupting. */
SHUNT_EXPORT __sighandler_t __sysv_signal(int sig, __sighandler_t handler)
{
	struct sigaction act, oact;

	if (dormant_enter(sig)) {
		__sighandler_t r = SHUNT_LIBC(__sysv_signal)(sig, handler);

		dormant_leave(sig);
		return r;
	}
	shunt_ensure_init();
	if (!shunt_fault_sig(sig))
		return SHUNT_LIBC(__sysv_signal)(sig, handler);
	if (handler == SIG_ERR) {
		errno = EINVAL;
		return SIG_ERR;
	}
	memset(&act, 0, sizeof(act));
	act.sa_handler = handler;
	sigemptyset(&act.sa_mask);
	act.sa_flags = (int)(SA_RESETHAND | SA_NODEFER | K_SA_INTERRUPT);
	fault_sigaction(sig, &act, &oact);
	return oact.sa_handler;
}

SHUNT_EXPORT __sighandler_t sysv_signal(int sig, __sighandler_t handler)
{
	return __sysv_signal(sig, handler);
}

/* glibc's sigset: SIG_HOLD blocks, anything else is set and unblocks. */
SHUNT_EXPORT __sighandler_t sigset(int sig, __sighandler_t disp)
{
	struct sigaction act, oact;
	sigset_t set, oset;

	if (dormant_enter(sig)) {
		__sighandler_t r = SHUNT_LIBC(sigset)(sig, disp);

		dormant_leave(sig);
		return r;
	}
	shunt_ensure_init();
	if (!shunt_fault_sig(sig))
		return SHUNT_LIBC(sigset)(sig, disp);
	sigemptyset(&set);
	sigaddset(&set, sig);
	if (disp == SIG_HOLD) {
		if (sigprocmask(SIG_BLOCK, &set, &oset) < 0)
			return SIG_ERR;
		if (sigismember(&oset, sig))
			return SIG_HOLD;
		fault_sigaction(sig, NULL, &oact);
		return oact.sa_handler;
	}
	memset(&act, 0, sizeof(act));
	act.sa_handler = disp;
	sigemptyset(&act.sa_mask);
	act.sa_flags = 0;
	fault_sigaction(sig, &act, &oact);
	if (sigprocmask(SIG_UNBLOCK, &set, &oset) < 0)
		return SIG_ERR;
	return sigismember(&oset, sig) ? SIG_HOLD : oact.sa_handler;
}

SHUNT_EXPORT int sigignore(int sig)
{
	struct sigaction act;

	if (dormant_enter(sig)) {
		int r = SHUNT_LIBC(sigignore)(sig);

		dormant_leave(sig);
		return r;
	}
	shunt_ensure_init();
	if (!shunt_fault_sig(sig))
		return SHUNT_LIBC(sigignore)(sig);
	memset(&act, 0, sizeof(act));
	act.sa_handler = SIG_IGN;
	sigemptyset(&act.sa_mask);
	return fault_sigaction(sig, &act, NULL);
}

SHUNT_EXPORT int siginterrupt(int sig, int interrupt)
{
	struct sigaction action;

	if (dormant_enter(sig)) {
		int r = SHUNT_LIBC(siginterrupt)(sig, interrupt);

		dormant_leave(sig);
		return r;
	}
	shunt_ensure_init();
	if (!shunt_fault_sig(sig))
		return SHUNT_LIBC(siginterrupt)(sig, interrupt);
	fault_sigaction(sig, NULL, &action);
	if (interrupt) {
		atomic_fetch_or(&sigintr, 1u << sig);
		action.sa_flags &= ~SA_RESTART;
	} else {
		atomic_fetch_and(&sigintr, ~(1u << sig));
		action.sa_flags |= SA_RESTART;
	}
	return fault_sigaction(sig, &action, NULL);
}

long shunt_fault_rt_sigaction(long sig, long act, long oact, long sigsetsize)
{
	struct shunt_ksigaction k, ok;

	/* rt_sigaction's order: the size, the new action, then the old one out. */
	if (sigsetsize != KSIGSET_BYTES) {
		errno = EINVAL;
		return -1;
	}
	if (act && shunt_get_user(&k, (const void *)act, sizeof(k))) {
		errno = EFAULT;
		return -1;
	}
	shunt_fault_kaction((int)sig, act ? &k : NULL, oact ? &ok : NULL);
	if (oact && shunt_put_user((void *)oact, &ok, sizeof(ok))) {
		errno = EFAULT;
		return -1;
	}
	return 0;
}
