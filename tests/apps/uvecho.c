// SPDX-License-Identifier: MIT
/*
 * A libuv program, server and client, for tests/apps/test_libuv.py. The
 * same protocol as uvecho.js (Node.js) and uvecho.py (asyncio, uvloop):
 *
 *   request  u32 len, u32 flags, u64 seq, len bytes of body
 *   reply    u32 len, u32 flags, u64 FNV-1a (32-bit) of the body, the body again
 *
 * flags bit 0: the last request of the connection (the server closes it
 * after the reply, the client then expects EOF). The server also writes
 * every body to a file of its own with libuv's file calls, reads it back
 * and counts the files whose content was right: a descriptor the library
 * mistook for a closed connection would lose the file's bytes to a peer.
 *
 *   uvecho server DIR               prints "port N", runs until SIGTERM,
 *                                   then prints "served R files_ok F files_bad B"
 *   uvecho client PORT CONNS TOTAL MAXBODY keepalive|perreq
 *                                   prints "ok R requests B bytes", or exits 1
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

enum { HDR = 16, LAST = 1 };

/* 32-bit FNV-1a (what Node.js computes quickly), in the reply's 64-bit word. */
static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint32_t h = 0x811c9dc5u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x01000193u;
	return h;
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static void die(const char *what, int err)
{
	fprintf(stderr, "uvecho: %s: %s\n", what, uv_strerror(err));
	exit(1);
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p) {
		fprintf(stderr, "uvecho: out of memory\n");
		exit(1);
	}
	return p;
}

/* A growing input buffer: bytes come in pieces, messages are taken whole. */
struct inbuf {
	uint8_t *data;
	size_t len, cap;
};

static void inbuf_add(struct inbuf *b, const char *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2;
		b->data = realloc(b->data, b->cap);
		if (!b->data)
			die("realloc", UV_ENOMEM);
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
}

static void inbuf_drop(struct inbuf *b, size_t n)
{
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)h;
	buf->base = xmalloc(suggested);
	buf->len = suggested;
}

struct wreq {
	uv_write_t w;
	uint8_t *data;
};

static void write_done(uv_write_t *w, int status)
{
	struct wreq *r = (struct wreq *)w;

	if (status < 0 && status != UV_ECANCELED && status != UV_EPIPE)
		die("write", status);
	free(r->data);
	free(r);
}

static void send_bytes(uv_stream_t *s, uint8_t *data, size_t n)
{
	struct wreq *r = xmalloc(sizeof(*r));
	uv_buf_t b = uv_buf_init((char *)data, (unsigned)n);
	int e;

	r->data = data;
	e = uv_write(&r->w, s, &b, 1, write_done);
	if (e < 0)
		die("uv_write", e);
}

/* ---- server ---- */

static const char *dir;
static uint64_t served, files_ok, files_bad, conns;

struct sconn {
	uv_tcp_t tcp;
	struct inbuf in;
	uint64_t id;
	bool closing;
};

/*
 * Write @body to a file, read it back, check it, with libuv's own file
 * calls (synchronous: on the loop's thread, between the socket calls).
 */
static void file_check(uint64_t conn, uint64_t seq, const uint8_t *body, uint32_t len)
{
	char path[512];
	uv_fs_t req;
	uv_buf_t b;
	uint8_t *back = xmalloc(len);
	int fd, n;

	snprintf(path, sizeof(path), "%s/%" PRIu64 "-%" PRIu64, dir, conn, seq);
	fd = uv_fs_open(uv_default_loop(), &req, path, UV_FS_O_CREAT | UV_FS_O_TRUNC | UV_FS_O_WRONLY, 0600,
			NULL);
	uv_fs_req_cleanup(&req);
	if (fd < 0)
		die("open", fd);
	b = uv_buf_init((char *)body, len);
	n = uv_fs_write(uv_default_loop(), &req, fd, &b, 1, 0, NULL);
	uv_fs_req_cleanup(&req);
	uv_fs_close(uv_default_loop(), &req, fd, NULL);
	uv_fs_req_cleanup(&req);
	fd = uv_fs_open(uv_default_loop(), &req, path, UV_FS_O_RDONLY, 0, NULL);
	uv_fs_req_cleanup(&req);
	if (fd < 0)
		die("open again", fd);
	b = uv_buf_init((char *)back, len);
	int got = len ? uv_fs_read(uv_default_loop(), &req, fd, &b, 1, 0, NULL) : 0;
	uv_fs_req_cleanup(&req);
	uv_fs_close(uv_default_loop(), &req, fd, NULL);
	uv_fs_req_cleanup(&req);
	uv_fs_unlink(uv_default_loop(), &req, path, NULL);
	uv_fs_req_cleanup(&req);
	if (n == (int)len && got == (int)len && !memcmp(back, body, len))
		files_ok++;
	else
		files_bad++;
	free(back);
}

