/* SPDX-License-Identifier: MIT */
/*
 * epoll over shunt sockets and kernel descriptors together. The
 * application's epoll descriptor stays a real kernel epoll instance (so
 * nesting it, polling it and sharing it keep the kernel's behaviour), in
 * which kernel descriptors are registered as the application asks. A shunt
 * socket's registration is a record here with a mode:
 *
 *   KERNEL    the socket is still a kernel socket (not connected yet, or a
 *             listener shuntd does not know): registered in the kernel
 *             instance with the application's data, as without shunt;
 *   CIRCUIT   its bytes move in a circuit: readiness comes from notices
 *             (notice.h) and sits on a ready list here (delivered, never
 *             scanned);
 *   LISTENER  a shunt listener: its kernel listening socket and its backlog
 *             doorbell are registered in the kernel instance with our own
 *             data, and reported as one event with the application's;
 *   NESTED    another shunt epoll instance: registered with our own data
 *             too, so that its readiness can be checked (its ready list may
 *             hold entries that are no longer ready) before it is reported.
 *
 * A registration changes mode when its socket does (connect, listen,
 * disconnect). Each instance also holds a "bell" eventfd, set while its
 * ready list is not empty and someone may be waiting or looking from
 * outside (nested epoll, poll). The notice hub is put in the instance only
 * while a thread sleeps there (see epoll_wait.c).
 */
#ifndef SHUNT_EPOLL_H
#define SHUNT_EPOLL_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "common/list.h"
#include "common/map.h"
#include "preload/file.h"

struct shunt_sock;

enum shunt_reg_mode {
	SHUNT_REG_KERNEL,
	SHUNT_REG_CIRCUIT,
	SHUNT_REG_LISTENER,
	SHUNT_REG_NESTED,
};

struct shunt_epoll {
	struct shunt_file f;		/* first: what the fd table holds */
	struct shunt_epoll *next_free;	/* under the pool lock */
	struct shunt_epoll *all_next;	/* under the pool lock: every object, for fork */
	pthread_mutex_t lock;		/* ready list, bell, sleepers, sentinels */
	int kfd;			/* our hidden dup of the instance, for our own calls */
	int bell;			/* hidden eventfd registered in it, level-triggered */
	bool bell_set;			/* under lock */
	int sleepers;			/* under lock: threads asleep in it */
	struct shunt_list asleep_node;	/* under the hub lock (epoll_wait.c): while sleepers > 0 */
	_Atomic bool exposed;		/* polled or nested: keep the bell exact */
	struct shunt_list regs;		/* under shunt_notice_lock: its registrations */
	struct shunt_list watchers;	/* under shunt_notice_lock: NESTED registrations of it */
	bool circuit_first;		/* under lock: alternates who reports first */
	struct shunt_list ready;	/* under lock: CIRCUIT registrations to report */
	struct shunt_map sentinels;	/* under lock: our kernel data -> registration */
	char bell_mark, hub_mark;	/* their addresses tag the bell's and hub's events */
};

/* One socket registered in one epoll instance under one descriptor number. */
struct shunt_reg {
	struct shunt_reg *next_free;	/* under the pool lock */
	struct shunt_epoll *ep;
	struct shunt_sock *sock;	/* no reference: the socket's release removes us */
	struct shunt_epoll *inner;	/* NESTED: the instance registered (no reference either) */
	int fd;
	uint32_t events;		/* as the application gave them */
	epoll_data_t data;
	enum shunt_reg_mode mode;	/* under shunt_notice_lock */
	bool armed;			/* EPOLLONESHOT has not fired since ADD/MOD */
	bool queued;			/* under ep->lock: on ep->ready */
	struct shunt_list ep_node;	/* under shunt_notice_lock */
	struct shunt_list sock_node;	/* under shunt_notice_lock: in sock or inner watchers */
	struct shunt_list ready_node;	/* under ep->lock */
};

/* epoll_create1: a kernel instance plus our record of it; fd or -errno. */
int shunt_epoll_create(int flags);

/* epoll_ctl on instance @epfd (ours) for descriptor @fd: 0 or -errno. */
int shunt_epoll_ctl(struct shunt_epoll *ep, int epfd, int op, int fd, struct epoll_event *ev);

/*
 * epoll_wait/epoll_pwait/epoll_pwait2 on instance @epfd (ours): @timeout_ns
 * < 0 waits forever, @mask as epoll_pwait's. Returns events or -errno.
 */
int shunt_epoll_wait(struct shunt_epoll *ep, int epfd, struct epoll_event *events, int max,
		     int64_t timeout_ns, const sigset_t *mask);

/* A socket's readiness may have changed: queue its CIRCUIT registrations. Under the notice lock. */
void shunt_epoll_sock_changed(struct shunt_sock *s);

/* A socket's state changed (connected, listening, disconnected): move its registrations. */
void shunt_epoll_sock_moved(struct shunt_sock *s);

/*
 * A listener's doorbell descriptor is about to refer to another file (false:
 * take the old one out of every instance), or now does (true: put it in).
 * The caller holds s->lock across both calls (relisten.c).
 */
void shunt_epoll_sock_bell(struct shunt_sock *s, bool attach);

/*
 * Listener @s's channels changed (one was mapped, or dropped): its
 * EPOLLEXCLUSIVE registrations, which hold the channels' bells one by one,
 * follow. Call it after the connection the new channel brought was taken,
 * if any: a bell put in while it counts wakes every such instance.
 */
void shunt_epoll_sock_chans(struct shunt_sock *s);

/* The socket is going away: drop every registration of it. */
void shunt_epoll_sock_gone(struct shunt_sock *s);

/* Clear the bell if nothing is ready any more. Under ep->lock. */
void shunt_epoll_unring_locked(struct shunt_epoll *ep);

/* Mark @ep as looked at from outside (nested in another epoll, or polled). */
void shunt_epoll_expose(struct shunt_epoll *ep);

/*
 * Whether @ep has registrations ready in user space now, dropping the ones
 * that no longer are (and clearing the bell if none is left): what polling
 * an epoll descriptor from outside must see.
 */
bool shunt_epoll_ready_now(struct shunt_epoll *ep);

/*
 * Whether @ep is ready as the kernel's ep_eventpoll_poll would say: its
 * ready list, or its kernel instance (after the list is pruned).
 */
bool shunt_epoll_readable(struct shunt_epoll *ep);

/*
 * The socket becomes a plain kernel socket the library forgets (an io_uring
 * operation reached its kernel file): every registration of it becomes the
 * kernel's own, with the application's events and data, and our records go.
 */
void shunt_epoll_sock_forget(struct shunt_sock *s);

/* Whether @ep holds only kernel registrations: its kernel instance tells all. */
bool shunt_epoll_kernel_only(struct shunt_epoll *ep);

/*
 * The sockets whose readiness @ep (or an instance nested in it) learns in
 * user space — registrations not in KERNEL mode — each with a reference
 * (drop with shunt_sock_put) and the descriptor it was registered under;
 * at most @max. Returns how many.
 */
int shunt_epoll_members(struct shunt_epoll *ep, struct shunt_sock **socks, int *fds, int max);

/* Called by shunt_file_put when the last reference is gone. */
void shunt_epoll_release(struct shunt_epoll *ep);

/* Around fork (fork.c): the pool's lock, and in the child every instance's lock anew. */
void shunt_epoll_fork_prepare(void);
void shunt_epoll_fork_parent(void);
void shunt_epoll_fork_child(void);
/* epoll_wait.c: in the child, no instance holds the hub. */
void shunt_epoll_hub_fork_child(void);

#endif
