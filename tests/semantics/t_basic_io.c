// SPDX-License-Identifier: MIT
// Blocking data exchange on a connected pair: partial reads, every read and
// write entry point (read/write/readv/writev/send*/recv*, *mmsg, sendfile,
// splice) and an 8 MiB checksummed transfer.
// shunt-expect: shm_connect>=2 shm_accept>=2 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=8M shm_rx_bytes>=8M
#include "t_harness.h"

#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/uio.h>
#include <unistd.h>

enum {
	BIG_SIZE = 8 << 20,
	BIG_SEED = 0x1234,
	CHUNK_MAX = 65536,
};

struct big_writer {
	int fd;
	uint64_t hash;
};

// Writes BIG_SIZE bytes of the stream in chunks of 1..64 KiB.
static void *big_write(void *arg)
{
	struct big_writer *w = arg;
	static unsigned char buf[CHUNK_MAX];
	uint64_t off = 0, rnd = 7;

	w->hash = T_FNV_OFFSET;
	while (off < BIG_SIZE) {
		size_t n = 1 + t_rand(&rnd) % CHUNK_MAX;

		if (n > BIG_SIZE - off)
			n = BIG_SIZE - off;
		t_stream_fill(BIG_SEED, off, buf, n);
		w->hash = t_fnv1a(w->hash, buf, n);
		t_send_all(w->fd, buf, n);
		off += n;
	}
	return NULL;
}

static void small_exchange(int c, int s)
{
	char buf[128];

	// send/recv, write/read
	T_REPORT("send(c, \"hello\")", send(c, "hello", 5, 0));
	t_wait_inq(s, 5);
	T_REPORT_DATA("recv(s, 64)", recv(s, buf, 64, 0), buf);
	T_REPORT("write(s, \"world!\")", write(s, "world!", 6));
	t_wait_inq(c, 6);
	T_REPORT_DATA("read(c, 64)", read(c, buf, 64), buf);

	// Partial reads: recv smaller than what is queued.
	T_REPORT("send(c, \"0123456789\")", send(c, "0123456789", 10, 0));
	t_wait_inq(s, 10);
	T_REPORT_DATA("recv(s, 3)", recv(s, buf, 3, 0), buf);
	T_REPORT_DATA("read(s, 4)", read(s, buf, 4), buf);
	T_REPORT_DATA("recv(s, 100)", recv(s, buf, 100, 0), buf);

	// Two sends are read back by one recv once both have arrived.
	T_REPORT("send(c, \"ab\")", send(c, "ab", 2, 0));
	T_REPORT("send(c, \"cd\")", send(c, "cd", 2, 0));
	t_wait_inq(s, 4);
	T_REPORT_DATA("recv(s, 100) after two sends", recv(s, buf, 100, 0), buf);

	// Zero-length transfers.
	T_REPORT("send(c, len 0)", send(c, buf, 0, 0));
	T_REPORT("write(c, len 0)", write(c, buf, 0));
	T_REPORT("send(c, \"z\")", send(c, "z", 1, 0));
	t_wait_inq(s, 1);
	T_REPORT("recv(s, len 0) with data queued", recv(s, buf, 0, 0));
	T_REPORT("read(s, len 0) with data queued", read(s, buf, 0));
	T_REPORT_DATA("recv(s, 100)", recv(s, buf, 100, 0), buf);
}

