/* SPDX-License-Identifier: MIT */
/*
 * shuntd's objects and the functions each file of the daemon offers the
 * others. The daemon is one thread running one event loop; nothing here is
 * locked.
 *
 * Ownership: a session is one process (or, for a fork ticket, a child that
 * has not spoken yet). It holds circuit ends and listeners through holds:
 * after fork the child holds what the parent held, as it holds the same
 * kernel sockets. An end lives while it has a holder, a circuit until both
 * ends are done; a listener until its last holder lets go. Links join two
 * sessions and die with either.
 */
#ifndef SHUNTD_H
#define SHUNTD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/list.h"
#include "common/map.h"
#include "policy/policy.h"
#include "shunt/chan.h"
#include "shunt/circuit.h"
#include "shunt/journal.h"
#include "shunt/link.h"
#include "shunt/proto.h"

struct shuntd_config {
	const char *socket_path;
	uint32_t ring_size;
	uint32_t chan_slots;		/* slots of a new channel; 0: no channels */
	int idle_exit_ms;		/* exit after this long without sessions; <0: never */
	mode_t socket_mode;
	const char *config_path;	/* the policy file, or NULL for the built-in policy */
	const char *metrics;		/* --metrics, else the policy file's, else none */
};

/*
 * Connects the policy left to the kernel or refused, per pair of tenants and
 * deciding rule (tenant.c), for `shunt status` to say which rule would allow
 * them. A bounded list: past SHUNTD_POLICY_PAIRS new pairs are only counted
 * in the totals.
 */
enum { SHUNTD_POLICY_PAIRS = 256 };
/* Channels one client process may have to one listener (each --channel-slots connections). */
enum { SHUNTD_CHANS_PER_CLIENT = 64 };
/* Counts taken off a listener hold's announce at once when nothing is left to hand it. */
enum { SHUNTD_ANNOUNCE_SETTLE = 64 };

struct policy_pair {
	char from[SHUNT_TENANT_LEN];
	char to[SHUNT_TENANT_LEN];
	char rule[SHUNT_RULE_LEN];	/* "" when the default decided */
	bool refused;
	uint64_t count;
	struct policy_pair *next;
};

/* What shuntd accounts per tenant (tenant.c). */
struct tenant {
	char name[SHUNT_NAME_MAX];
	uint64_t connections;		/* circuits it is an end of (once, even both ends) */
	uint64_t memory;		/* bytes of the circuits charged to it */
	uint64_t circuits_total;
	uint64_t fallbacks[SHUNT_FALLBACK_REASONS];
	struct tenant *next;
};

struct shuntd {
	struct shuntd_config cfg;
	int epfd;
	int listen_fd;			/* the control socket */
	dev_t socket_dev;		/* its file, to remove only our own at exit */
	ino_t socket_ino;
	uint64_t next_id;
	uint64_t netns_self;		/* inode of the daemon's own network namespace */
	int netns_self_fd;		/* that namespace, to return to after making a socket elsewhere */
	struct shunt_map netns;		/* inode -> struct netns: the namespaces clients live in */
	struct netns_world *netns_world;	/* their rtnetlink sockets (netns.c) */
	struct shunt_map sessions;	/* id -> struct session (tickets too) */
	struct shunt_map listeners;	/* id -> struct listener */
	struct shunt_map ports;		/* port + 1 -> the listeners on it (listener.port_next) */
	struct shunt_map circuits;	/* id -> struct circuit */
	struct shunt_map channels;	/* id -> struct channel */
	struct shunt_map tickets;	/* a fork ticket's name (its parent's) -> struct session */
	struct shunt_list tickets_orphaned; /* struct session.due_node, by due_at */
	struct shunt_list tickets_unwatched; /* struct session.due_node, by due_at */
	struct shunt_list family_waiting;	/* family.c's waiting closes, by when they give up */
	struct shunt_list journals_awake;	/* struct journal.awake_node: read on the next tick */
	struct shunt_list adopt_pending;	/* struct circuit.adopt_node, by adopt_at */
	struct shunt_list warm_channels;	/* struct channel.warm_node, by warm_at */
	void **graves;			/* watched objects gone in this batch (loop.c) */
	size_t ngraves, graves_cap;
	size_t live_sessions;		/* connected sessions, for idle exit */
	uint64_t circuits_total;
	uint64_t sessions_total;
	uint64_t fallbacks[SHUNT_FALLBACK_REASONS];
	uint64_t bytes_closed;		/* bytes moved by circuits since destroyed */
	/* Requests handled, and the time spent on them (ns), by type: for the metrics. */
	uint64_t requests[SHUNT_MSG_TYPE_MAX + 1];
	uint64_t request_ns[SHUNT_MSG_TYPE_MAX + 1];
	struct shunt_policy *policy;	/* tenants, limits, rules */
	struct tenant *tenants;		/* every tenant seen, for accounting */
	struct policy_pair *pairs;	/* policy fallbacks by tenants and rule */
	unsigned npairs;
	int metrics_fd;			/* the metrics listener, or -1 */
	bool stopping;
	char stop_reason[96];		/* why the loop ended, for the last log line */
	bool reload;			/* SIGHUP: read the policy file again */
};

/* What the event loop's tags point at: the first member of each watched object. */
enum shuntd_watch_kind {
	SHUNTD_WATCH_SESSION = 1,	/* input on a session's control socket */
	SHUNTD_WATCH_TICKET,		/* a fork child that has not claimed its ticket exited */
	SHUNTD_WATCH_METRICS,		/* a metrics client sent (part of) its request */
	SHUNTD_WATCH_EXEC_TIMER,	/* an exec ticket was not claimed in time */
	SHUNTD_WATCH_NETNS,		/* rtnetlink notifications or answers (netns.c) */
	SHUNTD_WATCH_JOURNAL,		/* a session kicked its journal */
	SHUNTD_WATCH_GONE,		/* freed at the end of this batch of events: ignore */
};

