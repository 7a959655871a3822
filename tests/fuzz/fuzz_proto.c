// SPDX-License-Identifier: MIT
/*
 * Fuzz target: shuntd's handling of control messages, from the record on the
 * wire to the state it leaves behind. Malformed messages must be refused
 * with an error, never crash shuntd, never leak, never be left unanswered.
 *
 * Depth: the real daemon, in-process, not a copy of its checks. Every daemon
 * source but main.c is linked in, and each input is played by two fake
 * processes against a fresh daemon state. They connect to a real
 * SOCK_SEQPACKET control socket (shuntd_session_accept: SO_PEERCRED, comm,
 * tenant from a policy whose limits and rules put every outcome of a
 * connect in reach) and send records with real SCM_RIGHTS descriptors
 * (listening, bound and unbound TCP sockets, UDP, non-sockets, the kernel
 * sockets they got back); shuntd_session_input receives, checks
 * (shunt_proto_recv, shunt_proto_check) and dispatches each one to the real
 * handlers: listeners, circuits (memfds, companion sockets in TCP_REPAIR),
 * network namespace views (rtnetlink), fork tickets, links, downgrade,
 * status. No refactor of session.c was needed: a session is a socket, and
 * the harness holds the other end. Only the event loop (epoll_wait, signals)
 * and main() are left out; the harness calls what the loop calls when a
 * session's socket is readable, and sets up struct shuntd as main() does.
 *
 * The input is a sequence of operations (enum op_kind): send a record (with
 * up to 7 descriptors, so that "too many" is reached), scribble on a
 * circuit's shared control page as a hostile process may, or let a process
 * exit and another take its place. Two liberties, so that a corpus replays
 * the same way in any run: getrandom() is deterministic (companion
 * sequence numbers), and a CONNECT to port 1..4 is rewritten to
 * the ephemeral port of the harness's listening socket 0..3.
 * tests/fuzz/make_corpus.py writes the seeds; FUZZ_TRACE=1 tells the story
 * of an input.
 *
 * Oracles, beyond ASan/UBSan: each reply is well formed (shunt_proto_check)
 * and carries the descriptors its type promises; a request that is
 * answered (docs/protocol.md) is answered exactly once, on its own
 * session's socket, with -EPROTO if malformed, and one that is not is not;
 * once the processes are gone, shuntd holds no session, listener, circuit
 * or namespace view, no tenant is charged anything, and no descriptor is
 * left open.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/shuntd.h"

enum {
	NPEERS = 2,
	NPOOL = 4,		/* listening sockets shared by every run */
	KEEP = 8,		/* kernel sockets a peer keeps, as proof for DOWNGRADE */
	NMAPS = 8,		/* circuit control pages kept mapped, for POKE */
	MAX_OPS = 64,		/* bounds the time one input takes */
	MAX_FDS_SENT = 7,	/* more than SHUNT_MSG_MAX_FDS, on purpose */
	FD_PROBE = 1024,	/* descriptors below this are checked for leaks */
};

/*
 * One operation: a byte, then its arguments.
 *   op & 1        which process (peer 0 or 1)
 *   (op >> 1) & 7 SEND: how many descriptors
 *   op >> 4       0..11 SEND, 12..13 POKE, 14..15 RESTART
 * SEND    fd kind bytes (one per descriptor), u16 length, the record's bytes
 * POKE    u8 map, u16 offset, u64 value: written into a circuit's control page
 * RESTART the process exits (shuntd sees EOF) and a new one connects instead
 */
enum op_kind { OP_SEND, OP_POKE, OP_RESTART };

static enum op_kind op_kind(uint8_t op)
{
	return (op >> 4) < 12 ? OP_SEND : (op >> 4) < 14 ? OP_POKE : OP_RESTART;
}

