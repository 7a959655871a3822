/* SPDX-License-Identifier: MIT */
/*
 * stdio on shunt sockets. glibc's FILE functions move their bytes with
 * internal calls no preload sees, so a printf or fgets on a descriptor
 * carried by a circuit would reach the kernel socket behind it, not the
 * connection. The standard streams of a new image whose stdin, stdout or
 * stderr is a connection it took over (exec.c) are replaced before main()
 * by streams whose reads and writes go through this library, and fdopen()
 * of a shunt socket makes such a stream too.
 */
#ifndef SHUNT_STDSTREAM_H
#define SHUNT_STDSTREAM_H

#include <stdio.h>

/* After adoption: the streams of descriptors 0, 1, 2 that are circuits. */
void shunt_stdio_adopt(void);

/* fdopen() of shunt socket @fd: a stream as glibc's, or NULL with errno set. */
FILE *shunt_stdio_fdopen(int fd, const char *mode);

#endif
