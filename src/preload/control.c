// SPDX-License-Identifier: MIT
/* The control client: this process's session with shuntd. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/log.h"
#include "common/proto.h"
#include "common/sys.h"
#include "preload/chan.h"
#include "preload/control.h"
#include "preload/directory.h"
#include "preload/fdlimit.h"
#include "preload/fdroom.h"
#include "preload/journal.h"
#include "preload/plink.h"
#include "preload/relisten.h"
#include "preload/sandbox.h"
#include "preload/seccomp.h"
#include "preload/stats.h"
#include "preload/util.h"

/*
 * Lock order: ctl_lock is taken after a socket's lock and the notice lock,
 * never before; only the links' lock (to install the daemon link) is taken
 * while it is held.
 */
static pthread_mutex_t ctl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sockaddr_un ctl_addr;	/* set once by init */
static int ctl_fd = -1;			/* under ctl_lock */
static uint32_t ctl_seq;		/* under ctl_lock */
static int64_t ctl_retry_at;		/* under ctl_lock: no reconnect before */
static bool ctl_warned;			/* under ctl_lock */
static bool ctl_had_session;		/* under ctl_lock: a session was opened before */
/*
 * A fork child's claim of its parent's ticket, sent without waiting for it
 * (fork.h): written under ctl_lock, read without it where a load will do.
 */
enum { CLAIM_NONE, CLAIM_SENT, CLAIM_GRANTED, CLAIM_REFUSED };
static _Atomic int claim_state;
/*
 * Whether shuntd may not have read yet the FORK this process sent (no
 * reply to a later request came): the holders counted in each circuit end
 * may not include the child yet (shunt_ctl_holders_known). Written under
 * ctl_lock.
 */
static _Atomic bool fork_unheard;
static uint32_t ctl_fork_seq;		/* under ctl_lock: that FORK's */
static _Atomic uint64_t session_id;	/* written under ctl_lock; 0: no session */
static uint64_t claim_ticket, claim_secret, claim_parent; /* ctl_lock: a fork child's first HELLO */
static bool claim_exec;			/* under ctl_lock: a new image's first HELLO */
static int exec_claimed = -ENOENT;	/* under ctl_lock: what that HELLO's claim said */
/*
 * Patience (docs/connect.md, "When shuntd is slow"): a connect waits for
 * shuntd at most ctl_patience_ns, then lets the kernel connect. Until the
 * reply it gave up on (or a HELLO's) arrives, shuntd is late: connects do
 * not ask, requests that must be answered wait for that reply first.
 */
static int64_t ctl_patience_ns = 200000000;	/* SHUNT_CONNECT_WAIT_US */
static bool ctl_hello_pending;		/* under ctl_lock: HELLO sent, not answered */
/*
 * Under ctl_lock: that HELLO was sent with nobody waiting (a fork child's
 * claim), so it is not late yet: the first request with a deadline waits
 * for it until then, as a new process's first connect waits for its HELLO.
 */
static bool ctl_hello_unwaited;
static struct shunt_msg_hello ctl_hello;	/* under ctl_lock: that HELLO */
static bool ctl_late;			/* under ctl_lock: a CONNECT was given up on... */
static uint32_t ctl_late_seq;		/* ...this one (or an ACCEPT)... */
static uint16_t ctl_late_type;		/* ...of this type... */
static struct shunt_wire_addr ctl_late_dst;	/* ...to there (a late channel is kept) */

void shunt_ctl_init(void)
{
	const char *wait = getenv("SHUNT_CONNECT_WAIT_US");

	if (wait && *wait)
		ctl_patience_ns = (int64_t)strtoull(wait, NULL, 10) * 1000;
	const char *path = getenv("SHUNT_SOCKET");

	if (!path || !*path)
		path = "/run/shunt/shuntd.sock";
	ctl_addr.sun_family = AF_UNIX;
	if (strlen(path) < sizeof(ctl_addr.sun_path))
		strcpy(ctl_addr.sun_path, path);
}

void shunt_ctl_fork_prepare(void)
{
	pthread_mutex_lock(&ctl_lock);
}

void shunt_ctl_fork_parent(void)
{
	pthread_mutex_unlock(&ctl_lock);
}

void shunt_ctl_after_fork(void)
{
	/* Only this thread exists in the child; the lock may have been held. */
	pthread_mutex_init(&ctl_lock, NULL);
	if (ctl_fd >= 0)
		shunt_close_hidden(ctl_fd);
	ctl_fd = -1;
	ctl_retry_at = 0;
	claim_ticket = 0;
	atomic_store(&claim_state, CLAIM_NONE);
	atomic_store(&fork_unheard, false);	/* the parent's FORK: its to hear of */
	ctl_hello_pending = ctl_late = false;
	atomic_store(&session_id, 0);
}

/*
 * The session is over (shuntd died, or broke the protocol): what it held at
 * shuntd is released there, if shuntd still lives. Connections keep their
 * circuits; new ones use the kernel until a session can be opened again.
 */
static void drop_session(const char *why, int err)
{
	if (!ctl_warned)
		shunt_warn("lost shuntd at %s (%s: %s); new sockets use the kernel",
			   ctl_addr.sun_path, why, strerror(err));
	ctl_warned = true;
	shunt_journal_drop();
	shunt_directory_drop();
	shunt_chan_drop_clients();
	shunt_close_hidden(ctl_fd);
	ctl_fd = -1;
	ctl_hello_pending = ctl_late = false;
	/* A claim that got no answer holds nothing for us. */
	if (claim_state == CLAIM_SENT)
		atomic_store(&claim_state, CLAIM_REFUSED);
	atomic_store(&fork_unheard, false);
	atomic_store(&session_id, 0);
	ctl_retry_at = shunt_now_ns() + 1000000000;
	shunt_relisten_lost();
}

/*
 * A reply and the descriptors that came with it. @want: how many the reply
 * may carry; near the descriptor limit room is made for them before the
 * request goes out (fdlimit.c), and without room it does not go out at all
 * (-EMFILE). @truncated: the kernel could not install them all
 * (MSG_CTRUNC); the session goes on, and the caller gives back what the
 * reply gave.
 */
