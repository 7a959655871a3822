// SPDX-License-Identifier: MIT
/*
 * Options, fcntl and ioctl on shunt sockets. Options are set on the kernel
 * socket every shunt socket keeps, so they are accepted, refused and read
 * back exactly as the kernel does (XWAY's companion socket); the library
 * only remembers the few that change how it moves bytes, and answers the
 * few whose value depends on the connection the kernel half does not have.
 */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <string.h>
#include <linux/sockios.h>
#include <linux/time_types.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>

#include "common/once.h"
#include "common/sys.h"
#include "preload/conn.h"
#include "preload/epoll.h"
#include "preload/fault.h"
#include "preload/libc.h"
#include "preload/ops.h"
#include "preload/recycle.h"
#include "preload/sock.h"
#include "preload/tcpinfo.h"

/*
 * The timeout SO_RCVTIMEO or SO_SNDTIMEO (@name, either spelling) was just
 * set to from @val: -1 for a negative one, which the kernel stores as "do
 * not wait" and reads back as {0, 0}, just like "no timeout"; otherwise
 * what the kernel reads back, since it rounds the value it was given.
 */
static int64_t timeout_us(int fd, int name, const void *val)
{
	bool rcv = name == SO_RCVTIMEO_OLD || name == SO_RCVTIMEO_NEW;
	struct timeval tv;
	socklen_t len = sizeof(tv);
	int64_t sec;

	/* The kernel accepted it, so it was long enough for its kind. */
	if (name == SO_RCVTIMEO_NEW || name == SO_SNDTIMEO_NEW) {
		struct __kernel_sock_timeval k;

		memcpy(&k, val, sizeof(k));
		sec = k.tv_sec;
	} else {
		struct { long tv_sec, tv_usec; } k;	/* __kernel_old_timeval */

		memcpy(&k, val, sizeof(k));
		sec = k.tv_sec;
	}
	if (sec < 0)
		return -1;
	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, rcv ? SO_RCVTIMEO_OLD : SO_SNDTIMEO_OLD, &tv,
				  &len) < 0)
		return 0;
	return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

/* A buffer size as the kernel stored it (doubled, clamped): what sizes a circuit's share. */
static uint32_t buf_size(int fd, int name)
{
	int v = 0;
	socklen_t len = sizeof(v);

	if (SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, name, &v, &len) < 0 || v <= 0)
		return 0;
	return (uint32_t)v;
}

/*
 * The circuit end whose copies of the options count, or NULL. A retired
 * connection stays mapped until the socket is released, so reading one that
 * is being replaced is harmless.
 */
static struct shunt_circuit_end *opts_end(struct shunt_sock *s)
{
	struct shunt_conn *c = s->conn;

	return c ? c->me : NULL;
}

bool shunt_sock_opt_nonblock(struct shunt_sock *s)
{
	struct shunt_circuit_end *e = opts_end(s);

	return e ? atomic_load_explicit(&e->nonblock, memory_order_relaxed) != 0
		 : atomic_load(&s->nonblock);
}

/* Timeouts: any negative value is "never wait" (io.c checks a changed one with the kernel). */
int64_t shunt_sock_opt_rcvtimeo(struct shunt_sock *s)
{
	struct shunt_circuit_end *e = opts_end(s);
	int64_t v = e ? atomic_load_explicit(&e->rcvtimeo_us, memory_order_relaxed)
		      : atomic_load(&s->rcvtimeo_us);

	return v < 0 ? -1 : v;
}

int64_t shunt_sock_opt_sndtimeo(struct shunt_sock *s)
{
	struct shunt_circuit_end *e = opts_end(s);
	int64_t v = e ? atomic_load_explicit(&e->sndtimeo_us, memory_order_relaxed)
		      : atomic_load(&s->sndtimeo_us);

	return v < 0 ? -1 : v;
}

int shunt_sock_opt_rcvlowat(struct shunt_sock *s)
{
	struct shunt_circuit_end *e = opts_end(s);
	uint32_t v = e ? atomic_load_explicit(&e->rcvlowat, memory_order_relaxed)
		       : (uint32_t)atomic_load(&s->rcvlowat);

	return v >= 1 && v <= INT_MAX ? (int)v : 1;
}