/*
 * A session's journal (journal.c): what its process did without asking,
 * read in batches. @watch is the loop's tag for @kick.
 */
struct journal {
	int watch;			/* SHUNTD_WATCH_JOURNAL */
	struct session *session;
	struct shunt_journal_hdr *hdr;
	int memfd;
	int kick;			/* eventfd the process writes when shuntd sleeps */
	uint64_t head;			/* the next entry to read: ours, hdr->head only says it */
	bool reading;			/* shuntd_journal_read is applying its entries */
	uint64_t read_at_tick;		/* head when the last tick began */
	int64_t busy_ms;		/* when a tick last found entries (or it woke) */
	uint64_t nonsense;		/* times its indices made no sense: logged at powers of two */
	bool awake;			/* on d->journals_awake */
	struct shunt_list awake_node;
};

/*
 * One connected process, identified by SO_PEERCRED when it connected; or a
 * ticket (fd -1): what a child about to be forked will hold, until it
 * claims it with its first HELLO; or, for an exec ticket, what the new
 * program of a process about to exec will hold (exec.c).
 */
struct session {
	int watch;			/* enum shuntd_watch_kind: first, the loop's tag */
	uint64_t id;
	int fd;				/* -1 for a ticket */
	pid_t pid;
	uid_t uid;
	gid_t gid;
	char comm[SHUNT_COMM_LEN];	/* shuntd_session_comm(): read when first needed */
	bool comm_known;
	struct shunt_facts facts;	/* checked by shuntd: uid, cgroup, network namespace */
	struct tenant *tenant;		/* derived from the facts by the policy */
	struct netns *ns;		/* a reference to its network namespace's view, or NULL */
	struct shunt_list holds;	/* struct hold.session_node */
	struct shunt_map links;		/* partner session id -> struct link */
	struct link *dlink;		/* shuntd's notices to this session */
	struct journal *journal;	/* what it did without asking, or NULL */
	struct shunt_list channels;	/* struct channel.client_node: its channels as a client */
	struct shunt_map chans_given;	/* channel id -> struct channel, given as an acceptor */
	uint64_t *gone;			/* ids of links whose partner is gone, not yet told */
	size_t ngone, gone_cap;
	uint32_t links_waiting;		/* links of its that it has not been handed yet */
	/*
	 * A STATUS reply being sent as fast as the client takes it (status.c):
	 * while it is, the session's requests wait, and the loop watches its
	 * socket for room instead.
	 */
	struct status_cursor {
		bool active;
		bool waiting;		/* for room: the loop watches for EPOLLOUT */
		uint32_t seq;
		unsigned phase;		/* enum in status.c */
		size_t pos;		/* in the phase's map; in the policy pairs, how many sent */
	} status;
	/* Tickets only. */
	bool ticket;
	bool exec;			/* an exec ticket: claimed by the same pid, no secret */
	bool spawn;			/* ...for a spawned child: its parent is parent_pid */
	uint64_t secret;
	uint64_t name;			/* fork tickets: the name the parent gave it (0: none) */
	uint64_t parent_session;	/* fork tickets: the session that sent FORK */
	/*
	 * Fork tickets waiting for something at due_at (CLOCK_MONOTONIC ms)
	 * unless the child claims them first: in tickets_orphaned (their
	 * parent went away before FORK_DONE), released then; in
	 * tickets_unwatched (FORK_DONE read), their child watched from then.
	 */
	struct shunt_list due_node;
	int64_t due_at;
	pid_t parent_pid;
	int pidfd;			/* the child once known (the process itself for exec), else -1 */
	int timer_watch;		/* SHUNTD_WATCH_EXEC_TIMER: the loop's tag for timerfd */
	int timerfd;			/* exec tickets: the claim deadline, else -1 */
};

/* A session's hold on one circuit end or one listener. */
struct hold {
	struct session *session;
	struct shunt_list session_node;	/* in session->holds */
	struct shunt_list node;		/* in circuit_end.holds or listener.holds */
	struct circuit *circuit;	/* or NULL for a listener hold */
	unsigned end;
	struct listener *listener;
	/*
	 * A listener hold's: EFD_SEMAPHORE, counting the channels of the
	 * listener made and not yet handed to this session (chan.c), which its
	 * process's EPOLLEXCLUSIVE registrations wake on; or -1.
	 */
	int announce;
	/* Holds an exec ticket kept (exec.c): what the new image needs to find its socket. */
	uint64_t inode;			/* of the kernel socket the end was kept with */
	uint32_t xflags;		/* enum shunt_exec_flags */
	bool exec_pending;		/* not yet handed to the new image (EXEC_NEXT) */
	bool closing;			/* a channel's circuit: closed, not yet let go (connect.c) */
};

/* The notice pages shared by two sessions, or by one session and shuntd. */
struct link {
	uint64_t id;
	struct session *side[2];	/* a self link has the same session twice */
	bool daemon;			/* side 0 is the session, side 1 is shuntd */
	bool delivered[2];		/* whether that side has been sent the descriptors */
	struct shunt_link_hdr *hdr;
	int memfd;
	int efd[2];			/* side i sleeps on efd[i]; the other side writes it */
};

enum circuit_queue {
	CIRCUIT_UNQUEUED = 0,
	CIRCUIT_SYN,			/* waits for room in the accept queue */
	CIRCUIT_ACCEPTQ,		/* established, waits for accept() */
	CIRCUIT_DEFERRED,		/* established, TCP_DEFER_ACCEPT waits for its data */
};