struct answer {
	_Alignas(8) char buf[SHUNT_MSG_MAX];
	int fds[SHUNT_MSG_MAX_FDS];
	unsigned nfds;
	unsigned want;
	bool truncated;
};

struct patience;
static int exchange_locked(void *req, const int *fds, unsigned nfds, struct answer *a,
			   const struct patience *pt);
static int receive_locked(const struct shunt_msg_hdr *h, struct answer *a);
static bool catch_up_locked(int64_t deadline);
static int take_grant(int status, const void *reply, int *rfds, unsigned n,
		      struct shunt_grant *g);

/* No session for now, for want of descriptors: nothing to warn about, nothing lost. */
static void close_quietly_locked(void)
{
	shunt_journal_drop();
	shunt_directory_drop();
	shunt_close_hidden(ctl_fd);
	ctl_fd = -1;
	ctl_hello_pending = ctl_late = false;
	atomic_store(&session_id, 0);
	ctl_retry_at = shunt_now_ns() + 1000000000;
}

/*
 * Whether filter stack @c lets us talk to shuntd over @fd (-1: no session
 * yet): open the socket and connect it, then send and receive on it. Both
 * directions are judged before anything is sent, since half an exchange
 * would drop the session, and with it everything it holds at shuntd.
 */
static bool may_ask(const struct shunt_chain *c, int fd)
{
	if (!c)
		return true;
	if (fd < 0) {
		/* Its number is not known yet: the gate judges the real calls too. */
		if (!shunt_chain_allows(c, SYS_socket, (const long[6]){ AF_UNIX,
					SOCK_SEQPACKET | SOCK_CLOEXEC, 0 }) ||
		    !shunt_chain_allows(c, SYS_connect, (const long[6]){ 0, 0, sizeof(ctl_addr) }))
			return false;
		fd = 0;
	}
	return shunt_chain_allows(c, SYS_sendmsg, (const long[6]){ fd, 0, MSG_NOSIGNAL }) &&
	       shunt_chain_allows(c, SYS_recvmsg, (const long[6]){ fd, 0, MSG_CMSG_CLOEXEC });
}

bool shunt_ctl_usable(const struct shunt_chain *c)
{
	bool ok;

	if (!c)
		return true;
	pthread_mutex_lock(&ctl_lock);
	ok = may_ask(c, ctl_fd);
	pthread_mutex_unlock(&ctl_lock);
	return ok;
}

/*
 * Wait until the session's socket has something to read: 1, or 0 when
 * @deadline (CLOCK_MONOTONIC, ns) passed first. -1: no deadline (the
 * receive blocks). A filter that forbids the look makes it block too.
 */
static int reply_ready_locked(int64_t deadline)
{
	struct pollfd p = { ctl_fd, POLLIN, 0 };

	if (deadline < 0)
		return 1;
	for (;;) {
		int64_t left = deadline - shunt_now_ns();
		struct timespec ts = { 0, 0 };
		long r;

		if (left > 0)
			ts = (struct timespec){ left / 1000000000, left % 1000000000 };
		r = shunt_syscall(SYS_ppoll, &p, 1, &ts, NULL, 8);
		if (r != 0)
			return r > 0 || errno != EINTR ? 1 : (left > 0 ? 0 : 1) * 0 + (left > 0);
		return 0;
	}
}

/* The HELLO's reply is in @a (status @r): take the session it opens. */
static int hello_answered_locked(int r, struct answer *a)
{
	/* A claim is granted only by a reply that opens the session below. */
	if (ctl_hello.flags & SHUNT_HELLO_CLAIM)
		atomic_store(&claim_state, CLAIM_REFUSED);
	if (r == -EMFILE || (r == SHUNT_OK && a->truncated)) {
		/* Out of descriptors: shuntd ends the session it began when we close. */
		shunt_close_replies(a->fds, a->nfds);
		close_quietly_locked();
		return -ENOTCONN;
	}
	/* The daemon link, and the journal if shuntd keeps one for us, and its directory. */
	if (r != SHUNT_OK || (a->nfds != 2 && a->nfds != 4 && a->nfds != 5)) {
		shunt_close_replies(a->fds, a->nfds);
		drop_session("hello", r < 0 ? -r : EPROTO);
		return -ENOTCONN;
	}
	if (a->nfds >= 4 && shunt_journal_install(a->fds[2], a->fds[3]) < 0)
		shunt_info("shuntd's journal could not be mapped; every connect asks shuntd");
	if (a->nfds == 5 && shunt_directory_install(a->fds[4]) < 0)
		shunt_info("shuntd's directory could not be mapped; every connect asks shuntd");
	const struct shunt_msg_hello_reply *hr = (const void *)a->buf;
	bool claimed = (ctl_hello.flags & SHUNT_HELLO_CLAIM) && !hr->claim;

	if (ctl_hello.flags & SHUNT_HELLO_EXEC)
		exec_claimed = hr->claim;

	if ((ctl_hello.flags & SHUNT_HELLO_CLAIM) && hr->claim)
		shunt_warn("shuntd refused this fork child its parent's sockets (%s); "
			   "they may end when the parent closes them", strerror(-hr->claim));
	if (shunt_plink_install_daemon(hr->link, a->fds) < 0) {
		drop_session("daemon link", EPROTO);
		return -ENOTCONN;
	}
	atomic_store(&session_id, hr->session);
	if (claimed)
		atomic_store(&claim_state, CLAIM_GRANTED);
	if (ctl_warned && ctl_had_session)
		shunt_info("shuntd at %s answers again", ctl_addr.sun_path);
	ctl_warned = false;
	/*
	 * Not the first session, and not a fork child's claim of what its
	 * parent holds: this daemon knows none of our listeners (a restarted
	 * shuntd, or one that dropped us). They are registered again.
	 */
	if (ctl_had_session && !claimed)
		shunt_relisten_renew();
	ctl_had_session = true;
	return 0;
}