bool shunt_sock_opt_linger_abort(struct shunt_sock *s)
{
	struct shunt_circuit_end *e = opts_end(s);

	return e ? atomic_load(&e->linger_abort) != 0 : atomic_load(&s->linger_abort);
}

uint32_t shunt_sock_opt_sndbuf(struct shunt_sock *s)
{
	struct shunt_circuit_end *e = opts_end(s);

	return e ? atomic_load_explicit(&e->sndbuf, memory_order_relaxed) : atomic_load(&s->sndbuf);
}

uint32_t shunt_sock_opt_rcvbuf(struct shunt_sock *s)
{
	struct shunt_circuit_end *e = opts_end(s);

	return e ? atomic_load_explicit(&e->rcvbuf, memory_order_relaxed) : atomic_load(&s->rcvbuf);
}

uint32_t shunt_sock_opt_flags(struct shunt_sock *s)
{
	struct shunt_circuit_end *e = opts_end(s);

	return e ? atomic_load_explicit(&e->opts, memory_order_relaxed) : atomic_load(&s->opts);
}

void shunt_sock_opts_to_circuit(struct shunt_sock *s)
{
	struct shunt_circuit_end *e = opts_end(s);

	if (!e)
		return;
	atomic_store(&e->nonblock, atomic_load(&s->nonblock));
	atomic_store(&e->rcvtimeo_us, atomic_load(&s->rcvtimeo_us));
	atomic_store(&e->sndtimeo_us, atomic_load(&s->sndtimeo_us));
	atomic_store(&e->rcvlowat, (uint32_t)atomic_load(&s->rcvlowat));
	atomic_store(&e->linger_abort, atomic_load(&s->linger_abort));
	atomic_store(&e->sndbuf, atomic_load(&s->sndbuf));
	atomic_store(&e->rcvbuf, atomic_load(&s->rcvbuf));
	atomic_store(&e->opts, atomic_load(&s->opts));
}

/* Set an option's value here and, when there is one, in the circuit. */
static void set_nonblock(struct shunt_sock *s, bool v)
{
	struct shunt_circuit_end *e = opts_end(s);

	atomic_store(&s->nonblock, v);
	if (e)
		atomic_store(&e->nonblock, v);
}

static void set_timeo(struct shunt_sock *s, bool rcv, int64_t us)
{
	struct shunt_circuit_end *e = opts_end(s);

	atomic_store(rcv ? &s->rcvtimeo_us : &s->sndtimeo_us, us);
	if (e)
		atomic_store(rcv ? &e->rcvtimeo_us : &e->sndtimeo_us, us);
}

static void set_rcvlowat(struct shunt_sock *s, int v)
{
	struct shunt_circuit_end *e = opts_end(s);

	atomic_store(&s->rcvlowat, v);
	if (e)
		atomic_store(&e->rcvlowat, (uint32_t)v);
}

static void set_linger_abort(struct shunt_sock *s, bool v)
{
	struct shunt_circuit_end *e = opts_end(s);

	atomic_store(&s->linger_abort, v);
	if (e)
		atomic_store(&e->linger_abort, v);
}

/*
 * A buffer size changed: the circuit's share for this socket's bytes and
 * for the peer's changes with it, and a sender waiting for room may have
 * it now (the kernel's sk_write_space on SO_SNDBUF).
 */
static void set_buf(struct shunt_sock *s, bool snd, uint32_t v)
{
	struct shunt_circuit_end *e = opts_end(s);

	atomic_store(snd ? &s->sndbuf : &s->rcvbuf, v);
	if (e) {
		atomic_store(snd ? &e->sndbuf : &e->rcvbuf, v);
		if (shunt_sock_state(s) == SHUNT_SOCK_CONNECTED)
			shunt_conn_bufs_changed(s->conn);
	}
}

