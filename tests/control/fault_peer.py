# SPDX-License-Identifier: MIT
"""A scriptable TCP peer for tests/control/test_daemon_fault.py, run under
`shunt run`: many connections at once, each checksummed both ways, driven by
commands on stdin so that the test can kill shuntd between two steps.

    fault_peer.py server PORTFILE     listen on four ports of 127.0.0.1, write
                                      them: one served by a thread blocked in
                                      accept(), one by an epoll loop, and two
                                      nobody accepts on until `resume`
    fault_peer.py client PORT         connect to 127.0.0.1:PORT on command

Client commands (one a line): `open NAME KIND [PORT]`, `ping NAME` (5
bytes there and back on a `hand` connection), `close NAME` (shut it down,
wait for EOF, close), `drop NAME` (close it at once), `go`, `stop`, `quit`; `fork NAME` / `exec NAME` / `pass NAME`
hand connection NAME (kind `hand`) on to a forked child, an exec'd program
or another process (SCM_RIGHTS), which finishes it. Server commands:
`listen2` (one more listener, port on stdout), `resume` (the last two
listeners get a thread in accept() and a place in the epoll loop), `dial NAME` (an `echo`
connection to its own epoll port), `go`, `stop`, `quit`. Each connection
ends with a line

    report NAME sent=SHA256:BYTES recv=SHA256:BYTES eof=1 err=-

which the test compares across the two processes. Kinds: `stream` (both
sides send until `stop`), `idle` (a little, nothing until `go`, then more),
`blocked` (the server sits in recv() until the client sends after `go`),
`epoll` (non-blocking, both sides wait in epoll), `echo` and `hand` (the
client sends, the server echoes).
"""

import hashlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time

HDR = 16
BLOCK = os.urandom(1 << 20)
GO = threading.Event()
STOP = threading.Event()
OUT = threading.Lock()


def say(*words):
    with OUT:
        sys.stdout.write(" ".join(str(w) for w in words) + "\n")
        sys.stdout.flush()


class Tally:
    """What one side of one connection sent and received."""

    def __init__(self):
        self.sent, self.recv = hashlib.sha256(), hashlib.sha256()
        self.nsent = self.nrecv = 0
        self.eof = False
        self.err = "-"
        self.off = 0

    def chunk(self, n):
        """The next n bytes of this connection's stream (varying, so that a
        lost, repeated or reordered piece changes the digest)."""
        self.off = (self.off + 7919) % (len(BLOCK) - n)
        return BLOCK[self.off:self.off + n]

    def did_send(self, data):
        self.sent.update(data)
        self.nsent += len(data)

    def did_recv(self, data):
        self.recv.update(data)
        self.nrecv += len(data)

    def report(self, name):
        say("report", name, f"sent={self.sent.hexdigest()}:{self.nsent}",
            f"recv={self.recv.hexdigest()}:{self.nrecv}", f"eof={int(self.eof)}",
            f"err={self.err}")


def send_n(sock, t, total, chunk=16384, pace=0.0):
    left = total
    while left > 0:
        data = t.chunk(min(chunk, left))
        sock.sendall(data)
        t.did_send(data)
        left -= len(data)
        if pace:
            time.sleep(pace)


def stream_out(sock, t):
    """Send until `stop`, paced so that shuntd dies in the middle."""
    while not STOP.is_set():
        data = t.chunk(16384)
        sock.sendall(data)
        t.did_send(data)
        time.sleep(0.002)


def recv_all(sock, t, echo=False):
    while True:
        data = sock.recv(65536)
        if not data:
            t.eof = True
            return
        t.did_recv(data)
        if echo:
            sock.sendall(data)
            t.did_send(data)


def guarded(name, t, sock, fn):
    """Run fn, record an error instead of dying, then close and report."""
    try:
        fn()
    except OSError as e:
        t.err = f"{type(e).__name__}:{e.errno}"
    finally:
        try:
            sock.close()
        except OSError as e:
            t.err = f"close:{e.errno}"
        t.report(name)


def two_way(name, sock, sender):
    """A sender thread and a receiver (this thread); close once both are done."""
    t = Tally()

    def run():
        box = {}

        def out():
            try:
                sender(t)
                sock.shutdown(socket.SHUT_WR)
            except OSError as e:
                box["err"] = f"send:{e.errno}"
        th = threading.Thread(target=out, daemon=True)
        th.start()
        recv_all(sock, t)
        th.join()
        if "err" in box:
            t.err = box["err"]
    guarded(name, t, sock, run)


