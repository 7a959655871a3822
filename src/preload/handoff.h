/* SPDX-License-Identifier: MIT */
/*
 * Handing sockets on: before a descriptor of a shunt connection reaches
 * code that cannot take its circuit over — a program exec'd over this one
 * without the library (exec.h decides), a process started with
 * posix_spawn, system or popen, a process it is passed to with SCM_RIGHTS —
 * the connection moves onto its kernel socket (shunt_sock_downgrade), so
 * whoever gets the descriptor finds an ordinary TCP socket with every byte
 * in order.
 */
#ifndef SHUNT_HANDOFF_H
#define SHUNT_HANDOFF_H

#include <spawn.h>
#include <sys/socket.h>

struct shunt_inherited;

/*
 * Every connection whose descriptor survives an exec (no FD_CLOEXEC): before
 * system and popen, and an exec in a child sharing our memory (exec.c).
 */
void shunt_handoff_exec(void);

/* Before posix_spawn: the same, and those the file actions duplicate. */
void shunt_handoff_spawn(void);

/* posix_spawn_file_actions_adddup2(@fd, ...): @fd will reach the child. */
void shunt_handoff_note_dup2(int fd);

/* The descriptors spawn file actions will duplicate (at most @max), into @fds. */
size_t shunt_handoff_dup2_sources(int *fds, size_t max);

/* Before sendmsg: the connections passed in @msg's SCM_RIGHTS. */
void shunt_handoff_scm(const struct msghdr *msg);

/*
 * And the other way: descriptors that arrive from outside the library (in
 * SCM_RIGHTS, or inherited when this program was exec'd). A TCP listening
 * socket among them is registered with shuntd — as one more holder of the
 * registration it may already have — so its shunt clients keep coming.
 */
void shunt_handoff_received(const struct msghdr *msg);
void shunt_handoff_inherited(const struct shunt_inherited *socks, size_t nsocks);

#endif
