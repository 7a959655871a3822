// SPDX-License-Identifier: MIT
// A process killed with SIGKILL while holding sockets: its peer sees EOF
// when nothing was left unread, a reset when something was; bytes it had
// sent are still delivered; a killed holder of a listener resets the
// connections queued on it. A killed child that shared a connection or a
// listener with a live parent, even blocked in send or recv on it, does not
// end or wedge it. Nothing hangs.
// shunt-expect: shm_connect>=7 shm_accept>=6 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	CHILD_WATCHDOG_S = 30,
	STILL_MS = 100,
	QUIET_MS = 50,
	SEED_CHILD = 0xc41d,
	SEED_PARENT = 0xa2e7,
	CHUNK = 16 << 10,
	PARENT_MSG = 100000,
	KILLED = 128 + SIGKILL,
};

static void report_poll(const char *label, int fd)
{
	printf("%s = %s\n", label, t_poll_str(t_poll1(fd, POLLIN | POLLOUT | POLLRDHUP, 0)));
}

// A child that holds c (and nothing else of ours) and blocks in recv.
static pid_t holder(int c, int s, bool read_first)
{
	pid_t pid = t_fork_tied(CHILD_WATCHDOG_S);
	char buf[64];

	if (pid)
		return pid;
	close(s);
	if (read_first)
		t_recv_all(c, buf, 5);
	for (;;)
		pause();
}

static void killed_holder(bool unread)
{
	int c, s;
	pid_t pid;

	printf("the only holder killed, %s:\n", unread ? "bytes it never read" : "nothing unread");
	t_pair(AF_INET, &c, &s);
	T_REPORT("  peer send", send(s, "first", 5, 0));
	if (unread)
		T_REPORT("  peer send", send(s, "unread", 6, 0));
	pid = holder(c, s, true);
	close(c);
	t_wait_asleep(pid, pid, QUIET_MS);
	printf("  peer sees before the kill: %s\n", t_peer_sees(s, STILL_MS));
	t_expect(t_kill_child(pid) == KILLED, "  killed");
	t_wait_event(s, POLLIN | POLLRDHUP);
	report_poll("  peer poll", s);
	printf("  peer sees: %s\n", t_peer_sees(s, 0));
	printf("  peer sees next: %s\n", t_peer_sees(s, 0));
	close(s);
}

// Killed blocked in send with the buffers full: what it had sent arrives.
static void killed_sending(void)
{
	static unsigned char buf[CHUNK];
	uint64_t off = 0;
	bool intact = true;
	ssize_t r;
	int c, s;
	pid_t pid;

	printf("the only holder killed while blocked in send, buffers full:\n");
	t_pair(AF_INET, &c, &s);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		close(s);
		for (uint64_t o = 0;; o += CHUNK) {
			t_stream_fill(SEED_CHILD, o, buf, CHUNK);
			t_send_all(c, buf, CHUNK);
		}
	}
	close(c);
	t_wait_inq(s, 1);
	t_wait_asleep(pid, pid, QUIET_MS);
	t_expect(t_kill_child(pid) == KILLED, "  killed");
	while ((r = recv(s, buf, sizeof(buf), 0)) > 0) {
		intact = intact && t_stream_check(SEED_CHILD, off, buf, (size_t)r) < 0;
		off += (uint64_t)r;
	}
	t_report("  peer reads everything it had sent, then recv", r,
		 r < 0 ? errno : T_ERRNO_SENTINEL);
	t_expect(intact && off > 0, "  the bytes it sent: some, intact");
	close(s);
}

// The queue of a killed listener: connections nobody accepted are reset.
static void killed_listener(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a), c, r;
	pid_t pid;

	printf("the only holder of a listener killed, one connection queued:\n");
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		for (;;)
			pause();
	}
	close(lfd);
	c = t_connect(&a);
	T_REPORT("  client send", send(c, "hello?", 6, 0));
	t_wait_asleep(pid, pid, QUIET_MS);
	t_expect(t_kill_child(pid) == KILLED, "  killed");
	t_wait_event(c, POLLIN | POLLRDHUP);
	printf("  client sees: %s\n", t_peer_sees(c, 0));
	close(c);
	c = t_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC);
	r = connect(c, (struct sockaddr *)&a.ss, a.len);
	t_report("  a new connect", r, r < 0 ? errno : T_ERRNO_SENTINEL);
	close(c);
}

