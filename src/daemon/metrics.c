// SPDX-License-Identifier: MIT
/*
 * Metrics in the Prometheus text exposition format, served over HTTP by
 * shuntd itself on a loopback port or a Unix socket (--metrics, or the
 * policy's [daemon] metrics): connections by transport and tenant, circuit
 * memory, bytes, fallbacks by reason, policy denials. A client's request
 * is read without blocking the loop; the answer is one small write.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/log.h"
#include "common/proto.h"
#include "daemon/shuntd.h"

enum { REQUEST_MAX = 4096, ANSWER_MAX = 64 << 10 };

struct client {
	int watch;			/* SHUNTD_WATCH_METRICS: first, the loop's tag */
	int fd;
	size_t n;
	char req[REQUEST_MAX];
};

/* "HOST:PORT", "[V6]:PORT" or "unix:PATH" into a listening socket, or -errno. */
static int listen_on(const char *spec)
{
	struct sockaddr_storage ss = { 0 };
	socklen_t len;
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon;
	int fd, one = 1;
	long port;

	if (!strncmp(spec, "unix:", 5)) {
		struct sockaddr_un *un = (struct sockaddr_un *)&ss;

		if (strlen(spec + 5) >= sizeof(un->sun_path))
			return -ENAMETOOLONG;
		un->sun_family = AF_UNIX;
		strcpy(un->sun_path, spec + 5);
		unlink(un->sun_path);
		len = sizeof(*un);
	} else {
		colon = strrchr(spec, ':');
		if (!colon || (size_t)(colon - spec) >= sizeof(host))
			return -EINVAL;
		memcpy(host, spec, (size_t)(colon - spec));
		host[colon - spec] = 0;
		port = strtol(colon + 1, NULL, 10);
		if (port <= 0 || port > 65535)
			return -EINVAL;
		if (host[0] == '[' && host[strlen(host) - 1] == ']') {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

			host[strlen(host) - 1] = 0;
			if (inet_pton(AF_INET6, host + 1, &in6->sin6_addr) != 1)
				return -EINVAL;
			in6->sin6_family = AF_INET6;
			in6->sin6_port = htons((uint16_t)port);
			len = sizeof(*in6);
		} else {
			struct sockaddr_in *in = (struct sockaddr_in *)&ss;

			if (inet_pton(AF_INET, host, &in->sin_addr) != 1)
				return -EINVAL;
			in->sin_family = AF_INET;
			in->sin_port = htons((uint16_t)port);
			len = sizeof(*in);
		}
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 16) < 0) {
		int e = -errno;

		close(fd);
		return e;
	}
	return fd;
}

int shuntd_metrics_init(struct shuntd *d)
{
	const char *spec = d->cfg.metrics ? d->cfg.metrics : d->policy->metrics;

	if (!spec || !*spec)
		return 0;
	d->metrics_fd = listen_on(spec);
	if (d->metrics_fd < 0) {
		shunt_err("cannot serve metrics on %s: %s", spec, strerror(-d->metrics_fd));
		return -1;
	}
	if (shuntd_loop_watch_metrics(d, d->metrics_fd) < 0)
		return -1;
	shunt_info("metrics on %s", spec);
	return 0;
}