/* What a descriptor byte sends: (byte % FD_KINDS), the rest picks a kept socket. */
enum fd_kind {
	FD_POOL0, FD_POOL1, FD_POOL2, FD_POOL3,	/* the shared listening sockets */
	FD_TCP4, FD_TCP6,			/* fresh, unbound */
	FD_TCP4_BOUND, FD_TCP6_BOUND,		/* fresh, bound to 127.0.0.1 / ::, port 0 */
	FD_KEPT,				/* a kernel socket this peer sent or got */
	FD_UDP, FD_EVENTFD, FD_UNIX,		/* the wrong kinds */
	FD_KINDS
};

struct peer {
	int fd;				/* our end of its control socket, or -1 */
	uint64_t id;			/* its session in shuntd */
	int kept[KEEP];			/* ring of kernel sockets, -1 when empty */
	unsigned nkept;
	/* UNLISTENs whose answer shuntd may still give (a family's last close, family.c). */
	uint32_t owed[MAX_OPS];
	unsigned nowed;
};

struct reply {
	uint16_t type;
	uint32_t seq;
	int32_t status;
};

static struct {
	struct shuntd d;
	struct sockaddr_un sun;
	socklen_t sunlen;
	int pool[NPOOL];
	uint16_t pool_port[NPOOL];
	int baseline;			/* how many of them were open when this run started */
	bool trace;
	char policy_path[32];
	/* Per run. */
	struct peer peer[NPEERS];
	void *map[NMAPS];
	unsigned nmaps;
} F;

/*
 * Deterministic, so that a corpus replays the same way (see the top
 * comment): every companion's sequence numbers are 0x5a... .
 */
ssize_t getrandom(void *buf, size_t len, unsigned flags)
{
	(void)flags;
	memset(buf, 0x5a, len);
	return (ssize_t)len;
}

/* main.c is not linked in: this is its one function the other files need. */
uint64_t shuntd_new_id(struct shuntd *d)
{
	return ++d->next_id;
}

static void die(const char *what)
{
	fprintf(stderr, "fuzz_proto: %s\n", what);
	abort();
}

#define CHECK(cond, what) do { if (!(cond)) die(what); } while (0)

/* Close a TCP socket without leaving TIME_WAIT behind (a reset). */
static void close_hard(int fd)
{
	struct linger l = { 1, 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

static void keep_socket(struct peer *pe, int fd)
{
	int *slot = &pe->kept[pe->nkept++ % KEEP];

	if (*slot >= 0)
		close_hard(*slot);
	*slot = fd;
}

static int pool_listener(int family, const char *addr, int backlog, int v6only)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (family == AF_INET) {
		struct sockaddr_in *sin = (void *)&ss;

		sin->sin_family = AF_INET;
		inet_pton(AF_INET, addr, &sin->sin_addr);
		len = sizeof(*sin);
	} else {
		struct sockaddr_in6 *sin6 = (void *)&ss;

		sin6->sin6_family = AF_INET6;
		inet_pton(AF_INET6, addr, &sin6->sin6_addr);
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof(v6only));
		len = sizeof(*sin6);
	}
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, backlog) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

static uint16_t port_of(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (fd < 0 || getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return 0;
	return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port :
					       ((struct sockaddr_in6 *)&ss)->sin6_port);
}

