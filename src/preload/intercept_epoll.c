// SPDX-License-Identifier: MIT
/*
 * Exported wrappers of the epoll calls. An instance the library did not
 * create (made before it was loaded, or when it is disabled) goes to the C
 * library untouched.
 */
#include <errno.h>
#include <limits.h>
#include <sys/epoll.h>

#include "preload/epoll.h"
#include "preload/fdlimit.h"
#include "preload/fault.h"
#include "preload/fdtable.h"
#include "preload/init.h"
#include "preload/libc.h"
#include "preload/util.h"

/* A new instance, held to the program's descriptor limit (fdlimit.c). */
static int create(int flags)
{
	int saved = errno, r = shunt_epoll_create(flags);

	if (r >= 0 && shunt_fdlimit_note(r) < 0)
		r = shunt_fdlimit_refuse(r);
	return (int)shunt_ret(r, saved);
}

SHUNT_EXPORT int epoll_create1(int flags)
{
	shunt_ensure_init();
	return create(flags);
}

SHUNT_EXPORT int epoll_create(int size)
{
	shunt_ensure_init();
	if (size <= 0)
		return SHUNT_LIBC(epoll_create)(size);	/* EINVAL, from the kernel */
	return create(0);
}

SHUNT_EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
	struct shunt_epoll *ep;
	int saved = errno, r;
	struct epoll_event kev;

	shunt_ensure_init();
	/*
	 * A registration is a slow path: make sure neither descriptor is a
	 * stale entry, closed behind our back and its number reused.
	 */
	if (op == EPOLL_CTL_ADD) {
		struct shunt_file *f = shunt_fdt_get_file_checked(fd);

		if (f)
			shunt_file_put(f);
		ep = shunt_fdt_get_epoll_checked(epfd);
	} else {
		ep = shunt_fdt_get_epoll(epfd);
	}
	if (!ep)
		return SHUNT_LIBC(epoll_ctl)(epfd, op, fd, ev);
	/* The kernel reads the event before anything else, for every op but DEL. */
	if (op != EPOLL_CTL_DEL && shunt_get_user(&kev, ev, sizeof(kev)))
		r = -EFAULT;
	else
		r = shunt_epoll_ctl(ep, epfd, op, fd, op == EPOLL_CTL_DEL ? ev : &kev);
	shunt_file_put(&ep->f);
	return (int)shunt_ret(r, saved);
}

/* Wait on our instance @ep (a reference held, dropped here); @mask is the library's copy. */
static int do_wait(struct shunt_epoll *ep, int epfd, struct epoll_event *events, int max,
		   int64_t timeout_ns, const sigset_t *mask)
{
	int saved = errno, r;

	r = shunt_epoll_wait(ep, epfd, events, max, timeout_ns, mask);
	shunt_file_put(&ep->f);
	return (int)shunt_ret(r, saved);
}

/*
 * Our instance behind @epfd, once the program's sigmask is read into @kmask
 * (the kernel reads it before anything else): NULL when the instance is
 * not ours, or the mask cannot be read (the kernel then answers EFAULT).
 */
static struct shunt_epoll *epoll_with_mask(int epfd, const sigset_t *mask, sigset_t *kmask)
{
	struct shunt_epoll *ep = shunt_fdt_get_epoll(epfd);

	sigemptyset(kmask);
	if (ep && mask && shunt_get_user(kmask, mask, _NSIG / 8)) {
		shunt_file_put(&ep->f);
		return NULL;
	}
	return ep;
}

SHUNT_EXPORT int epoll_wait(int epfd, struct epoll_event *events, int max, int timeout)
{
	struct shunt_epoll *ep;

	shunt_ensure_init();
	ep = shunt_fdt_get_epoll(epfd);
	if (!ep)
		return SHUNT_LIBC(epoll_wait)(epfd, events, max, timeout);
	return do_wait(ep, epfd, events, max, timeout < 0 ? -1 : timeout * 1000000LL, NULL);
}

SHUNT_EXPORT int epoll_pwait(int epfd, struct epoll_event *events, int max, int timeout,
			     const sigset_t *mask)
{
	struct shunt_epoll *ep;
	sigset_t kmask;

	shunt_ensure_init();
	ep = epoll_with_mask(epfd, mask, &kmask);
	if (!ep)
		return SHUNT_LIBC(epoll_pwait)(epfd, events, max, timeout, mask);
	return do_wait(ep, epfd, events, max, timeout < 0 ? -1 : timeout * 1000000LL,
		       mask ? &kmask : NULL);
}

SHUNT_EXPORT int epoll_pwait2(int epfd, struct epoll_event *events, int max,
			      const struct timespec *ts, const sigset_t *mask)
{
	struct shunt_epoll *ep;
	struct timespec kts;
	sigset_t kmask;

	shunt_ensure_init();
	/* The timeout is read first, then checked: the kernel answers for a bad one. */
	if (ts && (shunt_get_user(&kts, ts, sizeof(kts)) || kts.tv_sec < 0 || kts.tv_nsec < 0 ||
		   kts.tv_nsec >= 1000000000))
		return SHUNT_LIBC(epoll_pwait2)(epfd, events, max, ts, mask);
	ep = epoll_with_mask(epfd, mask, &kmask);
	if (!ep)
		return SHUNT_LIBC(epoll_pwait2)(epfd, events, max, ts, mask);
	return do_wait(ep, epfd, events, max, ts ? kts.tv_sec * 1000000000LL + kts.tv_nsec : -1,
		       mask ? &kmask : NULL);
}
