/* SPDX-License-Identifier: MIT */
/*
 * What shuntd needs of systemd's service protocols: the control socket
 * passed by socket activation (LISTEN_FDS) and readiness (NOTIFY_SOCKET).
 * Both are no-ops when not started by systemd.
 */
#ifndef SHUNTD_SYSTEMD_H
#define SHUNTD_SYSTEMD_H

#include <stddef.h>

/*
 * The listening control socket systemd passed us (shuntd.socket), made
 * non-blocking and close-on-exec, with its path in @path; LISTEN_PID,
 * LISTEN_FDS and LISTEN_FDNAMES are removed from the environment so no
 * child takes them for its own. Returns the fd; -ENOENT when nothing was
 * passed (start the normal way); another -errno when what was passed is not
 * one listening AF_UNIX SOCK_SEQPACKET socket bound to a path (an error
 * in the unit: do not start).
 */
int shuntd_systemd_listen_fd(char *path, size_t n);

/*
 * Send @state ("READY=1", "STOPPING=1", "STATUS=...") to the service
 * manager if NOTIFY_SOCKET names one. Returns 0 (also when there is none),
 * or -errno when the message could not be sent.
 */
int shuntd_systemd_notify(const char *state);

#endif
