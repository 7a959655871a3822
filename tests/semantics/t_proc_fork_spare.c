// SPDX-License-Identifier: MIT
// An accepted socket a fork child still holds is the child's after the
// parent closes it: the parent's next accepted socket is another one, and
// the child's options are its own. (Under shunt a closed accepted socket's
// kernel half may be the next one's, spare.c; never one a child holds.)
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0 kernel_accept==0
#include "t_harness.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

enum { CHILD_WATCHDOG_S = 30 };

static ino_t inode_of(int fd)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		t_fatal("fstat");
	return st.st_ino;
}

static int nodelay(int fd)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, &len) < 0)
		t_fatal("getsockopt");
	return v;
}

int main(void)
{
	struct t_chan to_child, to_parent;
	struct t_addr a;
	int lfd, c, c2, s, s2, one = 1;
	ino_t held;
	pid_t pid;

	t_start(60);
	lfd = t_listen_loopback(AF_INET, 8, &a);
	c = t_connect(&a);
	s = t_accept(lfd);
	held = inode_of(s);
	t_chan_open(&to_child);
	t_chan_open(&to_parent);
	pid = t_fork_tied(CHILD_WATCHDOG_S);
	if (pid == 0) {
		// Holds s until the parent has accepted again, then looks at it.
		t_chan_get(&to_child);
		t_chan_put(&to_parent, (uint32_t)nodelay(s));
		t_chan_get(&to_child);
		_exit(0);
	}
	close(s);
	/*
	 * Under shunt, a listen() is a request, before which shuntd reads
	 * what this process journaled: a kept half would be handed out from
	 * here on (spare.c). To the kernel it is a listener more, and gone.
	 */
	close(t_listen_loopback(AF_INET, 1, NULL));
	c2 = t_connect(&a);
	s2 = t_accept(lfd);
	printf("the next accepted socket is another one: %d\n", inode_of(s2) != held);
	if (setsockopt(s2, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
		t_fatal("setsockopt");
	t_chan_put(&to_child, 1);
	printf("the child's TCP_NODELAY after the parent set its new one's: %u\n",
	       t_chan_get(&to_parent));
	t_chan_put(&to_child, 1);
	t_expect(t_wait_child(pid) == 0, "child exit status 0");
	close(s2);
	close(c2);
	close(c);
	close(lfd);
	return t_finish();
}
