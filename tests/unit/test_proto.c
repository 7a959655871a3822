// SPDX-License-Identifier: MIT
/* Control messages: what shunt_proto_check accepts and refuses, and framing with fds. */
#include <errno.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "common/proto.h"

static void t_well_formed_requests_pass(void **state)
{
	struct shunt_msg_connect m;
	struct shunt_msg_hello h;

	(void)state;
	shunt_proto_init(&m, SHUNT_MSG_CONNECT, sizeof(m), 3);
	assert_int_equal(shunt_proto_check(&m, sizeof(m)), 0);
	shunt_proto_init(&h, SHUNT_MSG_HELLO, sizeof(h), 1);
	assert_int_equal(shunt_proto_check(&h, sizeof(h)), 0);
}

static void t_malformed_messages_refused(void **state)
{
	struct shunt_msg_connect m;
	char big[SHUNT_MSG_MAX + 8] = { 0 };

	(void)state;
	shunt_proto_init(&m, SHUNT_MSG_CONNECT, sizeof(m), 3);
	/* Length field disagreeing with the record, or with the type's size. */
	assert_int_equal(shunt_proto_check(&m, sizeof(m) - 1), -EPROTO);
	m.h.len = sizeof(m) + 4;
	assert_int_equal(shunt_proto_check(&m, sizeof(m) + 4), -EPROTO);
	/* Another version. */
	shunt_proto_init(&m, SHUNT_MSG_CONNECT, sizeof(m), 3);
	m.h.version = SHUNT_PROTO_VERSION + 1;
	assert_int_equal(shunt_proto_check(&m, sizeof(m)), -EPROTO);
	/* Unknown types. */
	shunt_proto_init(&m, SHUNT_MSG_CONNECT, sizeof(m), 3);
	m.h.type = 0;
	assert_int_equal(shunt_proto_check(&m, sizeof(m)), -EPROTO);
	m.h.type = SHUNT_MSG_TYPE_MAX + 1;
	assert_int_equal(shunt_proto_check(&m, sizeof(m)), -EPROTO);
	/* A request may not carry a status. */
	shunt_proto_init(&m, SHUNT_MSG_CONNECT, sizeof(m), 3);
	m.h.status = 5;
	assert_int_equal(shunt_proto_check(&m, sizeof(m)), -EPROTO);
	/* Too short for a header, too long for any message. */
	assert_int_equal(shunt_proto_check(&m, 4), -EPROTO);
	assert_int_equal(shunt_proto_check(big, sizeof(big)), -EPROTO);
}

static void t_error_reply_is_bare_header(void **state)
{
	struct shunt_msg_hdr h;

	(void)state;
	shunt_proto_init(&h, SHUNT_MSG_CONNECT | SHUNT_MSG_REPLY, sizeof(h), 1);
	h.status = SHUNT_USE_KERNEL;
	assert_int_equal(shunt_proto_check(&h, sizeof(h)), 0);
	/* A success reply must be the full circuit message. */
	h.status = SHUNT_OK;
	assert_int_equal(shunt_proto_check(&h, sizeof(h)), -EPROTO);
}

static void t_descriptors_travel_with_the_message(void **state)
{
	struct shunt_msg_hello m, *r;
	_Alignas(8) char buf[SHUNT_MSG_MAX];
	int sv[2], fds[SHUNT_MSG_MAX_FDS], p[2];
	unsigned n = 0;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	assert_int_equal(pipe(p), 0);
	shunt_proto_init(&m, SHUNT_MSG_HELLO, sizeof(m), 9);
	assert_int_equal(shunt_proto_send(sv[0], &m, p, 2), 0);
	assert_int_equal(shunt_proto_recv(sv[1], buf, fds, &n, 0), sizeof(m));
	r = (struct shunt_msg_hello *)buf;
	assert_int_equal(r->h.seq, 9);
	assert_int_equal(n, 2);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(read(fds[0], buf, 1), 1);
	close(fds[0]);
	close(fds[1]);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

static void t_too_many_descriptors_refused(void **state)
{
	int sv[2], fds[SHUNT_MSG_MAX_FDS], many[SHUNT_MSG_MAX_FDS + 1];
	_Alignas(8) char buf[SHUNT_MSG_MAX];
	struct msghdr mh = { 0 };
	struct iovec iov;
	union {
		char b[CMSG_SPACE(sizeof(many))];
		struct cmsghdr align;
	} ctl;
	struct shunt_msg_hello m;
	unsigned n = 99;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	for (unsigned i = 0; i < SHUNT_MSG_MAX_FDS + 1; i++)
		many[i] = dup(0);
	shunt_proto_init(&m, SHUNT_MSG_HELLO, sizeof(m), 1);
	iov.iov_base = &m;
	iov.iov_len = sizeof(m);
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = ctl.b;
	mh.msg_controllen = sizeof(ctl.b);
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(many));
	memcpy(CMSG_DATA(c), many, sizeof(many));
	assert_int_equal(sendmsg(sv[0], &mh, 0), sizeof(m));
	/* Refused, and nothing received is left open. */
	assert_int_equal(shunt_proto_recv(sv[1], buf, fds, &n, 0), -EPROTO);
	assert_int_equal(n, 0);
	for (unsigned i = 0; i < SHUNT_MSG_MAX_FDS + 1; i++)
		close(many[i]);
	close(sv[0]);
	close(sv[1]);
}

