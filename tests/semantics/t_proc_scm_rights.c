// SPDX-License-Identifier: MIT
// Sockets passed to another process over a Unix socket (SCM_RIGHTS), to a
// receiver running with the preload and to one without: a connection with
// bytes the peer sent before the pass and nobody read (they are the
// receiver's first), the sender closing its copy right after sending it; a
// listening socket, on which the receiver accepts; a connection the sender
// keeps and uses in turns with the receiver; a connection whose peer sent
// its last bytes and closed before the pass (the receiver reads them, then
// EOF).
// shunt-needs: companions
// shunt-expect: shm_connect>=4 shm_accept>=4
// shunt-expect: shm_tx_bytes>=1 shm_rx_bytes>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

enum {
	FIRST = 20000,
	SECOND = 1 << 20,
	STILL_MS = 100,
	RECEIVER_WATCHDOG_S = 60,
	// Tags sent along with a descriptor: what the receiver does with it.
	TAG_TALK = 't',
	TAG_LISTENER = 'l',
	TAG_SHARED = 's',
	TAG_DRAIN = 'd',
	TAG_QUIT = 'q',
	EXIT_PRELOADED = 3,
};

// ---- the receiver: --receiver USOCK PLAIN

static void shared_turns(int fd, int usock)
{
	char token;

	// The sender wrote first; our turn, then the sender's again.
	if (read(usock, &token, 1) != 1)
		t_fatal("receiver: token");
	t_send_all(fd, "receiver's turn;", 16);
	if (write(usock, "r", 1) != 1)
		t_fatal("receiver: token");
}

// Everything until EOF: "goodbye" exactly, then 0.
static unsigned char drain(int fd)
{
	char buf[64];
	size_t got = 0;
	ssize_t n;

	while ((n = recv(fd, buf + got, sizeof(buf) - got, 0)) > 0)
		got += (size_t)n;
	return n == 0 && got == 7 && !memcmp(buf, "goodbye", 7) ? 0 : 1;
}

static int receiver(int usock, int plain)
{
	unsigned char status;

	if (plain && t_preloaded())
		return EXIT_PRELOADED;
	for (;;) {
		char tag;
		int fd, s;
		char buf[8];

		if (read(usock, &tag, 1) != 1)
			t_fatal("receiver: command");
		if (tag == TAG_QUIT)
			return 0;
		fd = t_recv_fd(usock, &tag);
		switch (tag) {
		case TAG_TALK:
			// Not a byte before the sender has looked at the peer.
			if (read(usock, buf, 1) != 1)
				t_fatal("receiver: go");
			status = t_talk_holder(fd, fd, FIRST) ? 0 : 1;
			break;
		case TAG_LISTENER:
			s = t_accept(fd);
			t_recv_all(s, buf, 5);
			t_send_all(s, buf, 5);
			close(s);
			status = 0;
			break;
		case TAG_SHARED:
			shared_turns(fd, usock);
			status = 0;
			break;
		case TAG_DRAIN:
			status = drain(fd);
			break;
		default:
			status = 2;
		}
		close(fd);
		if (write(usock, &status, 1) != 1)
			t_fatal("receiver: status");
	}
}

// ---- the sender, also the peer of every connection

struct rx {
	pid_t pid;
	int usock;
	bool plain;
};

static void command(struct rx *r, char tag)
{
	if (write(r->usock, &tag, 1) != 1)
		t_fatal("command");
}

static int status_of(struct rx *r)
{
	unsigned char st;

	if (read(r->usock, &st, 1) != 1)
		t_fatal("receiver status");
	return st;
}

