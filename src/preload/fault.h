/* SPDX-License-Identifier: MIT */
/*
 * Memory the program passes in (buffers, iovec arrays, msghdrs, pollfd and
 * epoll_event arrays, sigmasks, addresses) is read and written only through
 * these copies. A bad pointer makes them fail with EFAULT where the kernel
 * would, instead of killing the program: a SIGSEGV or SIGBUS raised inside
 * one of them resumes the copy with a short count (fault.c). Every other
 * SIGSEGV and SIGBUS reaches the program's own disposition as if the
 * library were not there (the library's handler stands in for it, and the
 * sigaction family shows the program what it set).
 */
#ifndef SHUNT_PRELOAD_FAULT_H
#define SHUNT_PRELOAD_FAULT_H

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/*
 * Copy @n bytes from @src to @dst, either of which may be the program's:
 * 0 once every byte is copied, nonzero when a fault stopped the copy (some
 * bytes may have been copied, which ones is not said). No system call. The
 * _nt variant writes with streaming stores (into a ring, whose publisher
 * fences them: common/copy.h).
 */
size_t shunt_ucopy(void *dst, const void *src, size_t n);
size_t shunt_ucopy_nt(void *dst, const void *src, size_t n);

/* copy_from_user / copy_to_user: 0, or -EFAULT. */
static inline int shunt_get_user(void *dst, const void *usrc, size_t n)
{
	return shunt_ucopy(dst, usrc, n) ? -EFAULT : 0;
}

static inline int shunt_put_user(void *udst, const void *src, size_t n)
{
	return shunt_ucopy(udst, src, n) ? -EFAULT : 0;
}

/*
 * The kernel's access_ok: whether [@p, @p + @n) lies in the user half of
 * the address space (not whether it is mapped). Calls that check it before
 * anything else fail with EFAULT at once for a pointer outside it.
 */
bool shunt_user_range_ok(const void *p, size_t n);

/* The kernel caps one read or write at this many bytes (MAX_RW_COUNT). */
enum { SHUNT_MAX_RW = 0x7ffff000 };

/* The kernel's UIO_FASTIOV: iovec arrays up to this size need no allocation. */
enum { SHUNT_FAST_IOV = 8 };

/*
 * import_iovec: copy the program's array of @cnt (0..IOV_MAX) iovecs into
 * @fast, or into an allocation when longer (returned in *@out; free it
 * with shunt_iov_free), with the kernel's checks: EFAULT for an array it
 * cannot read or a buffer outside the user half, EINVAL for a negative
 * length; the lengths are cut to SHUNT_MAX_RW in total.
 */
int shunt_iov_import(const struct iovec *uiov, int cnt, struct iovec fast[SHUNT_FAST_IOV],
		     struct iovec **out);
void shunt_iov_free(struct iovec *iov, struct iovec fast[SHUNT_FAST_IOV]);

/*
 * Take over SIGSEGV and SIGBUS: the program's dispositions (inherited, or
 * set earlier by a library loaded before us) are recorded as its own and
 * the library's handler stands in. Once, from the library's start.
 */
/*
 * The process began under a seccomp filter the library cannot see (exec'd
 * into a sandbox): it must not install handlers the filter may forbid, so
 * it keeps none. The program's dispositions are then its own, untouched,
 * and a bad pointer on a socket of the library faults (which, the library
 * being off there, only the C library's own calls meet).
 */
void shunt_fault_disable(void);
void shunt_fault_init(void);

/* Whether @sig is one the library stands in for (SIGSEGV, SIGBUS). */
bool shunt_fault_sig(int sig);

/*
 * The kernel's rt_sigaction for a signal of shunt_fault_sig(), applied to
 * the program's recorded disposition: @act and @oact in the kernel's
 * layout, already in the library's memory. 0 or -EINVAL.
 */
struct shunt_ksigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};
int shunt_fault_kaction(int sig, const struct shunt_ksigaction *act,
			struct shunt_ksigaction *oact);

/* The restorer glibc's sigaction hands the kernel (its __restore_rt). */
void *shunt_fault_restorer(void);

/*
 * syscall(SYS_rt_sigaction, ...) for a signal of shunt_fault_sig(), with the
 * kernel's checks and copies: the result, or -1 with errno set.
 */
long shunt_fault_rt_sigaction(long sig, long act, long oact, long sigsetsize);

#endif
