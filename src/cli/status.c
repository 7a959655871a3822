// SPDX-License-Identifier: MIT
/*
 * shunt status: the connections of every process using shunt, like ss:
 * shared-memory circuits as shuntd knows them (with the bytes each end has
 * moved), and the kernel TCP connections those processes hold, from
 * sock_diag. Plain text or --json.
 */
#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/sockdiag.h"
#include "common/addr.h"
#include "common/proto.h"
#include "shunt/circuit.h"

struct view {
	struct shunt_msg_status_session *sessions;
	size_t nsessions;
	struct shunt_msg_status_listener *listeners;
	size_t nlisteners;
	struct shunt_msg_status_conn *conns;
	size_t nconns;
	struct shunt_msg_status_policy *policy;
	size_t npolicy;
	struct shunt_msg_status_end end;
	struct kconn *kconns;
	size_t nkconns;
};

/* A kernel TCP socket held by a shunt process. */
struct kconn {
	int pid;
	struct tcp_entry e;
	int peer_pid;			/* the shunt process at the other end, or 0 */
	int shown;
};

static int push(void **arr, size_t *n, const void *item, size_t size)
{
	void *p = realloc(*arr, (*n + 1) * size);

	if (!p)
		return -ENOMEM;
	memcpy((char *)p + *n * size, item, size);
	*arr = p;
	(*n)++;
	return 0;
}

static int fetch(const char *path, struct view *v)
{
	struct shunt_msg_status req;
	int fd = shunt_daemon_connect(path), r = 0;

	if (fd < 0)
		return fd;
	shunt_proto_init(&req, SHUNT_MSG_STATUS, sizeof(req), 1);
	r = shunt_proto_send(fd, &req, NULL, 0);
	while (r == 0) {
		_Alignas(8) char buf[SHUNT_MSG_MAX];
		int fds[SHUNT_MSG_MAX_FDS];
		unsigned nfds = 0;
		ssize_t len = shunt_proto_recv(fd, buf, fds, &nfds, 0);
		const struct shunt_msg_hdr *h = (const void *)buf;

		shunt_proto_close_fds(fds, nfds);
		if (len <= 0 || shunt_proto_check(buf, (size_t)len) < 0) {
			r = len < 0 ? (int)len : -EPROTO;
			break;
		}
		switch (h->type) {
		case SHUNT_MSG_STATUS_SESSION:
			r = push((void **)&v->sessions, &v->nsessions, buf, sizeof(*v->sessions));
			break;
		case SHUNT_MSG_STATUS_LISTENER:
			r = push((void **)&v->listeners, &v->nlisteners, buf, sizeof(*v->listeners));
			break;
		case SHUNT_MSG_STATUS_CONN:
			r = push((void **)&v->conns, &v->nconns, buf, sizeof(*v->conns));
			break;
		case SHUNT_MSG_STATUS_POLICY:
			r = push((void **)&v->policy, &v->npolicy, buf, sizeof(*v->policy));
			break;
		case SHUNT_MSG_STATUS_END:
			memcpy(&v->end, buf, sizeof(v->end));
			close(fd);
			return 0;
		default:
			r = -EPROTO;
		}
	}
	close(fd);
	return r;
}

static const struct shunt_msg_status_session *session(const struct view *v, uint64_t id)
{
	for (size_t i = 0; i < v->nsessions; i++)
		if (v->sessions[i].session == id)
			return &v->sessions[i];
	return NULL;
}

static bool same_endpoint(const struct shunt_wire_addr *a, const struct shunt_wire_addr *b)
{
	return a->family == b->family && a->port == b->port && shunt_addr_same_ip(a, b);
}

/*
 * Whether kernel socket @e is the companion of a circuit: the kernel socket
 * shuntd made ESTABLISHED (without packets) so that ports and ss tell the
 * truth. It carries nothing while the circuit does; the circuit is the
 * connection.
 */