static void set_flag(struct shunt_sock *s, uint32_t flag, bool on)
{
	struct shunt_circuit_end *e = opts_end(s);

	if (on)
		atomic_fetch_or(&s->opts, flag);
	else
		atomic_fetch_and(&s->opts, ~flag);
	if (e) {
		if (on)
			atomic_fetch_or(&e->opts, flag);
		else
			atomic_fetch_and(&e->opts, ~flag);
	}
}

/* Bytes held back by TCP_CORK or MSG_MORE go out now (tcp_push_pending_frames). */
static void push_held(struct shunt_sock *s)
{
	if (shunt_sock_state(s) == SHUNT_SOCK_CONNECTED)
		shunt_conn_push(s->conn);
}

/* What a TCP option reads back as, or -1. */
static int tcp_opt(int fd, int name)
{
	int v = -1;
	socklen_t len = sizeof(v);

	if (SHUNT_LIBC(getsockopt)(fd, IPPROTO_TCP, name, &v, &len) < 0)
		return -1;
	return v;
}

/* The TCP options that change how bytes move, once the kernel half took them. */
static void set_tcp(struct shunt_sock *s, int fd, int name, const void *val)
{
	int v;

	switch (name) {
	case TCP_CORK:
		v = tcp_opt(fd, TCP_CORK);
		set_flag(s, SHUNT_OPT_CORK, v > 0);
		/* Uncorking sends what was held, as tcp_sock_set_cork does. */
		if (v == 0)
			push_held(s);
		break;
	case TCP_NODELAY:
		/* Turning Nagle off pushes what is pending, even while corked. */
		memcpy(&v, val, sizeof(v));
		if (v)
			push_held(s);
		break;
	case TCP_INQ:
		set_flag(s, SHUNT_OPT_INQ, tcp_opt(fd, TCP_INQ) > 0);
		break;
	}
}

/*
 * Options an accepted socket inherits from its listener (the kernel clones
 * the listening sock). A shunt socket accepted from a circuit is a new
 * kernel socket, so the library copies those the listener had set.
 */
static const struct {
	int level, name;
} inherited[] = {
	{ SOL_SOCKET, SO_KEEPALIVE }, { SOL_SOCKET, SO_LINGER }, { SOL_SOCKET, SO_RCVTIMEO_OLD },
	{ SOL_SOCKET, SO_SNDTIMEO_OLD }, { SOL_SOCKET, SO_PRIORITY }, { SOL_SOCKET, SO_OOBINLINE },
	{ SOL_SOCKET, SO_RCVBUF }, { SOL_SOCKET, SO_SNDBUF }, { SOL_SOCKET, SO_RCVLOWAT },
	{ SOL_SOCKET, SO_REUSEADDR }, { SOL_SOCKET, SO_MARK },
	{ IPPROTO_TCP, TCP_NODELAY }, { IPPROTO_TCP, TCP_KEEPIDLE }, { IPPROTO_TCP, TCP_KEEPINTVL },
	{ IPPROTO_TCP, TCP_KEEPCNT }, { IPPROTO_TCP, TCP_USER_TIMEOUT }, { IPPROTO_TCP, TCP_CORK },
	{ IPPROTO_TCP, TCP_CONGESTION }, { IPPROTO_TCP, TCP_INQ },
	{ IPPROTO_IP, IP_TOS }, { IPPROTO_IP, IP_TTL },
	{ IPPROTO_IPV6, IPV6_TCLASS }, { IPPROTO_IPV6, IPV6_UNICAST_HOPS },
};

/*
 * What a fresh socket of each family has for the options above, for
 * shunt_opts_reset; read once from a socket made for the purpose. @ok:
 * the value can be set back (not the buffer sizes, which lock the
 * kernel's autotuning once set, SO_MARK, which needs a privilege, or the
 * congestion control, a name).
 */
#define N_INHERITED (sizeof(inherited) / sizeof(inherited[0]))
static struct fresh_opts {
	struct shunt_once once;
	int domain;
	struct {
		bool ok;
		socklen_t len;
		char val[16];
	} v[N_INHERITED];
} fresh[2] = { { SHUNT_ONCE_INIT, AF_INET, { { 0 } } },
	       { SHUNT_ONCE_INIT, AF_INET6, { { 0 } } } };

