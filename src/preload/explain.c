// SPDX-License-Identifier: MIT
/* Why a socket did not get shared memory: once loudly, then quietly. */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "preload/explain.h"

static _Atomic bool told;

/* What to do about @err, for a person reading the line. */
static const char *fix_for(int err)
{
	switch (err) {
	case -ENOTCONN:
		return "start the program with `shunt run`, which starts a shuntd if none "
		       "answers, or run `shunt daemon`; SHUNT_SOCKET names the control socket";
	case -EPERM:
	case -EACCES:
		return "shuntd cannot verify this socket: without CAP_NET_ADMIN it serves only "
		       "sockets in its own network namespace; run the program in shuntd's "
		       "namespace or run shuntd as root";
	case -EMFILE:
	case -ENFILE:
	case -ENOMEM:
		return "the process or the system is out of descriptors or memory";
	default:
		return "shuntd's log says more (SHUNT_DAEMON_LOG=FILE for the one `shunt run` "
		       "starts), SHUNT_LOG=info here";
	}
}

void shunt_explain_fallback(const char *what, int err)
{
	const char *why = err == -ENOTCONN ? "no shuntd answers" : strerror(-err);

	if (!atomic_exchange(&told, true)) {
		shunt_warn("%s stays on the kernel, without shared memory: %s; %s "
			   "(said once; SHUNT_LOG=info tells every time)", what, why, fix_for(err));
		return;
	}
	shunt_info("%s stays on the kernel: %s", what, why);
}