// The parent holds it too: the child's death changes nothing.
static void killed_sharer(void)
{
	char buf[16];
	int c, s;
	pid_t pid;

	printf("a child sharing the connection with its parent killed:\n");
	t_pair(AF_INET, &c, &s);
	T_REPORT("  peer send", send(s, "first", 5, 0));
	pid = holder(c, s, true);
	t_wait_asleep(pid, pid, QUIET_MS);
	T_REPORT("  peer send, for the parent", send(s, "later", 5, 0));
	t_expect(t_kill_child(pid) == KILLED, "  killed");
	printf("  peer sees: %s\n", t_peer_sees(s, STILL_MS));
	t_wait_inq(c, 5);
	T_REPORT_DATA("  parent recv", recv(c, buf, sizeof(buf), 0), buf);
	T_REPORT("  parent send", send(c, "alive", 5, 0));
	t_wait_inq(s, 5);
	T_REPORT_DATA("  peer recv", recv(s, buf, sizeof(buf), 0), buf);
	close(c);
	printf("  after the parent's close the peer sees: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(s);
}

// Two children on the parent's connection, one blocked in send (buffers
// full), one in recv, both killed: the parent's next message arrives whole
// right after the last byte the sender got out, and the parent reads.
struct parent_msg {
	int fd;
	pthread_t th;
};

static void *send_parent_msg(void *arg)
{
	static unsigned char msg[PARENT_MSG];
	struct parent_msg *m = arg;

	t_stream_fill(SEED_PARENT, 0, msg, PARENT_MSG);
	t_send_all(m->fd, msg, PARENT_MSG);
	return NULL;
}

static void killed_mid_call(void)
{
	static unsigned char buf[CHUNK];
	uint64_t off = 0, got;
	struct parent_msg m;
	pid_t sender, reader;
	bool parent_ok;
	int c, s;

	printf("children blocked in send and in recv on the parent's connection, killed:\n");
	t_pair(AF_INET, &c, &s);
	sender = t_fork_tied(CHILD_WATCHDOG_S);
	if (sender == 0) {
		close(s);
		for (uint64_t o = 0;; o += CHUNK) {
			t_stream_fill(SEED_CHILD, o, buf, CHUNK);
			t_send_all(c, buf, CHUNK);
		}
	}
	reader = holder(c, s, false);
	t_wait_inq(s, 1);
	t_wait_asleep(sender, sender, QUIET_MS);
	t_wait_asleep(reader, reader, QUIET_MS);
	t_expect(t_kill_child(sender) == KILLED && t_kill_child(reader) == KILLED, "  both killed");
	// The buffers are full: the parent sends from a thread while we read.
	m.fd = c;
	if (pthread_create(&m.th, NULL, send_parent_msg, &m))
		t_fatal("pthread_create");
	// The child's stream up to the first byte that is not its, where the
	// parent's message must begin.
	for (;;) {
		ssize_t r = recv(s, buf, sizeof(buf), 0);
		int64_t bad;

		if (r <= 0)
			t_fatal("peer recv");
		bad = t_stream_check(SEED_CHILD, off, buf, (size_t)r);
		if (bad < 0) {
			off += (uint64_t)r;
			continue;
		}
		got = (uint64_t)((int64_t)off + r - bad);
		parent_ok = got <= PARENT_MSG &&
			    t_stream_check(SEED_PARENT, 0, buf + (bad - (int64_t)off), got) < 0;
		off = (uint64_t)bad;
		break;
	}
	while (got < PARENT_MSG) {
		size_t k = PARENT_MSG - got < sizeof(buf) ? PARENT_MSG - got : sizeof(buf);

		t_recv_all(s, buf, k);
		parent_ok = parent_ok && t_stream_check(SEED_PARENT, got, buf, k) < 0;
		got += k;
	}
	pthread_join(m.th, NULL);
	t_expect(off > 0, "  the killed sender's bytes first: some, in order");
	t_expect(parent_ok, "  then the parent's %d bytes, whole", PARENT_MSG);
	T_REPORT("  peer send", send(s, "to parent", 9, 0));
	t_wait_inq(c, 9);
	T_REPORT_DATA("  parent recv", recv(c, buf, 16, 0), buf);
	close(c);
	printf("  after the parent's close the peer sees: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(s);
}

// A worker killed while blocked in accept on a listener the parent shares.
static void killed_acceptor(void)
{
	struct t_addr a;
	int lfd = t_listen_loopback(AF_INET, 4, &a), c, s;
	pid_t pid;

	printf("a child blocked in accept on the parent's listener, killed:\n");
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		accept(lfd, NULL, NULL);
		_exit(2);
	}
	t_wait_asleep(pid, pid, QUIET_MS);
	t_expect(t_kill_child(pid) == KILLED, "  killed");
	c = t_connect(&a);
	s = T_REPORT_FD("  parent accept", accept(lfd, NULL, NULL));
	if (s >= 0) {
		char buf[8];

		t_send_all(c, "still", 5);
		t_recv_all(s, buf, 5);
		t_expect(!memcmp(buf, "still", 5), "  the connection works");
		close(s);
	}
	close(c);
	close(lfd);
}

int main(void)
{
	t_start(60);
	killed_holder(false);
	killed_holder(true);
	killed_sending();
	killed_listener();
	killed_sharer();
	killed_mid_call();
	killed_acceptor();
	return t_finish();
}
