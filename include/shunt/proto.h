/* SPDX-License-Identifier: MIT */
/*
 * The control protocol between libshunt (and the CLI) and shuntd: fixed-size,
 * versioned messages over a SOCK_SEQPACKET Unix socket, file descriptors in
 * SCM_RIGHTS. See docs/protocol.md. shuntd learns identity from SO_PEERCRED
 * and addresses from the sockets it is handed, never from message fields.
 */
#ifndef SHUNT_PROTO_H
#define SHUNT_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define SHUNT_PROTO_VERSION 7u

enum shunt_msg_type {
	SHUNT_MSG_HELLO = 1,		/* lib -> d, replied + daemon link */
	SHUNT_MSG_LISTEN = 2,		/* lib -> d + listening socket, replied + bells, doorbell, announce */
	SHUNT_MSG_UNLISTEN = 3,		/* lib -> d, replied once done (unless UNANSWERED) */
	SHUNT_MSG_CONNECT = 4,		/* lib -> d + bound socket, replied (+ circuit) */
	SHUNT_MSG_ACCEPT = 5,		/* lib -> d + listening socket, replied (+ circuit) */
	SHUNT_MSG_CLOSE = 6,		/* lib -> d, replied only with SHUNT_CLOSE_SHARED */
	SHUNT_MSG_STATUS = 7,		/* cli -> d, answered by a stream of records */
	SHUNT_MSG_STATUS_SESSION = 8,	/* d -> cli */
	SHUNT_MSG_STATUS_LISTENER = 9,	/* d -> cli */
	SHUNT_MSG_STATUS_CONN = 10,	/* d -> cli */
	SHUNT_MSG_STATUS_END = 11,	/* d -> cli, last record */
	SHUNT_MSG_LINK = 12,		/* lib -> d, replied + link */
	SHUNT_MSG_LINK_NEXT = 13,	/* lib -> d, replied (+ link) */
	SHUNT_MSG_FORK = 14,		/* lib -> d, not replied */
	SHUNT_MSG_FORK_DONE = 15,	/* lib -> d, not replied */
	SHUNT_MSG_DOWNGRADE = 16,	/* lib -> d, replied */
	SHUNT_MSG_STATUS_POLICY = 17,	/* d -> cli */
	SHUNT_MSG_UNREPAIR = 18,	/* lib -> d + socket, replied */
	SHUNT_MSG_WITHDRAW = 19,	/* lib -> d + the request's socket, not replied */
	SHUNT_MSG_EXEC = 20,		/* lib -> d, replied */
	SHUNT_MSG_EXEC_KEEP = 21,	/* lib -> d + the socket kept, replied */
	SHUNT_MSG_EXEC_DONE = 22,	/* lib -> d, not replied */
	SHUNT_MSG_EXEC_NEXT = 23,	/* lib -> d, replied (+ circuit memfd) */
	SHUNT_MSG_TYPE_MAX = 23,
	SHUNT_MSG_REPLY = 0x8000,	/* or'ed into the type of a reply */
};

enum shunt_msg_limits {
	SHUNT_MSG_MAX = 512,		/* no message is larger */
	SHUNT_MSG_MAX_FDS = 5,		/* no message carries more descriptors */
	SHUNT_COMM_LEN = 16,
};

/*
 * Positive reply statuses; negative ones are -errno. A CONNECT answered
 * with one of the SHUNT_KERNEL_* (or SHUNT_USE_KERNEL) leaves the
 * connection to the kernel, for the reason it names.
 */
enum shunt_reply_status {
	SHUNT_OK = 0,
	SHUNT_USE_KERNEL = 1,		/* connect: no shunt listener matches, use the kernel */
	SHUNT_NONE = 2,			/* link_next: nothing to hand over */
	SHUNT_LAST = 3,			/* close of a shared end: you were its last holder */
	SHUNT_KERNEL_POLICY = 4,	/* connect: the policy leaves it to the kernel */
	SHUNT_KERNEL_LIMIT = 5,		/* connect: a tenant's limit is reached */
	SHUNT_KERNEL_RESOURCES = 6,	/* connect: shuntd is out of memory or descriptors */
	/*
	 * connect, accept: use this channel (struct shunt_msg_chan, its
	 * memfd and its bell) and try again.
	 */
	SHUNT_USE_CHANNEL = 7,
	/*
	 * connect, accept: the library stopped waiting before shuntd took the
	 * request (SHUNT_*_DEADLINE): nothing was done; the kernel connected
	 * it, or the acceptor looks again.
	 */
	SHUNT_ABANDONED = 8,
};

