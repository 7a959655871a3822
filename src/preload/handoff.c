// SPDX-License-Identifier: MIT
/* Handing sockets on (exec, posix_spawn, SCM_RIGHTS): the connection moves onto the kernel. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/syscall.h>

#include "common/sys.h"
#include "preload/fdlimit.h"
#include "preload/fdtable.h"
#include "preload/file.h"
#include "preload/fork.h"
#include "preload/handoff.h"
#include "preload/inherited.h"
#include "preload/ops.h"
#include "preload/sock.h"

/* Descriptors spawn file actions duplicate (adddup2 sources): they reach the child. */
enum { DUP2_MAX = 64 };
static pthread_mutex_t dup2_lock = PTHREAD_MUTEX_INITIALIZER;
static int dup2_fds[DUP2_MAX];
static int ndup2;

static void hand_on(int fd)
{
	struct shunt_sock *s = shunt_fdt_get(fd);

	if (!s)
		return;
	shunt_sock_downgrade(s, fd);
	shunt_sock_put(s);
}

static bool survives_exec(int fd)
{
	long flags = shunt_syscall(SYS_fcntl, fd, F_GETFD);

	return flags >= 0 && !(flags & FD_CLOEXEC);
}

void shunt_handoff_exec(void)
{
	size_t high = shunt_fdt_high();

	/* The new program inherits the program's own descriptor limit (fdlimit.c). */
	shunt_fdlimit_exec();

	for (size_t fd = 0; fd < high; fd++)
		if (shunt_fdt_is_ours((int)fd) && survives_exec((int)fd))
			hand_on((int)fd);
}

void shunt_handoff_note_dup2(int fd)
{
	pthread_mutex_lock(&dup2_lock);
	for (int i = 0; i < ndup2; i++)
		if (dup2_fds[i] == fd)
			goto out;
	/* Full: the oldest goes (it was most likely spawned already). */
	if (ndup2 == DUP2_MAX) {
		for (int i = 1; i < DUP2_MAX; i++)
			dup2_fds[i - 1] = dup2_fds[i];
		ndup2--;
	}
	dup2_fds[ndup2++] = fd;
out:
	pthread_mutex_unlock(&dup2_lock);
}

size_t shunt_handoff_dup2_sources(int *fds, size_t max)
{
	size_t n;

	pthread_mutex_lock(&dup2_lock);
	n = (size_t)ndup2 < max ? (size_t)ndup2 : max;
	for (size_t i = 0; i < n; i++)
		fds[i] = dup2_fds[i];
	pthread_mutex_unlock(&dup2_lock);
	return n;
}

void shunt_handoff_spawn(void)
{
	int fds[DUP2_MAX], n;

	pthread_mutex_lock(&dup2_lock);
	n = ndup2;
	for (int i = 0; i < n; i++)
		fds[i] = dup2_fds[i];
	pthread_mutex_unlock(&dup2_lock);
	for (int i = 0; i < n; i++)
		if (shunt_fdt_is_ours(fds[i]))
			hand_on(fds[i]);
	shunt_handoff_exec();
}

/* Call @fn for every descriptor in @msg's SCM_RIGHTS. */
static void each_passed_fd(const struct msghdr *msg, void (*fn)(int))
{
	if (!msg || !msg->msg_control || msg->msg_controllen < sizeof(struct cmsghdr))
		return;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR((struct msghdr *)msg, c)) {
		size_t n;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
			fn(fd);
		}
	}
}

static void hand_on_ours(int fd)
{
	if (shunt_fdt_is_ours(fd))
		hand_on(fd);
}

void shunt_handoff_scm(const struct msghdr *msg)
{
	each_passed_fd(msg, hand_on_ours);
}

/*
 * A descriptor the kernel just installed for a received file: whatever the
 * table still says about its number is stale (a close no preload saw, a
 * raw system call), and is dropped as that close would have dropped it,
 * before the new socket is looked at.
 */
static void received_one(int fd)
{
	struct shunt_file *f;

	if (fd < 0 || (size_t)fd >= shunt_fdt_size())
		return;
	shunt_fork_enter();
	f = shunt_fdt_take(fd);
	if (f)
		shunt_file_put(f);
	shunt_fork_leave();
	shunt_op_adopt_listener(fd);
}

void shunt_handoff_received(const struct msghdr *msg)
{
	each_passed_fd(msg, received_one);
}

void shunt_handoff_inherited(const struct shunt_inherited *socks, size_t nsocks)
{
	for (size_t i = 0; i < nsocks; i++)
		shunt_op_adopt_listener(socks[i].fd);
}