struct circuit_end {
	struct circuit *circuit;
	struct shunt_list holds;	/* struct hold.node: the processes holding it */
	bool done;			/* every holder closed it or died */
};

struct circuit {
	uint64_t id;
	uint32_t ring_size;
	int memfd;			/* kept for its life: an exec'd image maps it anew (exec.c) */
	struct shunt_circuit_hdr *hdr;	/* the control page, mapped */
	struct circuit_end end[2];
	struct shunt_wire_addr local[2];	/* getsockname of each end, in its family */
	struct shunt_wire_addr peer[2];		/* getpeername of each end */
	struct tenant *charged[2];	/* whose connection each end counts as (tenant.c) */
	struct tenant *payer;		/* whose memory the circuit counts as */
	uint32_t isn[2];		/* companion sockets' initial sequence numbers */
	bool companion;			/* the connector's socket was made ESTABLISHED */
	int connector_reuse;		/* its SO_REUSEADDR before (repair mode changes it) */
	uint64_t kino[2];		/* inode of each end's companion (companion.c) */
	bool downgraded;		/* the kernel carries it now (downgrade.c) */
	struct listener *listener;	/* while queued */
	int64_t defer_until;		/* CIRCUIT_DEFERRED: accepted anyway then (ms, monotonic) */
	enum circuit_queue queue;
	struct shunt_list queue_node;
	/* A circuit in a channel's slot (chan.c): its memory is the channel's. */
	struct channel *chan;
	uint32_t slot;
	int jfd[2];			/* each end's socket in its process, as journaled */
	uint64_t jino[2];		/* ...and its inode */
	int64_t adopt_at;		/* when it gets its companions (ms), on d->adopt_pending */
	struct shunt_list adopt_node;
};

/*
 * A channel (include/shunt/chan.h, chan.c): one client session's way to
 * one listener's holders without shuntd. It lives while its client and its
 * listener do, or while a circuit lives in one of its slots.
 */
struct channel {
	uint64_t id;
	uint64_t id_base;		/* slot i's circuit is id_base + i */
	struct session *client;		/* NULL once gone */
	struct listener *listener;	/* NULL once gone */
	struct shunt_chan_hdr *hdr;	/* all of it, mapped */
	size_t size;
	int memfd;
	/*
	 * EFD_SEMAPHORE: what its client counted its queued connections on,
	 * and its acceptors count them off; in its listener's bells while it
	 * has one. The client can fill, empty or leave it: its own only.
	 */
	int bell;
	uint32_t slots;
	uint32_t ring_size;
	struct circuit **circ;		/* per slot: the circuit living there, or NULL */
	/*
	 * Per slot, when its listener went: generation + 1 of a connection
	 * queued there but not yet journaled (its entry then resets it), or 0.
	 */
	uint32_t *gone_queued;
	uint32_t live;			/* circuits living in it */
	/* Per slot, whether it was freed with its pages kept (chan_pages.c); NULL: never. */
	uint8_t *warm;
	uint32_t nwarm;
	int64_t warm_at;		/* when a slot was last freed warm (ms) */
	bool warm_listed;
	struct shunt_list warm_node;	/* in d->warm_channels, by warm_at, while listed */
	bool closed;			/* no more connections: hdr->state, as we wrote it */
	bool busy;			/* its listener or client going: not freed under them */
	struct shunt_list client_node;	/* in client->channels */
	struct shunt_list listener_node;	/* in listener->channels */
};

/* Channel @ch's slot state words (include/shunt/chan.h). */
static inline _Atomic uint32_t *shuntd_chan_states(struct channel *ch)
{
	return (_Atomic uint32_t *)((char *)ch->hdr + shunt_chan_states_offset(ch->slots));
}

/* The circuit in slot @i of @ch, as mapped by shuntd. */
static inline struct shunt_circuit_hdr *shuntd_chan_slot(struct channel *ch, uint32_t i)
{
	return (struct shunt_circuit_hdr *)((char *)ch->hdr +
					    shunt_chan_slot_offset(ch->slots, ch->ring_size, i));
}

struct listener {
	uint64_t id;
	struct listener *port_next;	/* the next listener on its port, any namespace */
	struct shunt_list holds;	/* struct hold.node: the processes holding it */
	struct tenant *tenant;		/* of the process that registered it */
	uint64_t netns;
	struct netns *ns;		/* a reference to that namespace's view, or NULL */
	struct shunt_wire_addr addr;	/* bound address; AF_INET6 may be v6only */
	bool v6only;
	uint64_t inode;			/* of the listening socket, to detect reuse */
	uint32_t max_queued;		/* accept queue capacity: backlog + 1 */
	uint32_t queued;		/* circuits in acceptq */
	struct shunt_list acceptq;
	struct shunt_list synq;
	struct shunt_list deferq;	/* established, not yet acceptable (TCP_DEFER_ACCEPT) */
	uint32_t ndeferred;		/* circuits in deferq */
	uint32_t defer_ms;		/* TCP_DEFER_ACCEPT as the kernel rounded it, in ms; 0: off */
	bool reuseport;			/* SO_REUSEPORT: one of a group sharing the address */
	uid_t uid;			/* the socket's owner: a group has one */
	/*
	 * EFD_SEMAPHORE: value == queued (shuntd's acceptq). Shared with the
	 * listener's holders, for their EPOLLEXCLUSIVE registrations.
	 */
	int doorbell;
	/*
	 * An epoll instance holding the doorbell and each channel's bell:
	 * what the listener's holders poll, readable while any of them counts
	 * a connection. No client holds it or the doorbell.
	 */
	int bells;
	struct shunt_list channels;	/* struct channel.listener_node */
	uint32_t closes;		/* COUNTED closes read (family.c) */
	struct shunt_list waiters;	/* family.c: its last holders' closes, not answered yet */
};

