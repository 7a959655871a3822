// SPDX-License-Identifier: MIT
/*
 * Room for the library where its descriptors share the program's range.
 *
 * When the hard limit leaves no room above the program's soft limit, the
 * library's descriptors take the top of the program's range (fdlimit.c's
 * window). The window is shared: once the program has used every lower
 * number its own descriptors land there too, and a program that opens
 * descriptors until EMFILE leaves the library none. A reply from shuntd
 * then has nowhere to land. The accept of a connection from a peer process
 * this server has no channel with yet takes one carrying five descriptors
 * (a channel's memfd and bell, a link's three), and it failed with EMFILE
 * where the kernel needs only the one free number it returns. A server
 * that keeps one descriptor in reserve for that moment (Twisted; libuv's
 * EMFILE trick: close it, accept and close the connection, open it again)
 * met EMFILE again at once, and retried without end.
 *
 * So once the program comes near its limit in that mode, the library keeps
 * SHUNT_FDROOM free numbers of the window occupied (duplicates of its
 * anchor, hidden like its other descriptors): the program meets EMFILE that
 * many descriptors earlier, as it does for every descriptor the library
 * holds there (docs/differences.md), and a reply always has somewhere to
 * land. The numbers are let go right before a reply is received
 * (shunt_fdroom_take, shunt_fdroom_held, then shunt_fdlimit_release). A
 * descriptor of the reply may still land on a number the program had free,
 * lower than the room's: after the receive (shunt_fdroom_received) it is
 * moved into a number of the room the reply left free, which gives the
 * program its number back; what sits on the room then stays where it is
 * when hidden (shunt_fdroom_claim), and the room's numbers still free are
 * kept again. So the numbers the program had free are free again once the
 * reply is put away, as they would be without the library: the connection
 * an accept makes lands on the number the kernel's would. The room grows
 * back from the library's own descriptors as they are closed
 * (shunt_fdroom_keep), never from the program's free numbers but at the
 * start, when the program comes near its limit (shunt_fdroom_stand).
 *
 * Only replies that cannot be done without take the room (an accept's:
 * the connection already waits in shared memory; a session's: a fork child
 * claims its inherited connections with it). A connect that finds no room
 * goes through the kernel, as before.
 *
 * Nothing here waits for its lock (a try, or nothing done): a thread that
 * holds it may be the one a signal handler interrupted, or may not exist
 * in a fork child. Losing a try leaves fewer numbers kept for a moment, as
 * before this existed.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/fdlimit.h"
#include "preload/fdroom.h"
#include "preload/fdtable.h"
#include "preload/util.h"

static pthread_mutex_t room_lock = PTHREAD_MUTEX_INITIALIZER;
static int kept[SHUNT_FDROOM];		/* under room_lock */
static _Atomic unsigned nkept;		/* written under room_lock */
static int released[SHUNT_FDROOM];	/* under room_lock: let go for the reply coming */
static unsigned nreleased;		/* written under room_lock and the control lock */
static int landed[SHUNT_FDROOM];	/* under room_lock: the room's, holding a reply's descriptor */
static _Atomic unsigned nlanded;	/* written under room_lock */

/*
 * Close kept number @fd, unless the program put a file of its own there
 * (dup2 onto it: the fd table no longer marks it ours), which stays. Not
 * shunt_close_hidden, which would keep it as room again.
 */
static void let_go(int fd)
{
	if (shunt_fdt_is_hidden(fd)) {
		shunt_fdt_mark_hidden(fd, 0);
		shunt_close_internal(fd);
	}
}

static unsigned count(void)
{
	return atomic_load_explicit(&nkept, memory_order_relaxed);
}

static void set_count(unsigned n)
{
	atomic_store_explicit(&nkept, n, memory_order_relaxed);
}

void shunt_fdroom_stand(void)
{
	bool wanted = shunt_fdlimit_shares_range() && shunt_fdlimit_near();
	int a, base;

	if (wanted ? count() == SHUNT_FDROOM : count() == 0)
		return;
	/* Outside the lock: making the anchor hides a descriptor, which looks at the room. */
	a = wanted ? shunt_fdlimit_anchor() : -1;
	base = wanted ? shunt_fdlimit_base() : -1;
	if (pthread_mutex_trylock(&room_lock) != 0)
		return;
	if (a < 0 || base < 0) {
		/* The program raised its limit (a reserve above now), or no anchor. */
		for (unsigned n = count(); n > 0; set_count(--n))
			let_go(kept[n - 1]);
	}
	for (unsigned n = count(); a >= 0 && base >= 0 && n < SHUNT_FDROOM; set_count(++n)) {
		int fd = (int)shunt_syscall(SYS_fcntl, a, F_DUPFD_CLOEXEC, base);

		if (fd < 0)
			break;
		shunt_fdt_mark_hidden(fd, 1);
		kept[n] = fd;
	}
	pthread_mutex_unlock(&room_lock);
}