/* The HELLO sent earlier, answered by @deadline (-1: however long it takes), or -ETIMEDOUT. */
static int hello_reply_locked(int64_t deadline)
{
	struct answer a = { .want = 5 };
	int r = reply_ready_locked(deadline);

	/* Waited for (or given up on): late from now on, if it is not here. */
	if (deadline)
		ctl_hello_unwaited = false;
	if (r == 0) {
		if (deadline)
			shunt_stats.late_waits++;
		return -ETIMEDOUT;
	}
	ctl_hello_pending = false;
	r = receive_locked(&ctl_hello.h, &a);
	if (r == -ENOTCONN)
		return r;
	return hello_answered_locked(r, &a);
}

/*
 * A session, answered by @deadline (-1: none): 0, -ETIMEDOUT (the HELLO
 * stays sent; a later call takes its reply) or -ENOTCONN.
 */
static int open_session_locked(int64_t deadline)
{
	int held[SHUNT_MSG_MAX_FDS];
	int fd, r;

	/* A HELLO answered late: shuntd is late, a connect does not wait for it again. */
	if (ctl_fd >= 0) {
		if (!ctl_hello_pending)
			return 0;
		return hello_reply_locked(deadline < 0 ? -1 : ctl_hello_unwaited ? deadline : 0);
	}
	if (!ctl_addr.sun_path[0] || shunt_now_ns() < ctl_retry_at ||
	    !may_ask(shunt_seccomp_chain(), -1))
		return -ENOTCONN;
	fd = (int)shunt_syscall(SYS_socket, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (shunt_syscall(SYS_connect, fd, &ctl_addr, sizeof(ctl_addr)) < 0) {
		r = -errno;
		shunt_close_internal(fd);
		if (!ctl_warned)
			shunt_info("shuntd not reachable at %s (%s); using the kernel",
				   ctl_addr.sun_path, strerror(-r));
		ctl_warned = true;
		ctl_retry_at = shunt_now_ns() + 1000000000;
		return -ENOTCONN;
	}
	ctl_fd = shunt_fd_hide(fd);
	if (ctl_fd < 0) {
		/* No room even in the reserve: as if shuntd did not answer, for now. */
		ctl_fd = -1;
		ctl_retry_at = shunt_now_ns() + 1000000000;
		return -ENOTCONN;
	}
	shunt_proto_init(&ctl_hello, SHUNT_MSG_HELLO, sizeof(ctl_hello), 0);
	if (claim_ticket) {
		ctl_hello.flags = SHUNT_HELLO_CLAIM;
		ctl_hello.ticket = claim_ticket;
		ctl_hello.secret = claim_secret;
		ctl_hello.parent = claim_parent;
		claim_ticket = 0;
	} else if (claim_exec) {
		ctl_hello.flags = SHUNT_HELLO_EXEC;
		claim_exec = false;
	}
	/*
	 * Room for the reply's descriptors, or no session for now; the room
	 * kept for what cannot wait (fdroom.c) may serve: a fork child
	 * claims here what it inherited, and everything else needs a session.
	 */
	if (shunt_fdlimit_hold(ctl_fd, SHUNT_MSG_MAX_FDS, held, true) < 0) {
		close_quietly_locked();
		return -ENOTCONN;
	}
	ctl_hello.h.seq = ++ctl_seq;
	r = shunt_proto_send(ctl_fd, &ctl_hello, NULL, 0);
	shunt_fdlimit_release(SHUNT_MSG_MAX_FDS, held);
	if (r < 0) {
		drop_session("send", -r);
		return -ENOTCONN;
	}
	shunt_stats.ctl_asks++;
	ctl_hello_pending = true;
	ctl_hello_unwaited = deadline == 0;
	return hello_reply_locked(deadline);
}

/*
 * Take the reply to the connect given up on, if it came by @deadline (0:
 * only if it is here; -1: however long it takes), and the HELLO's before
 * it. True once nothing is late any more (the session may be gone).
 */
static bool catch_up_locked(int64_t deadline)
{
	struct answer a = { .want = SHUNT_MSG_MAX_FDS };
	struct shunt_msg_hdr h;
	struct shunt_grant g;
	int r;

	if (ctl_fd < 0)
		return true;
	if (ctl_hello_pending && hello_reply_locked(deadline) == -ETIMEDOUT)
		return false;
	if (!ctl_late)
		return true;
	if (reply_ready_locked(deadline) == 0)
		return false;
	ctl_late = false;
	shunt_proto_init(&h, ctl_late_type, sizeof(h), ctl_late_seq);
	r = receive_locked(&h, &a);
	if (ctl_late_type == SHUNT_MSG_CONNECT && r == SHUNT_USE_CHANNEL && !a.truncated) {
		/* A channel needs no socket: the next connect there uses it. */
		if (take_grant(r, a.buf, a.fds, a.nfds, &g) == SHUNT_USE_CHANNEL)
			shunt_chan_install_client(&g, &ctl_late_dst);
		return true;
	}
	shunt_close_replies(a.fds, a.nfds);
	return true;
}

/*
 * How long a request may be waited for: until @deadline (CLOCK_MONOTONIC,
 * ns), for a CONNECT to @dst whose @flags then get SHUNT_CONNECT_DEADLINE.
 */
struct patience {
	int64_t deadline;
	uint32_t *flags;
	uint32_t flag;				/* SHUNT_CONNECT_DEADLINE or SHUNT_ACCEPT_DEADLINE */
	const struct shunt_wire_addr *dst;	/* a CONNECT's (a late channel is kept) */
};

/* SHUNT_CONNECT_WAIT_US from now, for a request whose @flags get @flag. */
static struct patience patience_from_now(uint32_t *flags, uint32_t flag,
					 const struct shunt_wire_addr *dst)
{
	return (struct patience){ .deadline = shunt_now_ns() + ctl_patience_ns, .flags = flags,
				  .flag = flag, .dst = dst };
}

/*
 * Send @req and wait for its reply, into @a; with @pt, give it up at its
 * deadline if shuntd has not taken it by then. The reply must answer this
 * request: same type and sequence number, and a well-formed message.
 * Returns the reply's status (>= 0), -EMFILE when there is no room for the
 * descriptors it may carry (nothing was sent), -ETIMEDOUT when it was
 * given up (or not sent, shuntd being late), or -errno; on a transport
 * error the session is dropped. The caller closes @a->fds.
 */
static int exchange_locked(void *req, const int *fds, unsigned nfds, struct answer *a,
			   const struct patience *pt)
{
	struct shunt_msg_hdr *h = req;
	int held[SHUNT_MSG_MAX_FDS];
	bool may_give_up;
	int r;

	a->nfds = 0;
	a->truncated = false;
	/* What shuntd answers late comes first; while it is late, a connect does not ask. */
	if (!catch_up_locked(pt ? 0 : -1))
		return -ETIMEDOUT;
	if (ctl_fd < 0)
		return -ENOTCONN;
	/*
	 * An accept's reply takes the room kept for it (fdroom.c): the
	 * connection waits in shared memory, with no kernel to fall back on
	 * as a connect has.
	 */
	if (shunt_fdlimit_hold(ctl_fd, a->want, held, h->type == SHUNT_MSG_ACCEPT) < 0)
		return -EMFILE;
	h->seq = ++ctl_seq;
	may_give_up = pt && shunt_journal_claim_offer(h->seq);
	if (may_give_up)
		*pt->flags |= pt->flag;
	r = shunt_proto_send(ctl_fd, req, fds, nfds);
	/* The reply's descriptors are installed when we receive it: room for them now. */
	shunt_fdlimit_release(a->want, held);
	if (r < 0) {
		drop_session("send", -r);
		return -ENOTCONN;
	}
	shunt_stats.ctl_asks++;
	if (may_give_up && reply_ready_locked(pt->deadline) == 0 &&
	    shunt_journal_claim_withdraw(h->seq)) {
		ctl_late = true;
		ctl_late_seq = h->seq;
		ctl_late_type = h->type;
		if (pt->dst)
			ctl_late_dst = *pt->dst;
		shunt_stats.late_waits++;
		return -ETIMEDOUT;
	}
	return receive_locked(h, a);
}

/* The reply to request @h, into @a: its status, or -ENOTCONN (the session is dropped). */
static int receive_locked(const struct shunt_msg_hdr *h, struct answer *a)
{
	ssize_t len = shunt_proto_recv_reply(ctl_fd, a->buf, a->fds, &a->nfds, &a->truncated);

	if (len <= 0) {
		drop_session("receive", len ? (int)-len : ECONNRESET);
		return -ENOTCONN;
	}
	const struct shunt_msg_hdr *rh = (const void *)a->buf;

	if (shunt_proto_check(a->buf, (size_t)len) < 0 ||
	    rh->type != (h->type | SHUNT_MSG_REPLY) || rh->seq != h->seq) {
		shunt_close_replies(a->fds, a->nfds);
		a->nfds = 0;
		drop_session("reply", EPROTO);
		return -ENOTCONN;
	}
	/* Answered after our FORK: shuntd has read it, and counts the child. */
	if (atomic_load_explicit(&fork_unheard, memory_order_relaxed) &&
	    (int32_t)(rh->seq - ctl_fork_seq) > 0)
		atomic_store_explicit(&fork_unheard, false, memory_order_release);
	/* Where they landed says how full the program's range is. */
	for (unsigned i = 0; i < a->nfds; i++)
		shunt_fdlimit_note(a->fds[i]);
	/* What they left free of the room kept for them is kept again (fdroom.c). */
	shunt_fdroom_received(a->fds, a->nfds);
	return rh->status;
}

static int request_within(void *req, const int *fds, unsigned nfds, struct answer *a,
			  const struct patience *pt)
{
	int r;

	pthread_mutex_lock(&ctl_lock);
	r = open_session_locked(pt ? pt->deadline : -1);
	/* A seccomp filter that forbids the exchange: as if shuntd were gone. */
	if (r == 0 && !may_ask(shunt_seccomp_chain(), ctl_fd))
		r = -ENOTCONN;
	if (r == 0) {
		r = exchange_locked(req, fds, nfds, a, pt);
	} else {
		a->nfds = 0;
		a->truncated = false;
	}
	pthread_mutex_unlock(&ctl_lock);
	return r;
}

static int request(void *req, const int *fds, unsigned nfds, struct answer *a)
{
	return request_within(req, fds, nfds, a, NULL);
}

/* A request whose reply carries no descriptor we want: 0, a status, or -errno. */
static int request_plain(void *req, const int *fds, unsigned nfds, struct answer *a)
{
	int r = request(req, fds, nfds, a);

	shunt_close_replies(a->fds, a->nfds);
	a->nfds = 0;
	return r;
}

uint64_t shunt_ctl_session(void)
{
	uint64_t id = atomic_load_explicit(&session_id, memory_order_acquire);

	if (id)
		return id;
	pthread_mutex_lock(&ctl_lock);
	open_session_locked(-1);
	pthread_mutex_unlock(&ctl_lock);
	return atomic_load_explicit(&session_id, memory_order_acquire);
}

bool shunt_ctl_has_session(void)
{
	return atomic_load_explicit(&session_id, memory_order_acquire) != 0;
}

void shunt_ctl_open_session(void)
{
	/* Under a filter that forbids circuits every connect is the kernel's: no session. */
	if (shunt_ctl_has_session() || shunt_sandbox_forbids_circuits())
		return;
	pthread_mutex_lock(&ctl_lock);
	open_session_locked(shunt_now_ns() + ctl_patience_ns);
	pthread_mutex_unlock(&ctl_lock);
}

int shunt_ctl_claim_send(uint64_t ticket, uint64_t secret, uint64_t parent)
{
	int r;

	pthread_mutex_lock(&ctl_lock);
	claim_ticket = ticket;
	claim_secret = secret;
	claim_parent = parent;
	atomic_store(&claim_state, CLAIM_SENT);
	/* Taken now only if it is here already; else by whoever needs the session first. */
	r = open_session_locked(0);
	claim_ticket = 0;
	if (r == -ETIMEDOUT)
		r = 0;
	if (r < 0 || claim_state == CLAIM_REFUSED) {
		/* The caller lets go of what it inherited at once. */
		atomic_store(&claim_state, CLAIM_NONE);
		r = r < 0 ? r : -EACCES;
	}
	pthread_mutex_unlock(&ctl_lock);
	return r;
}

int shunt_ctl_claim_finish(void)
{
	int r;

	pthread_mutex_lock(&ctl_lock);
	if (claim_state == CLAIM_SENT)
		open_session_locked(-1);
	r = claim_state == CLAIM_GRANTED ? 0 : -EACCES;
	atomic_store(&claim_state, CLAIM_NONE);	/* settled: the caller acts on it */
	pthread_mutex_unlock(&ctl_lock);
	return r;
}

bool shunt_ctl_claim_refused(void)
{
	return atomic_load(&claim_state) == CLAIM_REFUSED;
}

/* Send @msg, which is not answered, on the session (ctl_fd open, sending allowed). */
static void send_locked(void *msg)
{
	int r;

	((struct shunt_msg_hdr *)msg)->seq = ++ctl_seq;
	r = shunt_proto_send(ctl_fd, msg, NULL, 0);
	if (r < 0)
		drop_session("send", -r);
}

/* Send a message that has no reply. */
static void notify(void *msg)
{
	pthread_mutex_lock(&ctl_lock);
	/* Not sent when a filter forbids it: shuntd cleans up when we exit. */
	if (ctl_fd >= 0 && may_ask(shunt_seccomp_chain(), ctl_fd))
		send_locked(msg);
	pthread_mutex_unlock(&ctl_lock);
}

int shunt_ctl_listen(int fd, uint64_t refresh, uint64_t *listener, struct shunt_listen_fds *out)
{
	struct shunt_msg_listen m;
	unsigned want = refresh ? 1 : 3;
	struct answer a = { .want = want };
	int r, *got[3] = { NULL, NULL, NULL };

	/* Not a new registration that could not be served once made. */
	if (!refresh && shunt_sandbox_forbids_circuits())
		return -ENOTCONN;
	shunt_proto_init(&m, SHUNT_MSG_LISTEN, sizeof(m), 0);
	m.listener = refresh;
	r = request(&m, &fd, 1, &a);
	if (r != SHUNT_OK) {
		shunt_close_replies(a.fds, a.nfds);
		return r > 0 ? -EPROTO : r;
	}
	*listener = ((struct shunt_msg_listen_reply *)a.buf)->listener;
	if (a.nfds != want) {
		shunt_close_replies(a.fds, a.nfds);
		if (refresh)
			return a.truncated ? -EMFILE : -EPROTO;
		if (!a.truncated)
			return -EPROTO;
		/* Its bells did not arrive: the listener stays kernel-only. */
		shunt_ctl_unlisten(*listener, SHUNT_FAMILY_NONE, SHUNT_UNLISTEN_CLOSE);
		*listener = 0;
		return -EMFILE;
	}
	if (!out) {
		shunt_close_replies(a.fds, a.nfds);
		return 0;
	}
	if (refresh) {
		got[0] = &out->announce;
	} else {
		got[0] = &out->bells;
		got[1] = &out->doorbell;
		got[2] = &out->announce;
	}
	out->bells = out->doorbell = out->announce = -1;
	r = 0;
	/* Each hidden, or closed (shunt_fd_hide); all of them closed if one fails. */
	for (unsigned i = 0; i < want; i++)
		if ((*got[i] = shunt_fd_hide(a.fds[i])) < 0)
			r = -EMFILE;
	if (r == 0)
		return 0;
	for (unsigned i = 0; i < want; i++)
		if (*got[i] >= 0)
			shunt_close_hidden(*got[i]);
	out->bells = out->doorbell = out->announce = -1;
	if (!refresh) {
		/* Nowhere to keep them: the listener stays kernel-only. */
		shunt_ctl_unlisten(*listener, SHUNT_FAMILY_NONE, SHUNT_UNLISTEN_CLOSE);
		*listener = 0;
	}
	return r;
}

void shunt_ctl_unlisten(uint64_t listener, int slot, enum shunt_unlisten_how how)
{
	struct shunt_msg_unlisten m;
	struct shunt_family_leave lv;
	struct answer a = { .want = 0 };

	shunt_proto_init(&m, SHUNT_MSG_UNLISTEN, sizeof(m), 0);
	m.listener = listener;
	m.flags = how == SHUNT_UNLISTEN_SHUT ? SHUNT_UNLISTEN_SHUTDOWN : 0;
	/* At exit, from whatever thread: never behind another thread's request. */
	if (how == SHUNT_UNLISTEN_EXIT) {
		if (pthread_mutex_trylock(&ctl_lock) != 0) {
			shunt_family_leave(slot, false);
			return;
		}
	} else {
		pthread_mutex_lock(&ctl_lock);
	}
	/*
	 * Only on the session that knows the listener: a new one (shuntd
	 * restarted) would not. A close not sent is not counted either, or
	 * the family's last would wait for it (family.h).
	 */
	if (ctl_fd < 0 || !may_ask(shunt_seccomp_chain(), ctl_fd)) {
		shunt_family_leave(slot, false);
		goto out;
	}
	lv = shunt_family_leave(slot, how != SHUNT_UNLISTEN_SHUT);
	if (how == SHUNT_UNLISTEN_EXIT && !lv.counted)
		goto out;	/* another thread's close got there first */
	if (lv.counted)
		m.flags |= SHUNT_UNLISTEN_COUNTED;
	/*
	 * Held by others of its family still (a fork child closing what its
	 * parent listens on): like the close of one of several references to
	 * a kernel socket, it changes nothing anyone can see. shuntd hears of
	 * it before any later request of ours, and nobody waits for it. The
	 * directory must agree: a family's count stays high for a holder
	 * killed before it closed, which shuntd has seen go. An exiting
	 * process never waits (as before, when only its session's end told).
	 */
	if ((lv.counted && lv.others && shunt_directory_listener_holders(listener) >= 2) ||
	    how == SHUNT_UNLISTEN_EXIT) {
		m.flags |= SHUNT_UNLISTEN_UNANSWERED;
		send_locked(&m);
		goto out;
	}
	/*
	 * Waited for: the port and the queue must be as the kernel leaves
	 * them when close() returns. The family's last holder has shuntd read
	 * the others' closes first (family.h).
	 */
	if (lv.counted && !lv.others)
		m.after = lv.closes;
	exchange_locked(&m, NULL, 0, &a, NULL);
	shunt_close_replies(a.fds, a.nfds);
out:
	pthread_mutex_unlock(&ctl_lock);
}

static void unlisten_at_exit(int slot, uint64_t listener)
{
	shunt_ctl_unlisten(listener, slot, SHUNT_UNLISTEN_EXIT);
}

void shunt_ctl_exit(void)
{
	/* A vfork child runs in our memory: what it would let go of is its parent's. */
	if (!shunt_family_held() || (uint32_t)shunt_syscall(SYS_getpid) != shunt_pid)
		return;
	shunt_family_each_held(unlisten_at_exit);
}

void shunt_grant_discard(struct shunt_grant *g)
{
	int fds[3] = { g->kernel_half, g->memfd, g->bell };

	shunt_close_replies(fds, 3);
	g->kernel_half = g->memfd = g->bell = -1;
}

/* Install the link that came with channel reply @m (its three descriptors taken over). */
static void take_chan_link(const struct shunt_msg_chan *m, int fds[3])
{
	struct shunt_msg_link_reply r = { .link = m->link, .partner = m->partner, .side = m->side };

	if (r.side > 1) {
		shunt_close_replies(fds, 3);
		return;
	}
	shunt_plink_install(&r, fds);
}

/* Unpack a circuit reply and its descriptors into @g. */
static int take_grant(int status, const void *reply, int *rfds, unsigned n,
		      struct shunt_grant *g)
{
	unsigned want, i = 0;

	g->kernel_half = g->memfd = g->bell = -1;
	g->offset = 0;
	if (status == SHUNT_USE_CHANNEL) {
		unsigned nlink;

		/* shunt_proto_check let this status through only as a channel. */
		memcpy(&g->chan, reply, sizeof(g->chan));
		nlink = g->chan.flags & SHUNT_CHAN_LINK ? 3 : 0;
		if (n < 1 + nlink || n > 2 + nlink) {
			shunt_close_replies(rfds, n);
			return -EPROTO;
		}
		g->memfd = rfds[0];
		g->bell = n - nlink == 2 ? rfds[1] : -1;
		/* A link to the other side, saving the LINK_NEXT that would fetch it. */
		if (nlink)
			take_chan_link(&g->chan, rfds + n - 3);
		if (g->chan.gone)
			shunt_plink_gone(g->chan.gone);
		return status;
	}
	if (status != SHUNT_OK) {
		shunt_close_replies(rfds, n);
		return status;
	}
	memcpy(&g->msg, reply, sizeof(g->msg));
	want = 1 + (g->msg.flags & SHUNT_CIRCUIT_KERNEL_HALF ? 1 : 0);
	if (n != want || g->msg.end > 1) {
		shunt_close_replies(rfds, n);
		return -EPROTO;
	}
	if (g->msg.flags & SHUNT_CIRCUIT_KERNEL_HALF)
		g->kernel_half = rfds[i++];
	g->memfd = rfds[i++];
	return 0;
}

/*
 * shuntd gave us an end of circuit @c whose descriptors did not arrive: give
 * it back, with @fd, the socket of the request. WITHDRAW has no reply; the
 * shared CLOSE of circuit 0 after it, which every shuntd answers, returns
 * once it is done: a connecting socket must be as it was before the
 * request (unconnected, out of repair mode) before the kernel connects it.
 */
static void withdraw(const struct shunt_msg_circuit *c, int fd)
{
	struct shunt_msg_withdraw m;
	struct shunt_msg_close barrier;
	struct answer a = { .want = 0 };
	int r;

	shunt_proto_init(&m, SHUNT_MSG_WITHDRAW, sizeof(m), 0);
	m.circuit = c->circuit;
	m.end = c->end;
	shunt_proto_init(&barrier, SHUNT_MSG_CLOSE, sizeof(barrier), 0);
	barrier.flags = SHUNT_CLOSE_SHARED;
	pthread_mutex_lock(&ctl_lock);
	/* The session the circuit came from (a new one would not know it). */
	if (ctl_fd >= 0) {
		m.h.seq = ++ctl_seq;
		r = shunt_proto_send(ctl_fd, &m, &fd, 1);
		if (r < 0) {
			drop_session("send", -r);
		} else {
			exchange_locked(&barrier, NULL, 0, &a, NULL);
			shunt_close_replies(a.fds, a.nfds);
		}
	}
	pthread_mutex_unlock(&ctl_lock);
}

/*
 * Send @req with socket @fd; a circuit reply (with up to @want descriptors)
 * is unpacked into @g. -EMFILE when there is no room for its descriptors:
 * then shuntd was not asked, or was given the circuit back. A CONNECT the
 * policy left to the kernel comes with its reason, copied to @why if given.
 */
static int request_circuit(void *req, int fd, unsigned want, struct shunt_grant *g,
			   struct shunt_msg_connect_kernel *why, const struct patience *pt)
{
	struct answer a = { .want = want };
	int r = request_within(req, &fd, 1, &a, pt);

	if (r == SHUNT_USE_CHANNEL && a.truncated) {
		/* Not delivered whole: do without it (the next connect asks again). */
		shunt_close_replies(a.fds, a.nfds);
		g->kernel_half = g->memfd = g->bell = -1;
		return -EMFILE;
	}
	if (r == SHUNT_OK && a.truncated) {
		shunt_close_replies(a.fds, a.nfds);
		g->kernel_half = g->memfd = g->bell = -1;
		/* A SHUNT_OK reply to CONNECT or ACCEPT is a circuit (shunt_proto_check). */
		withdraw((const struct shunt_msg_circuit *)a.buf, fd);
		return -EMFILE;
	}
	/* shunt_proto_check let this status through only with its reason. */
	if (r == SHUNT_KERNEL_POLICY && why)
		memcpy(why, a.buf, sizeof(*why));
	return take_grant(r, a.buf, a.fds, a.nfds, g);
}

int shunt_ctl_connect(int fd, const struct shunt_wire_addr *dst, uint32_t flags,
		      struct shunt_grant *g, struct shunt_msg_connect_kernel *why)
{
	struct shunt_msg_connect m;
	int r;

	/* A seccomp filter forbids what the circuit would need: the kernel connects. */
	if (shunt_sandbox_forbids_circuits()) {
		shunt_stats.fallback_seccomp++;
		return -ENOTCONN;
	}
	shunt_proto_init(&m, SHUNT_MSG_CONNECT, sizeof(m), 0);
	m.dst = *dst;
	m.flags = flags;
	struct patience pt = patience_from_now(&m.flags, SHUNT_CONNECT_DEADLINE, dst);
	/* A circuit's memfd, or a channel's with its bell and a link's three. */
	r = request_circuit(&m, fd, SHUNT_MSG_MAX_FDS, g, why, &pt);
	if (r == -ENOTCONN)
		shunt_stats.fallback_nodaemon++;
	else if (r == -ETIMEDOUT)
		shunt_stats.fallback_late++;
	return r;
}

int shunt_ctl_accept(int fd, uint64_t listener, struct shunt_grant *g)
{
	struct shunt_msg_accept m;
	int r;

	shunt_proto_init(&m, SHUNT_MSG_ACCEPT, sizeof(m), 0);
	m.listener = listener;
	/*
	 * Given up on like a connect: a doorbell that rang for a client still
	 * queueing (chan.c) must not make accept() wait for a stopped shuntd.
	 */
	struct patience pt = patience_from_now(&m.flags, SHUNT_ACCEPT_DEADLINE, NULL);
	/* A circuit's memfd and kernel half, or a channel's memfd and bell and a link's three. */
	r = request_circuit(&m, fd, SHUNT_MSG_MAX_FDS, g, NULL, &pt);
	/*
	 * shuntd is gone, and what it had queued went with it, its doorbell
	 * too: nothing to take, the kernel's queue is still there.
	 */
	return r;
}

int shunt_ctl_close(uint64_t circuit, unsigned end, bool shared)
{
	struct shunt_msg_close m;
	struct answer a = { .want = 0 };

	shunt_proto_init(&m, SHUNT_MSG_CLOSE, sizeof(m), 0);
	m.circuit = circuit;
	m.end = end;
	if (!shared) {
		/* Nothing to wait for: the journal says it without a system call. */
		struct shunt_journal_entry e = { .type = SHUNT_J_CLOSED, .end = (uint16_t)end,
						 .circuit = circuit };

		if (shunt_journal_add(&e) < 0)
			notify(&m);
		return SHUNT_OK;
	}
	m.flags = SHUNT_CLOSE_SHARED;
	return request_plain(&m, NULL, 0, &a);
}

bool shunt_ctl_alive(void)
{
	bool alive = false;

	pthread_mutex_lock(&ctl_lock);
	/* A late reply that came is taken; one still to come says shuntd lives. */
	if (!catch_up_locked(0)) {
		alive = true;
	} else if (ctl_fd >= 0) {
		/* shuntd never speaks first: anything to read is its end (EOF). */
		struct pollfd p = { ctl_fd, POLLIN, 0 };
		struct timespec zero = { 0, 0 };

		/* A filter that forbids the look: as alive as the last exchange said. */
		alive = shunt_syscall(SYS_ppoll, &p, 1, &zero, NULL, 8) <= 0;
		if (!alive)
			drop_session("session", ECONNRESET);
	}
	pthread_mutex_unlock(&ctl_lock);
	return alive;
}

int shunt_ctl_barrier(void)
{
	struct shunt_msg_close m;
	struct answer a = { .want = 0 };
	int r;

	/* A shared close of circuit 0, which nobody holds: -ENOENT, once the journal was read. */
	shunt_proto_init(&m, SHUNT_MSG_CLOSE, sizeof(m), 0);
	m.flags = SHUNT_CLOSE_SHARED;
	r = request_plain(&m, NULL, 0, &a);
	return r == -ENOENT ? 0 : r;
}

/* A link reply: SHUNT_OK with three descriptors, or one that says the link is gone. */
static int take_link(int status, const void *reply, int *rfds, unsigned n,
		     struct shunt_msg_link_reply *r, int fds[3])
{
	if (status != SHUNT_OK) {
		shunt_close_replies(rfds, n);
		return status;
	}
	memcpy(r, reply, sizeof(*r));
	if (n != ((r->flags & SHUNT_LINK_GONE) ? 0u : 3u) || r->side > 1) {
		shunt_close_replies(rfds, n);
		return -EPROTO;
	}
	memcpy(fds, rfds, n * sizeof(int));
	return SHUNT_OK;
}

int shunt_ctl_link(uint64_t partner, struct shunt_msg_link_reply *r, int fds[3])
{
	struct shunt_msg_link m;
	struct answer a = { .want = 3 };
	int st;

	shunt_proto_init(&m, SHUNT_MSG_LINK, sizeof(m), 0);
	m.partner = partner;
	st = request(&m, NULL, 0, &a);
	/* Not delivered: shuntd hands the same link over when asked again. */
	if (a.truncated) {
		shunt_close_replies(a.fds, a.nfds);
		return -EMFILE;
	}
	st = take_link(st, a.buf, a.fds, a.nfds, r, fds);
	if (st == SHUNT_OK && (r->flags & SHUNT_LINK_GONE))
		return -EPROTO;
	return st > 0 ? -EPROTO : st;
}

int shunt_ctl_link_next(struct shunt_msg_link_reply *r, int fds[3])
{
	struct shunt_msg_link m;
	struct answer a = { .want = 3 };
	int st;

	shunt_proto_init(&m, SHUNT_MSG_LINK_NEXT, sizeof(m), 0);
	st = request(&m, NULL, 0, &a);
	if (a.truncated) {
		shunt_close_replies(a.fds, a.nfds);
		shunt_warn("out of descriptors: a link shuntd made for this process was lost; "
			   "connections with one peer may not wake it");
		return -EMFILE;
	}
	return take_link(st, a.buf, a.fds, a.nfds, r, fds);
}

int shunt_ctl_fork(uint64_t *ticket, uint64_t *secret)
{
	struct shunt_msg_fork m;
	uint64_t named[2];
	int r = -ENOTCONN;

	/* Random, so that nobody else can claim it: the library's, through the seccomp gate. */
	if (shunt_syscall(SYS_getrandom, named, sizeof(named), GRND_NONBLOCK) != (long)sizeof(named))
		return -errno;
	shunt_proto_init(&m, SHUNT_MSG_FORK, sizeof(m), 0);
	m.ticket = named[0] | 1;	/* never 0: no ticket */
	m.secret = named[1];
	pthread_mutex_lock(&ctl_lock);
	if (ctl_fd >= 0 && may_ask(shunt_seccomp_chain(), ctl_fd)) {
		m.h.seq = ++ctl_seq;
		r = shunt_proto_send(ctl_fd, &m, NULL, 0);
		if (r < 0) {
			drop_session("send", -r);
		} else {
			/* Until shuntd answers something sent after it, the child may be uncounted. */
			ctl_fork_seq = m.h.seq;
			atomic_store_explicit(&fork_unheard, true, memory_order_release);
			shunt_stats.ctl_asks++;
		}
	}
	pthread_mutex_unlock(&ctl_lock);
	if (r < 0)
		return r;
	*ticket = m.ticket;
	*secret = m.secret;
	return 0;
}

bool shunt_ctl_holders_known(void)
{
	return !atomic_load_explicit(&fork_unheard, memory_order_acquire) &&
	       atomic_load_explicit(&claim_state, memory_order_acquire) != CLAIM_SENT;
}

void shunt_ctl_fork_done(uint64_t ticket, pid_t pid)
{
	struct shunt_msg_fork_done m;

	shunt_proto_init(&m, SHUNT_MSG_FORK_DONE, sizeof(m), 0);
	m.ticket = ticket;
	m.pid = pid > 0 ? pid : 0;
	notify(&m);
}

int shunt_ctl_downgrade(uint64_t circuit, int fd)
{
	struct shunt_msg_downgrade m;
	struct answer a = { .want = 0 };
	int r;

	shunt_proto_init(&m, SHUNT_MSG_DOWNGRADE, sizeof(m), 0);
	m.circuit = circuit;
	r = request_plain(&m, &fd, 1, &a);
	return r > 0 ? -EPROTO : r;
}

int shunt_ctl_unrepair(int fd)
{
	struct shunt_msg_unrepair m;
	struct answer a = { .want = 0 };
	int r;

	shunt_proto_init(&m, SHUNT_MSG_UNREPAIR, sizeof(m), 0);
	r = request_plain(&m, &fd, 1, &a);
	return r > 0 ? -EPROTO : r;
}

const char *shunt_ctl_path(void)
{
	return ctl_addr.sun_path;
}

int shunt_ctl_exec(uint32_t kind, uint64_t *ticket)
{
	struct shunt_msg_exec m;
	struct answer a = { .want = 0 };
	int r;

	shunt_proto_init(&m, SHUNT_MSG_EXEC, sizeof(m), 0);
	m.kind = kind;
	r = request_plain(&m, NULL, 0, &a);
	if (r != SHUNT_OK)
		return r > 0 ? -EPROTO : r;
	*ticket = ((struct shunt_msg_exec_reply *)(void *)a.buf)->ticket;
	return 0;
}

int shunt_ctl_exec_keep(uint64_t ticket, int fd, uint64_t circuit, unsigned end,
			uint64_t listener, uint32_t flags)
{
	struct shunt_msg_exec_keep m;
	struct answer a = { .want = 0 };
	int r;

	shunt_proto_init(&m, SHUNT_MSG_EXEC_KEEP, sizeof(m), 0);
	m.ticket = ticket;
	m.circuit = circuit;
	m.end = end;
	m.listener = listener;
	m.flags = flags;
	r = request_plain(&m, &fd, 1, &a);
	return r > 0 ? -EPROTO : r;
}

void shunt_ctl_exec_done(uint64_t ticket, pid_t pid)
{
	struct shunt_msg_exec_done m;

	shunt_proto_init(&m, SHUNT_MSG_EXEC_DONE, sizeof(m), 0);
	m.ticket = ticket;
	m.pid = pid > 0 ? pid : 0;
	notify(&m);
}

int shunt_ctl_exec_claim(void)
{
	int r;

	pthread_mutex_lock(&ctl_lock);
	/* Only a first HELLO can claim: a session already open holds nothing of the ticket. */
	if (ctl_fd >= 0) {
		pthread_mutex_unlock(&ctl_lock);
		return -EBUSY;
	}
	claim_exec = true;
	exec_claimed = -ENOENT;
	r = open_session_locked(-1);
	claim_exec = false;
	if (r == 0)
		r = exec_claimed;
	pthread_mutex_unlock(&ctl_lock);
	return r;
}

int shunt_ctl_exec_next(struct shunt_grant *g, uint64_t *inode, uint32_t *flags)
{
	struct shunt_msg_exec_next m;
	struct answer a = { .want = 1 };
	int r;

	shunt_proto_init(&m, SHUNT_MSG_EXEC_NEXT, sizeof(m), 0);
	r = request(&m, NULL, 0, &a);
	g->kernel_half = g->memfd = g->bell = -1;
	g->offset = 0;
	if (r != SHUNT_OK || a.truncated) {
		shunt_close_replies(a.fds, a.nfds);
		if (r == SHUNT_OK)
			return -EMFILE;
		return r == SHUNT_NONE ? SHUNT_NONE : r > 0 ? -EPROTO : r;
	}
	const struct shunt_msg_exec_end *e = (const void *)a.buf;

	if (a.nfds != 1 || e->end > 1) {
		shunt_close_replies(a.fds, a.nfds);
		return -EPROTO;
	}
	memset(&g->msg, 0, sizeof(g->msg));
	g->msg.circuit = e->circuit;
	g->msg.ring_size = e->ring_size;
	g->msg.end = e->end;
	g->msg.local = e->local;
	g->msg.peer = e->peer;
	g->memfd = a.fds[0];
	g->offset = e->offset;
	*inode = e->inode;
	*flags = e->flags;
	return SHUNT_OK;
}
