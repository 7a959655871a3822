// SPDX-License-Identifier: MIT
/*
 * shunt compare's report: the client's output of both passes side by side
 * with the time each took and what went over shared memory, or the same as
 * one JSON object. Throughput lines ("... per second", "Requests/sec: ...")
 * that appear in both outputs are paired, so scripts and the plot get the
 * programs' own numbers without knowing the programs.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>

#include "cli/compare.h"

enum { MAX_LINES = 100000, SHAPE_MAX = 512 };

/* The lines of an output as a terminal shows them: after the last '\r', tabs expanded. */
struct lines {
	char **v;
	size_t n;
};

static void split(const char *text, size_t len, struct lines *l)
{
	size_t start = 0;

	l->v = NULL;
	l->n = 0;
	for (size_t i = 0; i <= len && l->n < MAX_LINES; i++) {
		if (i < len && text[i] != '\n')
			continue;
		if (i == len && start == len)
			break;
		const char *s = text + start, *e = text + i;
		const char *cr = memrchr(s, '\r', (size_t)(e - s));
		char *line, **v;
		size_t k = 0, col = 0;

		if (cr)
			s = cr + 1;
		line = malloc((size_t)(e - s) * 8 + 1);
		v = realloc(l->v, (l->n + 1) * sizeof(*v));
		if (!line || !v) {
			free(line);
			if (v)
				l->v = v;
			break;
		}
		l->v = v;
		for (; s < e; s++) {
			if (*s == '\t') {
				do
					line[k++] = ' ';
				while (++col % 8);
			} else {
				line[k++] = *s;
				if (((unsigned char)*s & 0xc0) != 0x80)
					col++;
			}
		}
		line[k] = 0;
		l->v[l->n++] = line;
		start = i + 1;
	}
}

static void lines_free(struct lines *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

/* Display columns of @s (UTF-8: continuation bytes take none). */
static size_t columns(const char *s, size_t bytes)
{
	size_t c = 0;

	for (size_t i = 0; i < bytes; i++)
		if (((unsigned char)s[i] & 0xc0) != 0x80)
			c++;
	return c;
}

/* Bytes of @s that fill at most @width columns (never splitting a character). */
static size_t fit(const char *s, size_t width)
{
	size_t i = 0, c = 0;

	while (s[i]) {
		if (((unsigned char)s[i] & 0xc0) != 0x80) {
			if (c == width)
				break;
			c++;
		}
		i++;
	}
	return i;
}

/* A line cut into rows of @width columns: row @row's start and length. */
static void row_of(const char *line, size_t width, size_t row, const char **s, size_t *len)
{
	const char *p = line;

	for (size_t r = 0; r < row && *p; r++)
		p += fit(p, width);
	*s = p;
	*len = fit(p, width);
}

static size_t rows(const char *line, size_t width)
{
	size_t n = 0;

	do {
		line += fit(line, width);
		n++;
	} while (*line);
	return n;
}

static void cell(const char *s, size_t len, size_t width)
{
	size_t c = columns(s, len);

	fwrite(s, 1, len, stdout);
	printf("%*s", (int)(width > c ? width - c : 0), "");
}

static void both(size_t width, const char *a, const char *b)
{
	size_t n = rows(a, width) > rows(b, width) ? rows(a, width) : rows(b, width);

	for (size_t r = 0; r < n; r++) {
		const char *s;
		size_t len;

		row_of(a, width, r, &s, &len);
		cell(s, len, width);
		printf(" | ");
		row_of(b, width, r, &s, &len);
		fwrite(s, 1, len, stdout);
		printf("\n");
	}
}

static void human_bytes(char *buf, size_t n, uint64_t v)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double d = (double)v;
	int u = 0;

	while (d >= 1024 && u < 4) {
		d /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, n, "%" PRIu64 " B", v);
	else
		snprintf(buf, n, "%.1f %s", d, units[u]);
}

