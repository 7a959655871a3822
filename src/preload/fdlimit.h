/* SPDX-License-Identifier: MIT */
/*
 * RLIMIT_NOFILE, shared by the program and the library: the library's own
 * descriptors live in a reserve above the program's soft limit, so that
 * the program sees its native EMFILE behaviour (fdlimit.c says why and how).
 */
#ifndef SHUNT_FDLIMIT_H
#define SHUNT_FDLIMIT_H

#include <stdbool.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>

/*
 * Where the library's hidden descriptors go: the lowest number to give
 * F_DUPFD. Sets the reserve up on first use (raising the kernel's soft
 * limit when the hard limit allows).
 */
int shunt_fdlimit_base(void);

/*
 * F_DUPFD from shunt_fdlimit_base() found no free number: make the reserve
 * larger if the hard limit allows. 0 to try again, or -EMFILE.
 */
int shunt_fdlimit_grow(void);

/*
 * The kernel handed the program @fd (>= 0) in a call the library sees:
 * forget whatever the fd table held under that number (closed behind our
 * back), note how close the program is to its limit, and say whether the
 * program may have it: 0, or -EMFILE if it landed in the library's reserve,
 * where the kernel would have failed the call (the caller closes it, its
 * own way, and fails with EMFILE). A few loads when nothing is wrong.
 * This is the hook for descriptors made where no wrapper runs: io_uring's
 * OPENAT, ACCEPT, SOCKET completions (a refused one is closed and its
 * result made -EMFILE).
 */
int shunt_fdlimit_admit(int fd);

/*
 * The same for a descriptor the library itself just put in the fd table
 * (a socket, an accepted connection): no forgetting, the rest as admit.
 */
int shunt_fdlimit_note(int fd);

/*
 * A descriptor the library is about to return (a socket, an accepted
 * connection, an epoll instance) landed in the reserve (shunt_fdlimit_note
 * said so): release it as close() would. Returns -EMFILE, the call's result.
 */
int shunt_fdlimit_refuse(int fd);

/*
 * Before a call the kernel fails with EMFILE before it does anything
 * (open, accept, socketpair): -EMFILE if the program has fewer than @n free
 * descriptors below its limit, else 0. Only looks (two system calls per
 * descriptor) once the program has come near its limit; 0 otherwise.
 */
int shunt_fdlimit_room(unsigned n);

/*
 * Room for @n descriptors the library is about to receive (a control
 * reply): near the limit, take @n numbers in the reserve into @held (-1
 * when not needed), duplicates of the open descriptor @model, to be
 * released with shunt_fdlimit_release() right before the receive. With
 * @room, for a reply the library cannot do without, the room kept where
 * the program's range is shared (fdroom.c) is taken first. 0, or -EMFILE
 * when there is no room at all.
 */
int shunt_fdlimit_hold(int model, unsigned n, int *held, bool room);
void shunt_fdlimit_release(unsigned n, int *held);

/*
 * Whether @fd is in the library's reserve, where the program has no
 * descriptor: close() there is EBADF, close_range stops before it.
 */
bool shunt_fdlimit_reserved(int fd);

/*
 * Whether the library's descriptors share the program's range (no room
 * above it: the top window), and whether the program came near its limit.
 */
bool shunt_fdlimit_shares_range(void);
bool shunt_fdlimit_near(void);

/* The hidden descriptor probes duplicate, made on first use; -1 without one. */
int shunt_fdlimit_anchor(void);

/* The first number of the reserve, LONG_MAX when there is none above the program's limit. */
long shunt_fdlimit_reserve_start(void);

/* Range checks that follow the program's limit, not the raised one. -errno or 0. */
int shunt_fdlimit_check_target(int newfd);	/* dup2/dup3: EBADF at or above it */
int shunt_fdlimit_check_from(long from);	/* F_DUPFD: EINVAL at or above it */
int shunt_fdlimit_check_nfds(unsigned long n);	/* poll/ppoll: EINVAL above it */

/*
 * Descriptors the program received in @msg's SCM_RIGHTS (a successful
 * recvmsg): stale table entries forgotten, and those that landed in the
 * reserve closed and cut off with MSG_CTRUNC, as the kernel truncates what
 * it cannot install.
 */
void shunt_fdlimit_received(struct msghdr *msg);

/*
 * getrlimit/setrlimit/prlimit of RLIMIT_NOFILE for this process, as the
 * program sees it: 0 or -errno. @old and @new may be NULL.
 */
int shunt_fdlimit_prlimit(const struct rlimit *new, struct rlimit *old);

/* getrlimit and setrlimit: the same, with NULL an EFAULT as the kernel says. */
int shunt_fdlimit_get(struct rlimit *old);
int shunt_fdlimit_set(const struct rlimit *new);

/* The program's soft limit: sysconf(_SC_OPEN_MAX), getdtablesize(). */
long shunt_fdlimit_open_max(void);

/*
 * Whether @pid (prlimit's argument) names this process: 0, our pid, or the
 * calling thread's id.
 */
bool shunt_fdlimit_is_self(pid_t pid);

/*
 * Before exec, posix_spawn, system, popen: the kernel's soft limit goes back
 * to the program's own, which the new program inherits. The reserve comes
 * back when the library next needs it (after a failed exec).
 */
void shunt_fdlimit_exec(void);

#endif
