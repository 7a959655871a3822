/* SPDX-License-Identifier: MIT */
/*
 * Why a socket did not get shared memory, told to the person running the
 * program: the first time in a process that something which should have
 * worked did not (no shuntd, shuntd refused the socket, a circuit that
 * could not be mapped), one line at the default log level with the reason
 * and what fixes it; every later time at SHUNT_LOG=info. Ordinary reasons
 * (the peer is not under shunt, the policy) are never warned about.
 */
#ifndef SHUNT_EXPLAIN_H
#define SHUNT_EXPLAIN_H

/*
 * A socket stays on the kernel because of @err (-errno from shuntd or the
 * library; -ENOTCONN: no shuntd answers). @what says which socket and call,
 * e.g. "listener on fd 3" or "connect on fd 5".
 */
void shunt_explain_fallback(const char *what, int err);

#endif