static bool is_companion(const struct view *v, const struct tcp_entry *e)
{
	for (size_t i = 0; i < v->nconns; i++) {
		const struct shunt_wire_addr *a = v->conns[i].addr;

		for (int end = 0; end < 2; end++)
			if (same_endpoint(&e->local, &a[end]) && same_endpoint(&e->remote, &a[!end]))
				return true;
	}
	return false;
}

/* Kernel TCP connections held by the sessions' processes (same namespace only). */
static void find_kernel(struct view *v)
{
	struct tcp_entry *tcp;
	size_t ntcp;

	if (shunt_sockdiag_tcp(&tcp, &ntcp) < 0)
		return;
	for (size_t s = 0; s < v->nsessions; s++) {
		char dirpath[64];
		struct dirent *de;
		DIR *d;

		snprintf(dirpath, sizeof(dirpath), "/proc/%d/fd", v->sessions[s].pid);
		d = opendir(dirpath);
		if (!d)
			continue;
		while ((de = readdir(d))) {
			char link[320], target[64];
			unsigned long long ino;
			ssize_t n;

			snprintf(link, sizeof(link), "%s/%s", dirpath, de->d_name);
			n = readlink(link, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = 0;
			if (sscanf(target, "socket:[%llu]", &ino) != 1)
				continue;
			for (size_t t = 0; t < ntcp; t++) {
				/* Listeners and the idle kernel halves of circuits are not connections. */
				if (tcp[t].inode != ino || tcp[t].state == 10 || tcp[t].state == 7 ||
				    is_companion(v, &tcp[t]))
					continue;
				struct kconn k = { .pid = v->sessions[s].pid, .e = tcp[t] };

				push((void **)&v->kconns, &v->nkconns, &k, sizeof(k));
			}
		}
		closedir(d);
	}
	free(tcp);
	/* Pair the two ends of a connection between two shunt processes. */
	for (size_t i = 0; i < v->nkconns; i++)
		for (size_t j = 0; j < v->nkconns; j++)
			if (i != j && !memcmp(&v->kconns[i].e.local, &v->kconns[j].e.remote,
					      sizeof(struct shunt_wire_addr)) &&
			    !memcmp(&v->kconns[i].e.remote, &v->kconns[j].e.local,
				    sizeof(struct shunt_wire_addr)))
				v->kconns[i].peer_pid = v->kconns[j].pid;
}

/* --tenant, --pid, --transport: what to show (NULL / 0: everything). */
struct filter {
	const char *tenant;
	int pid;
	const char *transport;
};

static bool session_matches(const struct filter *f, const struct shunt_msg_status_session *s)
{
	char tenant[SHUNT_TENANT_LEN + 1] = { 0 };

	if (!s)
		return false;
	memcpy(tenant, s->tenant, SHUNT_TENANT_LEN);
	return (!f->tenant || !strcmp(f->tenant, tenant)) && (!f->pid || f->pid == s->pid);
}

static bool by_pid(const struct view *v, const struct filter *f, int pid)
{
	for (size_t i = 0; i < v->nsessions; i++)
		if (v->sessions[i].pid == pid)
			return session_matches(f, &v->sessions[i]);
	return false;
}

/* Keep only what the filter asks for; sessions stay, for the labels. */
static void apply_filter(struct view *v, const struct filter *f)
{
	size_t n = 0;

	if (!f->tenant && !f->pid && !f->transport)
		return;
	for (size_t i = 0; i < v->nconns; i++) {
		const struct shunt_msg_status_conn *c = &v->conns[i];

		if ((!f->transport || !strcmp(f->transport, "shm")) &&
		    (session_matches(f, session(v, c->session[0])) ||
		     session_matches(f, session(v, c->session[1]))))
			v->conns[n++] = *c;
	}
	v->nconns = n;
	n = 0;
	for (size_t i = 0; i < v->nkconns; i++) {
		const struct kconn *k = &v->kconns[i];

		if ((!f->transport || !strcmp(f->transport, "kernel")) &&
		    (by_pid(v, f, k->pid) || (k->peer_pid && by_pid(v, f, k->peer_pid))))
			v->kconns[n++] = *k;
	}
	v->nkconns = n;
	n = 0;
	for (size_t i = 0; i < v->nlisteners; i++)
		if (session_matches(f, session(v, v->listeners[i].session)))
			v->listeners[n++] = v->listeners[i];
	v->nlisteners = n;
}

static const char *circuit_state(const struct shunt_msg_status_conn *c)
{
	uint32_t a = c->state[0], b = c->state[1];

	if (c->setup == SHUNT_SETUP_PENDING)
		return "syn-sent";
	if (c->setup == SHUNT_SETUP_REFUSED)
		return "refused";
	if ((a | b) & SHUNT_END_RESET)
		return "reset";
	if ((a & SHUNT_END_WR_SHUT) && (b & SHUNT_END_WR_SHUT))
		return "closing";
	if ((a | b) & SHUNT_END_WR_SHUT)
		return "half-closed";
	if (!c->session[1])
		return "queued";
	return "established";
}

static const char *tcp_state(uint8_t s)
{
	static const char *const names[] = {
		"?", "established", "syn-sent", "syn-recv", "fin-wait-1", "fin-wait-2",
		"time-wait", "close", "close-wait", "last-ack", "listen", "closing",
	};

	return s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}

static void proc_label(const struct view *v, uint64_t sid, int pid, char *buf, size_t n)
{
	const struct shunt_msg_status_session *s = sid ? session(v, sid) : NULL;

	if (s)
		snprintf(buf, n, "%d/%.16s", s->pid, s->comm);
	else if (pid > 0)
		snprintf(buf, n, "%d", pid);
	else
		snprintf(buf, n, "-");
}

/* A field of a record, which need not end with a NUL, as a string. */
static const char *field(const char *f, size_t n, char *out)
{
	memcpy(out, f, n);
	out[n] = 0;
	return out;
}

/* What decided a policy record, in words. */
static void decided_by(const struct shunt_msg_status_policy *p, char *buf, size_t n)
{
	char rule[SHUNT_RULE_LEN + 1], dflt[sizeof(p->dflt) + 1];

	if (p->rule[0])
		snprintf(buf, n, "rule %s", field(p->rule, sizeof(p->rule), rule));
	else
		snprintf(buf, n, "the default policy (%s)", field(p->dflt, sizeof(p->dflt), dflt));
}

/*
 * The rule that would give this pair shared memory, as shuntd.conf lines
 * joined by @sep. A rule name takes letters, digits, '.', '_' and '-'.
 */
static void allow_rule(const struct shunt_msg_status_policy *p, const char *sep, char *buf,
		       size_t n)
{
	char from[SHUNT_TENANT_LEN + 1], to[SHUNT_TENANT_LEN + 1], name[2 * SHUNT_TENANT_LEN + 8];

	field(p->from, sizeof(p->from), from);
	field(p->to, sizeof(p->to), to);
	snprintf(name, sizeof(name), "%s-to-%s", from, to);
	for (char *c = name; *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr("._-", *c))
			*c = '-';
	snprintf(buf, n, "[rule %.31s]%sfrom = %s%sto = %s%saction = allow", name, sep, from, sep, to,
		 sep);
}

static uint64_t total_fallbacks(const struct view *v)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < SHUNT_FALLBACK_REASONS; i++)
		if (i != SHUNT_FALLBACK_REFUSED)
			n += v->end.fallbacks[i];
	return n;
}