def epoll_loop(sock, t, plan, echo=False):
    """Non-blocking both ways, every wait in epoll_wait. plan(t) yields the
    bytes to send (b"" means: wait for the next event first)."""
    sock.setblocking(False)
    ep = select.epoll()
    ep.register(sock.fileno(), select.EPOLLIN | select.EPOLLOUT)
    pending, gen, shut = b"", plan(t) if plan else None, False
    try:
        while not (t.eof and shut):
            ep.poll(0.05 if gen is not None and not pending else -1)
            while True:
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    break
                if not data:
                    t.eof = True
                    break
                t.did_recv(data)
                if echo:
                    pending += data
                    t.did_send(data)
            if gen is not None and not pending:
                try:
                    pending = next(gen)
                    if pending:
                        t.did_send(pending)
                except StopIteration:
                    gen = None
            while pending:
                try:
                    n = sock.send(pending)
                except BlockingIOError:
                    break
                pending = pending[n:]
            if not pending and not shut and gen is None and (not echo or t.eof):
                sock.shutdown(socket.SHUT_WR)
                shut = True
                ep.modify(sock.fileno(), select.EPOLLIN)
            elif pending:
                ep.modify(sock.fileno(), select.EPOLLIN | select.EPOLLOUT)
            else:
                ep.modify(sock.fileno(), select.EPOLLIN)
    finally:
        ep.close()


def epoll_plan(t):
    for _ in range(4):
        yield t.chunk(16384)
    while not GO.is_set():
        yield b""
    for _ in range(32):
        yield t.chunk(16384)
    while not STOP.is_set():
        yield b""


# ---- client

def client_conn(name, kind, port):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"{kind} {name}".encode().ljust(HDR))
    say("opened", name)
    if kind == "stream":
        threading.Thread(target=two_way, args=(name, sock, lambda t: stream_out(sock, t)),
                         daemon=True).start()
    elif kind == "idle":
        def idle(t):
            send_n(sock, t, 4096)
            GO.wait()
            send_n(sock, t, 1 << 20, pace=0.001)
            STOP.wait()
        threading.Thread(target=two_way, args=(name, sock, idle), daemon=True).start()
    elif kind == "blocked":
        def blocked(t):
            GO.wait()
            send_n(sock, t, 256 << 10)
            STOP.wait()
        threading.Thread(target=two_way, args=(name, sock, blocked), daemon=True).start()
    elif kind == "epoll":
        t = Tally()
        threading.Thread(target=guarded, daemon=True,
                         args=(name, t, sock, lambda: epoll_loop(sock, t, epoll_plan))).start()
    elif kind == "quiet":
        def quiet(t):
            GO.wait()
            send_n(sock, t, 64 << 10)
        threading.Thread(target=two_way, args=(name, sock, quiet), daemon=True).start()
    elif kind == "echo":
        threading.Thread(target=two_way, daemon=True,
                         args=(name, sock, lambda t: send_n(sock, t, 64 << 10))).start()
    elif kind == "hand":
        HANDS[name] = sock
    return sock


HANDS = {}
CHILD_CODE = r"""
import hashlib, os, socket, sys
fd = int(sys.argv[1])
s = socket.socket(fileno=fd)
s.settimeout(10)
data = b"h" * 65536
try:
    s.sendall(data)
    s.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
    print("child ok", hashlib.sha256(data).hexdigest(), len(data),
          hashlib.sha256(got).hexdigest(), len(got), flush=True)
except OSError as e:
    print("child error", type(e).__name__, e.errno, flush=True)
"""


def hand_on(name, how):
    """Give connection `name` to another process and drop our copy."""
    sock = HANDS.pop(name)
    if how == "fork":
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGPIPE, signal.SIG_IGN)   # EPIPE is reported below
            try:
                t = Tally()
                send_n(sock, t, 65536)
                sock.shutdown(socket.SHUT_WR)
                recv_all(sock, t)
                sock.close()
                say("child ok", t.sent.hexdigest(), t.nsent, t.recv.hexdigest(), t.nrecv)
            except OSError as e:
                say("child error", type(e).__name__, e.errno)
            os._exit(0)
        sock.close()
        os.waitpid(pid, 0)
    elif how == "exec":
        fd = sock.fileno()
        os.set_inheritable(fd, True)
        child = subprocess.Popen([sys.executable, "-c", CHILD_CODE, str(fd)], pass_fds=[fd],
                                 stdout=subprocess.PIPE, text=True)
        sock.close()
        say(child.stdout.read().strip())
        child.wait()
    elif how == "pass":
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        child = subprocess.Popen([sys.executable, "-c",
                                  "import socket,sys\n"
                                  "u=socket.socket(fileno=int(sys.argv[1]))\n"
                                  "m,fds,_,_=socket.recv_fds(u,16,1)\n"
                                  "sys.argv[1]=str(fds[0])\n" + CHILD_CODE,
                                  str(b.fileno())], pass_fds=[b.fileno()],
                                 stdout=subprocess.PIPE, text=True)
        b.close()
        socket.send_fds(a, [b"x"], [sock.fileno()])
        sock.close()
        say(child.stdout.read().strip())
        child.wait()
        a.close()
    say("handed", name)


