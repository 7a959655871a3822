/* SPDX-License-Identifier: MIT */
/*
 * shuntd's objects and the functions each file of the daemon offers the
 * others. The daemon is one thread running one event loop; nothing here is
 * locked. Ownership: a session owns its listeners and its links' references;
 * a circuit lives until both of its ends are closed or their sessions gone.
 */
#ifndef SHUNTD_H
#define SHUNTD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/list.h"
#include "common/map.h"
#include "shunt/circuit.h"
#include "shunt/link.h"
#include "shunt/proto.h"

struct shuntd_config {
	const char *socket_path;
	uint32_t ring_size;
	int idle_exit_ms;		/* exit after this long without sessions; <0: never */
	mode_t socket_mode;
};

struct shuntd {
	struct shuntd_config cfg;
	int epfd;
	int listen_fd;			/* the control socket */
	uint64_t next_id;
	uint64_t netns_self;		/* inode of the daemon's own network namespace */
	struct shunt_map sessions;	/* id -> struct session */
	struct shunt_map listeners;	/* id -> struct listener */
	struct shunt_map circuits;	/* id -> struct circuit */
	uint64_t circuits_total;
	uint64_t sessions_total;
	uint64_t kernel_fallbacks;
	bool stopping;
};

/* One connected process (or CLI), identified by SO_PEERCRED when it connected. */
struct session {
	uint64_t id;
	int fd;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	char comm[SHUNT_COMM_LEN];
	struct shunt_list listeners;	/* struct listener.session_node */
	struct shunt_list ends;		/* struct circuit_end.session_node */
	struct shunt_map links;		/* peer session id -> struct link */
};

/* The notice pages shared by a pair of sessions (possibly the same one twice). */
struct link {
	uint64_t id;
	struct session *side[2];	/* NULL once that side's session is gone */
	bool delivered[2];		/* whether that side has been sent the fds */
	struct shunt_link_hdr *hdr;
	int memfd;
	int efd[2];			/* side i sleeps on efd[i]; the other side writes it */
	uint32_t circuits;		/* circuits using a slot: a reference each */
	uint32_t next_slot;
	uint64_t used[SHUNT_LINK_SLOT_WORDS];
};

enum circuit_queue {
	CIRCUIT_UNQUEUED = 0,
	CIRCUIT_SYN,			/* waits for room in the accept queue */
	CIRCUIT_ACCEPTQ,		/* established, waits for accept() */
};

struct circuit_end {
	struct circuit *circuit;
	struct session *session;	/* holder; NULL once closed or dead */
	struct shunt_list session_node;
	bool done;			/* closed or its process died */
};

struct circuit {
	uint64_t id;
	uint32_t ring_size;
	int memfd;			/* kept until the acceptor has it */
	struct shunt_circuit_hdr *hdr;	/* the control page, mapped */
	struct circuit_end end[2];
	struct shunt_wire_addr local[2];	/* getsockname of each end, in its family */
	struct shunt_wire_addr peer[2];		/* getpeername of each end */
	struct link *link;
	uint32_t slot;			/* in the link, for notices to either end */
	uint8_t side[2];		/* the link side of each end's process */
	uint32_t isn[2];		/* companion sockets' initial sequence numbers */
	bool companion;			/* the connector's socket was made ESTABLISHED */
	struct listener *listener;	/* while queued */
	enum circuit_queue queue;
	struct shunt_list queue_node;
};

struct listener {
	uint64_t id;
	struct session *session;
	struct shunt_list session_node;
	uint64_t netns;
	struct shunt_wire_addr addr;	/* bound address; AF_INET6 may be v6only */
	bool v6only;
	uint64_t inode;			/* of the listening socket, to detect reuse */
	uint32_t max_queued;		/* accept queue capacity: backlog + 1 */
	uint32_t queued;		/* circuits in acceptq */
	struct shunt_list acceptq;
	struct shunt_list synq;
	int doorbell;			/* EFD_SEMAPHORE: value == queued */
};

/* main.c */
uint64_t shuntd_new_id(struct shuntd *d);

/* loop.c */
int shuntd_loop_init(struct shuntd *d);
int shuntd_loop_run(struct shuntd *d);
int shuntd_loop_watch(struct shuntd *d, int fd, void *tag);
void shuntd_loop_unwatch(struct shuntd *d, int fd);

/* session.c */
void shuntd_session_accept(struct shuntd *d);
void shuntd_session_input(struct shuntd *d, struct session *s);
void shuntd_session_close(struct shuntd *d, struct session *s);
int shuntd_session_reply(struct session *s, void *msg, const int *fds, unsigned nfds);
int shuntd_session_reply_status(struct session *s, uint16_t type, uint32_t seq, int status);

/* socket.c: facts about a socket handed over by a process */
struct sock_facts {
	int domain;
	bool listening;
	bool v6only;
	uint64_t netns;
	uint64_t inode;
	uint32_t max_backlog;
	struct shunt_wire_addr local;
};
int shuntd_socket_facts(int fd, struct sock_facts *f);

/* listener.c */
void shuntd_listener_register(struct shuntd *d, struct session *s,
			      const struct shunt_msg_listen *m, int fd);
void shuntd_listener_unregister(struct shuntd *d, struct session *s, uint64_t id);
void shuntd_listener_destroy(struct shuntd *d, struct listener *l);
struct listener *shuntd_listener_match(struct shuntd *d, uint64_t netns,
				       const struct shunt_wire_addr *dst);
/* Move circuits from the SYN queue into free accept-queue room. */
void shuntd_listener_admit(struct shuntd *d, struct listener *l);

/* circuit.c */
struct circuit *shuntd_circuit_create(struct shuntd *d, uint32_t ring_size);
void shuntd_circuit_destroy(struct shuntd *d, struct circuit *c);
void shuntd_circuit_end_done(struct shuntd *d, struct circuit *c, unsigned end, bool died);
void shuntd_circuit_set_setup(struct shuntd *d, struct circuit *c, enum shunt_setup_state st);
void shuntd_circuit_hold(struct circuit *c, unsigned end, struct session *s);
void shuntd_circuit_unqueue(struct circuit *c);
void shuntd_circuit_wake(struct circuit *c, unsigned end);
int shuntd_circuit_reply(struct shuntd *d, struct session *s, struct circuit *c, unsigned end,
			 uint16_t type, uint32_t seq, int kernel_half);

/* companion.c: real kernel sockets for the two ends (needs CAP_NET_ADMIN) */
int shuntd_companion_seqs(struct circuit *c);
int shuntd_companion_connector(struct circuit *c, int fd);
int shuntd_companion_acceptor(struct circuit *c, int domain);

/* shm.c: a sealed, anonymous memfd of @size bytes, or -errno */
int shuntd_memfd_sealed(const char *name, size_t size);

/* link.c */
struct link *shuntd_link_get(struct shuntd *d, struct session *a, struct session *b);
int shuntd_link_slot(struct link *l, uint32_t *slot);
void shuntd_link_release(struct shuntd *d, struct link *l, uint32_t slot);
void shuntd_link_session_gone(struct shuntd *d, struct link *l, struct session *s);
unsigned shuntd_link_side_of(const struct link *l, const struct session *s);

/* connect.c */
void shuntd_connect(struct shuntd *d, struct session *s, const struct shunt_msg_connect *m, int fd);
void shuntd_accept(struct shuntd *d, struct session *s, const struct shunt_msg_accept *m, int fd);
void shuntd_close(struct shuntd *d, struct session *s, const struct shunt_msg_close *m);

/* status.c */
void shuntd_status(struct shuntd *d, struct session *s, const struct shunt_msg_status *m);

#endif