/*
 * Why shuntd left a connect to the kernel or refused it: counted per reason
 * and shown by `shunt status` and the metrics.
 */
enum shunt_fallback {
	SHUNT_FALLBACK_NO_LISTENER,	/* nobody under shunt listens there */
	SHUNT_FALLBACK_POLICY,		/* a rule (or the default) says kernel */
	SHUNT_FALLBACK_REFUSED,		/* a rule (or the default) says refuse */
	SHUNT_FALLBACK_LIMIT_CONNECTIONS, /* a tenant's max_connections */
	SHUNT_FALLBACK_LIMIT_MEMORY,	/* a tenant's max_memory */
	SHUNT_FALLBACK_RESOURCES,	/* shuntd's own memory or descriptors */
	SHUNT_FALLBACK_SOCKET,		/* shuntd could not verify the socket (its namespace) */
	SHUNT_FALLBACK_REASONS,
	SHUNT_FALLBACK_SLOTS = 8,	/* room on the wire */
};

/* Whether a CONNECT reply status means "use the kernel". */
static inline int shunt_status_is_kernel(int status)
{
	return status == SHUNT_USE_KERNEL || status == SHUNT_KERNEL_POLICY ||
	       status == SHUNT_KERNEL_LIMIT || status == SHUNT_KERNEL_RESOURCES;
}

struct shunt_msg_hdr {
	uint16_t type;
	uint16_t version;
	uint32_t len;			/* of the whole message, header included */
	uint32_t seq;			/* echoed in the reply */
	int32_t status;			/* replies only */
};

/* An IPv4 or IPv6 socket address, port in host order. */
struct shunt_wire_addr {
	uint16_t family;		/* AF_INET or AF_INET6 */
	uint16_t port;
	uint32_t scope_id;
	uint32_t flowinfo;
	uint32_t reserved;
	uint8_t addr[16];		/* AF_INET uses the first 4 bytes */
};

enum shunt_hello_flags {
	SHUNT_HELLO_CLAIM = 1u << 0,	/* a fork child takes over its parent's ticket */
	SHUNT_HELLO_EXEC = 1u << 1,	/* a new image takes over its exec ticket, if any */
};

struct shunt_msg_hello {
	struct shunt_msg_hdr h;
	uint32_t flags;			/* enum shunt_hello_flags */
	uint32_t reserved;
	uint64_t ticket;		/* SHUNT_HELLO_CLAIM: the name the parent's FORK gave it */
	uint64_t secret;
	uint64_t parent;		/* SHUNT_HELLO_CLAIM: the parent's session */
};

/*
 * The reply carries the session's daemon link: a link memfd whose side 0
 * this process drains and that side's eventfd, through which shuntd posts
 * notices (a completed connect, a peer that died, a link to pick up); then
 * the session's journal (include/shunt/journal.h): its memfd and the
 * eventfd that kicks shuntd into reading it.
 */
struct shunt_msg_hello_reply {
	struct shunt_msg_hdr h;
	uint64_t session;
	uint32_t ring_size;		/* default ring size of this daemon */
	/*
	 * SHUNT_HELLO_CLAIM: 0, or -errno. SHUNT_HELLO_EXEC: how many circuit
	 * ends the exec ticket kept (each to fetch with EXEC_NEXT), or -ENOENT.
	 */
	int32_t claim;
	uint64_t link;			/* the daemon link's id */
};

/*
 * LISTEN carries the listening socket. The reply carries the session's
 * announce for the listener, an eventfd counting channels made and not yet
 * handed to it; the reply to a new registration carries before it the
 * listener's bells, an epoll instance readable while shuntd's doorbell or
 * one of its channels' bells counts a queued connection, and that doorbell
 * (docs/connect.md, "The doorbell").
 */
struct shunt_msg_listen {
	struct shunt_msg_hdr h;
	uint64_t listener;		/* 0 to register, else the id to refresh */
};

