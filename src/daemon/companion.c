// SPDX-License-Identifier: MIT
/*
 * Companion kernel sockets: with CAP_NET_ADMIN, shuntd gives both ends of a
 * circuit a real ESTABLISHED kernel TCP socket with the connection's
 * 4-tuple, made in TCP_REPAIR mode so that not one packet is sent. The
 * kernel then sees the connection as it would without shunt: the server's
 * port stays taken while the connection lives, `ss` lists it, and calls we
 * do not intercept meet a connected socket. Sequence numbers mirror each
 * other, so the pair could carry data through the kernel if ever released
 * from repair mode. Without the capability circuits simply go without.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "common/addr.h"
#include "common/log.h"
#include "daemon/shuntd.h"

static bool disabled;	/* the first EPERM turns companions off for good */

static int repair(int fd, int on)
{
	return setsockopt(fd, IPPROTO_TCP, TCP_REPAIR, &on, sizeof(on)) < 0 ? -errno : 0;
}

/* Set the next sequence number of one queue (TCP_SEND_QUEUE or TCP_RECV_QUEUE). */
static int queue_seq(int fd, int queue, uint32_t seq)
{
	if (setsockopt(fd, IPPROTO_TCP, TCP_REPAIR_QUEUE, &queue, sizeof(queue)) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_QUEUE_SEQ, &seq, sizeof(seq)) < 0)
		return -errno;
	return 0;
}

/* Put @fd in repair mode, give it @snd/@rcv sequence numbers and connect it to @peer. */
static int establish(int fd, uint32_t snd, uint32_t rcv, const struct shunt_wire_addr *peer)
{
	struct sockaddr_storage ss;
	socklen_t len = shunt_addr_from_wire(peer, &ss);
	int r = repair(fd, 1);

	if (r == -EPERM && !disabled) {
		disabled = true;
		shunt_info("no CAP_NET_ADMIN: circuits get no companion kernel sockets");
	}
	if (r == 0)
		r = queue_seq(fd, TCP_SEND_QUEUE, snd);
	if (r == 0)
		r = queue_seq(fd, TCP_RECV_QUEUE, rcv);
	if (r == 0 && connect(fd, (struct sockaddr *)&ss, len) < 0)
		r = -errno;
	return r;
}

int shuntd_companion_seqs(struct circuit *c)
{
	if (disabled)
		return -EPERM;
	if (getrandom(c->isn, sizeof(c->isn), 0) != sizeof(c->isn))
		return -EIO;
	return 0;
}

int shuntd_companion_connector(struct circuit *c, int fd)
{
	if (disabled)
		return -EPERM;
	/* The connector's socket is the application's own; shuntd holds a dup. */
	return establish(fd, c->isn[SHUNT_END_CONNECTOR], c->isn[SHUNT_END_ACCEPTOR],
			 &c->peer[SHUNT_END_CONNECTOR]);
}

int shuntd_companion_acceptor(struct circuit *c, int domain)
{
	struct sockaddr_storage ss;
	socklen_t len = shunt_addr_from_wire(&c->local[SHUNT_END_ACCEPTOR], &ss);
	int fd, r;

	if (disabled)
		return -EPERM;
	fd = socket(domain, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
	if (fd < 0)
		return -errno;
	/* In repair mode bind ignores the listener on that port (a forced reuse). */
	r = repair(fd, 1);
	if (r == 0 && bind(fd, (struct sockaddr *)&ss, len) < 0)
		r = -errno;
	if (r == 0)
		r = establish(fd, c->isn[SHUNT_END_ACCEPTOR], c->isn[SHUNT_END_CONNECTOR],
			      &c->peer[SHUNT_END_ACCEPTOR]);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}