static void sconn_closed(uv_handle_t *h)
{
	struct sconn *c = (struct sconn *)h;

	free(c->in.data);
	free(c);
}

static void server_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct sconn *c = (struct sconn *)s;

	if (n > 0)
		inbuf_add(&c->in, buf->base, (size_t)n);
	free(buf->base);
	if (n < 0) {
		if (!c->closing) {
			c->closing = true;
			uv_close((uv_handle_t *)s, sconn_closed);
		}
		return;
	}
	while (!c->closing && c->in.len >= HDR && c->in.len >= HDR + get32(c->in.data)) {
		uint32_t len = get32(c->in.data), flags = get32(c->in.data + 4);
		uint64_t seq = get64(c->in.data + 8);
		uint8_t *reply = xmalloc(HDR + len);

		put32(reply, len);
		put32(reply + 4, flags);
		put64(reply + 8, fnv1a(c->in.data + HDR, len));
		memcpy(reply + HDR, c->in.data + HDR, len);
		file_check(c->id, seq, c->in.data + HDR, len);
		send_bytes(s, reply, HDR + len);
		inbuf_drop(&c->in, HDR + len);
		served++;
		if (flags & LAST) {
			c->closing = true;
			uv_close((uv_handle_t *)s, sconn_closed);
		}
	}
}

static void on_connection(uv_stream_t *l, int status)
{
	struct sconn *c;
	int e;

	if (status < 0)
		die("listen", status);
	c = calloc(1, sizeof(*c));
	uv_tcp_init(l->loop, &c->tcp);
	e = uv_accept(l, (uv_stream_t *)&c->tcp);
	if (e < 0)
		die("accept", e);
	c->id = ++conns;
	uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, server_read);
}

static void on_term(uv_signal_t *h, int sig)
{
	(void)sig;
	printf("served %" PRIu64 " files_ok %" PRIu64 " files_bad %" PRIu64 "\n", served,
	       files_ok, files_bad);
	fflush(stdout);
	uv_stop(h->loop);
}

static int server(const char *d)
{
	uv_loop_t *loop = uv_default_loop();
	struct sockaddr_in a;
	struct sockaddr_storage bound;
	int len = sizeof(bound), e;
	uv_tcp_t l;
	uv_signal_t term;

	dir = d;
	uv_tcp_init(loop, &l);
	uv_ip4_addr("127.0.0.1", 0, &a);
	if ((e = uv_tcp_bind(&l, (struct sockaddr *)&a, 0)) < 0 ||
	    (e = uv_listen((uv_stream_t *)&l, 511, on_connection)) < 0)
		die("listen", e);
	uv_tcp_getsockname(&l, (struct sockaddr *)&bound, &len);
	printf("port %d\n", ntohs(((struct sockaddr_in *)&bound)->sin_port));
	fflush(stdout);
	uv_signal_init(loop, &term);
	uv_signal_start(&term, on_term, SIGTERM);
	uv_run(loop, UV_RUN_DEFAULT);
	return 0;
}

/* ---- client ---- */

static struct sockaddr_in target;
static uint64_t total, started, done, bytes, maxbody;
static bool perreq;
static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

struct cconn {
	uv_tcp_t tcp;
	uv_connect_t connect;
	struct inbuf in;
	uint8_t *sent;		/* the body of the request in flight */
	uint32_t sent_len;
	uint64_t seq;
	uint64_t quota;		/* requests this connection makes */
	bool last, eof_due;
};

static int nconns;

static void client_next(struct cconn *c);
static void open_conn(uv_loop_t *loop);
static uint64_t given;		/* connections opened */

