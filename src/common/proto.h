/* SPDX-License-Identifier: MIT */
/*
 * Framing of control messages: one message per SOCK_SEQPACKET record, with
 * descriptors in SCM_RIGHTS, and the strict check of everything received.
 */
#ifndef SHUNT_COMMON_PROTO_H
#define SHUNT_COMMON_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shunt/proto.h"

/* Fill in the header of a @len-byte message. */
void shunt_proto_init(void *msg, uint16_t type, size_t len, uint32_t seq);

/*
 * Send one message and @nfds descriptors (at most SHUNT_MSG_MAX_FDS). Never
 * raises SIGPIPE; retries EINTR. Returns 0 or -errno.
 */
int shunt_proto_send(int sock, const void *msg, const int *fds, unsigned nfds);

/*
 * Receive one message into @buf (SHUNT_MSG_MAX bytes) and its descriptors
 * into @fds (SHUNT_MSG_MAX_FDS slots, received close-on-exec). Retries EINTR
 * unless @flags has MSG_DONTWAIT. Returns the length (0 at end of stream) or
 * -errno; a truncated record or descriptor list, or an empty record with
 * descriptors, is -EPROTO with every received descriptor closed. The
 * message is not yet checked.
 */
ssize_t shunt_proto_recv(int sock, void *buf, int *fds, unsigned *nfds, int flags);

/*
 * The same, for a reply the library receives for its process: descriptors
 * the kernel could not install (the process is out of them: MSG_CTRUNC)
 * are not an error. The message comes back with those that did arrive and
 * *@truncated set, so that the session survives and the caller can undo
 * what the reply gave. A truncated message body is still -EPROTO.
 */
ssize_t shunt_proto_recv_reply(int sock, void *buf, int *fds, unsigned *nfds, bool *truncated);

/*
 * Check a received message: its version, a known type, and a length equal
 * to the fixed size of that type (a reply with a non-zero status is a bare
 * header). Returns 0 or -EPROTO.
 */
int shunt_proto_check(const void *buf, size_t len);

/* Fixed size of messages of @type (with or without SHUNT_MSG_REPLY), or 0. */
size_t shunt_proto_size(uint16_t type);

/* A request type's row of SHUNT_REQUESTS (include/shunt/proto.h). */
struct shunt_request_kind {
	size_t size;
	size_t reply_size;
	unsigned fds;
	enum shunt_answer answered;
};

/* The row of request type @type, or NULL: not a request (a reply, a record, unknown). */
const struct shunt_request_kind *shunt_request_kind(uint16_t type);

/* The name of an enum shunt_fallback reason, as metrics and `shunt status` show it. */
const char *shunt_fallback_name(unsigned why);

/* Close @n descriptors, e.g. ones received with a message that is refused. */
void shunt_proto_close_fds(const int *fds, unsigned n);

#endif