unsigned shunt_fdroom_take(int *held, unsigned n)
{
	unsigned got = 0;

	if (count() == 0 || pthread_mutex_trylock(&room_lock) != 0)
		return 0;
	for (unsigned k = count(); k > 0 && got < n; set_count(--k)) {
		int fd = kept[k - 1];

		if (shunt_fdt_is_hidden(fd))
			held[got++] = fd;
	}
	pthread_mutex_unlock(&room_lock);
	return got;
}

void shunt_fdroom_held(const int *held, unsigned n)
{
	if (!shunt_fdlimit_shares_range() || pthread_mutex_trylock(&room_lock) != 0)
		return;
	nreleased = 0;
	atomic_store_explicit(&nlanded, 0, memory_order_relaxed);
	for (unsigned i = 0; i < n && nreleased < SHUNT_FDROOM; i++)
		if (held[i] >= 0)
			released[nreleased++] = held[i];
	pthread_mutex_unlock(&room_lock);
}

static bool among(int fd, const int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] == fd)
			return true;
	return false;
}

/* A released number that no descriptor of the reply landed on, still free: @fd moved there. */
static int move_into_room(int fd, const int *fds, unsigned n)
{
	for (unsigned i = 0; i < nreleased; i++) {
		int r = released[i], got;

		if (among(r, fds, n))
			continue;
		got = (int)shunt_syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, r);
		if (got == r) {
			shunt_close_internal(fd);
			return r;
		}
		/* Taken since (the lowest free from there is another): not the room's now. */
		if (got >= 0)
			shunt_close_internal(got);
	}
	return fd;
}

void shunt_fdroom_received(int *fds, unsigned n)
{
	unsigned nland = 0;
	int a;

	if (nreleased == 0)
		return;
	a = shunt_fdlimit_anchor();
	if (a < 0 || pthread_mutex_trylock(&room_lock) != 0)
		return;
	/*
	 * What landed on a number the program had free (lower than the room)
	 * goes into the room, and gives the number back.
	 */
	for (unsigned i = 0; i < n; i++)
		if (!among(fds[i], released, nreleased))
			fds[i] = move_into_room(fds[i], fds, n);
	for (unsigned i = 0; i < nreleased; i++) {
		int r = released[i], fd;
		unsigned k = count();

		if (among(r, fds, n)) {
			landed[nland++] = r;
			continue;
		}
		if (k == SHUNT_FDROOM)
			continue;
		/* Still free, and not the program's since: the lowest free from there is itself. */
		fd = (int)shunt_syscall(SYS_fcntl, a, F_DUPFD_CLOEXEC, r);
		if (fd == r) {
			shunt_fdt_mark_hidden(fd, 1);
			kept[k] = fd;
			set_count(k + 1);
		} else if (fd >= 0) {
			shunt_close_internal(fd);
		}
	}
	atomic_store_explicit(&nlanded, nland, memory_order_relaxed);
	nreleased = 0;
	pthread_mutex_unlock(&room_lock);
}

bool shunt_fdroom_return(int fd)
{
	if (!shunt_fdroom_claim(fd))
		return false;
	if (!shunt_fdroom_keep(fd))
		return false;
	shunt_fdt_mark_hidden(fd, 1);
	return true;
}

bool shunt_fdroom_claim(int fd)
{
	bool mine = false;

	if (atomic_load_explicit(&nlanded, memory_order_relaxed) == 0 ||
	    pthread_mutex_trylock(&room_lock) != 0)
		return false;
	for (unsigned i = atomic_load_explicit(&nlanded, memory_order_relaxed); i > 0 && !mine; i--) {
		if (landed[i - 1] != fd)
			continue;
		mine = true;
		landed[i - 1] = landed[atomic_load_explicit(&nlanded, memory_order_relaxed) - 1];
		atomic_fetch_sub_explicit(&nlanded, 1, memory_order_relaxed);
	}
	pthread_mutex_unlock(&room_lock);
	return mine;
}

bool shunt_fdroom_keep(int fd)
{
	bool kept_it = false;
	unsigned k = count();
	int a;

	if (k == SHUNT_FDROOM || !shunt_fdlimit_shares_range() || !shunt_fdlimit_near())
		return false;
	a = shunt_fdlimit_anchor();
	if (a < 0 || pthread_mutex_trylock(&room_lock) != 0)
		return false;
	k = count();
	/* In place, in one step: the number is never free for the program to take. */
	if (k < SHUNT_FDROOM && shunt_syscall(SYS_dup3, a, fd, O_CLOEXEC) == fd) {
		kept[k] = fd;
		set_count(k + 1);
		kept_it = true;
	}
	pthread_mutex_unlock(&room_lock);
	return kept_it;
}
