// SPDX-License-Identifier: MIT
// Helpers shared by the differential semantic tests: each program prints a
// deterministic trace that must be byte-identical plain and under `shunt run`.
#ifndef T_HARNESS_H
#define T_HARNESS_H

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>

// Exit statuses, as in liburing's test/.
enum t_exit {
	T_PASS = 0,
	T_FAIL = 1,
	T_SKIP = 77,
};

// errno is set to this before every reported call, so that a wrapper that
// writes errno on success shows up in the trace (the kernel path never does).
enum { T_ERRNO_SENTINEL = 9999 };

enum {
	T_WAIT_MS = 5000, // upper bound for "the data should be there by now"
};

// An address together with its length, as returned by getsockname & co.
struct t_addr {
	struct sockaddr_storage ss;
	socklen_t len;
};

// Process setup: stdout line buffered (so fork and _exit lose nothing and
// never duplicate a line), SIGALRM watchdog armed for `watchdog_s` seconds.
void t_start(unsigned watchdog_s);
// (Re)arm the watchdog: when it fires the program prints FATAL and exits 1.
void t_watchdog(unsigned seconds);
// Raise the soft RLIMIT_NOFILE to at least `n` (within the hard limit, as
// any user may), for programs that use descriptor numbers that high; skip if
// the hard limit is lower. Ordinary users start at 1024.
void t_nofile_at_least(unsigned long n);
// Set RLIMIT_NOFILE's soft and hard limits both to `n` (as `ulimit -n n`
// does), printing the call; skip if the hard limit is lower. The limits
// before go in *old.
void t_nofile_exactly(unsigned long n, struct rlimit *old);
// Open /dev/null into @fds (room for @cap) until the descriptor limit, and
// print "filled up: <errno>"; returns how many were opened.
int t_fill_up(int *fds, int cap);
// T_PASS, or T_FAIL if any t_expect() failed. Call as `return t_finish();`.
int t_finish(void);
// Print "FATAL: <msg>[: ERRNAME]" (the name of errno, if nonzero) on stdout
// and stderr, exit T_FAIL.
__attribute__((noreturn, format(printf, 1, 2))) void t_fatal(const char *fmt, ...);
// Say why on stderr, exit T_SKIP.
__attribute__((noreturn, format(printf, 1, 2))) void t_skip(const char *fmt, ...);
// Print a property: the text when `ok`, "FAIL: <text>" (and remember the
// failure) otherwise. Returns ok.
__attribute__((format(printf, 2, 3))) bool t_expect(bool ok, const char *fmt, ...);

// "EAGAIN" for EAGAIN; never NULL.
const char *t_errname(int err);
// Print "<label> = <ret>" or "<label> = -1 <ERRNAME>"; `err` is errno as
// captured right after the call. A success that changed errno is flagged.
void t_report(const char *label, long ret, int err);

// Evaluate `expr` (a call returning -1/errno on failure), print it with
// t_report, and yield its value.
#define T_REPORT(label, expr)                                                 \
	({                                                                    \
		errno = T_ERRNO_SENTINEL;                                     \
		long t_ret_ = (long)(expr);                                   \
		int t_err_ = errno;                                           \
		t_report((label), t_ret_, t_err_);                            \
		errno = t_err_;                                               \
		t_ret_;                                                       \
	})

// For calls returning a new fd: prints "<label> = fd" on success, since fd
// numbers may legitimately differ (the library may hold descriptors).
void t_report_fd(const char *label, long ret, int err);
#define T_REPORT_FD(label, expr)                                              \
	({                                                                    \
		errno = T_ERRNO_SENTINEL;                                     \
		long t_ret_ = (long)(expr);                                   \
		int t_err_ = errno;                                           \
		t_report_fd((label), t_ret_, t_err_);                         \
		errno = t_err_;                                               \
		t_ret_;                                                       \
	})

// Like t_report, and on success also the `ret` bytes of buf as text:
// "<label> = <n> "<text>"". For reads of short ASCII messages.
void t_report_data(const char *label, long ret, int err, const void *buf);
#define T_REPORT_DATA(label, expr, buf)                                       \
	({                                                                    \
		errno = T_ERRNO_SENTINEL;                                     \
		long t_ret_ = (long)(expr);                                   \
		int t_err_ = errno;                                           \
		t_report_data((label), t_ret_, t_err_, (buf));                \
		errno = t_err_;                                               \
		t_ret_;                                                       \
	})

