// SPDX-License-Identifier: MIT
// inetd handlers that cannot take a circuit across exec: one without
// LD_PRELOAD (exec'd and posix_spawn'ed) and a statically linked cat. Their
// connection moves onto its companion kernel sockets first, and every byte
// still arrives. The same program as t_proc_exec_handler, its other half.
// shunt-needs: companions
// shunt-expect: shm_connect>=3 shm_accept>=3 kernel_connect==0 kernel_accept==0
// t-timeout: 120
#define T_EXEC_TO_KERNEL 1
#include "t_proc_exec_handler.c"
