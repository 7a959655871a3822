// SPDX-License-Identifier: MIT
/*
 * Faults in the library's copies of program memory, and the program's own
 * SIGSEGV and SIGBUS. The library's handler is the one the kernel knows;
 * the program's dispositions are kept here, exactly as the kernel would
 * hold them, and applied by that handler to every fault that is not one
 * of the library's copies (ucopy.S).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "common/once.h"
#include "common/sys.h"
#include "preload/fault.h"
#include "preload/libc.h"

/* The sa_flags bits the kernel keeps (UAPI_SA_FLAGS on x86-64); it clears the others. */
enum {
	KEPT_FLAGS = SA_NOCLDSTOP | SA_NOCLDWAIT | SA_SIGINFO | 0x800 /* SA_EXPOSE_TAGBITS */ |
		     0x04000000 /* SA_RESTORER */ | SA_ONSTACK | SA_RESTART | SA_NODEFER |
		     SA_RESETHAND,
	KSIGSET_BYTES = 8,	/* the kernel's sigset_t */
};

#if defined(__x86_64__)
extern const char shunt_ucopy_begin[] __attribute__((visibility("hidden")));
extern const char shunt_ucopy_end[] __attribute__((visibility("hidden")));
extern const char shunt_ucopy_fixup[] __attribute__((visibility("hidden")));

/* A fault on an instruction of ucopy.S: resume at its fixup, which returns the bytes left. */
static bool fix_copy(ucontext_t *uc)
{
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];

	if (pc < (uintptr_t)shunt_ucopy_begin || pc >= (uintptr_t)shunt_ucopy_end)
		return false;
	uc->uc_mcontext.gregs[REG_RIP] = (greg_t)(uintptr_t)shunt_ucopy_fixup;
	return true;
}
#else
/* No fault-tolerant copies on this architecture yet: a bad pointer still faults. */
size_t shunt_ucopy(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	return 0;
}

size_t shunt_ucopy_nt(void *dst, const void *src, size_t n)
{
	memcpy(dst, src, n);
	return 0;
}

static bool fix_copy(ucontext_t *uc)
{
	(void)uc;
	return false;
}
#endif

/*
 * The program's disposition of one signal, as the kernel would hold it.
 * Written under set_lock with every signal blocked; read by the handler
 * without a lock: a sequence count (odd while written) tells it to read
 * again. S1: the release stores of seq pair with the acquire loads in
 * disp_read.
 */
struct disp {
	_Atomic uint32_t seq;
	_Atomic uintptr_t handler;
	_Atomic unsigned long flags;
	_Atomic uintptr_t restorer;
	_Atomic uint64_t mask;
};

static struct disp disps[2];		/* SIGSEGV, SIGBUS */
static _Atomic bool set_lock;		/* writers of disps, one at a time */
static void *glibc_restorer;		/* written once by shunt_fault_init */
static struct shunt_once init_once = SHUNT_ONCE_INIT;
/* Set before start when the process began under a seccomp filter it cannot know (init.c). */
static _Atomic bool off;

bool shunt_fault_sig(int sig)
{
	return (sig == SIGSEGV || sig == SIGBUS) && !atomic_load_explicit(&off, memory_order_relaxed);
}

void shunt_fault_disable(void)
{
	atomic_store(&off, true);
}

static struct disp *disp_of(int sig)
{
	return &disps[sig == SIGBUS];
}

static void disp_read(struct disp *d, struct shunt_ksigaction *k)
{
	for (;;) {
		uint32_t seq = atomic_load_explicit(&d->seq, memory_order_acquire);

		if (seq & 1)
			continue;
		k->handler = (void *)atomic_load_explicit(&d->handler, memory_order_relaxed);
		k->flags = atomic_load_explicit(&d->flags, memory_order_relaxed);
		k->restorer = (void *)atomic_load_explicit(&d->restorer, memory_order_relaxed);
		k->mask = atomic_load_explicit(&d->mask, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&d->seq, memory_order_relaxed) == seq)
			return;
	}
}

static void disp_write(struct disp *d, const struct shunt_ksigaction *k)
{
	uint32_t seq = atomic_load_explicit(&d->seq, memory_order_relaxed);

	atomic_store_explicit(&d->seq, seq + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&d->handler, (uintptr_t)k->handler, memory_order_relaxed);
	atomic_store_explicit(&d->flags, k->flags, memory_order_relaxed);
	atomic_store_explicit(&d->restorer, (uintptr_t)k->restorer, memory_order_relaxed);
	atomic_store_explicit(&d->mask, k->mask, memory_order_relaxed);
	atomic_store_explicit(&d->seq, seq + 2, memory_order_release);	/* S1 */
}