static void cconn_closed(uv_handle_t *h)
{
	struct cconn *c = (struct cconn *)h;
	uv_loop_t *loop = h->loop;

	free(c->in.data);
	free(c->sent);
	free(c);
	if (perreq && given < total)
		open_conn(loop);
}

static void client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct cconn *c = (struct cconn *)s;

	if (n > 0)
		inbuf_add(&c->in, buf->base, (size_t)n);
	free(buf->base);
	if (n == UV_EOF && c->eof_due && !c->in.len) {
		uv_close((uv_handle_t *)s, cconn_closed);
		return;
	}
	if (n < 0) {
		fprintf(stderr, "uvecho: connection ended early (%s), %" PRIu64 " of %" PRIu64
			" done\n", uv_strerror((int)n), done, total);
		exit(1);
	}
	if (c->in.len >= HDR && c->in.len >= HDR + get32(c->in.data)) {
		uint32_t len = get32(c->in.data);

		if (c->eof_due || len != c->sent_len || get64(c->in.data + 8) != fnv1a(c->sent, len) ||
		    memcmp(c->in.data + HDR, c->sent, len)) {
			fprintf(stderr, "uvecho: wrong reply to request %" PRIu64 "\n", c->seq);
			exit(1);
		}
		inbuf_drop(&c->in, HDR + len);
		done++;
		bytes += 2 * (uint64_t)len;
		if (c->last) {
			c->eof_due = true;	/* the server closes: EOF next */
			return;
		}
		client_next(c);
	}
}

static void client_next(struct cconn *c)
{
	uint32_t len = (uint32_t)(next_rand() % (maxbody + 1));
	uint8_t *req = xmalloc(HDR + len);

	free(c->sent);
	c->sent = xmalloc(len);
	for (uint32_t i = 0; i < len; i++)
		c->sent[i] = (uint8_t)next_rand();
	c->sent_len = len;
	c->seq = ++started;
	c->last = --c->quota == 0;
	put32(req, len);
	put32(req + 4, c->last ? LAST : 0);
	put64(req + 8, c->seq);
	memcpy(req + HDR, c->sent, len);
	send_bytes((uv_stream_t *)&c->tcp, req, HDR + len);
}

static void on_connect(uv_connect_t *r, int status)
{
	struct cconn *c = (struct cconn *)r->handle;

	if (status < 0)
		die("connect", status);
	uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, client_read);
	client_next(c);
}

static void open_conn(uv_loop_t *loop)
{
	struct cconn *c = calloc(1, sizeof(*c));
	int e;

	/* One request each, or an even share of the total per connection. */
	c->quota = perreq ? 1 : total / (uint64_t)nconns + (given < total % (uint64_t)nconns);
	given++;
	uv_tcp_init(loop, &c->tcp);
	e = uv_tcp_connect(&c->connect, &c->tcp, (struct sockaddr *)&target, on_connect);
	if (e < 0)
		die("uv_tcp_connect", e);
}

static int client(int port, int nconn, uint64_t n, uint64_t max, bool per)
{
	uv_loop_t *loop = uv_default_loop();

	total = n;
	maxbody = max;
	perreq = per;
	nconns = nconn;
	uv_ip4_addr("127.0.0.1", port, &target);
	for (int i = 0; i < nconn && (uint64_t)i < total; i++)
		open_conn(loop);
	uv_run(loop, UV_RUN_DEFAULT);
	if (done != total) {
		fprintf(stderr, "uvecho: %" PRIu64 " of %" PRIu64 " requests answered\n", done, total);
		return 1;
	}
	printf("ok %" PRIu64 " requests %" PRIu64 " bytes\n", done, bytes);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "server"))
		return server(argv[2]);
	if (argc == 7 && !strcmp(argv[1], "client"))
		return client(atoi(argv[2]), atoi(argv[3]), strtoull(argv[4], NULL, 10),
			      strtoull(argv[5], NULL, 10), !strcmp(argv[6], "perreq"));
	fprintf(stderr, "usage: uvecho server DIR | uvecho client PORT CONNS TOTAL MAXBODY "
			"keepalive|perreq\n");
	return 2;
}