static void vector_io(int c, int s)
{
	char a[4], b[16], buf[128];
	struct iovec wv[3] = {
		{ .iov_base = "ab", .iov_len = 2 },
		{ .iov_base = "cde", .iov_len = 3 },
		{ .iov_base = "f", .iov_len = 1 },
	};
	struct iovec rv[2] = {
		{ .iov_base = a, .iov_len = 2 },
		{ .iov_base = b, .iov_len = sizeof(b) },
	};
	struct msghdr mh;
	struct sockaddr_storage from;
	long r;

	T_REPORT("writev(c, 2+3+1)", writev(c, wv, 3));
	t_wait_inq(s, 6);
	r = T_REPORT("readv(s, 2+16)", readv(s, rv, 2));
	if (r == 6)
		printf("readv data: \"%.2s\" \"%.4s\"\n", a, b);

	// sendmsg with two iovecs and no address.
	memset(&mh, 0, sizeof(mh));
	mh.msg_iov = wv + 1;
	mh.msg_iovlen = 2;
	T_REPORT("sendmsg(s, 3+1)", sendmsg(s, &mh, 0));
	t_wait_inq(c, 4);
	// recvmsg with room for an address: TCP reports none.
	memset(&mh, 0, sizeof(mh));
	memset(&from, 0xa5, sizeof(from));
	mh.msg_name = &from;
	mh.msg_namelen = sizeof(from);
	rv[0].iov_len = 1;
	mh.msg_iov = rv;
	mh.msg_iovlen = 2;
	r = T_REPORT("recvmsg(c, 1+16)", recvmsg(c, &mh, 0));
	if (r == 4)
		printf("recvmsg data: \"%.1s\" \"%.3s\"\n", a, b);
	printf("recvmsg msg_namelen = %u\n", (unsigned)mh.msg_namelen);
	printf("recvmsg msg_flags = %#x\n", (unsigned)mh.msg_flags);
	printf("recvmsg msg_controllen = %zu\n", (size_t)mh.msg_controllen);

	// sendto/recvfrom without and with an address.
	T_REPORT("sendto(c, \"xyz\", NULL)", sendto(c, "xyz", 3, 0, NULL, 0));
	{
		struct t_addr other;

		t_addr_make(&other, "127.0.0.1", 9);
		T_REPORT("sendto(c, \"uv\", 127.0.0.1:9)",
			 sendto(c, "uv", 2, 0, (struct sockaddr *)&other.ss,
				other.len));
	}
	t_wait_inq(s, 5);
	{
		socklen_t flen = sizeof(from);

		T_REPORT_DATA("recvfrom(s, 100, &from)",
			      recvfrom(s, buf, 100, 0, (struct sockaddr *)&from,
				       &flen),
			      buf);
		printf("recvfrom addrlen = %u\n", (unsigned)flen);
	}
	T_REPORT("sendto(s, \"q\", NULL)", sendto(s, "q", 1, 0, NULL, 0));
	t_wait_inq(c, 1);
	T_REPORT_DATA("recvfrom(c, 100, NULL)",
		      recvfrom(c, buf, 100, 0, NULL, NULL), buf);
}

static void mmsg_io(int c, int s)
{
	struct mmsghdr mm[3];
	struct iovec iov[3];
	char rb[3][5];
	static const char *parts[3] = { "one", "four", "seven" };
	int i;
	long r;

	memset(mm, 0, sizeof(mm));
	for (i = 0; i < 3; i++) {
		iov[i].iov_base = (void *)parts[i];
		iov[i].iov_len = strlen(parts[i]);
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
	}
	r = T_REPORT("sendmmsg(c, 3)", sendmmsg(c, mm, 3, 0));
	for (i = 0; i < r; i++)
		printf("sendmmsg msg_len[%d] = %u\n", i, mm[i].msg_len);
	t_wait_inq(s, 12);

	// 12 bytes queued, three 5-byte buffers: a stream fills them in turn.
	memset(mm, 0, sizeof(mm));
	for (i = 0; i < 3; i++) {
		iov[i].iov_base = rb[i];
		iov[i].iov_len = sizeof(rb[i]);
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
	}
	r = T_REPORT("recvmmsg(s, 3 x 5 bytes)", recvmmsg(s, mm, 3, 0, NULL));
	for (i = 0; i < r; i++)
		printf("recvmmsg[%d] len = %u \"%.*s\"\n", i, mm[i].msg_len,
		       (int)mm[i].msg_len, rb[i]);

	// Fewer bytes than buffers: MSG_WAITFORONE returns what is there.
	T_REPORT("send(c, \"abcdefg\")", send(c, "abcdefg", 7, 0));
	t_wait_inq(s, 7);
	memset(mm, 0, sizeof(mm));
	for (i = 0; i < 3; i++) {
		mm[i].msg_hdr.msg_iov = &iov[i];
		mm[i].msg_hdr.msg_iovlen = 1;
	}
	r = T_REPORT("recvmmsg(s, 3 x 5, MSG_WAITFORONE)",
		     recvmmsg(s, mm, 3, MSG_WAITFORONE, NULL));
	for (i = 0; i < r; i++)
		printf("recvmmsg[%d] len = %u \"%.*s\"\n", i, mm[i].msg_len,
		       (int)mm[i].msg_len, rb[i]);
	T_REPORT("recvmmsg(s, MSG_DONTWAIT) on empty",
		 recvmmsg(s, mm, 3, MSG_DONTWAIT, NULL));
}

