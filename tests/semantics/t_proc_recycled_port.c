// SPDX-License-Identifier: MIT
// A connection that ended (the server closed first) leaves nothing open in
// this process once the next socket is given an address of its own, as
// with the kernel, even where shunt answered that socket() with the ended
// connection's kernel half, still bound to its port (src/preload/recycle.h):
// the bind gives the socket a fresh half, and nothing of the library's may
// keep the old one, and its port, open (spare.h: the copy kept since
// socket() goes with it). Told by the socket's inode in /proc/self/fd, not
// by binding the port: an ephemeral port may also be held by a TIME_WAIT
// socket of an earlier connection elsewhere, and the kernel's connect
// shares such ports where shunt's bind to port 0 does not.
// shunt-expect: shm_connect>=1 recycled>=1 recycled_fresh>=1
#include "t_harness.h"

#include <dirent.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static unsigned long inode_of(int fd)
{
	struct stat st;

	if (fstat(fd, &st))
		t_fatal("fstat");
	return (unsigned long)st.st_ino;
}

// Whether any descriptor of this process is socket inode @ino.
static bool open_here(unsigned long ino)
{
	char want[64], path[300], link[64];
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	bool found = false;

	if (!d)
		t_fatal("opendir /proc/self/fd");
	snprintf(want, sizeof(want), "socket:[%lu]", ino);
	while (!found && (e = readdir(d))) {
		ssize_t n;

		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		found = strcmp(link, want) == 0;
	}
	closedir(d);
	return found;
}

int main(void)
{
	struct t_addr srv, at;
	unsigned long ended;
	int l, c, s, fd;
	char b = 'x';

	t_start(20);
	l = t_listen_loopback(AF_INET, 4, &srv);
	c = t_connect(&srv);
	s = t_accept(l);
	ended = inode_of(c);
	if (send(c, &b, 1, 0) != 1 || recv(s, &b, 1, 0) != 1)
		t_fatal("one byte across");
	close(s);
	if (recv(c, &b, 1, 0) != 0)
		t_fatal("the end of the connection");
	close(c);
	// For shuntd to read that it ended: only then is the half handed out again.
	t_sleep_ms(50);

	fd = t_socket(AF_INET, SOCK_STREAM);
	t_addr_make(&at, "127.0.0.2", 0);
	T_REPORT("bind the next socket to 127.0.0.2:0", bind(fd, (struct sockaddr *)&at.ss, at.len));
	printf("the next socket is another socket: %s\n", inode_of(fd) != ended ? "yes" : "no");
	printf("the ended connection's socket still open here: %s\n",
	       open_here(ended) ? "yes" : "no");
	close(fd);
	close(l);
	return t_finish();
}
