# SPDX-License-Identifier: MIT
"""Memory that follows use: once a connection has gone quiet, the pages of
its circuit's rings that its bytes have left are given back (the idle
trimmer, docs/circuit.md), so that what stays resident at rest is about
the control page, as the kernel frees a socket's buffers once they are
read. Data sent after a trim arrives intact, the trimmer costs an idle
process no wake-ups, and a fork child that sends on what it inherited has
its own rings trimmed too.

The outcome is waited for generously (all but one page of a ring go 0.5
to 1 s after its last send, that one 5 s later); nothing here times the
library."""

import os
import pathlib
import re
import select
import subprocess
import sys
import textwrap
import time

import pytest

# One process holds both ends of a connection: a and b. On stdin:
#   carry N   N bytes each way at once, each direction checked (sha256)
#   fork      fork; the child carries 256 KiB each way, says "child PID", and
#             idles until the parent is gone
#   quit      exit
PROGRAM = textwrap.dedent("""\
    import hashlib, os, socket, sys, threading

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    a = socket.create_connection(ls.getsockname())
    b, _ = ls.accept()
    rounds = 0

    def pattern(n, seed):
        out, i = bytearray(), 0
        while len(out) < n:
            out += hashlib.sha256(b"%d:%d" % (seed, i)).digest()
            i += 1
        return bytes(out[:n])

    def carry(n):
        global rounds
        rounds += 1
        got = {}
        def read(s, key):
            h, left = hashlib.sha256(), n
            while left:
                chunk = s.recv(min(left, 1 << 16))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
            got[key] = h.hexdigest()
        up, down = pattern(n, 2 * rounds), pattern(n, 2 * rounds + 1)
        ts = [threading.Thread(target=read, args=(b, "up")),
              threading.Thread(target=read, args=(a, "down"))]
        [t.start() for t in ts]
        ws = [threading.Thread(target=a.sendall, args=(up,)),
              threading.Thread(target=b.sendall, args=(down,))]
        [t.start() for t in ws]
        [t.join() for t in ws + ts]
        ok = (got.get("up") == hashlib.sha256(up).hexdigest() and
              got.get("down") == hashlib.sha256(down).hexdigest())
        return "intact" if ok else "CORRUPT"

    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "carry":
            print("carried", int(cmd[1]), carry(int(cmd[1])), flush=True)
        elif cmd[0] == "fork":
            r, w = os.pipe()
            if os.fork() == 0:
                os.close(w)
                print("child", os.getpid(), carry(256 << 10), flush=True)
                os.read(r, 1)
                os._exit(0)
            os.close(r)
            rounds += 1
        elif cmd[0] == "quit":
            break
    """)

# A circuit of its own, or a slot in a channel's memfd (docs/connect.md).
CIRCUIT = re.compile(r"shunt-(circuit|channel)")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
# Two mappings of one channel (the client's and the listener's) in the
# process: each keeps the channel's header, the page of its queue entry, the
# page of slot states and the slot's control page; a page more may stay at
# the edge of unread bytes.
AT_REST_KIB = 2 * 5 * PAGE_KIB
WAIT_S = 30


def circuit_rss_kib(pid):
    """Resident KiB of the circuits' mappings of @pid, and how many there are."""
    rss, n, inside = 0, 0, False
    for line in pathlib.Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = CIRCUIT.search(line) is not None
            n += inside
        elif inside and line.startswith("Rss:"):
            rss += int(line.split()[1])
    return rss, n


def wait_rss(pid, at_most, what):
    deadline = time.monotonic() + WAIT_S
    while True:
        rss, n = circuit_rss_kib(pid)
        if rss <= at_most:
            return rss, n
        assert time.monotonic() < deadline, (
            f"{what}: the circuit mappings of pid {pid} still hold {rss} KiB resident "
            f"after {WAIT_S} s at rest (at most {at_most} KiB expected, {n} mappings)")
        time.sleep(0.05)


def trimmer_switches(pid):
    """Context switches of the library's trimmer thread in @pid, or None."""
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != "shunt-trim":
                continue
            st = (task / "status").read_text()
        except OSError:
            continue
        return sum(int(m) for m in re.findall(r"ctxt_switches:\s+(\d+)", st))
    return None


class Program:
    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)

    def say(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def expect(self, prefix, timeout=60):
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise AssertionError(f"no {prefix!r} within {timeout} s")
        line = self.proc.stdout.readline().strip()
        if not line.startswith(prefix):
            self.proc.kill()
            raise AssertionError(f"expected {prefix!r}, got {line!r}; stderr: "
                                 f"{self.proc.stderr.read()[-2000:]}")
        return line

    def finish(self):
        if self.proc.poll() is None:
            try:
                self.say("quit")
                self.proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, 9)
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def program(shunt_cli, shunt_session, tmp_path):
    script = tmp_path / "rings.py"
    script.write_text(PROGRAM)
    stats = tmp_path / "stats.jsonl"
    started = []

    def start():
        p = Program([str(shunt_cli()), "run", "--", sys.executable, str(script)],
                    shunt_session.env(stats))
        started.append(p)
        p.expect("ready")
        return p

    start.stats = stats
    yield start
    for p in started:
        if p.proc.poll() is None:
            os.killpg(p.proc.pid, 9)
            p.proc.wait()