struct shunt_msg_listen_reply {
	struct shunt_msg_hdr h;
	uint64_t listener;
};

enum shunt_unlisten_flags {
	/* shutdown(SHUT_RD): the socket stops listening for every holder, not just this one. */
	SHUNT_UNLISTEN_SHUTDOWN = 1u << 0,
	/*
	 * Not answered: others of the holder's family (the processes forked
	 * from one another that hold it) hold the listener still, so this
	 * holder's leaving changes nothing anyone sees, and it does not wait.
	 */
	SHUNT_UNLISTEN_UNANSWERED = 1u << 1,
	/* One of the family's closes, counted in @after of its last (docs/protocol.md). */
	SHUNT_UNLISTEN_COUNTED = 1u << 2,
};

struct shunt_msg_unlisten {
	struct shunt_msg_hdr h;
	uint64_t listener;
	uint32_t flags;			/* enum shunt_unlisten_flags */
	/*
	 * Answered once shuntd has read this many COUNTED closes of the
	 * listener (this one included), or it is gone, or a second passed:
	 * the family's last holder, whose others did not wait. 0: at once.
	 */
	uint32_t after;
};

enum shunt_connect_flags {
	SHUNT_CONNECT_NONBLOCK = 1u << 0,
	/* The channel was tried and had no room: a circuit of shuntd's own, please. */
	SHUNT_CONNECT_NO_CHANNEL = 1u << 1,
	/* Every slot of the channel in use is taken: another channel, if one may be had. */
	SHUNT_CONNECT_CHANNEL_FULL = 1u << 2,
	/*
	 * The library may stop waiting: shuntd claims the request in the
	 * journal's claim word (include/shunt/journal.h) before it acts on it.
	 */
	SHUNT_CONNECT_DEADLINE = 1u << 3,
};

/* CONNECT carries the client's socket, already bound to its local address. */
struct shunt_msg_connect {
	struct shunt_msg_hdr h;
	struct shunt_wire_addr dst;
	uint32_t flags;			/* enum shunt_connect_flags */
	uint32_t reserved;
};

enum { SHUNT_TENANT_LEN = 32, SHUNT_RULE_LEN = 32 };

/*
 * The reply to a CONNECT that the policy left to the kernel (status
 * SHUNT_KERNEL_POLICY): who the two ends are and what decided, so that the
 * program's log can name the rule that would allow shared memory.
 */
struct shunt_msg_connect_kernel {
	struct shunt_msg_hdr h;
	char from[SHUNT_TENANT_LEN];	/* the connecting process's tenant */
	char to[SHUNT_TENANT_LEN];	/* the listener's */
	char rule[SHUNT_RULE_LEN];	/* the rule that decided, or "" for the default */
	char dflt[16];			/* the default policy's action, when it decided */
};

enum shunt_accept_flags {
	/* As SHUNT_CONNECT_DEADLINE: the library may stop waiting (docs/connect.md). */
	SHUNT_ACCEPT_DEADLINE = 1u << 0,
};

struct shunt_msg_accept {
	struct shunt_msg_hdr h;
	uint64_t listener;
	uint32_t flags;			/* enum shunt_accept_flags */
	uint32_t reserved;
};

enum shunt_circuit_flags {
	SHUNT_CIRCUIT_KERNEL_HALF = 1u << 0,	/* ACCEPT: an ESTABLISHED kernel socket comes first */
	/*
	 * CONNECT: in the accept queue already. What the connector believes,
	 * rather than the circuit's setup word, which the acceptor can write
	 * as soon as it has accepted.
	 */
	SHUNT_CIRCUIT_ESTABLISHED = 1u << 1,
};

/*
 * Reply to CONNECT (status SHUNT_OK) and ACCEPT: with SHUNT_CIRCUIT_KERNEL_HALF
 * first the accepted kernel socket (so it lands on the lowest free number,
 * as accept() would), then the circuit memfd.
 */
struct shunt_msg_circuit {
	struct shunt_msg_hdr h;
	uint64_t circuit;
	uint32_t ring_size;
	uint8_t end;			/* enum shunt_end_index */
	uint8_t reserved8;
	uint16_t flags;			/* enum shunt_circuit_flags */
	struct shunt_wire_addr local;	/* as the kernel would report getsockname */
	struct shunt_wire_addr peer;	/* and getpeername */
};