static bool settable_back(int level, int name)
{
	if (level == SOL_SOCKET)
		return name != SO_RCVBUF && name != SO_SNDBUF && name != SO_MARK;
	return !(level == IPPROTO_TCP && name == TCP_CONGESTION);
}

/* Through the seccomp gate, as everything spare.c does: a call forbidden costs only the spare. */
static void read_fresh(struct fresh_opts *f)
{
	int fd = (int)shunt_syscall(SYS_socket, f->domain, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP);

	if (fd < 0)
		return;
	for (unsigned i = 0; i < N_INHERITED; i++) {
		int level = inherited[i].level, name = inherited[i].name;

		f->v[i].len = sizeof(f->v[i].val);
		if (!settable_back(level, name) ||
		    shunt_syscall(SYS_getsockopt, fd, level, name, f->v[i].val, &f->v[i].len) < 0)
			continue;
		/* -1 is "the system's default" for these, which a read does not say. */
		if ((level == IPPROTO_IP && name == IP_TTL) ||
		    (level == IPPROTO_IPV6 && name == IPV6_UNICAST_HOPS)) {
			int dflt = -1;

			memcpy(f->v[i].val, &dflt, sizeof(dflt));
			f->v[i].len = sizeof(dflt);
		}
		f->v[i].ok = true;
	}
	shunt_syscall(SYS_close, fd);
}

static void read_fresh4(void)
{
	read_fresh(&fresh[0]);
}

static void read_fresh6(void)
{
	read_fresh(&fresh[1]);
}

int shunt_opts_reset(int domain, int fd, uint32_t set)
{
	struct fresh_opts *f = &fresh[domain == AF_INET6];

	if (!set)
		return 0;
	shunt_once(&f->once, domain == AF_INET6 ? read_fresh6 : read_fresh4);
	for (unsigned i = 0; i < N_INHERITED; i++) {
		if (!(set & (1u << i)))
			continue;
		/* Turning lingering off leaves its time as it was: set it to 0 first. */
		if (inherited[i].level == SOL_SOCKET && inherited[i].name == SO_LINGER) {
			struct linger zero = { 1, 0 };

			if (shunt_syscall(SYS_setsockopt, fd, SOL_SOCKET, SO_LINGER, &zero,
					  sizeof(zero)) < 0)
				return -1;
		}
		if (!f->v[i].ok || shunt_syscall(SYS_setsockopt, fd, inherited[i].level,
						 inherited[i].name, f->v[i].val, f->v[i].len) < 0)
			return -1;
	}
	return 0;
}

static int inherited_index(int level, int name)
{
	if (level == SOL_SOCKET && name == SO_RCVTIMEO_NEW)
		name = SO_RCVTIMEO_OLD;
	if (level == SOL_SOCKET && name == SO_SNDTIMEO_NEW)
		name = SO_SNDTIMEO_OLD;
	for (unsigned i = 0; i < sizeof(inherited) / sizeof(inherited[0]); i++)
		if (inherited[i].level == level && inherited[i].name == name)
			return (int)i;
	return -1;
}

void shunt_opts_copy(const struct shunt_sock *s, int from, int to)
{
	for (unsigned i = 0; i < sizeof(inherited) / sizeof(inherited[0]); i++) {
		char val[64];
		socklen_t len = sizeof(val);

		if (!(s->inherit & (1u << i)) ||
		    SHUNT_LIBC(getsockopt)(from, inherited[i].level, inherited[i].name, val, &len) < 0)
			continue;
		/* Buffer sizes read back doubled; setting half gives the same value. */
		if (inherited[i].level == SOL_SOCKET &&
		    (inherited[i].name == SO_RCVBUF || inherited[i].name == SO_SNDBUF))
			*(int *)val /= 2;
		SHUNT_LIBC(setsockopt)(to, inherited[i].level, inherited[i].name, val, len);
	}
}

