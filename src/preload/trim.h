/* SPDX-License-Identifier: MIT */
/*
 * The idle trimmer: the ring pages a connection's bytes have left are given
 * back once it has been quiet a while, so that memory at rest follows use
 * as the kernel's socket buffers do (docs/circuit.md, "Memory at rest").
 */
#ifndef SHUNT_TRIM_H
#define SHUNT_TRIM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct shunt_conn;

/*
 * How long a connection must have sent nothing before its ring is trimmed
 * but for the page its next byte goes to: long enough that a busy one
 * never pays the page faults, short enough that a burst's memory goes back
 * within a second (the trim comes between one and two of these after the
 * last send).
 */
#define SHUNT_TRIM_DELAY_NS (500 * 1000 * 1000LL)

/*
 * How long after that the last page goes too, if it still sent nothing: a
 * message after a shorter pause then costs no page fault (a fresh page
 * costs tens of microseconds on a cold CPU, on each side), and what stays
 * at rest is the control page.
 */
#define SHUNT_TRIM_REST_NS (5 * 1000 * 1000 * 1000LL)

/* What the trimmer does with a connection after a look (shunt_conn_trim). */
enum shunt_trim_next {
	SHUNT_TRIM_SOON,	/* it sent: look again SHUNT_TRIM_DELAY_NS from now */
	SHUNT_TRIM_LATER,	/* trimmed but a page: the rest SHUNT_TRIM_REST_NS from now */
	SHUNT_TRIM_DONE,	/* all trimmed: disarmed until it sends again */
};

/*
 * The trimmer's thread is put off while a process has only one connection
 * armed and that one has sent at most this much since it was armed: a
 * process that connects, asks and closes (a health check, a CGI client, a
 * client that opens a connection per request) never pays for a thread, nor
 * for the exit of a process with two threads. What that can leave
 * unreturned is bounded: the pages of this much of one connection's tx ring
 * (5 at most), until it closes or sends more; docs/circuit.md, "Memory at
 * rest".
 */
#define SHUNT_TRIM_EAGER_BYTES (16 * 1024)

/*
 * Whether the thread is put off with something armed (a hint for the send
 * path; shunt_trim_start decides under the trimmer's lock).
 */
extern _Atomic bool shunt_trim_put_off;

/*
 * @c sent: look at it SHUNT_TRIM_DELAY_NS from now (shunt_conn_trim).
 * Called with its tx lock held, once per quiet spell (conn.c keeps the
 * flag, and c->trim_from); takes the trimmer's lock, and starts the
 * trimmer's thread the first time in a process unless it is put off (see
 * SHUNT_TRIM_EAGER_BYTES). Does nothing once @c was forgotten, or in a
 * process under a seccomp filter (a thread of ours could meet calls the
 * filter kills for).
 */
void shunt_trim_arm(struct shunt_conn *c);

/*
 * Start the thread that was put off, if anything is still armed (an armed
 * connection sent more than SHUNT_TRIM_EAGER_BYTES). Under a tx lock, as
 * shunt_trim_arm.
 */
void shunt_trim_start(void);

/*
 * @c is being let go or freed: the trimmer never touches it again once
 * this returns (it waits for a look at it in progress). Called without its
 * tx lock; may be called more than once.
 */
void shunt_trim_forget(struct shunt_conn *c);

/*
 * Around fork (fork.c calls them in its handlers, which _Fork and clone
 * run too). The child starts with nothing armed and no thread: the parent
 * keeps trimming what it armed, and the child arms what it sends on.
 */
void shunt_trim_fork_prepare(void);
void shunt_trim_fork_parent(void);
void shunt_trim_fork_child(void);

#endif