/*
 * A channel to use (status SHUNT_USE_CHANNEL of a CONNECT or ACCEPT reply),
 * with its memfd and its bell (an EFD_SEMAPHORE eventfd), which the client
 * counts its queued connections on and an acceptor counts them off. With
 * SHUNT_CHAN_LINK, a link comes with it, as a LINK_NEXT reply would hand
 * it over (its three descriptors after the channel's): for a CONNECT the
 * link with a process that may accept, for an ACCEPT the link with the
 * channel's client. Either way the round trip that would fetch it is saved.
 */
struct shunt_msg_chan {
	struct shunt_msg_hdr h;
	uint64_t channel;
	uint32_t slots;
	uint32_t ring_size;
	struct shunt_wire_addr src;	/* CONNECT: the source address to bind to (port 0) */
	uint32_t flags;			/* enum shunt_chan_flags */
	uint32_t reserved;
	uint64_t link;			/* SHUNT_CHAN_LINK: as in struct shunt_msg_link_reply */
	uint64_t partner;
	uint64_t gone;			/* a dead link to forget, or 0 */
	uint8_t side;
	uint8_t reserved8[7];
};

enum shunt_chan_flags {
	/*
	 * ACCEPT: shuntd has no other channel of this listener to give this
	 * session; the acceptor need not ask again for one made before it asked.
	 */
	SHUNT_CHAN_LAST = 1u << 0,
	/* A link comes with the channel (link, partner, side; three descriptors). */
	SHUNT_CHAN_LINK = 1u << 1,
};

/*
 * LINK asks for the link with another session (one that shares a circuit
 * with this one, or this session itself); LINK_NEXT for a link shuntd made
 * for this session meanwhile (SHUNT_OK), or SHUNT_NONE. A link reply carries
 * the link memfd, then the eventfd of the side this process drains, then the
 * other side's. A link reply with flag SHUNT_LINK_GONE carries no
 * descriptors: the partner went away, the link is dead. A LINK_NEXT reply
 * with SHUNT_LINK_LAST was the last one shuntd had when it answered (it
 * posts SHUNT_LINK_SLOT_PULL again for anything later).
 */
struct shunt_msg_link {
	struct shunt_msg_hdr h;
	uint64_t partner;		/* LINK: the other session; LINK_NEXT: 0 */
};

enum shunt_link_flags {
	SHUNT_LINK_GONE = 1u << 0,
	/* LINK_NEXT: nothing else waits to be handed over; no need to ask again. */
	SHUNT_LINK_LAST = 1u << 1,
};

struct shunt_msg_link_reply {
	struct shunt_msg_hdr h;
	uint64_t link;
	uint64_t partner;		/* the other session (this one for a self link) */
	uint8_t side;			/* the side this process drains */
	uint8_t reserved8;
	uint16_t flags;			/* enum shunt_link_flags */
	uint32_t reserved;
	uint64_t gone;			/* LINK_NEXT with a link: also a dead one to forget, or 0 */
};

enum shunt_close_flags {
	/*
	 * The end has other holders (processes that share the socket): shuntd
	 * answers SHUNT_LAST if this was the last of them, and only then does
	 * the closer publish the FIN or reset.
	 */
	SHUNT_CLOSE_SHARED = 1u << 0,
};

struct shunt_msg_close {
	struct shunt_msg_hdr h;
	uint64_t circuit;
	uint32_t end;
	uint32_t flags;			/* enum shunt_close_flags */
};

/*
 * FORK, before fork(): shuntd makes a ticket that holds everything this
 * session holds, for the child, and counts the child as a holder of each
 * circuit end. The parent names the ticket and its secret (random, from
 * the library) and does not wait: shuntd makes the ticket when it reads
 * this, before any later request of the parent's, and a claim that comes
 * first reads the parent's requests until it does. The child claims it in
 * its HELLO; FORK_DONE tells shuntd the child's pid (so a child that dies
 * before claiming releases it) or, with pid 0, that fork failed.
 */
struct shunt_msg_fork {
	struct shunt_msg_hdr h;
	uint64_t ticket;
	uint64_t secret;
};

struct shunt_msg_fork_done {
	struct shunt_msg_hdr h;
	uint64_t ticket;
	int32_t pid;			/* the child, or 0: fork failed */
	uint32_t reserved;
};