/*
 * shuntd's view of one network namespace (netns.c): held by the sessions
 * of processes in it and by listeners whose sockets are in it, freed with
 * the last reference (which lets the namespace go, if nothing else holds it).
 * What it knows of the namespace is private to the netns files (netns.h).
 */
struct netns_view;
struct ns_directory;
struct netns {
	uint64_t inode;			/* the key: the namespace's inode */
	int fd;				/* the namespace (for setns and NETNSA_FD) */
	unsigned refs;
	struct netns_view *view;
	struct ns_directory *dir;	/* directory.c: its directory, once a session asked */
};

/* What netns.c did with rtnetlink, for the metrics. */
struct shuntd_netns_stats {
	uint64_t requests[5];		/* sent, by kind: -, dump, link, nsid, route */
	uint64_t deciding_requests;	/* of those, sent while a connect was being decided */
	uint64_t events;		/* notifications applied */
	uint64_t overruns;		/* notifications lost (ENOBUFS): everything dumped again */
	uint64_t route_model;		/* routes found in the facts kept */
	uint64_t route_cached;		/* ...answered by an earlier query still current */
	uint64_t route_asked;		/* ...asked of the kernel and answered at once */
	uint64_t route_unknown;		/* ...not answered at once: the connect went to the kernel */
	uint64_t verify_mismatches;	/* SHUNTD_NETNS_VERIFY: the model and the kernel differed */
};

/* What the kernel's route lookup for a connect would consider beyond the destination. */
struct shuntd_route_hints {
	struct shunt_wire_addr src;	/* the socket's bound address and port (port may be 0)... */
	bool has_src;			/* ...if it is bound to a specific address */
	uint32_t oif;			/* SO_BINDTOIFINDEX, or 0 */
	uint32_t mark;			/* SO_MARK */
};

/* main.c */
uint64_t shuntd_new_id(struct shuntd *d);

/* crash.c: a fatal signal is logged, with a backtrace, before it kills shuntd */
void shuntd_crash_init(void);

/* loop.c */
int shuntd_loop_init(struct shuntd *d);
int shuntd_loop_run(struct shuntd *d);
int shuntd_loop_watch(struct shuntd *d, int fd, void *tag);
/* Watch @fd (watched already) for room to write rather than input, or back. */
int shuntd_loop_watch_out(struct shuntd *d, int fd, void *tag, bool out);
void shuntd_loop_unwatch(struct shuntd *d, int fd);
/*
 * Free @obj, a watched object whose tags were all set to SHUNTD_WATCH_GONE,
 * once the batch of events being handled is done: a later event of the same
 * batch may still name it.
 */
void shuntd_loop_bury(struct shuntd *d, void *obj);
/* Watch the metrics listener (its clients are watched with their own tag). */
int shuntd_loop_watch_metrics(struct shuntd *d, int fd);

/* session.c */
void shuntd_session_accept(struct shuntd *d);
/* Its requests, a batch of them: true if more may wait (the batch was full). */
bool shuntd_session_input(struct shuntd *d, struct session *s);
/* The process is gone (or the ticket will never be claimed): release everything. */
void shuntd_session_close(struct shuntd *d, struct session *s);
int shuntd_session_reply(struct session *s, void *msg, const int *fds, unsigned nfds);
int shuntd_session_reply_status(struct session *s, uint16_t type, uint32_t seq, int status);
/* The process's name (/proc/PID/comm), read once, when first shown. */
const char *shuntd_session_comm(struct session *s);

/* hold.c: who holds what */
struct hold *shuntd_hold_end(struct circuit *c, unsigned end, struct session *s);
/*
 * A hold of @l by @s, with its announce eventfd; NULL if out of memory or
 * descriptors. The count of @l's holders is published at once.
 */
struct hold *shuntd_hold_listener(struct shuntd *d, struct listener *l, struct session *s);
/* Free @h, taken off its lists already. */
void shuntd_hold_free(struct hold *h);
struct hold *shuntd_hold_find_end(struct session *s, struct circuit *c, unsigned end);
struct hold *shuntd_hold_find_listener(struct session *s, struct listener *l);
/* Drop a hold; @died: the process went away without closing. */
void shuntd_hold_release(struct shuntd *d, struct hold *h, bool died);
/* Whether @a and @b hold ends of a common circuit (either end, or the same one). */
bool shuntd_hold_share_circuit(struct session *a, struct session *b);

/* The sooner of two timeouts in milliseconds, where -1 is none (epoll_wait's). */
static inline int shuntd_sooner(int a, int b)
{
	return a < 0 ? b : b < 0 ? a : a < b ? a : b;
}

/* fork.c: tickets */
/* A new ticket holding nothing yet, on behalf of @parent; NULL without memory. */
struct session *shuntd_ticket_new(struct shuntd *d, struct session *parent);
void shuntd_fork(struct shuntd *d, struct session *s, const struct shunt_msg_fork *m);
void shuntd_fork_done(struct shuntd *d, struct session *s, const struct shunt_msg_fork_done *m);
/* HELLO with SHUNT_HELLO_CLAIM from @s: 0 or -errno. */
int shuntd_fork_claim(struct shuntd *d, struct session *s, const struct shunt_msg_hello *m);
void shuntd_fork_ticket_exited(struct shuntd *d, struct session *t);
/*
 * Session @s is gone: its fork tickets that never learnt their child's pid
 * (it died between FORK and FORK_DONE) are released a second from now,
 * unless claimed first; _next_tick and _tick run that, and the watch of
 * a child that has not claimed its ticket soon after FORK_DONE.
 */
