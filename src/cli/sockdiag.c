// SPDX-License-Identifier: MIT
/* Kernel TCP sockets of this network namespace, from NETLINK_SOCK_DIAG. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "cli/sockdiag.h"

static void to_wire(int family, const __be32 *addr, __be16 port, struct shunt_wire_addr *w)
{
	memset(w, 0, sizeof(*w));
	w->family = (uint16_t)family;
	w->port = ntohs(port);
	memcpy(w->addr, addr, family == AF_INET ? 4 : 16);
}

static int dump_family(int nl, int family, struct tcp_entry **out, size_t *n, size_t *cap)
{
	struct {
		struct nlmsghdr nh;
		struct inet_diag_req_v2 req;
	} q = {
		.nh = { .nlmsg_len = sizeof(q), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP },
		.req = { .sdiag_family = (uint8_t)family, .sdiag_protocol = IPPROTO_TCP,
			 .idiag_states = ~0u, .idiag_ext = 1 << (INET_DIAG_INFO - 1) },
	};
	static char buf[65536];

	if (send(nl, &q, sizeof(q), 0) < 0)
		return -errno;
	for (;;) {
		ssize_t len = recv(nl, buf, sizeof(buf), 0);

		if (len < 0)
			return -errno;
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)len);
		     h = NLMSG_NEXT(h, len)) {
			if (h->nlmsg_type == NLMSG_DONE)
				return 0;
			if (h->nlmsg_type == NLMSG_ERROR)
				return -EPROTO;
			struct inet_diag_msg *m = NLMSG_DATA(h);
			struct tcp_entry e = { .inode = m->idiag_inode, .state = m->idiag_state };
			int rtalen = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));

			to_wire(m->idiag_family, m->id.idiag_src, m->id.idiag_sport, &e.local);
			to_wire(m->idiag_family, m->id.idiag_dst, m->id.idiag_dport, &e.remote);
			for (struct rtattr *a = (struct rtattr *)(m + 1); RTA_OK(a, rtalen);
			     a = RTA_NEXT(a, rtalen)) {
				struct tcp_info ti;

				if (a->rta_type != INET_DIAG_INFO)
					continue;
				memset(&ti, 0, sizeof(ti));
				size_t alen = (size_t)RTA_PAYLOAD(a);

				memcpy(&ti, RTA_DATA(a), alen < sizeof(ti) ? alen : sizeof(ti));
				e.bytes_sent = ti.tcpi_bytes_sent;
				e.bytes_received = ti.tcpi_bytes_received;
			}
			if (*n == *cap) {
				size_t nc = *cap ? *cap * 2 : 64;
				struct tcp_entry *p = realloc(*out, nc * sizeof(*p));

				if (!p)
					return -ENOMEM;
				*out = p;
				*cap = nc;
			}
			(*out)[(*n)++] = e;
		}
	}
}

int shunt_sockdiag_tcp(struct tcp_entry **out, size_t *n)
{
	size_t cap = 0;
	int nl, r;

	*out = NULL;
	*n = 0;
	nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (nl < 0)
		return -errno;
	r = dump_family(nl, AF_INET, out, n, &cap);
	if (r == 0)
		r = dump_family(nl, AF_INET6, out, n, &cap);
	close(nl);
	if (r < 0) {
		free(*out);
		*out = NULL;
		*n = 0;
	}
	return r;
}