static void print_policy_text(const struct view *v)
{
	char from[SHUNT_TENANT_LEN + 1], to[SHUNT_TENANT_LEN + 1], by[96], rule[160];

	if (!v->npolicy)
		return;
	printf("\nBY POLICY (between tenants)\n%-20s %-20s %-9s %10s  %s\n", "FROM", "TO", "OUTCOME",
	       "CONNECTS", "DECIDED BY");
	for (size_t i = 0; i < v->npolicy; i++) {
		const struct shunt_msg_status_policy *p = &v->policy[i];

		decided_by(p, by, sizeof(by));
		printf("%-20s %-20s %-9s %10llu  %s\n", field(p->from, sizeof(p->from), from),
		       field(p->to, sizeof(p->to), to), p->refused ? "refused" : "kernel",
		       (unsigned long long)p->count, by);
	}
	printf("To give a pair shared memory, a rule in the policy file before any rule that "
	       "decides it now (then SIGHUP shuntd):\n");
	for (size_t i = 0; i < v->npolicy; i++) {
		allow_rule(&v->policy[i], "\n    ", rule, sizeof(rule));
		printf("%s    %s\n", i ? "\n" : "", rule);
	}
}

static void print_text(struct view *v)
{
	char a[SHUNT_ADDR_STRLEN], b[SHUNT_ADDR_STRLEN], pa[48], pb[48];

	printf("%-9s %-12s %-22s %-22s %-22s %-22s %12s %12s\n", "TRANSPORT", "STATE", "CLIENT",
	       "CLIENT ADDRESS", "SERVER", "SERVER ADDRESS", "CLIENT->SRV", "SRV->CLIENT");
	for (size_t i = 0; i < v->nconns; i++) {
		const struct shunt_msg_status_conn *c = &v->conns[i];

		proc_label(v, c->session[0], 0, pa, sizeof(pa));
		proc_label(v, c->session[1], 0, pb, sizeof(pb));
		printf("%-9s %-12s %-22s %-22s %-22s %-22s %12llu %12llu\n", "shm", circuit_state(c),
		       pa, shunt_addr_format(&c->addr[0], a, sizeof(a)), pb,
		       shunt_addr_format(&c->addr[1], b, sizeof(b)), (unsigned long long)c->bytes[0],
		       (unsigned long long)c->bytes[1]);
	}
	for (size_t i = 0; i < v->nkconns; i++) {
		struct kconn *k = &v->kconns[i];

		if (k->shown)
			continue;
		/* Show a connection between two shunt processes once. */
		for (size_t j = 0; j < v->nkconns; j++)
			if (v->kconns[j].pid == k->peer_pid && v->kconns[j].peer_pid == k->pid &&
			    !memcmp(&v->kconns[j].e.local, &k->e.remote, sizeof(k->e.remote)))
				v->kconns[j].shown = 1;
		snprintf(pa, sizeof(pa), "%d", k->pid);
		proc_label(v, 0, k->peer_pid, pb, sizeof(pb));
		printf("%-9s %-12s %-22s %-22s %-22s %-22s %12llu %12llu\n", "kernel",
		       tcp_state(k->e.state), pa, shunt_addr_format(&k->e.local, a, sizeof(a)), pb,
		       shunt_addr_format(&k->e.remote, b, sizeof(b)),
		       (unsigned long long)k->e.bytes_sent, (unsigned long long)k->e.bytes_received);
	}
	printf("\n%-22s %-30s %8s %8s\n", "LISTENER", "ADDRESS", "BACKLOG", "QUEUED");
	for (size_t i = 0; i < v->nlisteners; i++) {
		const struct shunt_msg_status_listener *l = &v->listeners[i];

		proc_label(v, l->session, 0, pa, sizeof(pa));
		printf("%-22s %-30s %8u %8u\n", pa, shunt_addr_format(&l->addr, a, sizeof(a)),
		       l->backlog, l->queued);
	}
	printf("\n%-22s %s\n", "PROCESS", "TENANT");
	for (size_t i = 0; i < v->nsessions; i++) {
		char tenant[SHUNT_TENANT_LEN + 1] = { 0 };

		memcpy(tenant, v->sessions[i].tenant, SHUNT_TENANT_LEN);
		proc_label(v, v->sessions[i].session, 0, pa, sizeof(pa));
		printf("%-22s %s\n", pa, tenant);
	}
	print_policy_text(v);
	printf("\n%zu processes, %zu shared-memory connections (%llu since start), "
	       "%llu connects left to the kernel", v->nsessions, v->nconns,
	       (unsigned long long)v->end.circuits_total, (unsigned long long)total_fallbacks(v));
	for (unsigned i = 0, first = 1; i < SHUNT_FALLBACK_REASONS; i++) {
		if (i == SHUNT_FALLBACK_REFUSED || !v->end.fallbacks[i])
			continue;
		printf("%s%s %llu", first ? " (" : ", ", shunt_fallback_name(i),
		       (unsigned long long)v->end.fallbacks[i]);
		first = 0;
	}
	if (total_fallbacks(v))
		printf(")");
	printf(", %llu refused by policy\n",
	       (unsigned long long)v->end.fallbacks[SHUNT_FALLBACK_REFUSED]);
}