void shuntd_fork_parent_gone(struct shuntd *d, struct session *s);
int shuntd_fork_next_tick(struct shuntd *d);
void shuntd_fork_tick(struct shuntd *d);
/* The parent of process @pid as /proc says, or -1. */
pid_t shuntd_parent_of(pid_t pid);

/* exec.c: exec tickets */
void shuntd_exec(struct shuntd *d, struct session *s, const struct shunt_msg_exec *m);
void shuntd_exec_keep(struct shuntd *d, struct session *s, const struct shunt_msg_exec_keep *m,
		      int fd);
void shuntd_exec_done(struct shuntd *d, struct session *s, const struct shunt_msg_exec_done *m);
void shuntd_exec_next(struct shuntd *d, struct session *s, const struct shunt_msg_exec_next *m);
/* HELLO with SHUNT_HELLO_EXEC from @s: the number of circuit ends taken over, or -errno. */
int shuntd_exec_claim(struct shuntd *d, struct session *s);
/* The claim deadline of exec ticket @t passed (@t is the timer's loop tag's session). */
void shuntd_exec_expired(struct shuntd *d, struct session *t);

/* socket.c: facts about a socket handed over by a process */
struct sock_facts {
	int domain;
	bool listening;
	bool v6only;
	uint64_t netns;
	uint64_t inode;
	uint32_t max_backlog;
	uint32_t defer_accept;		/* TCP_DEFER_ACCEPT, seconds as the kernel reports it */
	bool reuseport;			/* SO_REUSEPORT */
	uid_t uid;			/* owner of the socket (its inode's) */
	struct shunt_wire_addr local;
};
int shuntd_socket_facts(int fd, struct sock_facts *f);
/*
 * Only what says which socket @fd is and whether it listens: @f's inode,
 * domain and listening (the rest zero). Enough to recognise a listener
 * shuntd knows (its inode, unique while shuntd holds it), in 3 system calls
 * where shuntd_socket_facts makes about 12.
 */
int shuntd_socket_identity(int fd, struct sock_facts *f);
/* Why shuntd_socket_facts said @err, for a log line a person can act on. */
const char *shuntd_socket_refusal(int err);
/* Learn shuntd's own namespace (inode @netns_self), for sockets it cannot ask about. */
void shuntd_socket_init(uint64_t netns_self);

/*
 * efd.c: eventfds shuntd shares with processes, who can clear their
 * O_NONBLOCK for shuntd too; none of these ever waits (more than 2 ms).
 * shuntd_efd_init sets up the guard timer, once at start (0 or -1).
 */
int shuntd_efd_init(void);
/* Take one count (a doorbell) or all of them (a kick); false if there was none. */
bool shuntd_efd_take(int efd);
/* Add one, unless the counter is full (then it is readable anyway). */
void shuntd_efd_ring(int efd);
/* Take up to @max counts off doorbell or bell @efd: how many there were. */
uint32_t shuntd_efd_take_some(int efd, uint32_t max);
/*
 * Settle @efd: of the @taken counts just taken off it, ring back as many
 * as it owes (@owed: what is queued behind it), the rest were a holder's.
 */
void shuntd_efd_give_back(int efd, uint32_t taken, uint32_t owed);

/* listener.c */
void shuntd_listener_register(struct shuntd *d, struct session *s,
			      const struct shunt_msg_listen *m, int fd);
void shuntd_listener_unregister(struct shuntd *d, struct session *s,
				 const struct shunt_msg_unlisten *m);
void shuntd_listener_destroy(struct shuntd *d, struct listener *l);
/* The listeners on @port, in any namespace, chained by port_next. */
struct listener *shuntd_listeners_on_port(struct shuntd *d, uint16_t port);
/*
 * The listener a connect from namespace @netns (whose view is @from, NULL
 * if unknown) to @dst reaches, as the kernel's SYN would, or NULL. On a
 * match @src is the source address the kernel would choose (port 0, in the
 * destination's family, unmapped).
 */
struct listener *shuntd_listener_match(struct shuntd *d, struct netns *from, uint64_t netns,
				       const struct shunt_wire_addr *dst,
				       const struct shuntd_route_hints *h,
				       struct shunt_wire_addr *src);
/* Move circuits from the SYN queue into free accept-queue room. */
void shuntd_listener_admit(struct shuntd *d, struct listener *l);
/*
 * The bells of @l ring with nothing queued for the acceptor that asked:
 * take what the doorbell and each channel's bell count beyond what is
 * queued there (up to SETTLE_MAX at a time each), so that poll() and epoll
 * no longer say the listener is readable. Counts to spare come from a
 * client whose entry was taken before it counted it, entries dropped as
 * spoilt, or a client ringing its bell.
 */
void shuntd_listener_settle(struct listener *l);
/*
 * Queue an established circuit @c on @l: acceptable at once, or after its
 * first byte (or FIN, or the timeout) with TCP_DEFER_ACCEPT.
 */
void shuntd_listener_enqueue(struct shuntd *d, struct listener *l, struct circuit *c);
/* The connector of deferred circuit @c let go of it: accepted (a FIN came) or dropped. */
void shuntd_listener_deferred_closed(struct shuntd *d, struct circuit *c);
/* Milliseconds until deferred circuits need a look (-1: none), and the look. */
int shuntd_listener_next_tick(struct shuntd *d);
void shuntd_listener_tick(struct shuntd *d);
/* A session holding @l, for the status display (NULL if none). */
struct session *shuntd_listener_holder(struct listener *l);