void shunt_opts_inherit(struct shunt_sock *from, int lfd, struct shunt_sock *to, int nfd)
{
	shunt_opts_copy(from, lfd, nfd);
	to->inherit = from->inherit;
	atomic_store(&to->reuseaddr, atomic_load(&from->reuseaddr));
	atomic_store(&to->rcvtimeo_us, atomic_load(&from->rcvtimeo_us));
	atomic_store(&to->sndtimeo_us, atomic_load(&from->sndtimeo_us));
	atomic_store(&to->linger_abort, atomic_load(&from->linger_abort));
	atomic_store(&to->rcvlowat, atomic_load(&from->rcvlowat));
	atomic_store(&to->sndbuf, atomic_load(&from->sndbuf));
	atomic_store(&to->rcvbuf, atomic_load(&from->rcvbuf));
	atomic_store(&to->opts, atomic_load(&from->opts));
}

int shunt_op_setsockopt(struct shunt_sock *s, int fd, int level, int name, const void *val,
			socklen_t len)
{
	int i = inherited_index(level, name), r;

	/* One tied to binding (IPV6_V6ONLY, SO_REUSEPORT...) needs the fresh half it expects. */
	if (i < 0 && (r = shunt_recycle_fresh(s, fd)) < 0)
		return r;
	if (SHUNT_LIBC(setsockopt)(fd, level, name, val, len) < 0)
		return -errno;
	if (i >= 0)
		atomic_fetch_or(&s->inherit, 1u << i);
	else
		atomic_store_explicit(&s->spare, false, memory_order_relaxed);	/* spare.h */
	/* shuntd defers circuits as the kernel defers connections: it reads the value anew. */
	if (level == IPPROTO_TCP && name == TCP_DEFER_ACCEPT)
		shunt_sock_listener_refresh(s, fd);
	if (level == IPPROTO_TCP)
		set_tcp(s, fd, name, val);
	if (level != SOL_SOCKET)
		return 0;
	switch (name) {
	case SO_RCVTIMEO_OLD:
	case SO_RCVTIMEO_NEW:
		set_timeo(s, true, timeout_us(fd, name, val));
		break;
	case SO_SNDTIMEO_OLD:
	case SO_SNDTIMEO_NEW:
		set_timeo(s, false, timeout_us(fd, name, val));
		break;
	case SO_SNDBUF:
	case SO_SNDBUFFORCE:
		set_buf(s, true, buf_size(fd, SO_SNDBUF));
		break;
	case SO_RCVBUF:
	case SO_RCVBUFFORCE:
		set_buf(s, false, buf_size(fd, SO_RCVBUF));
		break;
	case SO_RCVLOWAT: {
		int v = 1;
		socklen_t l = sizeof(v);

		SHUNT_LIBC(getsockopt)(fd, SOL_SOCKET, SO_RCVLOWAT, &v, &l);
		set_rcvlowat(s, v > 0 ? v : 1);
		break;
	}
	case SO_REUSEADDR: {
		int v = 0;

		memcpy(&v, val, len < sizeof(v) ? len : sizeof(v));
		atomic_store(&s->reuseaddr, v != 0);
		break;
	}
	case SO_LINGER: {
		struct linger l;

		/* The kernel read it a moment ago; another thread may have unmapped it since. */
		if (!shunt_get_user(&l, val, sizeof(l)))
			set_linger_abort(s, l.l_onoff && !l.l_linger);
		break;
	}
	}
	return 0;
}

/* Copy an int option out the way sk_getsockopt does, after it read the length (@have). */
static int put_int(int v, void *val, socklen_t *len, int have)
{
	if (have > (int)sizeof(v))
		have = (int)sizeof(v);
	if (shunt_put_user(val, &v, (size_t)have))
		return -EFAULT;
	return shunt_put_user(len, &have, sizeof(have));
}

