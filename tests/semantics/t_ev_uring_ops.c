// SPDX-License-Identifier: MIT
// io_uring operations other than EPOLL_CTL on TCP sockets: CLOSE of a
// connected socket, a listener and an epoll instance (and CLOSE refused:
// a bad descriptor, a fixed-file flag, a bad field, which ends the batch);
// SEND, RECV and POLL_ADD on a connection; WRITE through a registered file;
// CONNECT of an unconnected socket and ACCEPT on a listener; POLL_ADD on an
// epoll instance that holds a connection.
// shunt-needs: companions
// shunt-expect: shm_connect>=3 shm_accept>=3 shm_tx_bytes>=1 shm_rx_bytes>=1
// shunt-expect: kernel_accept>=1
#include "t_uring.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

static struct t_ring ring;

static struct io_uring_sqe *close_sqe(uint64_t ud, int fd)
{
	struct io_uring_sqe *sqe = t_ring_sqe(&ring, ud);

	sqe->opcode = IORING_OP_CLOSE;
	sqe->fd = fd;
	return sqe;
}

static struct io_uring_sqe *rw_sqe(uint64_t ud, int op, int fd, void *buf, unsigned len)
{
	struct io_uring_sqe *sqe = t_ring_sqe(&ring, ud);

	sqe->opcode = (uint8_t)op;
	sqe->fd = fd;
	sqe->addr = (uint64_t)(uintptr_t)buf;
	sqe->len = len;
	return sqe;
}

static void closes(void)
{
	struct t_addr laddr;
	int c, s, l, ep, probe;

	printf("-- CLOSE\n");
	t_pair(AF_INET, &c, &s);
	l = t_listen_loopback(AF_INET, 8, &laddr);
	ep = epoll_create1(EPOLL_CLOEXEC);
	close_sqe(1, s);
	close_sqe(2, l);
	close_sqe(3, ep);
	close_sqe(4, -1);
	close_sqe(5, c)->flags = IOSQE_FIXED_FILE;	// EBADF: the kernel's, c stays open
	close_sqe(6, c)->off = 1;			// EINVAL while prepared: the batch ends
	close_sqe(7, c);				// not submitted by this call
	t_ring_submit(&ring, 6);
	t_ring_print(&ring);
	printf("  peer of the closed one sees: %s\n", t_peer_sees(c, T_WAIT_MS));
	T_REPORT("fcntl(closed, F_GETFD)", fcntl(s, F_GETFD));
	T_REPORT("fcntl(closed epoll, F_GETFD)", fcntl(ep, F_GETFD));
	probe = t_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC);
	T_REPORT("connect to the closed listener", connect(probe, (struct sockaddr *)&laddr.ss,
							   laddr.len));
	close(probe);
	T_REPORT("io_uring_enter(1, 1, GETEVENTS)", t_uring_enter(ring.fd, 1, 1,
								 IORING_ENTER_GETEVENTS));
	t_ring_print(&ring);
	T_REPORT("fcntl(c, F_GETFD) after its CLOSE", fcntl(c, F_GETFD));
}

