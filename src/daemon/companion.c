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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdbool.h>
#include <string.h>
#include <sys/random.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "common/addr.h"
#include "common/log.h"
#include "daemon/shuntd.h"

static bool disabled;	/* the first EPERM turns companions off for good */

static uint64_t inode_of(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

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

/*
 * What a loopback handshake would have agreed on, so that a connection
 * released from repair mode (a downgrade) runs as fast as one the kernel
 * made: loopback's MSS, window scaling, SACK.
 */
static int set_options(int fd, int domain)
{
	struct tcp_repair_opt opts[] = {
		{ TCPOPT_MAXSEG, domain == AF_INET6 ? 65476 : 65483 },
		{ TCPOPT_WINDOW, 7 | (7 << 16) },
		{ TCPOPT_SACK_PERMITTED, 0 },
	};

	if (setsockopt(fd, IPPROTO_TCP, TCP_REPAIR_OPTIONS, opts, sizeof(opts)) < 0)
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
	if (r == 0)
		r = set_options(fd, ss.ss_family);
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
	socklen_t len = sizeof(c->connector_reuse);
	int r;

	if (disabled)
		return -EPERM;
	/* Repair mode forces address reuse, and leaving it clears it: keep the program's. */
	if (getsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &c->connector_reuse, &len) < 0)
		c->connector_reuse = 0;
	/* The connector's socket is the application's own; shuntd keeps its copy. */
	r = establish(fd, c->isn[SHUNT_END_CONNECTOR], c->isn[SHUNT_END_ACCEPTOR],
		      &c->peer[SHUNT_END_CONNECTOR]);
	if (r == 0)
		c->kino[SHUNT_END_CONNECTOR] = inode_of(fd);
	return r;
}

int shuntd_companion_undo_connector(struct circuit *c, int fd)
{
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };
	int err, off = TCP_REPAIR_OFF_NO_WP;
	socklen_t len = sizeof(err);

	/* Only the socket shuntd made a companion: the client sends it, and could lie. */
	if (!c->companion || !c->kino[SHUNT_END_CONNECTOR] ||
	    inode_of(fd) != c->kino[SHUNT_END_CONNECTOR])
		return -EINVAL;
	/*
	 * In repair mode tcp_disconnect sends nothing; it leaves the socket
	 * TCP_CLOSE with its autobound port released (an address the client
	 * bound stays, as the kernel's own connect would have chosen it) and
	 * ECONNABORTED pending, which SO_ERROR takes away.
	 */
	if (connect(fd, &unspec, sizeof(unspec)) < 0)
		return -errno;
	getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
	if (setsockopt(fd, IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off)) < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &c->connector_reuse, sizeof(c->connector_reuse));
	c->kino[SHUNT_END_CONNECTOR] = 0;
	return 0;
}

/*
 * A new kernel socket for end @end of @c, in the family of @domain (the
 * listener's: a dual-stack one reports v4-mapped addresses), bound to the
 * end's address and ESTABLISHED with its sequence numbers, or -errno.
 */
