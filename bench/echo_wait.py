#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""echo_wait: a request-response echo in the shape of ordinary Python servers,
to see how each way of waiting behaves (bench/busy.py drives it).

The server waits with edge-triggered epoll over non-blocking sockets (or, for
--api block, with a blocking recv on its one connection). The client opens
--conns connections, registers them all with its waiting API (epoll, poll,
select, or none for block) and does --rounds rounds: one 8-byte message on
one connection, in turn, then waits until the echo is back. Prints one JSON
line: rounds, seconds, and the round time's mean and percentiles in µs.
Plain socket calls only, so that it runs unmodified under `shunt run`.
"""

import argparse
import json
import os
import select
import socket
import sys
import time

MSG = b"12345678"


def pin(cpu):
    if cpu is not None and cpu >= 0:
        os.sched_setaffinity(0, {cpu})


def recv_exact(s, n):
    got = b""
    while len(got) < n:
        b = s.recv(n - len(got))
        if not b:
            raise ConnectionError("peer closed")
        got += b
    return got


def serve(a):
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.port))
    ls.listen(1024)
    if a.ready_file:
        with open(a.ready_file, "w") as f:
            f.write(str(ls.getsockname()[1]))
    if a.api == "block":
        c, _ = ls.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            b = c.recv(65536)
            if not b:
                return
            c.sendall(b)
    ep = select.epoll()
    ep.register(ls.fileno(), select.EPOLLIN)
    conns = {}
    accepted = 0
    while True:
        for fd, _ in ep.poll():
            if fd == ls.fileno():
                c, _ = ls.accept()
                c.setblocking(False)
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[c.fileno()] = c
                ep.register(c.fileno(), select.EPOLLIN | select.EPOLLET)
                accepted += 1
                continue
            c = conns[fd]
            while True:
                try:
                    b = c.recv(65536)
                except BlockingIOError:
                    break
                if not b:
                    ep.unregister(fd)
                    c.close()
                    del conns[fd]
                    if not conns and accepted >= a.conns:
                        return
                    break
                c.sendall(b)


class Waiter:
    """Wait until one socket of a set is readable, with the API asked for."""

    def __init__(self, api, socks):
        self.api = api
        self.socks = socks
        if api == "epoll":
            self.ep = select.epoll()
            for s in socks:
                self.ep.register(s.fileno(), select.EPOLLIN)
        elif api == "poll":
            self.p = select.poll()
            for s in socks:
                self.p.register(s.fileno(), select.POLLIN)

    def wait(self):
        if self.api == "epoll":
            return self.ep.poll()
        if self.api == "poll":
            return self.p.poll()
        return select.select(self.socks, [], [])[0]


def client(a):
    socks = []
    deadline = time.monotonic() + 10
    n = 1 if a.api == "block" else a.conns
    while len(socks) < n:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.connect(("127.0.0.1", a.port))
        except ConnectionRefusedError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
            continue
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        socks.append(s)
    waiter = None if a.api == "block" else Waiter(a.api, socks)
    times = []
    clock = time.perf_counter_ns
    for r in range(a.warmup + a.rounds):
        s = socks[r % n]
        t0 = clock()
        s.sendall(MSG)
        if waiter:
            waiter.wait()
        got = recv_exact(s, len(MSG))
        t1 = clock()
        if got != MSG:
            raise RuntimeError("echo differs")
        if r >= a.warmup:
            times.append(t1 - t0)
    for s in socks:
        s.close()
    times.sort()
    total = sum(times)

    def pct(p):
        return times[min(len(times) - 1, int(p / 100 * len(times)))] / 1000

    print(json.dumps({
        "api": a.api, "rounds": len(times), "seconds": total / 1e9,
        "mean_us": total / len(times) / 1000, "p50_us": pct(50), "p99_us": pct(99),
        "max_us": times[-1] / 1000, "cpu": a.cpu,
    }))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("role", choices=["server", "client"])
    p.add_argument("--api", choices=["epoll", "poll", "select", "block"], default="epoll")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--conns", type=int, default=100)
    p.add_argument("--rounds", type=int, default=20000)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--cpu", type=int, default=None, help="pin to this CPU (default: not pinned)")
    p.add_argument("--ready-file")
    a = p.parse_args()
    pin(a.cpu)
    try:
        serve(a) if a.role == "server" else client(a)
    except KeyboardInterrupt:
        sys.exit(1)


if __name__ == "__main__":
    main()
