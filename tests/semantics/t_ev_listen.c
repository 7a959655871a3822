// SPDX-License-Identifier: MIT
// A listener is readable while a connection is queued, whichever way it came:
// from this program, or from a child started without LD_PRELOAD (a peer that
// does not run shunt). Seen through poll, ppoll, select, pselect, epoll_wait,
// epoll_pwait and epoll_pwait2, level- and edge-triggered, blocked or not.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_accept>=1
#include "t_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <unistd.h>

enum {
	LATER_MS = 30,
	QUIET_MS = 50,
	MAX_KEEP = 16,
	CMD_EXIT = 0, // else a port to connect to
};

// --connector RD WR: for each port read from RD, connect, send "k", keep
// the connection and write 1 to WR; exit on CMD_EXIT.
static int connector(int rd, int wr)
{
	struct t_chan in = { .rd = rd, .wr = -1 }, out = { .rd = -1, .wr = wr };
	int keep[MAX_KEEP], n = 0;
	uint32_t port;

	while ((port = t_chan_get(&in)) != CMD_EXIT) {
		struct t_addr a;

		if (n == MAX_KEEP)
			t_fatal("connector: too many connections");
		t_addr_make(&a, "127.0.0.1", (uint16_t)port);
		keep[n] = t_connect(&a);
		t_send_all(keep[n++], "k", 1);
		t_chan_put(&out, 1);
	}
	while (n)
		close(keep[--n]);
	return 0;
}

struct scene {
	int lfd, ep, ep_et;
	uint16_t port;
	struct t_addr a;
	struct t_chan to_child, from_child;
	pid_t child;
	int own; // our client end, if any
};

static void plain_connect(struct scene *sc)
{
	t_chan_put(&sc->to_child, sc->port);
	t_chan_get(&sc->from_child);
}

static void own_connect(struct scene *sc)
{
	sc->own = t_connect(&sc->a);
	t_send_all(sc->own, "o", 1);
}

static void report(const char *state, struct scene *sc)
{
	struct epoll_event ev[2];
	struct pollfd p = { .fd = sc->lfd, .events = POLLIN | POLLRDNORM | POLLOUT | POLLPRI };
	int n;

	printf("%s:\n", state);
	n = poll(&p, 1, 0);
	printf("  poll = %d %s\n", n, t_poll_str(p.revents));
	printf("  select = %s\n", t_select1_str(sc->lfd, 0));
	n = t_epoll_wait_sorted(sc->ep, ev, 2, 0);
	printf("  epoll = %d%s%s\n", n, n ? " " : "", n ? t_epoll_str(ev[0].events) : "");
	n = t_epoll_wait_sorted(sc->ep_et, ev, 2, 0);
	printf("  epoll EPOLLET = %d%s%s\n", n, n ? " " : "", n ? t_epoll_str(ev[0].events) : "");
}

// Accept one connection and print the byte its client sent.
static void accept_one(struct scene *sc)
{
	char b = '?';
	int s = t_accept(sc->lfd);

	t_recv_all(s, &b, 1);
	printf("accepted the connection that sent '%c'\n", b);
	close(s);
}

static void states(struct scene *sc)
{
	report("empty", sc);
	own_connect(sc);
	t_wait_event(sc->lfd, POLLIN);
	report("our connection queued", sc);
	accept_one(sc);
	close(sc->own);
	report("accepted", sc);
	plain_connect(sc);
	t_wait_event(sc->lfd, POLLIN);
	report("a plain peer's connection queued", sc);
	accept_one(sc);
	report("accepted", sc);

	// Both kinds at once, ours first: one edge, FIFO accept.
	own_connect(sc);
	t_wait_event(sc->lfd, POLLIN);
	plain_connect(sc);
	t_sleep_ms(QUIET_MS);
	report("ours and a plain peer's queued", sc);
	accept_one(sc);
	report("one accepted", sc);
	accept_one(sc);
	close(sc->own);
	report("both accepted", sc);
}

// ---- each call, blocked, woken by each kind of connection

struct later {
	struct scene *sc;
	bool plain;
	pthread_t th;
};

static void *connect_later(void *arg)
{
	struct later *l = arg;

	t_sleep_ms(LATER_MS);
	if (l->plain)
		plain_connect(l->sc);
	else
		own_connect(l->sc);
	return NULL;
}

static int b_poll(struct scene *sc)
{
	struct pollfd p = { .fd = sc->lfd, .events = POLLIN };
	int n = poll(&p, 1, -1);

	printf("  revents %s\n", t_poll_str(p.revents));
	return n;
}

static int b_ppoll(struct scene *sc)
{
	struct pollfd p = { .fd = sc->lfd, .events = POLLIN | POLLRDNORM };
	int n = ppoll(&p, 1, NULL, NULL);

	printf("  revents %s\n", t_poll_str(p.revents));
	return n;
}

static int b_select(struct scene *sc)
{
	fd_set rd;
	int n;

	FD_ZERO(&rd);
	FD_SET(sc->lfd, &rd);
	n = select(sc->lfd + 1, &rd, NULL, NULL, NULL);
	printf("  readable %d\n", FD_ISSET(sc->lfd, &rd));
	return n;
}