static int make_half(struct circuit *c, unsigned end, int domain)
{
	struct sockaddr_storage ss;
	socklen_t len = shunt_addr_from_wire(&c->local[end], &ss);
	int fd, r;

	fd = socket(domain, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);
	if (fd < 0)
		return -errno;
	/* In repair mode bind ignores the listener on that port (a forced reuse). */
	r = repair(fd, 1);
	if (r == 0 && bind(fd, (struct sockaddr *)&ss, len) < 0)
		r = -errno;
	if (r == 0)
		r = establish(fd, c->isn[end], c->isn[end ^ 1], &c->peer[end]);
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

int shuntd_companion_acceptor(struct circuit *c, int domain)
{
	int fd;

	if (disabled)
		return -EPERM;
	fd = make_half(c, SHUNT_END_ACCEPTOR, domain);
	if (fd >= 0)
		c->kino[SHUNT_END_ACCEPTOR] = inode_of(fd);
	return fd;
}

/* The descriptor of socket inode @ino in process @pid (pidfd_getfd), or -errno. */
static int fd_in_process(pid_t pid, uint64_t ino)
{
	char path[64], link[64], want[48];
	struct dirent *e;
	int pidfd, r = -ENOENT;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	snprintf(want, sizeof(want), "socket:[%llu]", (unsigned long long)ino);
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return -errno;
	dir = opendir(path);
	while (dir && r == -ENOENT && (e = readdir(dir))) {
		ssize_t n = readlinkat(dirfd(dir), e->d_name, link, sizeof(link) - 1);

		if (n <= 0)
			continue;
		link[n] = 0;
		if (strcmp(link, want))
			continue;
		r = (int)syscall(SYS_pidfd_getfd, pidfd, atoi(e->d_name), 0);
		if (r < 0)
			r = -errno;
	}
	if (dir)
		closedir(dir);
	close(pidfd);
	return r;
}

/* Socket @fd of process @pid, if it still is socket inode @ino there; or -errno. */
static int fd_of(pid_t pid, int fd, uint64_t ino)
{
	int pidfd, r;

	if (pid <= 0 || fd < 0 || !ino)
		return -ENOENT;
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return -errno;
	r = (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	r = r < 0 ? -errno : r;
	close(pidfd);
	if (r >= 0 && inode_of(r) != ino) {
		close(r);
		r = -ESTALE;
	}
	return r;
}

/*
 * End @end's socket as journaled: @known if it is that socket, else from a
 * process holding the end (where it was journaled, or wherever it is now:
 * a fork child may have moved it, as inetd's do onto 0 and 1). -errno if
 * none has it.
 */
static int end_socket(struct circuit *c, unsigned end, int known)
{
	struct shunt_list *pos;
	int fd = -ENOENT;

	if (!c->jino[end])
		return -ENOENT;
	if (known >= 0 && inode_of(known) == c->jino[end]) {
		fd = fcntl(known, F_DUPFD_CLOEXEC, 0);
		return fd < 0 ? -errno : fd;
	}
	shunt_list_for_each(pos, &c->end[end].holds) {
		struct hold *h = shunt_container_of(pos, struct hold, node);

		if (h->session->ticket || h->session->pid <= 0)
			continue;
		fd = fd_of(h->session->pid, c->jfd[end], c->jino[end]);
		if (fd < 0)
			fd = fd_in_process(h->session->pid, c->jino[end]);
		if (fd >= 0)
			break;
	}
	return fd;
}

int shuntd_companion_adopt(struct circuit *c, int known)
{
	struct sockaddr_storage ss;
	socklen_t len;
	int fd[2] = { -1, -1 }, r;

	if (c->companion)
		return 0;
	if (disabled)
		return -EPERM;
	/* The two sockets, in the processes that made and took the connection. */
	for (unsigned e = 0; e < 2; e++) {
		fd[e] = end_socket(c, e, known);
		if (fd[e] < 0) {
			r = fd[e];
			goto out;
		}
	}
	r = shuntd_companion_seqs(c);
	if (r == 0)
		r = shuntd_companion_connector(c, fd[SHUNT_END_CONNECTOR]);
	if (r == 0) {
		/* In repair mode bind ignores the listener on that port (a forced reuse). */
		len = shunt_addr_from_wire(&c->local[SHUNT_END_ACCEPTOR], &ss);
		r = repair(fd[SHUNT_END_ACCEPTOR], 1);
		if (r == 0 && bind(fd[SHUNT_END_ACCEPTOR], (struct sockaddr *)&ss, len) < 0)
			r = -errno;
		if (r == 0)
			r = establish(fd[SHUNT_END_ACCEPTOR], c->isn[SHUNT_END_ACCEPTOR],
				      c->isn[SHUNT_END_CONNECTOR], &c->peer[SHUNT_END_ACCEPTOR]);
		if (r == 0)
			c->kino[SHUNT_END_ACCEPTOR] = c->jino[SHUNT_END_ACCEPTOR];
	}
	c->companion = r == 0;
out:
	for (unsigned e = 0; e < 2; e++)
		if (fd[e] >= 0)
			close(fd[e]);
	return r;
}

int shuntd_companion_fetch(struct shuntd *d, struct circuit *c, unsigned end)
{
	struct shunt_list *pos;

	(void)d;
	if (!c->companion)
		return -EOPNOTSUPP;
	shunt_list_for_each(pos, &c->end[end].holds) {
		struct hold *h = shunt_container_of(pos, struct hold, node);
		int fd;

		if (h->session->ticket || h->session->pid <= 0)
			continue;
		fd = fd_in_process(h->session->pid, c->kino[end]);
		if (fd >= 0)
			return fd;
	}
	/* Nobody holds that end any more: a socket in its place, as it was. */
	return make_half(c, end, c->local[end].family);
}

/* Put @len bytes into queue @queue of @fd (in repair mode): what was received, or sent. */
static int fill_queue(int fd, int queue, const uint8_t *data, size_t len)
{
	size_t off = 0;
	int want = 4 << 20;

	if (!len)
		return 0;
	if (setsockopt(fd, IPPROTO_TCP, TCP_REPAIR_QUEUE, &queue, sizeof(queue)) < 0)
		return -errno;
	/* Room for a whole ring: the queues are charged against the buffers. */
	setsockopt(fd, SOL_SOCKET, queue == TCP_RECV_QUEUE ? SO_RCVBUFFORCE : SO_SNDBUFFORCE,
		   &want, sizeof(want));
	while (off < len) {
		ssize_t n = send(fd, data + off, len - off, MSG_DONTWAIT);

		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		off += (size_t)n;
	}
	return 0;
}

/* The unread bytes of ring @r, copied out (the ring may wrap), or -EPROTO if impossible. */
static long ring_unread(struct circuit *c, unsigned r, uint8_t *out)
{
	struct shunt_ring_ctl *ctl = &c->hdr->ring[r];
	uint64_t head = atomic_load(&ctl->head), n = atomic_load(&ctl->tail) - head;
	const uint8_t *data = (const uint8_t *)c->hdr + shunt_ring_offset(r, c->ring_size);
	size_t at = (size_t)(head & (c->ring_size - 1)), first = c->ring_size - at;

	/* Indices from shared memory: checked as every reader checks them. */
	if (n > c->ring_size)
		return -EPROTO;
	if (first >= n) {
		memcpy(out, data + at, n);
	} else {
		memcpy(out, data + at, first);
		memcpy(out + first, data, n - first);
	}
	return (long)n;
}

int shuntd_companion_release(struct circuit *c, const int kfd[2])
{
	uint8_t *buf[2] = { NULL, NULL };
	long unread[2];
	int r = 0, off = TCP_REPAIR_OFF;

	for (unsigned ring = 0; ring < 2 && r == 0; ring++) {
		buf[ring] = malloc(c->ring_size);
		unread[ring] = buf[ring] ? ring_unread(c, ring, buf[ring]) : -ENOMEM;
		if (unread[ring] < 0)
			r = (int)unread[ring];
	}
	/*
	 * Ring r carries end r's bytes to end r ^ 1: they become received data
	 * of r ^ 1's socket and sent-but-unacknowledged data of r's, so that
	 * both sequence spaces agree (the ACK after repair acknowledges them).
	 */
	for (unsigned ring = 0; ring < 2 && r == 0; ring++) {
		r = fill_queue(kfd[ring ^ 1], TCP_RECV_QUEUE, buf[ring], (size_t)unread[ring]);
		if (r == 0)
			r = fill_queue(kfd[ring], TCP_SEND_QUEUE, buf[ring], (size_t)unread[ring]);
	}
	free(buf[0]);
	free(buf[1]);
	if (r < 0) {
		shunt_warn("circuit %llu: cannot move its bytes into the kernel: %s",
			   (unsigned long long)c->id, strerror(-r));
		return r;
	}
	/* Out of repair mode: each sends a window probe, and the ACKs set both sides right. */
	for (unsigned e = 0; e < 2; e++)
		if (setsockopt(kfd[e], IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off)) < 0)
			r = -errno;
	return r;
}

void shuntd_companion_unrepair(struct shuntd *d, struct session *s,
			       const struct shunt_msg_unrepair *m, int fd)
{
	struct sockaddr unspec = { .sa_family = AF_UNSPEC };
	int on = 0, off = TCP_REPAIR_OFF_NO_WP, err;
	socklen_t len = sizeof(on);
	int r = 0;

	(void)d;
	/*
	 * Only ever takes power away: a socket out of repair mode is what the
	 * process could have made itself. In repair mode the disconnect sends
	 * nothing (and leaves ECONNABORTED pending, read away below); out of
	 * it, no window probe either.
	 */
	if (getsockopt(fd, IPPROTO_TCP, TCP_REPAIR, &on, &len) < 0)
		r = -errno;
	else if (on && connect(fd, &unspec, sizeof(unspec)) < 0)
		r = -errno;
	else if (on && setsockopt(fd, IPPROTO_TCP, TCP_REPAIR, &off, sizeof(off)) < 0)
		r = -errno;
	len = sizeof(err);
	if (r == 0 && on)
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
	close(fd);
	shuntd_session_reply_status(s, SHUNT_MSG_UNREPAIR, m->h.seq, r);
}
