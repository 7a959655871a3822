/* SPDX-License-Identifier: MIT */
/*
 * The standard streams of a new image whose stdin, stdout or stderr is a
 * connection it took over in shared memory (exec.c). glibc's FILE functions
 * move their bytes with internal calls no preload sees, so a handler's
 * printf or fgets on such a descriptor would reach the kernel socket behind
 * the circuit, not the connection. Each such stream is replaced, before
 * main(), by one whose reads and writes go through this library.
 */
#ifndef SHUNT_STDSTREAM_H
#define SHUNT_STDSTREAM_H

/* After adoption: the streams of descriptors 0, 1, 2 that are circuits. */
void shunt_stdio_adopt(void);

#endif