static void status_text(char *buf, size_t n, const struct compare_pass *p)
{
	if (!p->ran)
		snprintf(buf, n, "not run: %s", p->why);
	else if (p->timed_out)
		snprintf(buf, n, "%s", p->why);
	else if (WIFEXITED(p->status))
		snprintf(buf, n, "exit %d", WEXITSTATUS(p->status));
	else
		snprintf(buf, n, "killed by signal %d", WTERMSIG(p->status));
}

/* ---- throughput lines, paired across the passes */

struct metric {
	char shape[SHAPE_MAX];		/* the line with every number as '#' */
	double plain, shunt;
};

/* The line with each number replaced by '#'; false when it has none. */
static bool shape_of(const char *line, char *shape, size_t n)
{
	size_t k = 0;
	bool any = false;

	for (const char *s = line; *s && k + 2 < n;) {
		if (isdigit((unsigned char)*s)) {
			while (isdigit((unsigned char)*s) || (*s == '.' && isdigit((unsigned char)s[1])))
				s++;
			shape[k++] = '#';
			any = true;
		} else if (isspace((unsigned char)*s)) {
			/* columns aligned with spaces differ with the numbers' widths */
			while (isspace((unsigned char)*s))
				s++;
			shape[k++] = ' ';
		} else {
			shape[k++] = *s++;
		}
	}
	shape[k] = 0;
	return any;
}

/*
 * The throughput a line states: "... 1234.5 requests per second" or
 * "12 MB/s" (the number before the rate), "Requests/sec: 1234" (a rate
 * label with a colon: the number after). False for other lines.
 */
static bool rate_of(const char *line, double *v)
{
	static const char *const marks[] = { "per second", "/sec", "/s" };
	const char *m = NULL;

	for (size_t i = 0; i < 3 && !m; i++) {
		const char *p = strcasestr(line, marks[i]);

		/* "/s" as a word's end only ("/second", "/sec" were tried first) */
		if (p && (i < 2 || !isalpha((unsigned char)p[2])))
			m = p;
	}
	if (!m)
		return false;
	const char *after = m;

	while (*after && !isspace((unsigned char)*after) && *after != ':')
		after++;
	if (*after == ':') {
		while (*after && !isdigit((unsigned char)*after))
			after++;
		if (!*after)
			return false;
		*v = strtod(after, NULL);
		return true;
	}
	/* the last number that ends before the mark */
	const char *last = NULL;

	for (const char *s = line; s < m; s++)
		if (isdigit((unsigned char)*s) && (s == line || !isdigit((unsigned char)s[-1])) &&
		    (s == line || s[-1] != '.'))
			last = s;
	if (!last)
		return false;
	*v = strtod(last, NULL);
	return true;
}

/*
 * Pair the rate lines of the two outputs: the i-th line of a shape in one
 * with the i-th of the same shape in the other. Returns how many, in @m.
 */
static size_t pair_rates(const struct lines *a, const struct lines *b, struct metric *m,
			 size_t max)
{
	size_t n = 0;
	bool *used = calloc(b->n + 1, sizeof(*used));

	if (!used)
		return 0;
	for (size_t i = 0; i < a->n && n < max; i++) {
		char sa[SHAPE_MAX], sb[SHAPE_MAX];
		double va, vb;

		if (!shape_of(a->v[i], sa, sizeof(sa)) || !rate_of(a->v[i], &va))
			continue;
		for (size_t j = 0; j < b->n; j++) {
			if (used[j] || !shape_of(b->v[j], sb, sizeof(sb)) || strcmp(sa, sb) ||
			    !rate_of(b->v[j], &vb))
				continue;
			used[j] = true;
			snprintf(m[n].shape, sizeof(m[n].shape), "%s", sa);
			m[n].plain = va;
			m[n].shunt = vb;
			n++;
			break;
		}
	}
	free(used);
	return n;
}