static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

static void json_addr(const struct shunt_wire_addr *w)
{
	char a[SHUNT_ADDR_STRLEN];

	json_str(shunt_addr_format(w, a, sizeof(a)));
}

static void print_json(struct view *v)
{
	printf("{\"sessions\":[");
	for (size_t i = 0; i < v->nsessions; i++) {
		printf("%s{\"session\":%llu,\"pid\":%d,\"uid\":%u,\"comm\":", i ? "," : "",
		       (unsigned long long)v->sessions[i].session, v->sessions[i].pid,
		       v->sessions[i].uid);
		char comm[SHUNT_COMM_LEN + 1] = { 0 };

		memcpy(comm, v->sessions[i].comm, SHUNT_COMM_LEN);
		json_str(comm);
		char tenant[SHUNT_TENANT_LEN + 1] = { 0 };

		memcpy(tenant, v->sessions[i].tenant, SHUNT_TENANT_LEN);
		printf(",\"tenant\":");
		json_str(tenant);
		printf("}");
	}
	printf("],\"listeners\":[");
	for (size_t i = 0; i < v->nlisteners; i++) {
		const struct shunt_msg_status_listener *l = &v->listeners[i];

		printf("%s{\"listener\":%llu,\"session\":%llu,\"address\":", i ? "," : "",
		       (unsigned long long)l->listener, (unsigned long long)l->session);
		json_addr(&l->addr);
		printf(",\"backlog\":%u,\"queued\":%u}", l->backlog, l->queued);
	}
	printf("],\"connections\":[");
	size_t k = 0;

	for (size_t i = 0; i < v->nconns; i++, k++) {
		const struct shunt_msg_status_conn *c = &v->conns[i];
		const struct shunt_msg_status_session *s0 = session(v, c->session[0]);
		const struct shunt_msg_status_session *s1 = session(v, c->session[1]);

		printf("%s{\"transport\":\"shm\",\"circuit\":%llu,\"state\":\"%s\","
		       "\"client_pid\":%d,\"server_pid\":%d,\"client\":",
		       k ? "," : "", (unsigned long long)c->circuit, circuit_state(c),
		       s0 ? s0->pid : 0, s1 ? s1->pid : 0);
		json_addr(&c->addr[0]);
		printf(",\"server\":");
		json_addr(&c->addr[1]);
		printf(",\"client_to_server_bytes\":%llu,\"server_to_client_bytes\":%llu,"
		       "\"ring_size\":%u}",
		       (unsigned long long)c->bytes[0], (unsigned long long)c->bytes[1], c->ring_size);
	}
	for (size_t i = 0; i < v->nkconns; i++, k++) {
		const struct kconn *c = &v->kconns[i];

		printf("%s{\"transport\":\"kernel\",\"state\":\"%s\",\"pid\":%d,\"peer_pid\":%d,"
		       "\"local\":",
		       k ? "," : "", tcp_state(c->e.state), c->pid, c->peer_pid);
		json_addr(&c->e.local);
		printf(",\"remote\":");
		json_addr(&c->e.remote);
		printf(",\"bytes_sent\":%llu,\"bytes_received\":%llu}",
		       (unsigned long long)c->e.bytes_sent, (unsigned long long)c->e.bytes_received);
	}
	printf("],\"policy\":[");
	for (size_t i = 0; i < v->npolicy; i++) {
		const struct shunt_msg_status_policy *p = &v->policy[i];
		char f[SHUNT_RULE_LEN + 1], by[96], rule[160];

		printf("%s{\"from\":", i ? "," : "");
		json_str(field(p->from, sizeof(p->from), f));
		printf(",\"to\":");
		json_str(field(p->to, sizeof(p->to), f));
		printf(",\"rule\":");
		json_str(field(p->rule, sizeof(p->rule), f));
		decided_by(p, by, sizeof(by));
		printf(",\"decided_by\":");
		json_str(by);
		allow_rule(p, "\n", rule, sizeof(rule));
		printf(",\"outcome\":\"%s\",\"connects\":%llu,\"allow_rule\":",
		       p->refused ? "refused" : "kernel", (unsigned long long)p->count);
		json_str(rule);
		printf("}");
	}
	printf("],\"totals\":{\"circuits_total\":%llu,\"sessions_total\":%llu,"
	       "\"kernel_fallbacks\":%llu,\"policy_kernel\":%llu,\"limit_fallbacks\":%llu,"
	       "\"policy_refused\":%llu,\"fallbacks\":{",
	       (unsigned long long)v->end.circuits_total, (unsigned long long)v->end.sessions_total,
	       (unsigned long long)total_fallbacks(v),
	       (unsigned long long)v->end.fallbacks[SHUNT_FALLBACK_POLICY],
	       (unsigned long long)(v->end.fallbacks[SHUNT_FALLBACK_LIMIT_CONNECTIONS] +
				    v->end.fallbacks[SHUNT_FALLBACK_LIMIT_MEMORY]),
	       (unsigned long long)v->end.fallbacks[SHUNT_FALLBACK_REFUSED]);
	for (unsigned i = 0; i < SHUNT_FALLBACK_REASONS; i++)
		printf("%s\"%s\":%llu", i ? "," : "", shunt_fallback_name(i),
		       (unsigned long long)v->end.fallbacks[i]);
	printf("}}}\n");
}