/*
 * family.c: a listener's family closing (preload/family.h). _counted: a
 * COUNTED close of @l was read, which may answer waiting ones. _wait: the
 * last holder's close (@seq of @s, answered @status) waits for @after
 * counted closes; false if it need not (answer it now). _listener_gone:
 * @l goes, its waiters are answered. _next_tick and _tick answer those
 * that waited too long.
 */
void shuntd_family_counted(struct shuntd *d, struct listener *l);
bool shuntd_family_wait(struct shuntd *d, struct listener *l, struct session *s, uint32_t seq,
			uint32_t after, int status);
void shuntd_family_listener_gone(struct shuntd *d, struct listener *l);
int shuntd_family_next_tick(struct shuntd *d);
void shuntd_family_tick(struct shuntd *d);

/* netns.c: network namespaces, their addresses, and which one a connect reaches */
int shuntd_netns_init(struct shuntd *d);
/*
 * A reference to the view of namespace @nsfd (borrowed; duplicated when a
 * view is made), made if need be; NULL if out of memory or @nsfd is not a
 * namespace. A view without an rtnetlink socket (shuntd lacks
 * CAP_SYS_ADMIN over that namespace) knows no addresses.
 */
struct netns *shuntd_netns_get(struct shuntd *d, int nsfd);
/* The same for the namespace of process @pid, or of socket @fd (found by @inode if known). */
struct netns *shuntd_netns_of_pid(struct shuntd *d, pid_t pid, uint64_t inode);
struct netns *shuntd_netns_of_socket(struct shuntd *d, int fd, uint64_t inode);
/* Drop a reference (NULL is fine). */
void shuntd_netns_put(struct shuntd *d, struct netns *ns);
/* Let go of shuntd's own namespace's view if no one holds it (it is kept otherwise). */
void shuntd_netns_drop_own(struct shuntd *d);
/*
 * Whether @ip (unmapped) is an address of @ns, as its notifications have
 * told so far (none: not local, and connects there go to the kernel).
 */
bool shuntd_netns_is_local(struct shuntd *d, struct netns *ns, const struct shunt_wire_addr *ip);
/*
 * The other namespace a connection from @from to @dst (unmapped, not local
 * in @from) reaches on this host: on-link through a veth pair or a bridge,
 * the one namespace that answers for @dst there, which must be one we have
 * a view of; or NULL (a gateway, another kind of link, no route, several
 * namespaces answering, anything we cannot tell now). @src gets the source
 * address @from's route lookup chose. May return @from itself when the
 * route says @dst is local after all. Decided from the facts kept current
 * by notifications; a route the facts cannot tell (policy routing, a
 * device-bound socket) is asked of the kernel without waiting for it.
 */
struct netns *shuntd_netns_reach(struct shuntd *d, struct netns *from,
				 const struct shunt_wire_addr *dst,
				 const struct shuntd_route_hints *h, struct shunt_wire_addr *src);
/* The loop saw notifications or answers: read them. */
void shuntd_netns_input(struct shuntd *d);
void shuntd_netns_stats(struct shuntd *d, struct shuntd_netns_stats *out);

/* circuit.c */
struct circuit *shuntd_circuit_create(struct shuntd *d, uint32_t ring_size);
void shuntd_circuit_destroy(struct shuntd *d, struct circuit *c);
/* The last holder of @end is gone; @died: without closing it (bury it). */
void shuntd_circuit_end_done(struct shuntd *d, struct circuit *c, unsigned end, bool died);
void shuntd_circuit_set_setup(struct shuntd *d, struct circuit *c, enum shunt_setup_state st);
void shuntd_circuit_unqueue(struct circuit *c);
/* Wake the holders of @end: futex sleepers, and watchers through their routes. */
void shuntd_circuit_wake(struct shuntd *d, struct circuit *c, unsigned end);
int shuntd_circuit_reply(struct shuntd *d, struct session *s, struct circuit *c, unsigned end,
			 uint16_t type, uint32_t seq, int kernel_half);
/* The first session holding @end (for status), or NULL. */
struct session *shuntd_circuit_holder(struct circuit *c, unsigned end);

/* chan.c: channels, and the circuits living in their slots */
/*
 * The channel through which @s may connect to @l from now on without
 * asking (made if need be), or NULL when it cannot have one: the caller
 * serves this connect itself.
 */
/*
 * The channel @s connects to @l through: the open one it has, or, when
 * @full (its slots are all taken), one with a free slot or a new one
 * (*@made), up to SHUNTD_CHANS_PER_CLIENT. NULL: connect through a circuit
 * of shuntd's.
 */
struct channel *shuntd_chan_for(struct shuntd *d, struct session *s, struct listener *l,
				bool full, bool *made);
/*
 * A channel of @l not yet given to @s, which holds @l (marked given), or
 * NULL; *@last tells whether it was the last one.
 */
struct channel *shuntd_chan_to_give(struct shuntd *d, struct session *s, struct listener *l,
				    bool *last);