/*
 * Regression (found by tests/fuzz/fuzz_proto): an empty record carrying a
 * descriptor was returned as the end of the stream, so shuntd dropped the
 * session and never closed the descriptor: any client could leak shuntd's
 * descriptors, one record at a time.
 */
static void t_empty_record_with_descriptors_refused(void **state)
{
	int sv[2], fds[SHUNT_MSG_MAX_FDS], one = dup(0), probe;
	_Alignas(8) char buf[SHUNT_MSG_MAX];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct msghdr mh = { .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	unsigned n = 99;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &one, sizeof(int));
	assert_int_equal(sendmsg(sv[0], &mh, 0), 0);
	close(one);
	/* Not the end of the stream: refused, and the descriptor closed. */
	assert_int_equal(shunt_proto_recv(sv[1], buf, fds, &n, 0), -EPROTO);
	assert_int_equal(n, 0);
	probe = dup(0);
	assert_int_equal(probe, one);	/* the lowest free number again: nothing leaked */
	close(probe);
	/* The end of the stream still reads as 0. */
	close(sv[0]);
	assert_int_equal(shunt_proto_recv(sv[1], buf, fds, &n, 0), 0);
	assert_int_equal(n, 0);
	close(sv[1]);
}

/*
 * A process out of descriptors receives a reply whose descriptors the
 * kernel cannot all install (MSG_CTRUNC): shuntd's receive refuses it, the
 * library's keeps the message and what arrived, and says it was cut short,
 * so that its session survives.
 */
static void t_truncated_descriptors_reported(void **state)
{
	struct shunt_msg_hello m;
	_Alignas(8) char buf[SHUNT_MSG_MAX];
	int sv[2], fds[SHUNT_MSG_MAX_FDS], p[2], fill[64], nfill = 0, fd;
	struct rlimit old, rl;
	unsigned n = 99;
	bool cut = false;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	assert_int_equal(pipe(p), 0);
	shunt_proto_init(&m, SHUNT_MSG_HELLO, sizeof(m), 4);
	assert_int_equal(shunt_proto_send(sv[0], &m, p, 2), 0);
	assert_int_equal(shunt_proto_send(sv[0], &m, p, 2), 0);
	/* Room for exactly one more descriptor. */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	while ((fd = dup(0)) >= 0 && fd < 60 && nfill < 64)
		fill[nfill++] = fd;
	if (fd >= 0)
		close(fd);
	rl = old;
	rl.rlim_cur = (rlim_t)fill[nfill - 1] + 2;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(shunt_proto_recv(sv[1], buf, fds, &n, 0), -EPROTO);
	assert_int_equal(n, 0);
	assert_int_equal(shunt_proto_recv_reply(sv[1], buf, fds, &n, &cut), sizeof(m));
	assert_true(cut);
	assert_int_equal(n, 1);
	assert_int_equal(((struct shunt_msg_hello *)buf)->h.seq, 4);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	close(fds[0]);
	while (nfill)
		close(fill[--nfill]);
	/* Nothing cut: the same receive says so. */
	assert_int_equal(shunt_proto_send(sv[0], &m, p, 2), 0);
	assert_int_equal(shunt_proto_recv_reply(sv[1], buf, fds, &n, &cut), sizeof(m));
	assert_false(cut);
	assert_int_equal(n, 2);
	close(fds[0]);
	close(fds[1]);
	close(p[0]);
	close(p[1]);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(t_well_formed_requests_pass),
		cmocka_unit_test(t_malformed_messages_refused),
		cmocka_unit_test(t_error_reply_is_bare_header),
		cmocka_unit_test(t_descriptors_travel_with_the_message),
		cmocka_unit_test(t_too_many_descriptors_refused),
		cmocka_unit_test(t_empty_record_with_descriptors_refused),
		cmocka_unit_test(t_truncated_descriptors_reported),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
