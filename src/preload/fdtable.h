/* SPDX-License-Identifier: MIT */
/*
 * The fd table: which application descriptors are shunt sockets. Indexed by
 * the kernel's own fd number (every shunt socket keeps a real kernel fd), so
 * a descriptor that is not ours costs one bounds check and one load.
 */
#ifndef SHUNT_FDTABLE_H
#define SHUNT_FDTABLE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct shunt_epoll;
struct shunt_file;
struct shunt_sock;

/* Set up the table for the process's descriptor limit (once, at start). */
int shunt_fdt_init(void);

/*
 * The object behind @fd with a reference taken, or NULL if the library does
 * not manage @fd. The reference keeps the object alive while another thread
 * closes the descriptor, as the kernel's file reference does; drop it with
 * shunt_file_put().
 */
struct shunt_file *shunt_fdt_get_file(int fd);

/* The same for a socket only (NULL for anything else); drop with shunt_sock_put(). */
struct shunt_sock *shunt_fdt_get(int fd);

/* The same for an epoll instance only. */
struct shunt_epoll *shunt_fdt_get_epoll(int fd);

/* Whether @fd is a shunt socket, without taking a reference. */
int shunt_fdt_is_ours(int fd);

/*
 * Make @fd refer to @f (taking a reference for the table). The kernel just
 * handed out @fd (a new socket, an accept, a dup), so whatever the slot
 * held was closed behind our back, or is replaced as dup2 replaces it: its
 * table reference is dropped here (the last one releases the object). The
 * first time a socket is put in the table its kernel identity is recorded.
 */
void shunt_fdt_set(int fd, struct shunt_file *f);

/*
 * The kernel identity of the socket open as @fd, asked of the kernel now
 * (one fstat): its inode number, 0 if @fd is no open socket, or
 * SHUNT_FDT_IDENT_UNKNOWN when it cannot be told (a seccomp filter forbids
 * fstat). A socket the library makes itself can have it stored in its
 * object's ident before shunt_fdt_set, which then asks no more.
 */
enum { SHUNT_FDT_IDENT_UNKNOWN = 1 };
uint64_t shunt_fdt_sock_ident(int fd);

/*
 * The inode of the socket the table holds under @fd, as recorded when it
 * was put there (no system call), or 0 if the table holds none or never
 * learned it. Only as fresh as the caller's last checked lookup of @fd.
 */
uint64_t shunt_fdt_sock_inode(int fd);

/* Forget @fd; returns what it referred to (with the table's reference). */
struct shunt_file *shunt_fdt_take(int fd);

/*
 * The kernel just handed @fd to the application as a new descriptor (open,
 * pipe, socketpair, eventfd, a kernel accept, SCM_RIGHTS, ...): the number
 * was free, so whatever the table held under it belongs to a descriptor
 * closed where the library could not see it (an inline system call, a
 * glibc-internal close, io_uring). Forget it, as close() would have. A
 * load and a branch when the slot is empty, which it nearly always is.
 * Never call it for a number the library itself just put in the table.
 */
void shunt_fdt_forget(int fd);

/*
 * The object behind @fd, as shunt_fdt_get_file, but only if @fd still
 * names the kernel file it stands for: a socket's inode (fstat), an epoll
 * instance's open file (kcmp with our own duplicate). A stale entry found
 * this way is forgotten and NULL returned. One system call: for the slow
 * paths (connect, accept, listen, bind, dup, epoll_ctl ADD), never for
 * data calls.
 */
struct shunt_file *shunt_fdt_get_file_checked(int fd);
struct shunt_sock *shunt_fdt_get_checked(int fd);
struct shunt_epoll *shunt_fdt_get_epoll_checked(int fd);

/*
 * The library's own descriptors (control socket, eventfds) are marked so the
 * application cannot close them by accident (a daemon closing "every" fd):
 * close() on one fails with EBADF, as on a descriptor that does not exist.
 */
int shunt_fdt_is_hidden(int fd);
void shunt_fdt_mark_hidden(int fd, int hidden);

/* Number of slots: descriptors at or above it are never ours. */
size_t shunt_fdt_size(void);

/* One past the highest descriptor the table ever held: a bound for scans. */
size_t shunt_fdt_high(void);

#endif