static int open_fds(void)
{
	struct pollfd p[FD_PROBE];
	int n = 0;

	for (int i = 0; i < FD_PROBE; i++)
		p[i] = (struct pollfd){ .fd = i, .events = 0 };
	poll(p, FD_PROBE, 0);
	for (int i = 0; i < FD_PROBE; i++)
		n += !(p[i].revents & POLLNVAL);
	return n;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const struct { int family; const char *addr; int backlog, v6only; } pool[NPOOL] = {
		{ AF_INET, "127.0.0.1", 1, 0 },	/* a small accept queue: SYN-queue paths */
		{ AF_INET6, "::1", 2, 1 },
		{ AF_INET, "0.0.0.0", 2, 0 },
		{ AF_INET6, "::", 2, 0 },	/* dual stack */
	};
	struct rlimit rl = { 4096, 4096 };
	struct stat st;
	int fd;

	(void)argc;
	(void)argv;
	F.trace = getenv("FUZZ_TRACE") != NULL;
	shunt_log_setup("shuntd", F.trace ? SHUNT_LOG_DEBUG : SHUNT_LOG_QUIET);
	signal(SIGPIPE, SIG_IGN);
	setrlimit(RLIMIT_NOFILE, &rl);
	for (int i = 0; i < NPOOL; i++) {
		F.pool[i] = pool_listener(pool[i].family, pool[i].addr, pool[i].backlog,
					  pool[i].v6only);
		F.pool_port[i] = port_of(F.pool[i]);
	}
	/* The control socket, in the abstract namespace: nothing to clean up. */
	F.sun.sun_family = AF_UNIX;
	snprintf(F.sun.sun_path + 1, sizeof(F.sun.sun_path) - 1, "shunt-fuzz-%d", (int)getpid());
	F.sunlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
			       strlen(F.sun.sun_path + 1));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&F.sun, F.sunlen) == 0 && listen(fd, 16) == 0,
	      "cannot make the control socket");
	F.d.listen_fd = fd;
	F.d.cfg = (struct shuntd_config){
		.ring_size = SHUNT_RING_MIN,	/* small circuits: cheap to make and poke */
		.idle_exit_ms = -1,
	};
	F.d.metrics_fd = -1;
	F.d.netns_self = stat("/proc/self/ns/net", &st) == 0 ? st.st_ino : 0;
	/*
	 * A policy with every outcome in reach: limits a few connects reach
	 * (a circuit is 12 KiB here), a rule leaving connects to the wildcard
	 * address to the kernel, one refusing 127.0.0.2 (which reaches the
	 * listener on 0.0.0.0).
	 */
	fd = memfd_create("fuzz-policy", MFD_CLOEXEC);
	CHECK(fd >= 0 && dprintf(fd, "[tenant fuzz]\nuid = %u\nmax_connections = 5\n"
				 "max_memory = 40K\n[rule wildcard]\ndst = 0.0.0.0\n"
				 "action = kernel\n[rule two]\ndst = 127.0.0.2\naction = refuse\n",
				 (unsigned)getuid()) > 0, "policy file");
	snprintf(F.policy_path, sizeof(F.policy_path), "/proc/self/fd/%d", fd);
	F.d.cfg.config_path = F.policy_path;
	CHECK(shuntd_policy_load(&F.d) == 0, "the harness's policy");
	CHECK(shuntd_netns_init(&F.d) == 0, "netns views");
	return 0;
}

/* A new process connects; shuntd accepts it. Returns 0, or -1 if shuntd refused. */
static int peer_connect(struct peer *pe)
{
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&F.sun, F.sunlen) == 0, "connect");
	shuntd_session_accept(&F.d);
	pe->fd = fd;
	pe->id = F.d.next_id;
	if (!shunt_map_get(&F.d.sessions, pe->id)) {
		close(fd);
		pe->fd = -1;
		return -1;
	}
	return 0;
}

static struct session *session_of(struct peer *pe)
{
	return pe->fd >= 0 ? shunt_map_get(&F.d.sessions, pe->id) : NULL;
}

/* The process exits: shuntd reads EOF from its socket, as its loop would. */
static void peer_exit(struct peer *pe)
{
	struct session *s = session_of(pe);

	if (pe->fd < 0)
		return;
	close(pe->fd);
	pe->fd = -1;
	pe->nowed = 0;	/* their answers went with the socket */
	if (s)
		shuntd_session_input(&F.d, s);
	CHECK(!shunt_map_get(&F.d.sessions, pe->id), "session outlives EOF");
}