/*
 * DOWNGRADE: a holder is about to lose control of a descriptor of this
 * circuit (exec of a program without the library, SCM_RIGHTS): move the connection onto its companion
 * kernel sockets. The requester holds the four holders' locks of the
 * circuit (both ends' tx_lock and rx_lock), so no ring moves meanwhile.
 */
struct shunt_msg_downgrade {
	struct shunt_msg_hdr h;
	uint64_t circuit;
};

/*
 * UNREPAIR: the circuit of this socket is gone while the socket lives on
 * (refused, disconnected, reconnecting): its kernel half, a companion
 * ESTABLISHED in TCP_REPAIR mode, goes back to an unconnected socket out of
 * repair mode, without a packet and without an error pending. Only shuntd
 * may leave repair mode (CAP_NET_ADMIN). A socket not in repair mode is
 * left alone.
 */
struct shunt_msg_unrepair {
	struct shunt_msg_hdr h;
};

/*
 * The library could not take an end shuntd just handed it: the reply's
 * descriptors were cut off (MSG_CTRUNC, the process is out of them). Sent
 * with the socket of the CONNECT or ACCEPT. A connector end whose circuit
 * no acceptor has taken yet is undone: the circuit goes away as if never
 * made, and the socket is put back as it was before the CONNECT
 * (unconnected, out of repair mode) for the kernel to connect. Any other
 * end is let go of as by a process that died. Not replied: the library
 * follows it with a request every shuntd answers (a shared CLOSE of
 * circuit 0), whose answer says the withdrawal is done; a shuntd that does
 * not know WITHDRAW ignores it, and nobody waits forever.
 */
struct shunt_msg_withdraw {
	struct shunt_msg_hdr h;
	uint64_t circuit;
	uint32_t end;
	uint32_t reserved;
};

/*
 * Exec: a process about to replace its program with one that runs the
 * library too keeps its connections on their circuits. EXEC makes an exec
 * ticket bound to this process (its pid survives exec; its session, whose
 * socket is close-on-exec, does not). EXEC_KEEP gives the ticket a hold on
 * one circuit end or listener this session holds, proven with the socket
 * (for an end with a companion, its inode must be the companion's), and
 * remembers the socket's inode and @flags for the new image. EXEC_DONE,
 * after an exec that failed, drops the ticket. The new image's first HELLO,
 * with SHUNT_HELLO_EXEC, claims the ticket of its pid; EXEC_NEXT then hands
 * it each kept end once, with its circuit memfd, until SHUNT_NONE. A
 * ticket nobody claims is dropped when the process exits, or after
 * SHUNT_EXEC_CLAIM_MS. A spawn ticket (SHUNT_EXEC_SPAWN) is the same for a
 * child about to be spawned, whose pid EXEC_DONE reports (0: the spawn
 * failed); until then its claim is the one of the spawner's child that
 * comes first (a process spawns one child at a time).
 */
enum shunt_exec_flags {
	SHUNT_EXEC_CONNECT_PENDING = 1u << 0,	/* connect said EINPROGRESS, not yet 0 */
};

enum { SHUNT_EXEC_CLAIM_MS = 30000 };

enum shunt_exec_kind {
	SHUNT_EXEC_IMAGE = 0,		/* this process execs */
	SHUNT_EXEC_SPAWN = 1,		/* a child this process spawns (posix_spawn) execs */
};

struct shunt_msg_exec {
	struct shunt_msg_hdr h;
	uint32_t kind;			/* enum shunt_exec_kind */
	uint32_t reserved;
};

struct shunt_msg_exec_reply {
	struct shunt_msg_hdr h;
	uint64_t ticket;
};

struct shunt_msg_exec_keep {
	struct shunt_msg_hdr h;
	uint64_t ticket;
	uint64_t circuit;		/* or 0, and: */
	uint64_t listener;		/* a listener (0 with a circuit) */
	uint32_t end;			/* enum shunt_end_index, with a circuit */
	uint32_t flags;			/* enum shunt_exec_flags */
};

struct shunt_msg_exec_done {
	struct shunt_msg_hdr h;
	uint64_t ticket;
	int32_t pid;			/* SHUNT_EXEC_SPAWN: the child, or 0: the spawn failed */
	uint32_t reserved;
};