static int b_pselect(struct scene *sc)
{
	fd_set rd;
	int n;

	FD_ZERO(&rd);
	FD_SET(sc->lfd, &rd);
	n = pselect(sc->lfd + 1, &rd, NULL, NULL, NULL, NULL);
	printf("  readable %d\n", FD_ISSET(sc->lfd, &rd));
	return n;
}

static int b_epoll_wait(struct scene *sc)
{
	struct epoll_event ev;
	int n = epoll_wait(sc->ep, &ev, 1, -1);

	printf("  events %s\n", n > 0 ? t_epoll_str(ev.events) : "-");
	return n;
}

static int b_epoll_pwait(struct scene *sc)
{
	struct epoll_event ev;
	int n = epoll_pwait(sc->ep_et, &ev, 1, -1, NULL);

	printf("  events %s (EPOLLET)\n", n > 0 ? t_epoll_str(ev.events) : "-");
	return n;
}

static int b_epoll_pwait2(struct scene *sc)
{
	struct epoll_event ev;
	int n = epoll_pwait2(sc->ep, &ev, 1, NULL, NULL);

	printf("  events %s\n", n > 0 ? t_epoll_str(ev.events) : "-");
	return n;
}

static const struct {
	const char *name;
	int (*wait)(struct scene *);
} calls[] = {
	{ "poll", b_poll },		{ "ppoll", b_ppoll },
	{ "select", b_select },		{ "pselect", b_pselect },
	{ "epoll_wait", b_epoll_wait }, { "epoll_pwait", b_epoll_pwait },
	{ "epoll_pwait2", b_epoll_pwait2 },
};

static void blocked(struct scene *sc)
{
	char label[96];

	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		for (int plain = 0; plain < 2; plain++) {
			struct later l = { .sc = sc, .plain = plain };

			if (pthread_create(&l.th, NULL, connect_later, &l))
				t_fatal("pthread_create");
			snprintf(label, sizeof(label), "%s(no timeout), %s connection later",
				 calls[i].name, plain ? "a plain peer's" : "our");
			printf("%s:\n", label);
			T_REPORT("  returned", calls[i].wait(sc));
			pthread_join(l.th, NULL);
			accept_one(sc);
			if (!plain)
				close(sc->own);
			// Drain a level-triggered event of the connection just
			// accepted, or the edge of the EPOLLET set.
			{
				struct epoll_event ev;

				epoll_wait(sc->ep_et, &ev, 1, 0);
			}
		}
	}
}

int main(int argc, char **argv)
{
	struct scene sc = { .own = -1 };
	struct epoll_event ev;
	int to_child[2], from_child[2];

	t_start(60);
	if (argc == 4 && !strcmp(argv[1], "--connector"))
		return connector(atoi(argv[2]), atoi(argv[3]));

	// The plain child first, before this process creates any socket.
	if (pipe(to_child) || pipe(from_child))
		t_fatal("pipe");
	// Our ends stay here; the child's ends survive its execve.
	if (fcntl(to_child[1], F_SETFD, FD_CLOEXEC) || fcntl(from_child[0], F_SETFD, FD_CLOEXEC))
		t_fatal("fcntl(FD_CLOEXEC)");
	{
		char rd[16], wr[16];
		const char *self = t_self_path(argv[0]);
		char *args[] = { (char *)self, "--connector", rd, wr, NULL };

		snprintf(rd, sizeof(rd), "%d", to_child[0]);
		snprintf(wr, sizeof(wr), "%d", from_child[1]);
		sc.child = t_spawn_unpreloaded(self, args);
	}
	close(to_child[0]);
	close(from_child[1]);
	sc.to_child = (struct t_chan){ .rd = -1, .wr = to_child[1] };
	sc.from_child = (struct t_chan){ .rd = from_child[0], .wr = -1 };

	sc.lfd = t_listen_loopback(AF_INET, 8, &sc.a);
	sc.port = t_addr_port(&sc.a);
	sc.ep = epoll_create1(EPOLL_CLOEXEC);
	sc.ep_et = epoll_create1(EPOLL_CLOEXEC);
	if (sc.ep < 0 || sc.ep_et < 0)
		t_fatal("epoll_create1");
	ev = (struct epoll_event){ .events = EPOLLIN, .data.u64 = 1 };
	if (epoll_ctl(sc.ep, EPOLL_CTL_ADD, sc.lfd, &ev) < 0)
		t_fatal("epoll_ctl");
	ev.events = EPOLLIN | EPOLLET;
	if (epoll_ctl(sc.ep_et, EPOLL_CTL_ADD, sc.lfd, &ev) < 0)
		t_fatal("epoll_ctl");

	states(&sc);
	blocked(&sc);

	t_chan_put(&sc.to_child, CMD_EXIT);
	t_expect(t_wait_child(sc.child) == 0, "plain connector exit status 0");
	close(sc.ep);
	close(sc.ep_et);
	close(sc.lfd);
	return t_finish();
}