@pytest.mark.shunt
def test_idle_ring_pages_given_back(program, tools):
    """256 KiB each way fill both rings; at rest only the control pages stay,
    and an idle process's trimmer sleeps. Then more data, trimmed again."""
    p = program()
    p.say("carry 262144")
    assert p.expect("carried") == "carried 262144 intact"
    rss, n = circuit_rss_kib(p.proc.pid)
    assert n == 2, f"the connection is no circuit (mappings: {n}): not under shunt?"
    wait_rss(p.proc.pid, AT_REST_KIB, "after 256 KiB each way")
    # At rest: the trimmer sleeps without a timeout, nothing wakes it.
    time.sleep(0.3)
    before = trimmer_switches(p.proc.pid)
    assert before is not None, "no shunt-trim thread in the process"
    time.sleep(2)
    assert trimmer_switches(p.proc.pid) == before, "the trimmer woke up at rest"
    # Bytes written into given-back pages, and bigger than the rings.
    p.say("carry 1048576")
    assert p.expect("carried") == "carried 1048576 intact"
    wait_rss(p.proc.pid, AT_REST_KIB, "after 1 MiB each way")
    assert p.finish() == 0
    _, total = tools.read_stats(program.stats)
    assert total.get("trim_idle", 0) >= 2, total


@pytest.mark.shunt
def test_fork_child_rings_given_back(program):
    """A fork child that sends on the connection it inherited: both
    processes' mappings of the circuit lose the pages once it is quiet."""
    p = program()
    p.say("carry 262144")
    assert p.expect("carried") == "carried 262144 intact"
    p.say("fork")
    line = p.expect("child")
    child = int(line.split()[1])
    assert line.endswith("intact"), line
    wait_rss(child, AT_REST_KIB, "fork child")
    wait_rss(p.proc.pid, AT_REST_KIB, "fork parent")
    assert p.finish() == 0


# One end per process: a server that echoes one connection, and a client
# that sends what stdin asks, reads it back, and says how many trimmer
# threads it has.
#   server        listens, says "port P", echoes one connection until EOF
#   client P      connects; on stdin "send N": N bytes there and back, then
#                 "echoed N intact|CORRUPT trimmers T"; "send N started": the
#                 same, once a trimmer thread has named itself (or 10 s passed)
ONE_END = textwrap.dedent("""\
    import hashlib, os, socket, sys, time

    def trimmers():
        n = 0
        for t in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{t}/comm") as f:
                    n += f.read().strip() == "shunt-trim"
            except OSError:
                pass
        return n

    if sys.argv[1] == "server":
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen(1)
        print("port", ls.getsockname()[1], flush=True)
        s, _ = ls.accept()
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            s.sendall(chunk)
        sys.exit(0)

    s = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "quit":
            break
        n = int(cmd[1])
        data = hashlib.sha256(cmd[1].encode()).digest() * (n // 32 + 1)
        data = data[:n]
        s.sendall(data)
        got = bytearray()
        while len(got) < n:
            chunk = s.recv(n - len(got))
            if not chunk:
                break
            got += chunk
        # A thread names itself once running: a moment after it was started.
        deadline = time.monotonic() + 10
        while cmd[2:] == ["started"] and not trimmers() and time.monotonic() < deadline:
            time.sleep(0.01)
        print("echoed", n, "intact" if bytes(got) == data else "CORRUPT",
              "trimmers", trimmers(), flush=True)
    """)


@pytest.mark.shunt
def test_trimmer_put_off_for_one_small_connection(shunt_cli, shunt_session, tmp_path):
    """A process with one connection that sent little starts no trimmer
    thread (trim.h, SHUNT_TRIM_EAGER_BYTES: a connection per process, as a
    health check or a CGI client makes, pays for no thread); once it sends
    more, the thread starts and its ring pages go back as usual."""
    script = tmp_path / "one_end.py"
    script.write_text(ONE_END)
    env = shunt_session.env(tmp_path / "stats.jsonl")
    run = [str(shunt_cli()), "run", "--", sys.executable, str(script)]
    server = Program(run + ["server"], env)
    client = None
    try:
        port = server.expect("port").split()[1]
        client = Program(run + ["client", port], env)
        client.expect("ready")
        client.say("send 100")
        assert client.expect("echoed") == "echoed 100 intact trimmers 0"
        rss, n = circuit_rss_kib(client.proc.pid)
        assert n == 1, f"the connection is no circuit (mappings: {n}): not under shunt?"
        client.say("send 65536 started")
        assert client.expect("echoed") == "echoed 65536 intact trimmers 1"
        # The server echoed as much: its thread started too, and both rings
        # (one mapping of the channel in each process) lose their pages.
        wait_rss(client.proc.pid, AT_REST_KIB // 2, "after 64 KiB each way")
        wait_rss(server.proc.pid, AT_REST_KIB // 2, "the server, after 64 KiB each way")
        assert client.finish() == 0
        assert server.proc.wait(timeout=20) == 0
    finally:
        for p in (client, server):
            if p and p.proc.poll() is None:
                os.killpg(p.proc.pid, 9)
                p.proc.wait()