static int make_fd(struct peer *pe, uint8_t b)
{
	int fd = -1;

	switch ((enum fd_kind)(b % FD_KINDS)) {
	case FD_POOL0: case FD_POOL1: case FD_POOL2: case FD_POOL3:
		if (F.pool[b % FD_KINDS] >= 0)
			return dup(F.pool[b % FD_KINDS]);
		/* fall through: no IPv6 here */
	case FD_TCP4:
		return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	case FD_TCP6:
		return socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
	case FD_TCP4_BOUND: {
		struct sockaddr_in sin = { .sin_family = AF_INET,
					   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0)
			bind(fd, (struct sockaddr *)&sin, sizeof(sin));
		return fd;
	}
	case FD_TCP6_BOUND: {
		struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6 };

		fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0)
			bind(fd, (struct sockaddr *)&sin6, sizeof(sin6));
		return fd;
	}
	case FD_KEPT:
		if (pe->nkept) {
			unsigned back = (b / FD_KINDS) % (pe->nkept < KEEP ? pe->nkept : KEEP);

			return dup(pe->kept[(pe->nkept - 1 - back) % KEEP]);
		}
		return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	case FD_UDP:
		return socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	case FD_EVENTFD:
		return eventfd(0, EFD_CLOEXEC);
	case FD_UNIX:
		return socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	case FD_KINDS:
		break;
	}
	return fd;
}

/* Whether a reply's descriptors are what its type and status promise. */
static bool fds_ok(const void *buf, unsigned nfds)
{
	const struct shunt_msg_hdr *h = buf;
	uint16_t t = h->type & ~SHUNT_MSG_REPLY;

	if (!(h->type & SHUNT_MSG_REPLY))
		return nfds == 0;		/* status records */
	/* A channel: its memfd and its bell, and maybe a link. */
	if (h->status == SHUNT_USE_CHANNEL && (t == SHUNT_MSG_CONNECT || t == SHUNT_MSG_ACCEPT))
		return nfds == 2u +
			       (((const struct shunt_msg_chan *)buf)->flags & SHUNT_CHAN_LINK ? 3u : 0u);
	if (h->status != SHUNT_OK)
		return nfds == 0;
	switch (t) {
	case SHUNT_MSG_HELLO:
		/* the link, and the journal when one was made, and with it the directory */
		return nfds == 2 || nfds == 4 || nfds == 5;
	case SHUNT_MSG_LISTEN:
		/* its hold's announce; a new registration's bells and doorbell before it */
		return nfds == 1 || nfds == 3;
	case SHUNT_MSG_CONNECT:
	case SHUNT_MSG_ACCEPT:
		return nfds == 1 + !!(((const struct shunt_msg_circuit *)buf)->flags &
				      SHUNT_CIRCUIT_KERNEL_HALF);
	case SHUNT_MSG_LINK:
	case SHUNT_MSG_LINK_NEXT:
		return nfds == (((const struct shunt_msg_link_reply *)buf)->flags & SHUNT_LINK_GONE ?
				0 : 3);
	default:
		return nfds == 0;
	}
}

/* Take what a circuit reply carries: the kernel half is kept, the control page mapped. */
static void take_circuit(struct peer *pe, const struct shunt_msg_circuit *c, int *fds, unsigned n)
{
	void *p;

	if (n == 2)
		keep_socket(pe, fds[0]);
	CHECK(c->ring_size == F.d.cfg.ring_size, "circuit of another size");
	p = mmap(NULL, shunt_circuit_size(c->ring_size), PROT_READ | PROT_WRITE, MAP_SHARED,
		 fds[n - 1], 0);
	close(fds[n - 1]);
	CHECK(p != MAP_FAILED, "circuit memfd cannot be mapped");
	if (F.map[F.nmaps % NMAPS])
		munmap(F.map[F.nmaps % NMAPS], shunt_circuit_size(F.d.cfg.ring_size));
	F.map[F.nmaps++ % NMAPS] = p;
}