/* @argv as a shell would take it back: words with other characters in quotes. */
static void argv_text(char *buf, size_t n, char **argv)
{
	static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
				    "0123456789_./:=@%+,-";
	size_t k = 0;

	buf[0] = 0;
	for (; *argv && k + 1 < n; argv++) {
		bool quote = !**argv || strspn(*argv, plain) != strlen(*argv);

		k += (size_t)snprintf(buf + k, n - k, "%s%s%s%s", k ? " " : "", quote ? "'" : "",
				      *argv, quote ? "'" : "");
		if (k >= n)
			break;
	}
}

void shunt_compare_print(const struct compare_opts *o, const struct compare_pass p[2], int width)
{
	struct lines out[2];
	struct metric m[64];
	size_t half = width > 63 ? (size_t)(width - 3) / 2 : 30, n, nm;
	char a[1024], b[1024], line[600];

	for (int i = 0; i < 2; i++)
		split(p[i].output, p[i].output_len, &out[i]);
	argv_text(line, sizeof(line), o->server);
	printf("server: %s\n", line);
	argv_text(line, sizeof(line), o->client);
	printf("client: %s\n\n", line);
	both(half, "plain (kernel TCP)", "under shunt run");
	for (size_t i = 0; i < half; i++)
		putchar('-');
	printf("-+-");
	for (size_t i = 0; i < half; i++)
		putchar('-');
	putchar('\n');
	n = out[0].n > out[1].n ? out[0].n : out[1].n;
	for (size_t i = 0; i < n; i++)
		both(half, i < out[0].n ? out[0].v[i] : "", i < out[1].n ? out[1].v[i] : "");
	for (size_t i = 0; i < 2 * half + 3; i++)
		putchar('-');
	putchar('\n');

	for (int i = 0; i < 2; i++) {
		status_text(line, sizeof(line), &p[i]);
		snprintf(i ? b : a, sizeof(a), "client: %s", line);
	}
	both(half, a, b);
	snprintf(a, sizeof(a), "time: %.3f s", p[0].seconds);
	if (p[0].ran && p[1].ran && p[1].seconds > 0)
		snprintf(b, sizeof(b), "time: %.3f s (%.2fx)", p[1].seconds,
			 p[0].seconds / p[1].seconds);
	else
		snprintf(b, sizeof(b), "time: %.3f s", p[1].seconds);
	both(half, a, b);
	for (int i = 0; i < 2; i++) {
		const struct compare_counters *c = &p[i].client;
		char tx[32], rx[32];

		human_bytes(tx, sizeof(tx), c->shm_tx_bytes);
		human_bytes(rx, sizeof(rx), c->shm_rx_bytes);
		if (!p[i].shunt)
			snprintf(a, sizeof(a), "shared memory: none (kernel TCP)");
		else
			snprintf(b, sizeof(b), "shared memory: %" PRIu64 " of %" PRIu64
				 " connections, %s sent, %s received", c->shm_connect,
				 c->shm_connect + c->kernel_connect, tx, rx);
	}
	both(half, a, b);

	nm = pair_rates(&out[0], &out[1], m, 64);
	if (nm) {
		printf("\nthroughput, as the client reports it (plain -> shunt):\n");
		for (size_t i = 0; i < nm; i++)
			printf("  %-*.*s %14.2f -> %14.2f  %6.2fx\n", 40, 40, m[i].shape, m[i].plain,
			       m[i].shunt, m[i].plain > 0 ? m[i].shunt / m[i].plain : NAN);
	}
	for (int i = 0; i < 2; i++) {
		if (p[i].ran && !p[i].timed_out && WIFEXITED(p[i].status) && !WEXITSTATUS(p[i].status))
			continue;
		if (p[i].server_log_len)
			printf("\nthe server's output (%s pass), last 2000 bytes:\n%s\n",
			       p[i].shunt ? "shunt" : "plain",
			       p[i].server_log + (p[i].server_log_len > 2000 ?
						  p[i].server_log_len - 2000 : 0));
	}
	lines_free(&out[0]);
	lines_free(&out[1]);
}

/* ---- JSON */

