// SPDX-License-Identifier: MIT
// Both ways through every read and write entry point, between two raw
// write(-1) markers; with T_FD_FILE it records its socket fds and thread ids so
// the driver can check under strace that no read/write syscall touched them.
// shunt-expect: shm_connect>=1 shm_accept>=1 kernel_connect==0 kernel_accept==0
// shunt-expect: shm_tx_bytes>=32M shm_rx_bytes>=32M
#include "t_harness.h"

#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

enum {
	XFER = 16 << 20,
	PIECE_MAX = 32 << 10,
	SEED_UP = 0x57ace1,
	SEED_DOWN = 0x57ace2,
	VARIANTS = 8,
};

struct flow {
	int fd;
	uint64_t seed, done;
	int64_t bad;
	pthread_barrier_t *parked;
};

// One write of up to n bytes, by call variant v. Returns bytes written.
static ssize_t put(int fd, const unsigned char *p, size_t n, unsigned v)
{
	struct iovec iov[2] = { { (void *)p, n / 2 }, { (void *)(p + n / 2), n - n / 2 } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	struct mmsghdr mm = { .msg_hdr = mh };

	switch (v % VARIANTS) {
	case 0: return send(fd, p, n, 0);
	case 1: return write(fd, p, n);
	case 2: return writev(fd, iov, 2);
	case 3: return sendmsg(fd, &mh, 0);
	case 4: return sendto(fd, p, n, 0, NULL, 0);
	case 5: return sendmmsg(fd, &mm, 1, 0) == 1 ? (ssize_t)mm.msg_len : -1;
	case 6: return send(fd, p, n, MSG_NOSIGNAL);
	default: return send(fd, p, n, MSG_DONTWAIT);
	}
}

static void put_all(int fd, const unsigned char *p, size_t n, unsigned v)
{
	while (n) {
		ssize_t w = put(fd, p, n, v);

		if (w < 0 && errno == EAGAIN) { // the MSG_DONTWAIT variant
			t_poll1(fd, POLLOUT, 1000);
			continue;
		}
		if (w <= 0)
			t_fatal("write variant %u", v % VARIANTS);
		p += w;
		n -= (size_t)w;
	}
}

static ssize_t get(int fd, unsigned char *p, size_t n, unsigned v)
{
	struct iovec iov[2] = { { p, n / 2 + 1 }, { p + n / 2 + 1, n - n / 2 - 1 } };
	struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 2 };
	struct mmsghdr mm = { .msg_hdr = mh };

	switch (v % VARIANTS) {
	case 0: return recv(fd, p, n, 0);
	case 1: return read(fd, p, n);
	case 2: return readv(fd, iov, 2);
	case 3: return recvmsg(fd, &mh, 0);
	case 4: return recvfrom(fd, p, n, 0, NULL, NULL);
	case 5: return recvmmsg(fd, &mm, 1, 0, NULL) == 1 ? (ssize_t)mm.msg_len : -1;
	case 6: return recv(fd, p, n, MSG_WAITALL);
	default: {
		ssize_t r = recv(fd, p, n, MSG_PEEK);

		return r <= 0 ? r : recv(fd, p, (size_t)r, 0);
	}
	}
}

static void *writer(void *arg)
{
	struct flow *f = arg;
	unsigned char *buf = malloc(PIECE_MAX);
	uint64_t rnd = f->seed;
	unsigned v = 0;

	if (!buf)
		t_fatal("malloc");
	while (f->done < XFER) {
		size_t n = 1 + t_rand(&rnd) % PIECE_MAX;

		if (n > XFER - f->done)
			n = XFER - f->done;
		t_stream_fill(f->seed, f->done, buf, n);
		put_all(f->fd, buf, n, v++);
		f->done += n;
	}
	free(buf);
	pthread_barrier_wait(f->parked);
	pthread_barrier_wait(f->parked);
	return NULL;
}

static void *reader(void *arg)
{
	struct flow *f = arg;
	unsigned char *buf = malloc(PIECE_MAX);
	uint64_t rnd = f->seed * 3;
	unsigned v = 0;

	if (!buf)
		t_fatal("malloc");
	f->bad = -1;
	while (f->done < XFER) {
		size_t n = 2 + t_rand(&rnd) % PIECE_MAX;
		ssize_t r;

		if (n > XFER - f->done)
			n = XFER - f->done;
		r = get(f->fd, buf, n, v++);
		if (r <= 0)
			t_fatal("read variant %u at %llu", (v - 1) % VARIANTS,
				(unsigned long long)f->done);
		if (f->bad < 0)
			f->bad = t_stream_check(f->seed, f->done, buf, (size_t)r);
		f->done += (uint64_t)r;
	}
	free(buf);
	pthread_barrier_wait(f->parked);
	pthread_barrier_wait(f->parked);
	return NULL;
}

// Marker visible to strace whatever the library intercepts.
static void marker(const char *text)
{
	syscall(SYS_write, -1, text, strlen(text));
}

// Write "fds C S" and "tids ..." (every thread of this process) to path.
static void record(const char *path, int c, int s)
{
	FILE *f = fopen(path, "w");
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;

	if (!f || !d)
		t_fatal("record %s", path);
	fprintf(f, "fds %d %d\ntids", c, s);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			fprintf(f, " %s", e->d_name);
	fprintf(f, "\n");
	closedir(d);
	fclose(f);
}

int main(void)
{
	const char *fd_file = getenv("T_FD_FILE");
	pthread_barrier_t parked;
	struct flow f[4];
	pthread_t th[4];
	int c, s, i;

	t_start(60);
	t_pair(AF_INET, &c, &s);
	if (pthread_barrier_init(&parked, NULL, 5))
		t_fatal("pthread_barrier_init");
	f[0] = (struct flow){ .fd = c, .seed = SEED_UP, .parked = &parked };
	f[1] = (struct flow){ .fd = s, .seed = SEED_UP, .parked = &parked };
	f[2] = (struct flow){ .fd = s, .seed = SEED_DOWN, .parked = &parked };
	f[3] = (struct flow){ .fd = c, .seed = SEED_DOWN, .parked = &parked };
	marker("SHUNT-T-BEGIN");
	for (i = 0; i < 4; i++)
		if (pthread_create(&th[i], NULL, i % 2 ? reader : writer, &f[i]))
			t_fatal("pthread_create");
	pthread_barrier_wait(&parked);
	marker("SHUNT-T-END");
	if (fd_file)
		record(fd_file, c, s);
	pthread_barrier_wait(&parked);
	for (i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	printf("%d MiB each way through %d call variants\n", XFER >> 20, VARIANTS);
	t_expect(f[1].done == XFER && f[1].bad < 0, "client -> server intact");
	t_expect(f[3].done == XFER && f[3].bad < 0, "server -> client intact");
	close(c);
	close(s);
	return t_finish();
}