static const char status_usage[] =
	"usage: shunt status [--json] [--socket PATH] [--tenant NAME] [--pid PID]\n"
	"                    [--transport shm|kernel]\n";

int shunt_cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "socket", required_argument, NULL, 's' },
		{ "tenant", required_argument, NULL, 't' },
		{ "pid", required_argument, NULL, 'p' },
		{ "transport", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct view v = { 0 };
	struct filter f = { 0 };
	char path[4096];
	int json = 0, c, r;

	shunt_path_socket(path, sizeof(path));
	while ((c = getopt_long(argc, argv, "js:t:p:T:h", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = 1;
			break;
		case 's':
			snprintf(path, sizeof(path), "%s", optarg);
			break;
		case 't':
			f.tenant = optarg;
			break;
		case 'p':
			f.pid = atoi(optarg);
			if (f.pid <= 0) {
				fprintf(stderr, "shunt status: --pid %s: not a process id\n", optarg);
				return 2;
			}
			break;
		case 'T':
			if (strcmp(optarg, "shm") && strcmp(optarg, "kernel")) {
				fprintf(stderr, "shunt status: --transport %s: shm or kernel\n", optarg);
				return 2;
			}
			f.transport = optarg;
			break;
		case 'h':
			printf("%s\n"
			       "Connections of the processes using shunt: shared-memory circuits\n"
			       "(bytes each way as counted by the rings) and kernel TCP connections\n"
			       "(bytes from the kernel's tcp_info), then listeners, processes with\n"
			       "their tenants, and totals. The filters keep connections with an end\n"
			       "in that tenant or process, or on that transport.\n", status_usage);
			return 0;
		default:
			fputs(status_usage, stderr);
			return 2;
		}
	}
	r = fetch(path, &v);
	if (r < 0) {
		fprintf(stderr, "shunt: cannot query shuntd at %s: %s\n", path, strerror(-r));
		return 1;
	}
	find_kernel(&v);
	apply_filter(&v, &f);
	if (json)
		print_json(&v);
	else
		print_text(&v);
	free(v.sessions);
	free(v.listeners);
	free(v.conns);
	free(v.policy);
	free(v.kconns);
	return 0;
}