// Sockets. All of these are fatal on failure: they set the scene, the
// calls under test are made directly by the programs.
int t_socket(int family, int type);
// Fill `a` with ip:port; ip is a numeric IPv4 or IPv6 literal.
void t_addr_make(struct t_addr *a, const char *ip, uint16_t port);
uint16_t t_addr_port(const struct t_addr *a);
// Numeric host part without the port, e.g. "127.0.0.1" or "::ffff:127.0.0.1".
const char *t_addr_host(const struct t_addr *a, char *buf, size_t size);
// Same family, address and port (and scope id for IPv6).
bool t_addr_eq(const struct t_addr *a, const struct t_addr *b);
struct t_addr t_sockname(int fd);
struct t_addr t_peername(int fd);
// Bind to ip:0 and listen; `bound` (may be NULL) gets the address from
// getsockname, port included.
int t_listen_on(int family, const char *ip, int backlog, struct t_addr *bound);
// Listener on 127.0.0.1 or ::1, port 0.
int t_listen_loopback(int family, int backlog, struct t_addr *bound);
// New blocking socket connected to `to`.
int t_connect(const struct t_addr *to);
int t_accept(int lfd);
// A connected pair over loopback: client end, server (accepted) end.
void t_pair(int family, int *client, int *server);

void t_set_nonblock(int fd, bool on);
bool t_is_nonblock(int fd);
// poll() one fd; returns revents, 0 on timeout.
short t_poll1(int fd, short events, int timeout_ms);
// "POLLIN|POLLOUT", "0" for none; static buffer, not thread safe.
const char *t_poll_str(short revents);
// Wait until FIONREAD on fd reports at least n bytes (fatal after T_WAIT_MS).
void t_wait_inq(int fd, int n);
// Wait until poll reports any of `events` (fatal after T_WAIT_MS).
short t_wait_event(int fd, short events);

void t_send_all(int fd, const void *buf, size_t n);
// Read exactly n bytes; fatal on EOF or error.
void t_recv_all(int fd, void *buf, size_t n);

// Time.
int64_t t_now_ns(void);
void t_sleep_ms(unsigned ms);
// elapsed in ms since `start_ns`.
int64_t t_elapsed_ms(int64_t start_ns);

// Signals: count SIGPIPE deliveries with a handler.
void t_count_sigpipe(void);
int t_sigpipes(void);

// One-way pipe channel for sequencing threads or forked processes.
struct t_chan {
	int rd, wr;
};
void t_chan_open(struct t_chan *c);
void t_chan_put(struct t_chan *c, uint32_t v);
uint32_t t_chan_get(struct t_chan *c);
// Fork; fatal on failure.
pid_t t_fork(void);
// Wait for a child and return its exit status (or 128+signal).
int t_wait_child(pid_t pid);

// Deterministic data. t_stream_* address a pseudo-random byte stream by
// absolute offset, so any chunking of it can be produced and checked.
uint64_t t_mix64(uint64_t x);
uint64_t t_rand(uint64_t *state);
void t_stream_fill(uint64_t seed, uint64_t off, void *buf, size_t n);
// -1 if buf equals the stream at `off`, else the stream offset of the first
// differing byte.
int64_t t_stream_check(uint64_t seed, uint64_t off, const void *buf, size_t n);
// FNV-1a, 64 bit; start with T_FNV_OFFSET.
#define T_FNV_OFFSET 0xcbf29ce484222325ULL
uint64_t t_fnv1a(uint64_t h, const void *buf, size_t n);

// Unsigned number from the environment, with optional K/M/G suffix.
uint64_t t_env_u64(const char *name, uint64_t dflt);

// Event interfaces (the t_ev_* programs).
struct epoll_event;
// "EPOLLIN|EPOLLRDHUP", "0" for none; per-thread buffer, valid until the
// calling thread's next call.
const char *t_epoll_str(uint32_t events);
// select() on one fd for reading, writing and exceptions, waiting up to
// timeout_ms (-1: forever): "rwx" with '-' for a set the fd is not in, e.g.
// "-w-", or "-1 EBADF" when select fails. Per-thread buffer.
const char *t_select1_str(int fd, int timeout_ms);
// epoll_wait() retried on EINTR, fatal on other errors; the events are sorted
// by data.u64, then by mask, so a trace never depends on the kernel's order.
int t_epoll_wait_sorted(int epfd, struct epoll_event *evs, int max, int timeout_ms);
// Fork and execve `self` with argv (argv[0] should be self) in an environment
// without LD_PRELOAD: a peer that runs without the library. Fatal on failure.
pid_t t_spawn_unpreloaded(const char *self, char *const argv[]);
// This program's path for t_spawn_unpreloaded: argv[0] when it holds a '/'
// (/proc/self/exe is the loader when a launcher runs `ld.so PROGRAM`).
const char *t_self_path(const char *argv0);