/* Read every message shuntd sent @pe; note up to @max of them in @out. Returns the count. */
static unsigned drain(struct peer *pe, struct reply *out, unsigned max)
{
	unsigned count = 0;

	while (pe->fd >= 0) {
		_Alignas(8) char buf[SHUNT_MSG_MAX + 1];
		union {
			char buf[CMSG_SPACE(sizeof(int) * 8)];
			struct cmsghdr align;
		} ctl;
		struct iovec iov = { buf, sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = ctl.buf, .msg_controllen = sizeof(ctl) };
		int fds[8];
		unsigned nfds = 0;
		ssize_t n = recvmsg(pe->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		const struct shunt_msg_hdr *h = (const void *)buf;

		if (n <= 0)
			break;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			CHECK(c->cmsg_type == SCM_RIGHTS && nfds + k <= 8, "odd control message");
			memcpy(fds + nfds, CMSG_DATA(c), k * sizeof(int));
			nfds += (unsigned)k;
		}
		CHECK(!(mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)), "reply truncated");
		CHECK(shunt_proto_check(buf, (size_t)n) == 0, "shuntd sent a malformed message");
		CHECK(nfds <= SHUNT_MSG_MAX_FDS && fds_ok(buf, nfds),
		      "reply carries the wrong descriptors");
		if (F.trace)
			fprintf(stderr, "  <- peer %d: type %#x seq %u status %d, %u fds\n",
				(int)(pe - F.peer), h->type, h->seq, h->status, nfds);
		if (count < max)
			out[count] = (struct reply){ h->type, h->seq, h->status };
		count++;
		if ((h->type == (SHUNT_MSG_CONNECT | SHUNT_MSG_REPLY) ||
		     h->type == (SHUNT_MSG_ACCEPT | SHUNT_MSG_REPLY)) && nfds &&
		    h->status != SHUNT_USE_CHANNEL) {
			take_circuit(pe, (const void *)buf, fds, nfds);
			continue;
		}
		shunt_proto_close_fds(fds, nfds);
	}
	return count;
}

/* Descriptors a request must carry: the protocol's table (include/shunt/proto.h). */
static unsigned fds_due(uint16_t type)
{
	const struct shunt_request_kind *k = shunt_request_kind(type);

	return k ? k->fds : 0;
}

enum { DUE_NOW_OR_LATER = -2 };

/*
 * How many replies a record with @nfds descriptors must get (-1: any, e.g.
 * STATUS's stream; DUE_NOW_OR_LATER: one, now or in a later step), from
 * docs/protocol.md: shuntd answers what it can tell
 * was a request that wants an answer; a record it could not read whole
 * (truncated, too many descriptors, shorter than a header) is refused
 * unanswered, and so is anything that is not a request.
 */
static int replies_due(const uint8_t *rec, size_t len, unsigned nfds)
{
	const struct shunt_request_kind *k;
	struct shunt_msg_hdr h;
	bool valid;

	if (len < sizeof(h) || len > SHUNT_MSG_MAX || nfds > SHUNT_MSG_MAX_FDS)
		return 0;
	memcpy(&h, rec, sizeof(h));
	valid = shunt_proto_check(rec, len) == 0 && nfds == fds_due(h.type);
	k = shunt_request_kind(h.type);
	switch (k ? k->answered : SHUNT_ANSWER_NEVER) {
	case SHUNT_ANSWER_ALWAYS:		/* once whatever happens, malformed with -EPROTO */
		return 1;
	case SHUNT_ANSWER_STREAM:
		return valid ? -1 : 0;
	case SHUNT_ANSWER_SHARED:
		return valid && (((const struct shunt_msg_close *)(const void *)rec)->flags &
				 SHUNT_CLOSE_SHARED);
	case SHUNT_ANSWER_ASKED: {
		const struct shunt_msg_unlisten *m = (const void *)rec;

		if (!valid || (m->flags & SHUNT_UNLISTEN_UNANSWERED))
			return 0;
		/* A family's last close: now, or once the closes it names are read. */
		return m->after ? DUE_NOW_OR_LATER : 1;
	}
	case SHUNT_ANSWER_NEVER:
		break;
	}
	return 0;	/* not replied, a reply, a status record, or unknown */
}