void shuntd_metrics_accept(struct shuntd *d)
{
	for (;;) {
		int fd = accept4(d->metrics_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct client *c;

		if (fd < 0)
			return;
		c = calloc(1, sizeof(*c));
		if (!c || shuntd_loop_watch(d, fd, c) < 0) {
			free(c);
			close(fd);
			continue;
		}
		c->watch = SHUNTD_WATCH_METRICS;
		c->fd = fd;
	}
}

struct out {
	char *buf;
	size_t n, cap;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	int k;

	if (o->n >= o->cap)
		return;
	va_start(ap, fmt);
	k = vsnprintf(o->buf + o->n, o->cap - o->n, fmt, ap);
	va_end(ap);
	if (k > 0)
		o->n = o->n + (size_t)k < o->cap ? o->n + (size_t)k : o->cap;
}

static void help(struct out *o, const char *name, const char *type, const char *text)
{
	put(o, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

/* What the network namespace views cost in rtnetlink (netns.c), and what connects asked. */
static void render_netns(struct shuntd *d, struct out *o)
{
	static const char *const kinds[] = { NULL, "dump", "link", "nsid", "route" };
	struct shuntd_netns_stats s;

	shuntd_netns_stats(d, &s);
	help(o, "shunt_netlink_requests_total", "counter",
	     "rtnetlink requests sent, by kind: dumps fill the facts kept of each namespace, "
	     "the rest ask what they cannot say.");
	for (unsigned k = 1; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		put(o, "shunt_netlink_requests_total{kind=\"%s\"} %llu\n", kinds[k],
		    (unsigned long long)s.requests[k]);
	help(o, "shunt_netlink_connect_requests_total", "counter",
	     "rtnetlink requests sent while a connect was being decided.");
	put(o, "shunt_netlink_connect_requests_total %llu\n",
	    (unsigned long long)s.deciding_requests);
	help(o, "shunt_netlink_events_total", "counter", "rtnetlink notifications applied.");
	put(o, "shunt_netlink_events_total %llu\n", (unsigned long long)s.events);
	help(o, "shunt_netlink_overruns_total", "counter",
	     "Notifications lost (ENOBUFS), each followed by a dump of everything.");
	put(o, "shunt_netlink_overruns_total %llu\n", (unsigned long long)s.overruns);
	help(o, "shunt_route_lookups_total", "counter",
	     "Routes looked up for connects across namespaces, by where the answer came from.");
	put(o, "shunt_route_lookups_total{from=\"facts\"} %llu\n", (unsigned long long)s.route_model);
	put(o, "shunt_route_lookups_total{from=\"cache\"} %llu\n",
	    (unsigned long long)s.route_cached);
	put(o, "shunt_route_lookups_total{from=\"kernel\"} %llu\n",
	    (unsigned long long)s.route_asked);
	put(o, "shunt_route_lookups_total{from=\"none\"} %llu\n",
	    (unsigned long long)s.route_unknown);
	help(o, "shunt_route_model_mismatches_total", "counter",
	     "SHUNTD_NETNS_VERIFY: routes the facts and the kernel disagreed on.");
	put(o, "shunt_route_model_mismatches_total %llu\n",
	    (unsigned long long)s.verify_mismatches);
}

/* The requests shuntd answered, and how long it took from reading one to being done with it. */
static void render_requests(struct shuntd *d, struct out *o)
{
	static const char *const names[SHUNT_MSG_TYPE_MAX + 1] = {
#define NAME(type, request, reply, nfds, answered, handler) [SHUNT_MSG_##type] = #type,
		SHUNT_REQUESTS(NAME)
#undef NAME
	};

	help(o, "shunt_requests_total", "counter", "Requests from processes handled, by type.");
	for (unsigned t = 0; t <= SHUNT_MSG_TYPE_MAX; t++)
		if (names[t])
			put(o, "shunt_requests_total{type=\"%s\"} %llu\n", names[t],
			    (unsigned long long)d->requests[t]);
	help(o, "shunt_request_seconds_total", "counter",
	     "Time spent handling requests, by type, from reading one to being done with it "
	     "(its reply sent): divided by shunt_requests_total, what one costs the loop.");
	for (unsigned t = 0; t <= SHUNT_MSG_TYPE_MAX; t++)
		if (names[t])
			put(o, "shunt_request_seconds_total{type=\"%s\"} %.9f\n", names[t],
			    (double)d->request_ns[t] / 1e9);
}

static void render(struct shuntd *d, struct out *o)
{
	uint64_t live_bytes = 0, circuits = 0, denials_kernel = 0, denials_refused = 0;
	struct circuit *c;
	struct tenant *t;
	uint64_t key;
	size_t it = 0;

	while ((c = shunt_map_next(&d->circuits, &it, &key))) {
		circuits++;
		for (unsigned e = 0; e < 2; e++)
			live_bytes += atomic_load(&c->hdr->ring[e].tail);
	}
	help(o, "shunt_sessions", "gauge", "Processes connected to shuntd.");
	put(o, "shunt_sessions %zu\n", d->live_sessions);
	help(o, "shunt_listeners", "gauge", "Listening sockets registered with shuntd.");
	put(o, "shunt_listeners %zu\n", d->listeners.len);
	help(o, "shunt_circuits", "gauge", "Connections on shared memory (circuits) now.");
	put(o, "shunt_circuits %llu\n", (unsigned long long)circuits);
	help(o, "shunt_connections", "gauge",
	     "Shared-memory connections open now, by tenant (one a tenant is an end of; "
	     "kernel connections are counted when made, in shunt_connects_total).");
	for (t = d->tenants; t; t = t->next)
		put(o, "shunt_connections{transport=\"shm\",tenant=\"%s\"} %llu\n", t->name,
		    (unsigned long long)t->connections);
	help(o, "shunt_memory_bytes", "gauge", "Shared memory of live circuits, by paying tenant.");
	for (t = d->tenants; t; t = t->next)
		put(o, "shunt_memory_bytes{tenant=\"%s\"} %llu\n", t->name,
		    (unsigned long long)t->memory);
	help(o, "shunt_connects_total", "counter",
	     "Connects shuntd answered, by transport, tenant and (kernel) reason.");
	for (t = d->tenants; t; t = t->next) {
		put(o, "shunt_connects_total{transport=\"shm\",tenant=\"%s\"} %llu\n", t->name,
		    (unsigned long long)t->circuits_total);
		for (unsigned r = 0; r < SHUNT_FALLBACK_REASONS; r++) {
			if (r == SHUNT_FALLBACK_REFUSED)
				continue;
			put(o, "shunt_connects_total{transport=\"kernel\",tenant=\"%s\",reason=\"%s\"} "
			       "%llu\n", t->name, shunt_fallback_name(r),
			    (unsigned long long)t->fallbacks[r]);
		}
		denials_kernel += t->fallbacks[SHUNT_FALLBACK_POLICY];
		denials_refused += t->fallbacks[SHUNT_FALLBACK_REFUSED];
	}
	help(o, "shunt_fallbacks_total", "counter", "Connects left to the kernel, by reason.");
	for (unsigned r = 0; r < SHUNT_FALLBACK_REASONS; r++)
		if (r != SHUNT_FALLBACK_REFUSED)
			put(o, "shunt_fallbacks_total{reason=\"%s\"} %llu\n", shunt_fallback_name(r),
			    (unsigned long long)d->fallbacks[r]);
	help(o, "shunt_policy_denials_total", "counter",
	     "Connects the policy did not allow on shared memory, by action.");
	put(o, "shunt_policy_denials_total{action=\"kernel\"} %llu\n",
	    (unsigned long long)d->fallbacks[SHUNT_FALLBACK_POLICY]);
	put(o, "shunt_policy_denials_total{action=\"refuse\"} %llu\n",
	    (unsigned long long)d->fallbacks[SHUNT_FALLBACK_REFUSED]);
	(void)denials_kernel;
	(void)denials_refused;
	help(o, "shunt_bytes_total", "counter", "Bytes moved over shared memory (both directions).");
	put(o, "shunt_bytes_total %llu\n", (unsigned long long)(d->bytes_closed + live_bytes));
	help(o, "shunt_sessions_total", "counter", "Processes that connected to shuntd.");
	put(o, "shunt_sessions_total %llu\n", (unsigned long long)d->sessions_total);
	render_requests(d, o);
	render_netns(d, o);
}

static void finish(struct shuntd *d, struct client *c)
{
	shuntd_loop_unwatch(d, c->fd);
	close(c->fd);
	free(c);
}

void shuntd_metrics_input(struct shuntd *d, void *tag)
{
	struct client *c = tag;
	struct out o = { .cap = ANSWER_MAX };
	char head[160];
	ssize_t n = read(c->fd, c->req + c->n, sizeof(c->req) - 1 - c->n);
	int hl;

	if (n < 0 && errno == EAGAIN)
		return;
	if (n > 0) {
		c->n += (size_t)n;
		c->req[c->n] = 0;
		/* The whole request head first: closing on unread bytes would be a reset. */
		if (!strstr(c->req, "\r\n\r\n") && !strstr(c->req, "\n\n") &&
		    c->n < sizeof(c->req) - 1)
			return;
	}
	if (n <= 0 && c->n == 0) {
		finish(d, c);
		return;
	}
	o.buf = malloc(o.cap);
	if (!o.buf) {
		finish(d, c);
		return;
	}
	if (strncmp(c->req, "GET ", 4)) {
		hl = snprintf(head, sizeof(head), "HTTP/1.0 405 Method Not Allowed\r\n"
			      "Content-Length: 0\r\nConnection: close\r\n\r\n");
	} else {
		shuntd_journal_read_all(d);
		render(d, &o);
		hl = snprintf(head, sizeof(head), "HTTP/1.0 200 OK\r\n"
			      "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
			      "Content-Length: %zu\r\nConnection: close\r\n\r\n", o.n);
	}
	(void)!send(c->fd, head, (size_t)hl, MSG_NOSIGNAL | MSG_DONTWAIT | MSG_MORE);
	(void)!send(c->fd, o.buf, o.n, MSG_NOSIGNAL | MSG_DONTWAIT);
	free(o.buf);
	shutdown(c->fd, SHUT_WR);
	finish(d, c);
}