static bool is_function(const void *handler)
{
	return handler != (void *)SIG_DFL && handler != (void *)SIG_IGN;
}

static void on_fault(int sig, siginfo_t *info, void *ucv);

/*
 * What the kernel is told: our handler, with the program's mask and the
 * flags the kernel acts on before any handler runs (the stack, the
 * signal's own blocking, restarting). A default or ignored disposition
 * restarts what the signal interrupts: a sent signal that the program
 * ignores must not turn a blocking call into EINTR.
 */
static void install(int sig, const struct shunt_ksigaction *prog)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO;
	if (is_function(prog->handler)) {
		sa.sa_flags |= (int)(prog->flags & (SA_ONSTACK | SA_RESTART | SA_NODEFER));
		memcpy(&sa.sa_mask, &prog->mask, KSIGSET_BYTES);
	} else {
		sa.sa_flags |= SA_ONSTACK | SA_RESTART;
	}
	SHUNT_LIBC(sigaction)(sig, &sa, NULL);
}

/* Block every signal and take set_lock: no handler can run on this thread meanwhile. */
static void set_begin(sigset_t *old)
{
	sigset_t all;

	sigfillset(&all);
	shunt_syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, old, KSIGSET_BYTES);
	while (atomic_exchange_explicit(&set_lock, true, memory_order_acquire))
		;
}

static void set_end(const sigset_t *old)
{
	atomic_store_explicit(&set_lock, false, memory_order_release);
	shunt_syscall(SYS_rt_sigprocmask, SIG_SETMASK, old, NULL, KSIGSET_BYTES);
}

/* Record @k as the program's disposition of @sig and tell the kernel. Under set_begin. */
static void set_locked(int sig, const struct shunt_ksigaction *k)
{
	disp_write(disp_of(sig), k);
	install(sig, k);
}

int shunt_fault_kaction(int sig, const struct shunt_ksigaction *act,
			struct shunt_ksigaction *oact)
{
	struct shunt_ksigaction k;
	sigset_t old;

	if (!shunt_fault_sig(sig))
		return -EINVAL;
	shunt_fault_init();
	set_begin(&old);
	if (oact)
		disp_read(disp_of(sig), oact);
	if (act) {
		k = *act;
		/* do_sigaction: unknown flag bits cleared, SIGKILL and SIGSTOP never masked. */
		k.flags &= KEPT_FLAGS;
		k.mask &= ~((1ULL << (SIGKILL - 1)) | (1ULL << (SIGSTOP - 1)));
		set_locked(sig, &k);
	}
	set_end(&old);
	return 0;
}

void *shunt_fault_restorer(void)
{
	shunt_fault_init();
	return glibc_restorer;
}

/*
 * The default action, as if the program had never had a handler: make it
 * the kernel's disposition and send the signal again, with the same
 * siginfo, to this thread. Blocked until the handler returns, it is
 * delivered on the way back, in the context that faulted: the process
 * dies of it, with a core dump where the kernel writes one.
 */
static void die(int sig, siginfo_t *info)
{
	struct sigaction dfl;
	sigset_t one;
	long pid = shunt_syscall(SYS_getpid), tid = shunt_syscall(SYS_gettid);

	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	SHUNT_LIBC(sigaction)(sig, &dfl, NULL);
	sigemptyset(&one);
	sigaddset(&one, sig);
	shunt_syscall(SYS_rt_sigprocmask, SIG_BLOCK, &one, NULL, KSIGSET_BYTES);
	if (shunt_syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, info) < 0)
		shunt_syscall(SYS_tgkill, pid, tid, sig);
}

/* Replace the handler of @sig's disposition (flags and mask stay, as the kernel's do). */
static void reset_handler(int sig, void *handler)
{
	struct shunt_ksigaction k;
	sigset_t old;

	set_begin(&old);
	disp_read(disp_of(sig), &k);
	k.handler = handler;
	set_locked(sig, &k);
	set_end(&old);
}

/*
 * Deliver to the program what the kernel would have: its handler, called
 * in this frame (the kernel already applied its mask, stack and
 * SA_NODEFER, which install() passed on), or the default action, or
 * nothing for an ignored signal that someone sent. A fault (si_code > 0)
 * the program ignores gets the default action, which stays, as the
 * kernel's force_sig_fault does.
 */