/* @s as a JSON string; bytes that are not UTF-8 become U+FFFD. */
static void json_string(FILE *f, const char *s, size_t len)
{
	fputc('"', f);
	for (size_t i = 0; i < len;) {
		unsigned char c = (unsigned char)s[i];
		size_t need = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 :
			      (c & 0xf8) == 0xf0 ? 3 : 4;
		bool ok = need < 4 && i + need < len && !(need == 1 && c < 0xc2);

		for (size_t k = 1; ok && k <= need; k++)
			ok = ((unsigned char)s[i + k] & 0xc0) == 0x80;
		if (!ok) {
			fputs("\\ufffd", f);
			i++;
			continue;
		}
		if (need) {
			fwrite(s + i, 1, need + 1, f);
			i += need + 1;
			continue;
		}
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c == '\n')
			fputs("\\n", f);
		else if (c == '\r')
			fputs("\\r", f);
		else if (c == '\t')
			fputs("\\t", f);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
		i++;
	}
	fputc('"', f);
}

static void json_argv(FILE *f, char **argv)
{
	fputc('[', f);
	for (size_t i = 0; argv[i]; i++) {
		if (i)
			fputs(", ", f);
		json_string(f, argv[i], strlen(argv[i]));
	}
	fputc(']', f);
}

static void json_counters(FILE *f, const struct compare_counters *c)
{
	fprintf(f, "{\"processes\": %u, \"shm_connect\": %" PRIu64 ", \"shm_accept\": %" PRIu64
		", \"kernel_connect\": %" PRIu64 ", \"kernel_accept\": %" PRIu64
		", \"shm_tx_bytes\": %" PRIu64 ", \"shm_rx_bytes\": %" PRIu64 "}",
		c->processes, c->shm_connect, c->shm_accept, c->kernel_connect, c->kernel_accept,
		c->shm_tx_bytes, c->shm_rx_bytes);
}

static void json_pass(FILE *f, const struct compare_pass *p)
{
	fprintf(f, "{\"ran\": %s, ", p->ran ? "true" : "false");
	if (p->ran && !p->timed_out && WIFEXITED(p->status))
		fprintf(f, "\"exit\": %d, \"signal\": null, ", WEXITSTATUS(p->status));
	else if (p->ran)
		fprintf(f, "\"exit\": null, \"signal\": %d, ", WTERMSIG(p->status));
	else
		fprintf(f, "\"exit\": null, \"signal\": null, ");
	fputs("\"error\": ", f);
	if (p->why[0])
		json_string(f, p->why, strlen(p->why));
	else
		fputs("null", f);
	fprintf(f, ", \"seconds\": %.6f, \"shm_bytes\": %" PRIu64 ",\n     \"client\": ",
		p->seconds, p->client.shm_tx_bytes + p->client.shm_rx_bytes);
	json_counters(f, &p->client);
	fputs(",\n     \"server\": ", f);
	json_counters(f, &p->server);
	fputs(",\n     \"output\": ", f);
	json_string(f, p->output, p->output_len);
	fputc('}', f);
}

void shunt_compare_json(FILE *f, const struct compare_opts *o, const struct compare_pass p[2])
{
	struct lines out[2];
	struct metric m[64];
	size_t nm;

	for (int i = 0; i < 2; i++)
		split(p[i].output, p[i].output_len, &out[i]);
	nm = pair_rates(&out[0], &out[1], m, 64);
	fputs("{\"server\": ", f);
	json_argv(f, o->server);
	fputs(",\n \"client\": ", f);
	json_argv(f, o->client);
	fputs(",\n \"plain\": ", f);
	json_pass(f, &p[0]);
	fputs(",\n \"shunt\": ", f);
	json_pass(f, &p[1]);
	fputs(",\n \"throughput\": [", f);
	for (size_t i = 0; i < nm; i++) {
		fprintf(f, "%s\n   {\"line\": ", i ? "," : "");
		json_string(f, m[i].shape, strlen(m[i].shape));
		fprintf(f, ", \"plain\": %.17g, \"shunt\": %.17g}", m[i].plain, m[i].shunt);
	}
	fputs("]}\n", f);
	lines_free(&out[0]);
	lines_free(&out[1]);
}