/* shunt_proto_check's contract, on whatever bytes came in. */
static void check_decoder(const uint8_t *rec, size_t len)
{
	struct shunt_msg_hdr h;

	if (shunt_proto_check(rec, len) < 0)
		return;
	CHECK(len >= sizeof(h) && len <= SHUNT_MSG_MAX, "check passed a bad length");
	memcpy(&h, rec, sizeof(h));
	CHECK(h.version == SHUNT_PROTO_VERSION && h.len == len, "check passed a bad header");
	CHECK(len == shunt_proto_size(h.type) ||
	      ((h.type & SHUNT_MSG_REPLY) && h.status && len == sizeof(h)) ||
	      (h.type == (SHUNT_MSG_CONNECT | SHUNT_MSG_REPLY) && h.status == SHUNT_KERNEL_POLICY &&
	       len == sizeof(struct shunt_msg_connect_kernel)) ||
	      ((h.type == (SHUNT_MSG_CONNECT | SHUNT_MSG_REPLY) ||
		h.type == (SHUNT_MSG_ACCEPT | SHUNT_MSG_REPLY)) && h.status == SHUNT_USE_CHANNEL &&
	       len == sizeof(struct shunt_msg_chan)),
	      "check passed a record of the wrong size");
}

enum { MAX_REPLIES = MAX_OPS + 8 };	/* every answer owed, and a few */

/* Whether @r is an answer shuntd owed @pe; then it owes it no more. */
static bool take_owed(struct peer *pe, const struct reply *r)
{
	if (r->type != (SHUNT_MSG_UNLISTEN | SHUNT_MSG_REPLY))
		return false;
	for (unsigned i = 0; i < pe->nowed; i++)
		if (pe->owed[i] == r->seq) {
			pe->owed[i] = pe->owed[--pe->nowed];
			return true;
		}
	return false;
}

/*
 * The @count replies @got to request @msg (@len bytes, @made descriptors),
 * which is due @due of them: each is its answer, or one owed from before.
 */
static void check_replies(struct peer *pe, const uint8_t *msg, size_t len, unsigned made,
			  int due, const struct reply *got, unsigned count)
{
	const struct shunt_msg_hdr *h = (const void *)msg;
	unsigned mine = 0;

	for (unsigned i = 0; i < count; i++) {
		bool its = due != 0 && got[i].type == (h->type | SHUNT_MSG_REPLY) &&
			   got[i].seq == h->seq;

		/* An owed answer with the same seq first, when this one may come later. */
		if ((!its || due == DUE_NOW_OR_LATER || (due > 0 && mine == (unsigned)due)) &&
		    take_owed(pe, &got[i]))
			continue;
		if (due == -1)
			continue;	/* a stream: any records */
		CHECK(its, "a reply to something else");
		mine++;
		if (shunt_proto_check(msg, len) < 0 || made != fds_due(h->type))
			CHECK(got[i].status == -EPROTO, "a malformed request not refused");
	}
	if (due == DUE_NOW_OR_LATER) {
		CHECK(mine <= 1, "a request answered twice");
		if (!mine) {
			CHECK(pe->nowed < MAX_OPS, "more answers owed than requests");
			pe->owed[pe->nowed++] = h->seq;
		}
		return;
	}
	if (due >= 0 && mine != (unsigned)due) {
		fprintf(stderr, "fuzz_proto: type %u: %u replies, %d due\n",
			len >= 2 ? msg[0] | msg[1] << 8 : 0, mine, due);
		die("a request answered the wrong number of times");
	}
}