static void deliver(int sig, siginfo_t *info, ucontext_t *uc)
{
	struct shunt_ksigaction k;

	disp_read(disp_of(sig), &k);
	if (k.handler == (void *)SIG_IGN && info->si_code <= 0)
		return;
	if (!is_function(k.handler)) {
		if (k.handler == (void *)SIG_IGN)
			reset_handler(sig, (void *)SIG_DFL);
		die(sig, info);
		return;
	}
	if (k.flags & SA_RESETHAND)
		reset_handler(sig, (void *)SIG_DFL);
	if (k.flags & SA_SIGINFO)
		((void (*)(int, siginfo_t *, void *))k.handler)(sig, info, uc);
	else
		((void (*)(int))k.handler)(sig);
}

/*
 * The handler the kernel knows. A fault (si_code > 0: raised by the CPU
 * for this thread's own access, not sent) on one of the copy instructions
 * is the library's; everything else is the program's.
 */
static void on_fault(int sig, siginfo_t *info, void *ucv)
{
	int saved = errno;

	if (info->si_code > 0 && fix_copy(ucv)) {
		errno = saved;
		return;
	}
	errno = saved;
	deliver(sig, info, ucv);
}

static void take_over(int sig)
{
	struct shunt_ksigaction k = { 0 };

	/* What the program has now: inherited across exec (SIG_IGN) or set before we loaded. */
	shunt_syscall(SYS_rt_sigaction, sig, NULL, &k, KSIGSET_BYTES);
	disp_write(disp_of(sig), &k);
	install(sig, &k);
}

static void start(void)
{
	struct shunt_ksigaction k = { 0 };
	sigset_t old;

	set_begin(&old);
	take_over(SIGSEGV);
	take_over(SIGBUS);
	/* install() went through glibc's sigaction: the kernel now has its restorer. */
	shunt_syscall(SYS_rt_sigaction, SIGSEGV, NULL, &k, KSIGSET_BYTES);
	glibc_restorer = k.restorer;
	set_end(&old);
}

void shunt_fault_init(void)
{
	if (!atomic_load_explicit(&off, memory_order_relaxed))
		shunt_once(&init_once, start);
}

/* The end of the user half: 47-bit addresses, or 56-bit with five-level paging. */
static uintptr_t user_end(void)
{
	static _Atomic uintptr_t end;
	uintptr_t e = atomic_load_explicit(&end, memory_order_relaxed);
	void *p;

	if (e)
		return e;
	/* A hint above 47 bits is honoured only by a kernel with five-level paging. */
	e = ((uintptr_t)1 << 47) - 4096;
	p = mmap((void *)((uintptr_t)1 << 48), 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		 0);
	if (p != MAP_FAILED) {
		if ((uintptr_t)p > e)
			e = ((uintptr_t)1 << 56) - 4096;
		munmap(p, 4096);
	}
	atomic_store_explicit(&end, e, memory_order_relaxed);
	return e;
}

bool shunt_user_range_ok(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p, end = a + n;

	if (end < a)
		return false;
	return end <= ((uintptr_t)1 << 47) - 4096 || end <= user_end();
}

int shunt_iov_import(const struct iovec *uiov, int cnt, struct iovec fast[SHUNT_FAST_IOV],
		     struct iovec **out)
{
	struct iovec *iov = fast;
	size_t total = 0;

	*out = fast;
	if (cnt <= 0)
		return 0;
	if (cnt > SHUNT_FAST_IOV) {
		iov = malloc((size_t)cnt * sizeof(*iov));
		if (!iov)
			return -ENOMEM;
	}
	if (shunt_get_user(iov, uiov, (size_t)cnt * sizeof(*iov)))
		goto fault;
	for (int i = 0; i < cnt; i++) {
		if ((ssize_t)iov[i].iov_len < 0) {
			shunt_iov_free(iov, fast);
			return -EINVAL;
		}
	}
	for (int i = 0; i < cnt; i++) {
		if (!shunt_user_range_ok(iov[i].iov_base, iov[i].iov_len))
			goto fault;
		if (iov[i].iov_len > SHUNT_MAX_RW - total)
			iov[i].iov_len = SHUNT_MAX_RW - total;
		total += iov[i].iov_len;
	}
	*out = iov;
	return 0;
fault:
	shunt_iov_free(iov, fast);
	return -EFAULT;
}

void shunt_iov_free(struct iovec *iov, struct iovec fast[SHUNT_FAST_IOV])
{
	if (iov != fast)
		free(iov);
}