// Kernel-side copies into and out of a socket: sendfile and splice.
static void file_and_pipe(int c, int s)
{
	char buf[64];
	off_t off = 2;
	int p[2], mfd;

	mfd = memfd_create("t_basic_io", MFD_CLOEXEC);
	if (mfd < 0 || write(mfd, "..from a file", 13) != 13 || pipe(p) < 0)
		t_fatal("memfd/pipe");
	T_REPORT("sendfile(c, memfd, offset 2, 11)", sendfile(c, mfd, &off, 11));
	printf("sendfile offset after = %lld\n", (long long)off);
	t_wait_inq(s, 11);
	T_REPORT_DATA("recv(s, 64)", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("lseek(memfd, 0)", lseek(mfd, 0, SEEK_SET));
	T_REPORT("sendfile(c, memfd, NULL, 100)", sendfile(c, mfd, NULL, 100));
	t_wait_inq(s, 13);
	T_REPORT_DATA("recv(s, 64)", recv(s, buf, sizeof(buf), 0), buf);

	if (write(p[1], "piped", 5) != 5)
		t_fatal("write(pipe)");
	T_REPORT("splice(pipe -> c, 5)", splice(p[0], NULL, c, NULL, 5, 0));
	t_wait_inq(s, 5);
	T_REPORT_DATA("recv(s, 64)", recv(s, buf, sizeof(buf), 0), buf);
	T_REPORT("send(s, \"spliced back\")", send(s, "spliced back", 12, 0));
	t_wait_inq(c, 12);
	T_REPORT("splice(c -> pipe, 64)", splice(c, NULL, p[1], NULL, 64, 0));
	T_REPORT_DATA("read(pipe, 64)", read(p[0], buf, sizeof(buf)), buf);
	// SPLICE_F_NONBLOCK concerns the pipe; an empty blocking socket would
	// still block (on 6.x), so make the socket non-blocking to probe it.
	t_set_nonblock(c, true);
	T_REPORT("splice(non-blocking c -> pipe) on empty",
		 splice(c, NULL, p[1], NULL, 64, 0));
	t_set_nonblock(c, false);
	close(p[0]);
	close(p[1]);
	close(mfd);
}

static void big_transfer(void)
{
	static unsigned char buf[CHUNK_MAX];
	struct big_writer w;
	pthread_t th;
	uint64_t got = 0, hash = T_FNV_OFFSET, rnd = 99;
	int64_t bad = -1;
	int c, s;

	t_pair(AF_INET, &c, &s);
	w.fd = c;
	if (pthread_create(&th, NULL, big_write, &w))
		t_fatal("pthread_create");
	while (got < BIG_SIZE) {
		// Read sizes vary too, independently of the write sizes.
		size_t want = 1 + t_rand(&rnd) % CHUNK_MAX;
		ssize_t r = recv(s, buf, want, 0);

		if (r <= 0)
			t_fatal("recv at %llu", (unsigned long long)got);
		if (bad < 0)
			bad = t_stream_check(BIG_SEED, got, buf, (size_t)r);
		hash = t_fnv1a(hash, buf, (size_t)r);
		got += (uint64_t)r;
	}
	pthread_join(th, NULL);
	close(c);
	T_REPORT("recv(s) after 8 MiB and close", recv(s, buf, 1, 0));
	close(s);
	t_expect(got == BIG_SIZE, "8 MiB: received %llu bytes",
		 (unsigned long long)got);
	t_expect(bad < 0, "8 MiB: content matches the stream (first bad %lld)",
		 (long long)bad);
	t_expect(hash == w.hash, "8 MiB: fnv1a %016llx, sender %016llx",
		 (unsigned long long)hash, (unsigned long long)w.hash);
}

int main(void)
{
	int c, s;

	t_start(30);
	t_pair(AF_INET, &c, &s);
	small_exchange(c, s);
	vector_io(c, s);
	mmsg_io(c, s);
	file_and_pipe(c, s);
	close(c);
	close(s);
	big_transfer();
	return t_finish();
}
