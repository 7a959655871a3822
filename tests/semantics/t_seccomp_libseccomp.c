// SPDX-License-Identifier: MIT
// A filter installed with libseccomp, as most programs that sandbox
// themselves do it: seccomp_load() probes the kernel with seccomp(2) calls
// that fail, sets no_new_privs with prctl(), then installs with seccomp(2).
// The filter kills sendmsg and recvmsg and refuses socket(AF_UNIX). The
// connection made before goes on in shared memory, a new one goes through
// the kernel.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect>=1 fallback_seccomp>=1
// shunt-expect: shm_tx_bytes>=32K
#include <sys/mman.h>

#include "t_seccomp.h"

#ifdef T_HAVE_LIBSECCOMP
#include <seccomp.h>

enum { BULK = 32 << 10 };

struct shared {
	struct t_addr addr;
};

static struct shared *sh;
static struct t_chan listening;

static void echo(int fd, const char *who)
{
	char buf[4096];
	size_t total = 0;
	ssize_t r;

	while ((r = read(fd, buf, sizeof(buf))) > 0) {
		t_send_all(fd, buf, (size_t)r);
		total += (size_t)r;
	}
	printf("%s: echoed %zu bytes, then %s\n", who, total, r ? "an error" : "EOF");
	close(fd);
}

static void server(void *arg)
{
	int lfd;

	(void)arg;
	lfd = t_listen_loopback(AF_INET, 8, &sh->addr);
	t_chan_put(&listening, 1);
	echo(t_accept(lfd), "server (first connection)");
	echo(t_accept(lfd), "server (connection made after the filter)");
}

static void round_trip(int fd, uint64_t seed, const char *what)
{
	static char out[BULK], in[BULK];

	t_stream_fill(seed, 0, out, sizeof(out));
	t_send_all(fd, out, sizeof(out));
	t_recv_all(fd, in, sizeof(in));
	t_expect(t_stream_check(seed, 0, in, sizeof(in)) < 0, "%s: %d bytes there and back, all right",
		 what, BULK);
}

static void client(void *arg)
{
	scmp_filter_ctx ctx;
	/* Spelled out: SCMP_A0() leaves datum_b out, which clang's -Wextra flags. */
	const struct scmp_arg_cmp unix_only = {
		.arg = 0, .op = SCMP_CMP_EQ, .datum_a = AF_UNIX, .datum_b = 0,
	};
	int fd, late, r;

	(void)arg;
	t_chan_get(&listening);
	fd = t_connect(&sh->addr);
	ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		t_fatal("seccomp_init");
	r = seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(sendmsg), 0);
	r = r ? r : seccomp_rule_add(ctx, SCMP_ACT_KILL_PROCESS, SCMP_SYS(recvmsg), 0);
	r = r ? r : seccomp_rule_add_array(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
					   &unix_only);
	r = r ? r : seccomp_load(ctx);
	if (r) {
		errno = -r;
		t_fatal("libseccomp");
	}
	seccomp_release(ctx);
	printf("client: filter loaded\n");
	round_trip(fd, 1, "client, first connection");
	T_REPORT("client: close", close(fd));
	T_REPORT("client: socket(AF_UNIX)", socket(AF_UNIX, SOCK_STREAM, 0));
	late = t_connect(&sh->addr);
	round_trip(late, 2, "client, connection made after the filter");
	T_REPORT("client: close late", close(late));
}

int main(void)
{
	struct t_child s, c;

	t_start(60);
	sh = t_shared_alloc(sizeof(*sh));
	t_chan_open(&listening);
	t_child_start(&s, "server", server, NULL);
	t_child_start(&c, "client", client, NULL);
	t_child_end(&c);
	t_child_end(&s);
	return t_finish();
}
#else
int main(void)
{
	t_skip("built without libseccomp (apt-get install libseccomp-dev; scripts/setup does)");
}
#endif