/* Connections queued in @l's channels and not yet taken. */
uint32_t shuntd_chan_queued(struct listener *l);
/* Settle each of @l's channels' bells against its queue (shuntd_listener_settle), @max each. */
void shuntd_chan_settle(struct listener *l, uint32_t max);
/* @l listens again (its backlog, its options changed): its channels follow. */
void shuntd_chan_relisten(struct listener *l);
/* @l is going away: its channels close, their queued connections are reset. */
void shuntd_chan_listener_gone(struct shuntd *d, struct listener *l);
/* @s is gone: its channels close (their circuits live on until done). */
void shuntd_chan_client_gone(struct shuntd *d, struct session *s);
/* The policy changed: every channel closes; new connects ask again. */
void shuntd_chan_close_all(struct shuntd *d);
/* Milliseconds until a channel's circuit is due its companions (-1: none), and the look. */
int shuntd_chan_next_tick(struct shuntd *d);
void shuntd_chan_tick(struct shuntd *d);
/* A circuit in a channel's slot is destroyed: give the slot back. */
void shuntd_chan_slot_done(struct shuntd *d, struct circuit *c);
/* chan_pages.c: a freed slot's pages, kept for the next connection a while. */
void shuntd_chan_pages_freed(struct shuntd *d, struct channel *ch, uint32_t slot);
void shuntd_chan_pages_forget(struct channel *ch);
int shuntd_chan_pages_next_tick(struct shuntd *d);
void shuntd_chan_pages_tick(struct shuntd *d);
/* Journal entries: a connection queued, taken. */
void shuntd_chan_connected(struct shuntd *d, struct session *s,
			   const struct shunt_journal_entry *e);
void shuntd_chan_accepted(struct shuntd *d, struct session *s,
			  const struct shunt_journal_entry *e);
/*
 * Reply to a CONNECT (with the source address to bind to) or an ACCEPT
 * (@src NULL) with a channel to use, its memfd and bell: status
 * SHUNT_USE_CHANNEL, @flags enum shunt_chan_flags, link @k (or NULL)
 * handed over with it, and a dead link to forget.
 */
int shuntd_chan_reply(struct session *s, struct channel *ch, uint16_t type, uint32_t seq,
		      const struct shunt_wire_addr *src, uint32_t flags, struct link *k);

/* journal.c */
/* A new session's journal; -errno if it cannot be made. */
int shuntd_journal_make(struct shuntd *d, struct session *s);
void shuntd_journal_free(struct shuntd *d, struct session *s);
/* Read what @s journaled so far (before any request of it, and when it is gone). */
void shuntd_journal_read(struct shuntd *d, struct session *s);
/*
 * Read the journals of the processes holding @c's ends (but @skip's, whose
 * own was read already): where their sockets are, whether they let go.
 * @c again, or NULL if what they said ended it.
 */
struct circuit *shuntd_journal_read_holders(struct shuntd *d, struct circuit *c,
					    struct session *skip);
/* Read every session's journal (status, metrics: what they show must be whole). */
void shuntd_journal_read_all(struct shuntd *d);
/*
 * Take request @seq of @s, which the library may give up on (its claim
 * word, include/shunt/journal.h): false if it already did, or the word says
 * anything else; then nothing may be done to what the request carries.
 */
bool shuntd_journal_claim(struct session *s, uint32_t seq);
/* The process kicked its journal. */
void shuntd_journal_kicked(struct shuntd *d, struct journal *j);
/*
 * @s is about to journal (a channel was just handed to it): stay awake for
 * its entries, read at the next tick, so that it need not kick us for them.
 */
void shuntd_journal_expect(struct shuntd *d, struct session *s);
/* Milliseconds until awake journals need a look (-1: none), and the look. */
int shuntd_journal_next_tick(struct shuntd *d);
void shuntd_journal_tick(struct shuntd *d);

/* companion.c: real kernel sockets for the two ends (needs CAP_NET_ADMIN) */
/* UNREPAIR: the kernel half of a socket whose circuit is gone, unconnected and out of repair. */
void shuntd_companion_unrepair(struct shuntd *d, struct session *s,
			       const struct shunt_msg_unrepair *m, int fd);
int shuntd_companion_seqs(struct circuit *c);
int shuntd_companion_connector(struct circuit *c, int fd);
int shuntd_companion_acceptor(struct circuit *c, int domain);
/*
 * A channel's circuit: make the two sockets the processes connected and
 * accepted with (named by the journal; @known, if not -1, may be one of
 * them) its companions, in place. 0 (done, or had them) or -errno (one is
 * gone, no capability...).
 */
int shuntd_companion_adopt(struct circuit *c, int known);
/*
 * Put the connector's socket @fd back as it was before CONNECT made it a
 * companion: unconnected, no error pending, out of repair mode, its
 * SO_REUSEADDR restored (a WITHDRAW). 0 or -errno.
 */
int shuntd_companion_undo_connector(struct circuit *c, int fd);
/*
 * A descriptor of end @end's companion: taken from a process holding that
 * end (pidfd_getfd), or, when none does any more, a new one made in its
 * place with the same addresses and sequence numbers. -errno on failure.
 */
int shuntd_companion_fetch(struct shuntd *d, struct circuit *c, unsigned end);
/*
 * Move the connection onto its companions @kfd (end 0's and end 1's): each
 * ring's unread bytes into the receiver's kernel queue (and, as sent, into
 * the sender's), then out of repair mode. 0 or -errno; on failure the
 * circuit is untouched.
 */
int shuntd_companion_release(struct circuit *c, const int kfd[2]);

/*
 * directory.c: the ports listened on, published read-only per network
 * namespace (include/shunt/directory.h). _init readies it (0 or -errno);
 * _fd is the memfd of @ns's directory, made on first use, for HELLO
 * replies (-1 without one); _ns_gone lets it go with @ns's view;
 * _listener counts @l in (@delta 1, once it is in the port chain) or out
 * (-1, once it has left it); _channel bumps @l's channel epoch, as shuntd
 * makes a channel to it.
 */
int shuntd_directory_init(void);
int shuntd_directory_fd(struct shuntd *d, struct netns *ns);
void shuntd_directory_ns_gone(struct netns *ns);
void shuntd_directory_listener(struct shuntd *d, const struct listener *l, int delta);
void shuntd_directory_channel(struct shuntd *d, const struct listener *l);
/* Publish how many sessions hold @l now (0 once it is gone). */
void shuntd_directory_holds(struct shuntd *d, const struct listener *l);