struct shunt_msg_exec_next {
	struct shunt_msg_hdr h;
};

/* A kept circuit end, as a circuit reply says it, with the socket it was kept with. */
struct shunt_msg_exec_end {
	struct shunt_msg_hdr h;
	uint64_t circuit;
	uint32_t ring_size;
	uint8_t end;			/* enum shunt_end_index */
	uint8_t reserved8;
	uint16_t flags;			/* enum shunt_exec_flags, as kept */
	struct shunt_wire_addr local;
	struct shunt_wire_addr peer;
	uint64_t inode;			/* of the kernel socket it was kept with */
	/* Where the circuit starts in the memfd: 0, or a channel slot's offset. */
	uint64_t offset;
};

struct shunt_msg_status {
	struct shunt_msg_hdr h;
	uint32_t flags;
	uint32_t reserved;
};

struct shunt_msg_status_session {
	struct shunt_msg_hdr h;
	uint64_t session;
	int32_t pid;
	uint32_t uid;
	char comm[SHUNT_COMM_LEN];
	char tenant[SHUNT_TENANT_LEN];	/* as shuntd derived it (docs/policy.md) */
};

struct shunt_msg_status_listener {
	struct shunt_msg_hdr h;
	uint64_t listener;
	uint64_t session;
	uint64_t netns;
	struct shunt_wire_addr addr;
	uint32_t backlog;
	uint32_t queued;
};

struct shunt_msg_status_conn {
	struct shunt_msg_hdr h;
	uint64_t circuit;
	uint64_t session[2];		/* per end; 0 once that end is gone */
	struct shunt_wire_addr addr[2];	/* local address of each end */
	uint64_t bytes[2];		/* bytes each end has sent (its tx ring's tail) */
	uint32_t state[2];		/* enum shunt_end_state of each end */
	uint32_t setup;			/* enum shunt_setup_state */
	uint32_t ring_size;
};

/*
 * Connects the policy left to the kernel or refused, per pair of tenants and
 * what decided (one record per pair, before STATUS_END).
 */
struct shunt_msg_status_policy {
	struct shunt_msg_hdr h;
	char from[SHUNT_TENANT_LEN];
	char to[SHUNT_TENANT_LEN];
	char rule[SHUNT_RULE_LEN];	/* the deciding rule, or "" for the default */
	char dflt[16];			/* the default's action, when it decided */
	uint32_t refused;		/* 1: refused; 0: left to the kernel */
	uint32_t reserved;
	uint64_t count;
};

struct shunt_msg_status_end {
	struct shunt_msg_hdr h;
	uint64_t circuits_total;	/* circuits created since the daemon started */
	uint64_t sessions_total;
	uint64_t fallbacks[SHUNT_FALLBACK_SLOTS]; /* connects per enum shunt_fallback */
};

/*
 * Every message of the protocol, once: the decoder (shunt_proto_check),
 * shuntd's dispatcher (src/daemon/session.c) and the fuzzer's oracle
 * (tests/fuzz/fuzz_proto.c) all read this table.
 *
 * X(type, request, reply, fds, answered, handler), for each request:
 *   request, reply: their sizes (the reply's when SHUNT_OK; 0: no reply of
 *     that type: none at all, or a stream of status records)
 *   fds: descriptors the request carries (0 or 1)
 *   answered: ALWAYS (a malformed one too, with -EPROTO), NEVER, SHARED
 *     (CLOSE: only with SHUNT_CLOSE_SHARED), ASKED (UNLISTEN: unless with
 *     SHUNT_UNLISTEN_UNANSWERED), STREAM (STATUS: records)
 *   handler: the shuntd function that takes it (the request, and its
 *     descriptor when it carries one)
 */
