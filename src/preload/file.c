// SPDX-License-Identifier: MIT
/* Releasing a file object: each kind knows what its last reference means. */
#include "preload/epoll.h"
#include "preload/file.h"
#include "preload/sock.h"
#include "preload/uring.h"

void shunt_file_put(struct shunt_file *f)
{
	if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (f->kind == SHUNT_FILE_SOCK)
		shunt_sock_release((struct shunt_sock *)f);
	else if (f->kind == SHUNT_FILE_URING)
		shunt_uring_release((struct shunt_uring *)f);
	else
		shunt_epoll_release((struct shunt_epoll *)f);
}