static void data_ops(void)
{
	char buf[64] = { 0 }, got[16] = { 0 };
	int c, s;

	printf("-- SEND, RECV and POLL_ADD on a connection\n");
	t_pair(AF_INET, &c, &s);
	T_REPORT("send before", send(c, "before", 6, 0));
	t_wait_inq(s, 6);
	rw_sqe(10, IORING_OP_SEND, c, "ring", 4);
	t_ring_submit(&ring, 1);
	t_ring_print(&ring);
	t_recv_all(s, got, 10);
	printf("  received: \"%s\"\n", got);
	rw_sqe(11, IORING_OP_RECV, s, buf, sizeof(buf) - 1);
	t_ring_submit(&ring, 0);
	T_REPORT("send late", send(c, "late", 4, 0));
	T_REPORT("io_uring_enter(0, 1, GETEVENTS)", t_uring_enter(ring.fd, 0, 1,
								 IORING_ENTER_GETEVENTS));
	t_ring_print(&ring);
	printf("  RECV got: \"%s\"\n", buf);
	rw_sqe(12, IORING_OP_POLL_ADD, s, NULL, 0)->poll32_events = POLLIN;
	t_ring_submit(&ring, 0);
	T_REPORT("send x", send(c, "x", 1, 0));
	T_REPORT("io_uring_enter(0, 1, GETEVENTS)", t_uring_enter(ring.fd, 0, 1,
								 IORING_ENTER_GETEVENTS));
	t_ring_print(&ring);
	T_REPORT_DATA("recv", recv(s, got, sizeof(got) - 1, 0), got);
	close(c);
	printf("  after close, the other end sees: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(s);
}

static void fixed_file(void)
{
	char got[8] = { 0 };
	int c, s, fds[1];

	printf("-- WRITE through a registered file\n");
	t_pair(AF_INET, &c, &s);
	fds[0] = c;
	T_REPORT("IORING_REGISTER_FILES", t_uring_register(ring.fd, IORING_REGISTER_FILES, fds, 1));
	rw_sqe(20, IORING_OP_WRITE, 0, "fixed", 5)->flags = IOSQE_FIXED_FILE;
	t_ring_submit(&ring, 1);
	t_ring_print(&ring);
	t_recv_all(s, got, 5);
	printf("  received: \"%s\"\n", got);
	T_REPORT("send back", send(s, "back", 4, 0));
	t_recv_all(c, got, 4);
	printf("  received: \"%.4s\"\n", got);
	T_REPORT("IORING_UNREGISTER_FILES", t_uring_register(ring.fd, IORING_UNREGISTER_FILES,
							     NULL, 0));
	close(c);
	close(s);
}

static void connect_accept(void)
{
	struct t_addr laddr, l2addr;
	char got[8] = { 0 };
	int l, fresh, a, l2, nc;
	struct io_uring_sqe *sqe;
	struct io_uring_cqe cqe;

	printf("-- CONNECT of an unconnected socket, ACCEPT on a listener\n");
	l = t_listen_loopback(AF_INET, 8, &laddr);
	fresh = t_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC);
	sqe = rw_sqe(30, IORING_OP_CONNECT, fresh, &laddr.ss, 0);
	sqe->off = laddr.len;
	t_ring_submit(&ring, 1);
	t_ring_print(&ring);
	a = T_REPORT_FD("accept", accept(l, NULL, NULL));
	T_REPORT("send", send(fresh, "hi", 2, 0));
	t_recv_all(a, got, 2);
	printf("  received: \"%.2s\"\n", got);
	close(a);
	close(fresh);
	close(l);

	l2 = t_listen_loopback(AF_INET, 8, &l2addr);
	rw_sqe(31, IORING_OP_ACCEPT, l2, NULL, 0);
	t_ring_submit(&ring, 0);
	nc = t_connect(&l2addr);
	T_REPORT("io_uring_enter(0, 1, GETEVENTS)", t_uring_enter(ring.fd, 0, 1,
								 IORING_ENTER_GETEVENTS));
	if (t_ring_reap(&ring, &cqe, 1) != 1)
		t_fatal("no completion for ACCEPT");
	printf("  cqe %llu: %s\n", (unsigned long long)cqe.user_data,
	       cqe.res >= 0 ? "a descriptor" : t_errname(-cqe.res));
	if (cqe.res >= 0) {
		T_REPORT("send", send(cqe.res, "ok", 2, 0));
		t_recv_all(nc, got, 2);
		printf("  received: \"%.2s\"\n", got);
		close(cqe.res);
	}
	close(nc);
	close(l2);
}

static void poll_epoll(void)
{
	struct epoll_event e = { .events = EPOLLIN, .data.u64 = 5 };
	int c, s, ep = epoll_create1(EPOLL_CLOEXEC);
	char got[4] = { 0 };

	printf("-- POLL_ADD on an epoll instance holding a connection\n");
	t_pair(AF_INET, &c, &s);
	T_REPORT("epoll_ctl ADD", epoll_ctl(ep, EPOLL_CTL_ADD, c, &e));
	rw_sqe(40, IORING_OP_POLL_ADD, ep, NULL, 0)->poll32_events = POLLIN;
	t_ring_submit(&ring, 0);
	T_REPORT("send", send(s, "e", 1, 0));
	T_REPORT("io_uring_enter(0, 1, GETEVENTS)", t_uring_enter(ring.fd, 0, 1,
								 IORING_ENTER_GETEVENTS));
	t_ring_print(&ring);
	T_REPORT_DATA("recv", recv(c, got, sizeof(got) - 1, 0), got);
	close(ep);
	close(c);
	close(s);
}

int main(void)
{
	struct io_uring_params p = { 0 };
	int e;

	t_start(60);
	e = t_ring_open(&ring, 32, &p);
	if (e == -ENOSYS || e == -EPERM)
		t_skip("io_uring_setup: %s (io_uring disabled here)", t_errname(-e));
	if (e < 0)
		t_fatal("io_uring_setup: %s", t_errname(-e));
	closes();
	data_ops();
	fixed_file();
	connect_accept();
	poll_epoll();
	t_ring_close(&ring);
	return t_finish();
}