static void pass_connection(struct rx *r)
{
	int c, s, st;
	bool ok;

	printf("  a connection with %d unread bytes, the sender closing its copy at once:\n",
	       FIRST);
	t_pair(AF_INET, &c, &s);
	t_talk_peer_first(s, FIRST);
	t_wait_inq(c, FIRST);
	command(r, TAG_TALK);
	t_send_fd(r->usock, c, TAG_TALK);
	T_REPORT("    sender close", close(c));
	printf("    peer sees: %s\n", t_peer_sees(s, STILL_MS));
	command(r, 'g');
	ok = t_talk_peer_rest(s, FIRST, SECOND);
	st = status_of(r);
	t_expect(ok && st == 0, "    every byte right both ways (receiver status %d)", st);
	printf("    after the receiver's close the peer sees: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(s);
}

static void pass_listener(struct rx *r)
{
	struct t_addr a;
	char buf[8];
	int lfd = t_listen_loopback(AF_INET, 4, &a), c, st;

	printf("  a listening socket:\n");
	command(r, TAG_LISTENER);
	t_send_fd(r->usock, lfd, TAG_LISTENER);
	T_REPORT("    sender close", close(lfd));
	c = t_connect(&a);
	t_send_all(c, "hello", 5);
	t_recv_all(c, buf, 5);
	st = status_of(r);
	t_expect(st == 0 && !memcmp(buf, "hello", 5),
		 "    the receiver accepted and echoed (status %d)", st);
	printf("    then the client sees: %s\n", t_peer_sees(c, T_WAIT_MS));
	close(c);
}

static void pass_shared(struct rx *r)
{
	char buf[64], token;
	int c, s, st;

	printf("  a connection the sender keeps, used in turns:\n");
	t_pair(AF_INET, &c, &s);
	command(r, TAG_SHARED);
	t_send_fd(r->usock, c, TAG_SHARED);
	t_send_all(c, "sender's turn;", 14);
	if (write(r->usock, "s", 1) != 1 || read(r->usock, &token, 1) != 1)
		t_fatal("token");
	t_send_all(c, "sender again", 12);
	st = status_of(r);
	t_wait_inq(s, 42);
	T_REPORT_DATA("    peer recv", recv(s, buf, sizeof(buf), 0), buf);
	t_expect(st == 0, "    receiver status %d", st);
	printf("    the receiver has closed its copy; peer sees: %s\n",
	       t_peer_sees(s, STILL_MS));
	T_REPORT("    sender close", close(c));
	printf("    peer sees: %s\n", t_peer_sees(s, T_WAIT_MS));
	close(s);
}

static void pass_after_peer_closed(struct rx *r)
{
	int c, s, st;

	printf("  a connection whose peer sent its last bytes and closed before the pass:\n");
	t_pair(AF_INET, &c, &s);
	t_send_all(s, "goodbye", 7);
	T_REPORT("    peer close", close(s));
	t_wait_event(c, POLLRDHUP);
	command(r, TAG_DRAIN);
	t_send_fd(r->usock, c, TAG_DRAIN);
	T_REPORT("    sender close", close(c));
	st = status_of(r);
	t_expect(st == 0, "    the receiver read \"goodbye\", then EOF (status %d)", st);
}

static void start_receiver(struct rx *r, const char *self, bool plain)
{
	char usarg[16];
	char *argv[] = { (char *)self, "--receiver", usarg, plain ? "1" : "0", NULL };
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		t_fatal("socketpair");
	if (fcntl(sv[0], F_SETFD, FD_CLOEXEC) < 0)
		t_fatal("fcntl");
	snprintf(usarg, sizeof(usarg), "%d", sv[1]);
	r->plain = plain;
	r->usock = sv[0];
	r->pid = t_fork_tied(RECEIVER_WATCHDOG_S);
	if (r->pid == 0) {
		execve(self, argv, plain ? t_env_unpreloaded() : environ);
		_exit(127);
	}
	close(sv[1]);
}

int main(int argc, char **argv)
{
	const char *self = t_self_path(argv[0]);
	struct rx r[2];

	t_start(60);
	if (argc == 4 && !strcmp(argv[1], "--receiver"))
		return receiver(atoi(argv[2]), atoi(argv[3]));

	// Both receivers start before this process makes any TCP socket:
	// whatever they hold, they got through SCM_RIGHTS.
	start_receiver(&r[0], self, false);
	start_receiver(&r[1], self, true);
	for (int i = 0; i < 2; i++) {
		printf("to a receiver %s:\n", r[i].plain ? "without LD_PRELOAD" : "with the environment kept");
		pass_connection(&r[i]);
		pass_listener(&r[i]);
		pass_shared(&r[i]);
		pass_after_peer_closed(&r[i]);
		command(&r[i], TAG_QUIT);
		t_expect(t_wait_child(r[i].pid) == 0, "  receiver exit status 0");
		close(r[i].usock);
	}
	return t_finish();
}