static void op_send(struct peer *pe, unsigned nfds, const uint8_t *fdb, const uint8_t *rec,
		    size_t len)
{
	static _Alignas(8) uint8_t msg[65536];
	union {
		char buf[CMSG_SPACE(sizeof(int) * MAX_FDS_SENT)];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { msg, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct reply got[MAX_REPLIES];
	struct session *s;
	int fds[MAX_FDS_SENT];
	unsigned made = 0, count;
	int due;

	memcpy(msg, rec, len);
	check_decoder(msg, len);
	/* CONNECT to port 1..4: the harness's listening socket 0..3, whatever its port. */
	if (len >= sizeof(struct shunt_msg_connect) &&
	    ((struct shunt_msg_hdr *)(void *)msg)->type == SHUNT_MSG_CONNECT) {
		struct shunt_msg_connect *m = (void *)msg;

		if (m->dst.port >= 1 && m->dst.port <= NPOOL && F.pool_port[m->dst.port - 1])
			m->dst.port = F.pool_port[m->dst.port - 1];
	}
	for (unsigned i = 0; i < nfds; i++) {
		int fd = make_fd(pe, fdb[i]);

		if (fd >= 0)
			fds[made++] = fd;
	}
	if (made) {
		struct cmsghdr *c;

		mh.msg_control = ctl.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * made);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * made);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * made);
	}
	if (F.trace)
		fprintf(stderr, "-> peer %d (session %llu): %zu bytes, type %u, %u fds\n",
			(int)(pe - F.peer), (unsigned long long)pe->id, len,
			len >= 2 ? msg[0] | msg[1] << 8 : 0, made);
	if (sendmsg(pe->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
		len = (size_t)-1;	/* not sent (too large for the socket): nothing is due */
	/* Our copies: TCP sockets stay, as a process keeps the socket it connected. */
	for (unsigned i = 0; i < made; i++) {
		int type = 0, dom = 0;
		socklen_t l = sizeof(int);

		getsockopt(fds[i], SOL_SOCKET, SO_TYPE, &type, &l);
		l = sizeof(int);
		getsockopt(fds[i], SOL_SOCKET, SO_DOMAIN, &dom, &l);
		if (type == SOCK_STREAM && (dom == AF_INET || dom == AF_INET6) &&
		    !(fdb[i] % FD_KINDS < NPOOL) && fdb[i] % FD_KINDS != FD_KEPT)
			keep_socket(pe, fds[i]);
		else
			close(fds[i]);
	}
	s = session_of(pe);
	if (s)
		shuntd_session_input(&F.d, s);
	if (!shunt_map_get(&F.d.sessions, pe->id)) {
		/* A zero-length record reads as EOF: shuntd let the process go. */
		CHECK(len == 0, "session dropped");
		close(pe->fd);
		pe->fd = -1;
		return;
	}
	count = drain(pe, got, MAX_REPLIES);
	/*
	 * The other process hears of it through its links, never on its
	 * socket, but for the answers shuntd owed it (a family's last close).
	 */
	{
		struct peer *other = &F.peer[pe == F.peer];
		struct reply late[MAX_REPLIES];
		unsigned n = drain(other, late, MAX_REPLIES);

		CHECK(n <= MAX_REPLIES, "too many replies at once");
		for (unsigned i = 0; i < n; i++)
			CHECK(take_owed(other, &late[i]), "a reply to the wrong session");
	}
	if (len == (size_t)-1) {
		for (unsigned i = 0; i < count; i++)
			CHECK(take_owed(pe, &got[i]), "a reply to something never sent");
		return;
	}
	due = replies_due(msg, len, made);
	/* A stream's records past what was kept are not looked at. */
	CHECK(due == -1 || count <= MAX_REPLIES, "too many replies at once");
	check_replies(pe, msg, len, made, due, got, count < MAX_REPLIES ? count : MAX_REPLIES);
}

static void op_poke(uint8_t which, uint16_t off, uint64_t val)
{
	void *p;
	size_t at = (off % sizeof(struct shunt_circuit_hdr)) & ~(size_t)7;

	if (!F.nmaps)
		return;
	p = F.map[(F.nmaps - 1 - which % (F.nmaps < NMAPS ? F.nmaps : NMAPS)) % NMAPS];
	memcpy((char *)p + at, &val, sizeof(val));
}

static void run_start(void)
{
	struct shuntd *d = &F.d;

	F.baseline = open_fds();
	d->next_id = 0;
	d->circuits_total = d->sessions_total = 0;
	d->live_sessions = 0;
	memset(d->fallbacks, 0, sizeof(d->fallbacks));
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	CHECK(d->epfd >= 0, "epoll_create1");
	shunt_map_init(&d->sessions);
	shunt_map_init(&d->listeners);
	shunt_map_init(&d->circuits);
	shunt_map_init(&d->tickets);
	shunt_list_init(&d->tickets_orphaned);
	shunt_list_init(&d->tickets_unwatched);
	shunt_list_init(&d->family_waiting);
	F.nmaps = 0;
	for (int i = 0; i < NPEERS; i++) {
		struct peer *pe = &F.peer[i];

		memset(pe, 0, sizeof(*pe));
		for (int k = 0; k < KEEP; k++)
			pe->kept[k] = -1;
		CHECK(peer_connect(pe) == 0, "shuntd refused a session");
	}
}

/* Every process goes; shuntd must be back where it started. */
static void run_end(void)
{
	struct shuntd *d = &F.d;
	struct session *s;
	uint64_t key;
	size_t it;

	for (int i = 0; i < NPEERS; i++)
		peer_exit(&F.peer[i]);
	/* Tickets whose child is named: watched now, as 20 ms later in shuntd. */
	for (struct shunt_list *pos = d->tickets_unwatched.next; pos != &d->tickets_unwatched;
	     pos = pos->next)
		shunt_container_of(pos, struct session, due_node)->due_at = 0;
	shuntd_fork_tick(d);
	/* Unclaimed fork tickets: as if their children had died. */
	for (it = 0; (s = shunt_map_next(&d->sessions, &it, &key)); it = 0) {
		CHECK(s->ticket, "a session without a process");
		shuntd_fork_ticket_exited(d, s);
	}
	CHECK(d->tickets.len == 0 && shunt_list_empty(&d->tickets_orphaned) &&
	      shunt_list_empty(&d->tickets_unwatched),
	      "a fork ticket outlives its session");
	CHECK(d->listeners.len == 0, "a listener outlives its holders");
	CHECK(shunt_list_empty(&d->family_waiting), "a close waits for a listener gone");
	CHECK(d->circuits.len == 0, "a circuit outlives its ends");
	/* But shuntd's own, which stays once made (netns.c, shuntd_netns_put), unheld. */
	shuntd_netns_drop_own(d);
	CHECK(d->netns.len == 0, "a network namespace's view outlives its users");
	CHECK(d->live_sessions == 0, "live_sessions miscounted");
	for (struct tenant *t = d->tenants; t; t = t->next)
		CHECK(t->connections == 0 && t->memory == 0, "a tenant still charged");
	for (int i = 0; i < NPEERS; i++)
		for (int k = 0; k < KEEP; k++)
			if (F.peer[i].kept[k] >= 0)
				close_hard(F.peer[i].kept[k]);
	for (unsigned i = 0; i < NMAPS && i < F.nmaps; i++) {
		munmap(F.map[i], shunt_circuit_size(d->cfg.ring_size));
		F.map[i] = NULL;
	}
	shunt_map_free(&d->sessions);
	shunt_map_free(&d->listeners);
	shunt_map_free(&d->circuits);
	shunt_map_free(&d->tickets);
	shunt_map_free(&d->netns);
	close(d->epfd);
	CHECK(open_fds() == F.baseline, "a descriptor leaked");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t at = 0;

	run_start();
	for (int n = 0; n < MAX_OPS && at < size; n++) {
		uint8_t op = data[at++];
		struct peer *pe = &F.peer[op & 1];

		if (pe->fd < 0 && peer_connect(pe) < 0)
			break;
		switch (op_kind(op)) {
		case OP_SEND: {
			unsigned nfds = (op >> 1) & 7;
			const uint8_t *fdb = data + at;
			size_t len;

			if (size - at < nfds + 2)
				goto out;
			at += nfds;
			len = (size_t)data[at] | (size_t)data[at + 1] << 8;
			at += 2;
			if (len > size - at)
				len = size - at;
			op_send(pe, nfds, fdb, data + at, len);
			at += len;
			break;
		}
		case OP_POKE: {
			uint16_t off;
			uint64_t val;

			if (size - at < 11)
				goto out;
			off = (uint16_t)(data[at + 1] | data[at + 2] << 8);
			memcpy(&val, data + at + 3, sizeof(val));
			op_poke(data[at], off, val);
			at += 11;
			break;
		}
		case OP_RESTART:
			peer_exit(pe);
			if (peer_connect(pe) < 0)
				goto out;
			break;
		}
	}
out:
	run_end();
	return 0;
}
