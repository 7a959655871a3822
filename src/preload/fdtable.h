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
 * Make @fd refer to @f (taking a reference for the table), replacing and
 * returning whatever was there (whose table reference passes to the caller).
 */
struct shunt_file *shunt_fdt_set(int fd, struct shunt_file *f);

/* Forget @fd; returns what it referred to (with the table's reference). */
struct shunt_file *shunt_fdt_take(int fd);

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