// Kernel descriptors of many kinds, to mix with TCP sockets in one event
// call. t_kfds_open makes them all idle (nothing to read: a pipe, a disarmed
// timerfd, an eventfd at 0, a signalfd for SIGUSR2, which it blocks, ...);
// t_kfds_ready makes every readable kind readable (SIGUSR2 is sent to the
// process), t_kfds_drain makes them idle again. Fatal on failure.
enum t_kfd {
	T_KFD_PIPE_RD,	 // read end of a pipe
	T_KFD_PIPE_WR,	 // its write end
	T_KFD_TIMERFD,	 // CLOCK_MONOTONIC timerfd
	T_KFD_EVENTFD,	 // eventfd, counter 0
	T_KFD_SIGNALFD,	 // signalfd for SIGUSR2
	T_KFD_FILE,	 // a regular file (memfd)
	T_KFD_DEVNULL,	 // /dev/null
	T_KFD_UNIX,	 // AF_UNIX stream socket of a socketpair
	T_KFD_UDP,	 // UDP socket bound to 127.0.0.1
	T_KFD_PTY,	 // pty master in packet mode: POLLPRI on a flush
	T_KFD_EPOLL,	 // epoll instance holding inner_rd, a pipe of its own
	T_KFD_COUNT
};
struct t_kfds {
	int fd[T_KFD_COUNT];
	int unix_peer, pty_slave; // the other ends, not polled
	int inner_rd, inner_wr;	  // the pipe inside T_KFD_EPOLL
};
void t_kfds_open(struct t_kfds *k);
void t_kfds_ready(struct t_kfds *k);
void t_kfds_drain(struct t_kfds *k);
void t_kfds_close(struct t_kfds *k);
// "pipe_rd", "timerfd", ...
const char *t_kfd_name(enum t_kfd which);

// Wait until thread `tid` of process `pid` has been asleep (state S in
// /proc) for `quiet_ms`: blocked in the call it was about to make. Fatal
// after T_WAIT_MS.
void t_wait_asleep(pid_t pid, pid_t tid, unsigned quiet_ms);

// ---- processes sharing sockets (the t_proc_* programs)

// Fork a child tied to this thread: the child gets SIGKILL when the thread
// that forked it exits (PR_SET_PDEATHSIG; fork from the main thread or from
// one that outlives the child) and a fresh watchdog of `watchdog_s` seconds
// (alarm() is not inherited by fork, and is kept by execve). Fatal on failure.
pid_t t_fork_tied(unsigned watchdog_s);
// A NULL-terminated copy of environ without LD_PRELOAD, for an exec into an
// image without the library; the strings are environ's. Never freed.
char **t_env_unpreloaded(void);
// Whether libshunt is mapped into this process (/proc/self/maps).
bool t_preloaded(void);
// Whether fd is an open descriptor (fcntl(F_GETFD) succeeds).
bool t_fd_open(int fd);
// Send fd over the AF_UNIX socket `usock` with SCM_RIGHTS, along with one
// byte `tag`; fatal on failure.
void t_send_fd(int usock, int fd, char tag);
// Receive one fd sent by t_send_fd (close-on-exec set), its tag in *tag
// (may be NULL); fatal when none arrives.
int t_recv_fd(int usock, char *tag);
// SIGKILL a child and reap it; returns what t_wait_child returns.
int t_kill_child(pid_t pid);
// Zeroed anonymous memory shared with children forked later; fatal on failure.
void *t_shared_alloc(size_t n);
// Entries of the directory @path but "." and "..", counted while it is open
// (so /proc/self/fd counts the descriptor reading it).
long t_dir_entries(const char *path);
// The number after "@field:" in a /proc status file @path (VmRSS,
// voluntary_ctxt_switches, ...). Fatal if the file cannot be read, -1 if
// the field is missing.
long t_status_field(const char *path, const char *field);
// What a reader sees now, after waiting up to `wait_ms` for any event:
// "EOF" (recv = 0), "-1 ERRNAME", "data" (bytes are there, left unread) or
// "nothing" (no event in time). Peeks: consumes no data, but a pending
// error is reported and so cleared, as by any recv.
const char *t_peer_sees(int fd, int wait_ms);

// A conversation across a change of holder (fork, exec, fd passing), with
// both sides checking every byte: the peer sends a first message of `first`
// bytes, which may wait unread while the socket changes hands (keep it well
// inside a socket buffer: 32 KiB at most); the holder reads it and answers
// with as many bytes; the peer sends a length and a second message of that
// many bytes, which may be large; the holder reads it and answers "done".
enum { T_TALK_FIRST_MAX = 32 << 10 };
// Peer: send the first message.
void t_talk_peer_first(int fd, size_t first);
// Peer: read the answer, send `second` bytes, read "done". True when every
// byte was right. Fatal on EOF or error.
bool t_talk_peer_rest(int fd, size_t first, size_t second);
// Holder, reading from rd and writing to wr (one socket, or fds 0 and 1):
// true when every byte was right. Fatal on EOF or error.
bool t_talk_holder(int rd, int wr, size_t first);

#endif