def client(port):
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        try:
            if w[0] == "open":
                client_conn(w[1], w[2], int(w[3]) if len(w) > 3 else port)
            elif w[0] in ("fork", "exec", "pass"):
                hand_on(w[1], w[0])
            elif w[0] == "ping":
                sock = HANDS[w[1]]
                sock.sendall(b"ping!")
                got = b""
                while len(got) < 5:
                    d = sock.recv(5 - len(got))
                    if not d:
                        raise ConnectionResetError(0, "EOF")
                    got += d
                say("pong", w[1])
            elif w[0] == "drop":
                HANDS.pop(w[1]).close()
                say("dropped", w[1])
            elif w[0] == "close":
                sock = HANDS.pop(w[1])
                sock.shutdown(socket.SHUT_WR)
                t = Tally()
                recv_all(sock, t)
                sock.close()
                say("closed", w[1], f"eof={int(t.eof)}")
            elif w[0] == "go":
                GO.set()
                say("ok go")
            elif w[0] == "stop":
                STOP.set()
                say("ok stop")
            elif w[0] == "quit":
                break
        except OSError as e:
            say("error", w[0], w[1] if len(w) > 1 else "", type(e).__name__, e.errno)


# ---- server

def serve_conn(sock):
    hdr = b""
    while len(hdr) < HDR:
        d = sock.recv(HDR - len(hdr))
        if not d:
            say("error", "header")
            sock.close()
            return
        hdr += d
    kind, name = hdr.decode().split()
    say("accepted", name)
    if kind == "stream":
        two_way(name, sock, lambda t: stream_out(sock, t))
    elif kind in ("epoll", "quiet"):
        t = Tally()
        guarded(name, t, sock, lambda: epoll_loop(sock, t, None, echo=True))
    else:
        t = Tally()

        def echo():
            recv_all(sock, t, echo=True)
            sock.shutdown(socket.SHUT_WR)
        guarded(name, t, sock, echo)


def accept_loop(lsock):
    while True:
        try:
            c, _ = lsock.accept()
        except OSError as e:
            say("error", "accept", type(e).__name__, e.errno)
            return
        threading.Thread(target=serve_conn, args=(c,), daemon=True).start()


EPOLL = select.epoll()
LISTENERS = {}


def epoll_accept_loop():
    """Every listener registered in EPOLL: non-blocking accept() until EAGAIN."""
    while True:
        for fd, _ in EPOLL.poll():
            lsock = LISTENERS[fd]
            while True:
                try:
                    c, _ = lsock.accept()
                except BlockingIOError:
                    break
                except OSError as e:
                    say("error", "accept", type(e).__name__, e.errno)
                    return
                c.setblocking(True)
                threading.Thread(target=serve_conn, args=(c,), daemon=True).start()


def epoll_accept(lsock):
    lsock.setblocking(False)
    LISTENERS[lsock.fileno()] = lsock
    EPOLL.register(lsock.fileno(), select.EPOLLIN)


def thread_accept(lsock):
    threading.Thread(target=accept_loop, args=(lsock,), daemon=True).start()


def listen_on(serve=thread_accept):
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    if serve:
        serve(lsock)
    return lsock, lsock.getsockname()[1]


def server(portfile):
    keep = [listen_on(), listen_on(epoll_accept), listen_on(None), listen_on(None)]
    threading.Thread(target=epoll_accept_loop, daemon=True).start()
    with open(portfile + ".tmp", "w") as f:
        f.write(" ".join(str(k[1]) for k in keep))
    os.rename(portfile + ".tmp", portfile)
    for line in sys.stdin:
        w = line.split()
        if not w:
            continue
        try:
            if w[0] == "listen2":
                keep.append(listen_on())
                say("port2", keep[-1][1])
            elif w[0] == "resume":
                thread_accept(keep[2][0])
                epoll_accept(keep[3][0])
                say("ok resume")
            elif w[0] == "dial":
                client_conn(w[1], "echo", keep[1][1])
            elif w[0] == "go":
                GO.set()
                say("ok go")
            elif w[0] == "stop":
                STOP.set()
                say("ok stop")
            elif w[0] == "quit":
                break
        except OSError as e:
            say("error", w[0], type(e).__name__, e.errno)


if __name__ == "__main__":
    # As a C program has it: a write to a dead peer (shuntd's socket
    # included) kills the process unless the library says MSG_NOSIGNAL.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    if sys.argv[1] == "server":
        server(sys.argv[2])
    else:
        client(int(sys.argv[2]))