int shunt_op_getsockopt(struct shunt_sock *s, int fd, int level, int name, void *val,
			socklen_t *len)
{
	int st = shunt_sock_sync(s);
	bool circuit = st == SHUNT_SOCK_CONNECTED || st == SHUNT_SOCK_CONNECTING;

	if (level == SOL_SOCKET && name == SO_ERROR) {
		int err, have;

		/* sk_getsockopt reads the length before it takes the error. */
		if (shunt_get_user(&have, len, sizeof(have)))
			return -EFAULT;
		if (have < 0)
			return -EINVAL;
		err = atomic_exchange(&s->so_error, 0);
		if (err)
			shunt_epoll_sock_moved(s);
		if (!err && st == SHUNT_SOCK_CONNECTED)
			err = shunt_conn_take_error(s->conn);
		if (err || circuit)
			return put_int(err, val, len, have);
	}
	if (SHUNT_LIBC(getsockopt)(fd, level, name, val, len) < 0)
		return -errno;
	/*
	 * SK_FORCE_REUSE, which no program can set: the kernel half is (or
	 * was) a companion in repair mode, and the value is the program's.
	 */
	if (level == SOL_SOCKET && name == SO_REUSEADDR && *len >= sizeof(int) &&
	    *(int *)val == 2)
		*(int *)val = atomic_load(&s->reuseaddr);
	/* The kernel half is unconnected, or a companion frozen in repair mode. */
	if (level == IPPROTO_TCP && name == TCP_INFO && st == SHUNT_SOCK_CONNECTED)
		shunt_tcpinfo_circuit(s->conn, val, *len);
	else if (level == IPPROTO_TCP && name == TCP_INFO && st == SHUNT_SOCK_CONNECTING)
		shunt_tcpinfo_connecting(val, *len);
	return 0;
}

/* An fcntl that changes nothing spare.c would put back, or only O_NONBLOCK. */
static bool plain_fcntl(int cmd, void *arg)
{
	if (cmd == F_SETFL)
		return !((long)arg & (O_APPEND | O_ASYNC | O_DIRECT | O_NOATIME));
	return cmd == F_GETFL || cmd == F_GETFD || cmd == F_SETFD;
}

int shunt_op_fcntl(struct shunt_sock *s, int fd, int cmd, void *arg)
{
	int r;

	/* A second descriptor, an owner, a signal: on the half socket() would have made. */
	if (!plain_fcntl(cmd, arg) && (r = shunt_recycle_fresh(s, fd)) < 0)
		return r;
	r = SHUNT_LIBC(fcntl)(fd, cmd, arg);
	if (r < 0)
		return -errno;
	if (cmd == F_SETFL)
		set_nonblock(s, ((long)arg & O_NONBLOCK) != 0);
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		shunt_op_dup(fd, r);
	else if (!plain_fcntl(cmd, arg))
		atomic_store_explicit(&s->spare, false, memory_order_relaxed);
	return r;
}

int shunt_op_ioctl(struct shunt_sock *s, int fd, unsigned long req, void *arg)
{
	int st = shunt_sock_sync(s);
	int v;

	if (st == SHUNT_SOCK_CONNECTED) {
		switch (req) {
		case SIOCINQ:
			v = (int)shunt_conn_inq(s->conn);
			break;
		case SIOCOUTQ:
			v = (int)shunt_conn_outq(s->conn);
			break;
		case SIOCOUTQNSD:
			v = (int)shunt_conn_unsent(s->conn);	/* held back by TCP_CORK */
			break;
		case SIOCATMARK:
			v = 0;
			break;
		default:
			goto kernel;
		}
		/* put_user, as the kernel's inet_ioctl. */
		return shunt_put_user(arg, &v, sizeof(v));
	}
kernel:
	/* What it changed in the kernel half, spare.c would not put back; FIONBIO it does. */
	if (req != FIONBIO) {
		int r = shunt_recycle_fresh(s, fd);

		if (r < 0)
			return r;
		atomic_store_explicit(&s->spare, false, memory_order_relaxed);
	}
	if (SHUNT_LIBC(ioctl)(fd, req, arg) < 0)
		return -errno;
	if (req == FIONBIO && !shunt_get_user(&v, arg, sizeof(v)))
		set_nonblock(s, v != 0);
	return 0;
}