/* shm.c: a sealed, anonymous memfd of @size bytes, or -errno */
int shuntd_memfd_sealed(const char *name, size_t size);
/*
 * shm.c: the same, mapped writable at *@map for shuntd, then sealed so
 * that whoever it is handed to can map it only read-only.
 */
int shuntd_memfd_published(const char *name, size_t size, void **map);

/* link.c */
/* The daemon link of a new session; -errno if it cannot be made. */
int shuntd_link_daemon(struct shuntd *d, struct session *s);
/* The link between @a and @b (made if need be), or NULL. */
struct link *shuntd_link_get(struct shuntd *d, struct session *a, struct session *b);
/*
 * Links between @s, connecting to @l, and each process that may accept the
 * connection, offered to both sides (SHUNT_LINK_SLOT_PULL) right away: a
 * link asked for only when first needed cannot be had once shuntd is dead,
 * and its connection could then never wake an epoll waiter. Except: one
 * link of @s's, returned in *@give (when @give is not NULL), which goes
 * with the reply (shuntd_link_attach); and when @fresh (the connection goes
 * through a channel made just now), the accepting side's, which goes with
 * the channel when it asks for it (ACCEPT).
 */
void shuntd_link_prepare(struct shuntd *d, struct session *s, struct listener *l, bool fresh,
			 struct link **give);
/* The link of @s with @partner if @s has not been handed it yet, or NULL. */
struct link *shuntd_link_undelivered(struct session *s, struct session *partner);
/*
 * Put link @k into channel reply @r for @s: its fields, its descriptors in
 * @fds (how many returned); once sent, shuntd_link_handed says whether it went.
 */
unsigned shuntd_link_attach(struct session *s, struct link *k, struct shunt_msg_chan *r,
			    int fds[3]);
void shuntd_link_handed(struct session *s, struct link *k, bool sent);
/* A dead link to tell @s about, taken off its list, or 0. */
uint64_t shuntd_link_take_gone(struct session *s);
/*
 * @s has been handed everything (links, dead links): take back the
 * SHUNT_LINK_SLOT_PULL posted for it, so that it does not ask for nothing.
 */
void shuntd_link_settle(struct session *s);
/* Post @slot to @s through its daemon link (and wake it if it sleeps). */
void shuntd_link_notify(struct session *s, uint32_t slot);
void shuntd_link_session_gone(struct shuntd *d, struct session *s);
/* LINK and LINK_NEXT requests. */
void shuntd_link_request(struct shuntd *d, struct session *s, const struct shunt_msg_link *m);
void shuntd_link_next(struct shuntd *d, struct session *s, const struct shunt_msg_link *m);

/* connect.c */
void shuntd_connect(struct shuntd *d, struct session *s, const struct shunt_msg_connect *m, int fd);
void shuntd_accept(struct shuntd *d, struct session *s, const struct shunt_msg_accept *m, int fd);
void shuntd_close(struct shuntd *d, struct session *s, const struct shunt_msg_close *m);
/* WITHDRAW: the library could not take an end it was just given (@fd: the request's socket). */
void shuntd_withdraw(struct shuntd *d, struct session *s, const struct shunt_msg_withdraw *m,
		     int fd);

/* downgrade.c */
void shuntd_downgrade(struct shuntd *d, struct session *s, const struct shunt_msg_downgrade *m,
		      int fd);

/* tenant.c: tenants, accounting, the policy's decisions */
/* Load (or reload) the policy file; 0 or -errno (the old policy stays). */
int shuntd_policy_load(struct shuntd *d);
/* The facts and tenant of a new session. */
void shuntd_tenant_identify(struct shuntd *d, struct session *s);
struct tenant *shuntd_tenant_get(struct shuntd *d, const char *name);
/*
 * What to do with a connect from @s to listener @l at @dst: SHUNT_OK (a
 * circuit, charged to the tenants), a SHUNT_KERNEL_* status, or
 * -ECONNREFUSED. Counts and logs every fallback and refusal with its reason;
 * for SHUNT_KERNEL_POLICY fills @why (the reply that says so).
 */
int shuntd_tenant_admit(struct shuntd *d, struct session *s, const struct listener *l,
			const struct shunt_wire_addr *dst, struct shunt_msg_connect_kernel *why);
/* Count a fallback that happened for another reason (no listener, resources). */
void shuntd_tenant_fallback(struct shuntd *d, struct session *s, enum shunt_fallback why);
/*
 * Count end @end of @c as a connection of @t (the connector's tenant also
 * pays for the circuit's memory); release it when the end is done, the
 * memory when the circuit is freed.
 */
void shuntd_tenant_charge(struct circuit *c, unsigned end, struct tenant *t);
void shuntd_tenant_release(struct circuit *c, unsigned end);
void shuntd_tenant_free_memory(struct circuit *c);

/* metrics.c: the Prometheus text format, over HTTP on loopback or a Unix socket */
int shuntd_metrics_init(struct shuntd *d);
void shuntd_metrics_accept(struct shuntd *d);
void shuntd_metrics_input(struct shuntd *d, void *client);

/* status.c */
void shuntd_status(struct shuntd *d, struct session *s, const struct shunt_msg_status *m);
/*
 * Send what the socket of @s takes of its STATUS reply (s->status.active):
 * called when it has room again. The reply is over (or the client gone)
 * once s->status.active is false again.
 */
void shuntd_status_continue(struct shuntd *d, struct session *s);

#endif