#define SHUNT_REQUESTS(X) \
	X(HELLO, sizeof(struct shunt_msg_hello), sizeof(struct shunt_msg_hello_reply), \
	  0, ALWAYS, shuntd_session_hello) \
	X(LISTEN, sizeof(struct shunt_msg_listen), sizeof(struct shunt_msg_listen_reply), \
	  1, ALWAYS, shuntd_listener_register) \
	X(UNLISTEN, sizeof(struct shunt_msg_unlisten), sizeof(struct shunt_msg_hdr), \
	  0, ASKED, shuntd_listener_unregister) \
	X(CONNECT, sizeof(struct shunt_msg_connect), sizeof(struct shunt_msg_circuit), \
	  1, ALWAYS, shuntd_connect) \
	X(ACCEPT, sizeof(struct shunt_msg_accept), sizeof(struct shunt_msg_circuit), \
	  1, ALWAYS, shuntd_accept) \
	X(CLOSE, sizeof(struct shunt_msg_close), sizeof(struct shunt_msg_hdr), \
	  0, SHARED, shuntd_close) \
	X(STATUS, sizeof(struct shunt_msg_status), 0, 0, STREAM, shuntd_status) \
	X(LINK, sizeof(struct shunt_msg_link), sizeof(struct shunt_msg_link_reply), \
	  0, ALWAYS, shuntd_link_request) \
	X(LINK_NEXT, sizeof(struct shunt_msg_link), sizeof(struct shunt_msg_link_reply), \
	  0, ALWAYS, shuntd_link_next) \
	X(FORK, sizeof(struct shunt_msg_fork), 0, 0, NEVER, shuntd_fork) \
	X(FORK_DONE, sizeof(struct shunt_msg_fork_done), 0, 0, NEVER, shuntd_fork_done) \
	X(DOWNGRADE, sizeof(struct shunt_msg_downgrade), sizeof(struct shunt_msg_hdr), \
	  1, ALWAYS, shuntd_downgrade) \
	X(UNREPAIR, sizeof(struct shunt_msg_unrepair), sizeof(struct shunt_msg_hdr), \
	  1, ALWAYS, shuntd_companion_unrepair) \
	X(WITHDRAW, sizeof(struct shunt_msg_withdraw), 0, 1, NEVER, shuntd_withdraw) \
	X(EXEC, sizeof(struct shunt_msg_exec), sizeof(struct shunt_msg_exec_reply), \
	  0, ALWAYS, shuntd_exec) \
	X(EXEC_KEEP, sizeof(struct shunt_msg_exec_keep), sizeof(struct shunt_msg_hdr), \
	  1, ALWAYS, shuntd_exec_keep) \
	X(EXEC_DONE, sizeof(struct shunt_msg_exec_done), 0, 0, NEVER, shuntd_exec_done) \
	X(EXEC_NEXT, sizeof(struct shunt_msg_exec_next), sizeof(struct shunt_msg_exec_end), \
	  0, ALWAYS, shuntd_exec_next)

/* X(type, size): the status records shuntd streams to a STATUS request. */
#define SHUNT_RECORDS(X) \
	X(STATUS_SESSION, sizeof(struct shunt_msg_status_session)) \
	X(STATUS_LISTENER, sizeof(struct shunt_msg_status_listener)) \
	X(STATUS_CONN, sizeof(struct shunt_msg_status_conn)) \
	X(STATUS_POLICY, sizeof(struct shunt_msg_status_policy)) \
	X(STATUS_END, sizeof(struct shunt_msg_status_end))

/* How a request is answered: the table's "answered" column. */
enum shunt_answer {
	SHUNT_ANSWER_NEVER,
	SHUNT_ANSWER_ALWAYS,
	SHUNT_ANSWER_SHARED,
	SHUNT_ANSWER_ASKED,
	SHUNT_ANSWER_STREAM,
};

_Static_assert(sizeof(struct shunt_msg_hdr) == 16, "wire v3");
_Static_assert(sizeof(struct shunt_wire_addr) == 32, "wire v3");
_Static_assert(sizeof(struct shunt_msg_circuit) == 96, "wire v3");
_Static_assert(sizeof(struct shunt_msg_chan) == 104, "wire v6");
_Static_assert(sizeof(struct shunt_msg_link_reply) == 48, "wire v6");
_Static_assert(sizeof(struct shunt_msg_withdraw) == 32, "wire v3");
_Static_assert(sizeof(struct shunt_msg_exec_keep) == 48, "wire v3");
_Static_assert(sizeof(struct shunt_msg_exec_end) == 112, "wire v4");
_Static_assert(sizeof(struct shunt_msg_status_conn) <= SHUNT_MSG_MAX, "fits");

#endif
