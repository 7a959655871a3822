# SPDX-License-Identifier: MIT
"""Daemon faults: kill -9 shuntd while connections are open.

Established circuits keep moving data and close normally (shuntd is never on
the data path); while shuntd is dead new connections go to the kernel
without the program noticing and without the library spinning; a handed-on
connection is either carried or reported; a restarted shuntd (same socket
path, the dead one's socket file replaced) serves the processes started
before it again, and gives back every descriptor it took.

The tests share one world and run in file order: one shuntd started here
(`shunt daemon`, so that its pid is known), a server and a client
(tests/control/fault_peer.py under `shunt run --no-daemon`, so that no
daemon is started behind our back). Timeouts only detect hangs.
"""

import collections
import json
import os
import pathlib
import re
import signal
import struct
import subprocess
import sys
import time

import pytest

from control_lib import (HANG_S, SANITIZER, LineProc, ShuntdWorld, check_idle, daemon_answers,
                         fd_targets, wait_for)

HERE = pathlib.Path(__file__).resolve().parent
PEER = HERE / "fault_peer.py"
PYTHON = "/usr/bin/python3"


class Proc(LineProc):
    """A process whose stdout lines we can wait for and whose stdin we drive."""

    def expect(self, prefix, timeout=HANG_S):
        """The first line not yet taken that starts with prefix (taken now)."""
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for i in range(seen, len(self.lines)):
                if self.lines[i].startswith(prefix):
                    return self.lines.pop(i)
            seen = len(self.lines)
            self.read_until(deadline, repr(prefix))

    def reports(self, names, timeout=HANG_S):
        """name -> {sent, recv, eof, err} for each connection in names."""
        out = {}
        for name in names:
            words = self.expect(f"report {name} ", timeout).split()[2:]
            out[name] = dict(w.split("=", 1) for w in words)
        return out


def established():
    """The established TCP sockets of the host, as ss lists them with their processes."""
    out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True,
                         timeout=HANG_S).stdout
    return {" ".join(line.split()) for line in out.splitlines()}


class World(ShuntdWorld):
    """shuntd (restartable), the fault_peer server and client, and their files."""

    def __init__(self, shunt, build_dir, directory, tools):
        # `shunt daemon` execs shuntd: the pid we kill is the daemon's.
        super().__init__(shunt, build_dir, directory, tools, [shunt, "daemon"])
        self.runs = 0
        self.started = False    # test_a began the scenario the next tests continue

    def continue_scenario(self):
        """Tests b to d continue what test_a began (connections opened, then
        shuntd killed); alone they have nothing to continue."""
        if not self.started:
            pytest.skip("SKIPPED LOUDLY: a later step of the scenario test_a begins "
                        "(connections open, shuntd killed): select the whole module")

    def env(self, stats=None):
        env = super().env(stats)
        env["SHUNT_LOG"] = "info"
        return env

    def peer(self, role, arg, name):
        stats = self.dir / f"{name}.stats.jsonl"
        p = Proc([self.shunt, "run", "--no-daemon", "--", PYTHON, PEER, role, arg],
                 self.env(stats), self.dir / f"{name}.stderr")
        p.stats = stats
        self.procs.append(p)
        return p

    def run_pair(self, tag):
        """A fresh tests/integration/peer server and client under shunt run
        (--no-daemon): 4000 bytes client to server, EOF. Their summed stats."""
        self.runs += 1
        stats = self.dir / f"pair-{tag}.stats.jsonl"
        portfile = self.dir / f"pair-{tag}.port"
        peer = self.build_dir / "tests" / "integration" / "peer"
        env = self.env(stats)
        server = Proc([self.shunt, "run", "--no-daemon", "--", peer, "server", portfile, 0, "recv"],
                      env, self.dir / f"pair-{tag}-server.stderr")
        self.procs.append(server)
        wait_for(lambda: portfile.exists() and portfile.read_text().strip(), "the pair's server")
        client = self.tools.run([self.shunt, "run", "--no-daemon", "--", peer, "client",
                                 portfile.read_text().strip(), 4000, "close"], env, timeout=HANG_S)
        assert client.rc == 0 and b"error" not in client.stdout, client.describe()
        assert server.expect("eof") == "eof after 4000 bytes"
        assert server.proc.wait(timeout=HANG_S) == 0, server.stderr()
        assert "error" not in " ".join(server.lines)
        return self.tools.read_stats(stats)[1]


@pytest.fixture(scope="module")
def world(build_dir, shunt_bin, tools, tmp_path_factory):
    """One daemon socket of our own: a daemon some other test left on the
    session's socket must not be the one we kill."""
    if not os.access(shunt_bin, os.X_OK):
        pytest.fail(f"shunt CLI not built: {shunt_bin} is missing", pytrace=False)
    w = World(shunt_bin, build_dir, tmp_path_factory.mktemp("fault"), tools)
    w.start_daemon()
    w.server = w.peer("server", str(w.dir / "port"), "server")
    wait_for(lambda: (w.dir / "port").exists(), "the server to listen")
    w.port, w.port_ep, w.port_q, w.port_qe = map(int, (w.dir / "port").read_text().split())
    w.client = w.peer("client", str(w.port), "client")
    # A process that has never woken the server before shuntd dies.
    w.quiet = w.peer("client", str(w.port), "quiet")
    yield w
    w.close()


STREAMS = ["s1", "s2", "s3"]
LIVE = STREAMS + ["idle", "blk", "ep"]
HANDS = ["f1", "e1", "p1", "h0"]
QUEUED = ["q1", "q2"]   # connected, not accepted yet: shuntd dies with them queued


def same_bytes(c, s, name):
    assert c["err"] == "-" and s["err"] == "-", f"{name}: client {c}, server {s}"
    assert c["eof"] == "1" and s["eof"] == "1", f"{name}: EOF missing: client {c}, server {s}"
    assert c["sent"] == s["recv"], f"{name}: client sent {c['sent']}, server got {s['recv']}"
    assert s["sent"] == c["recv"], f"{name}: server sent {s['sent']}, client got {c['recv']}"
    return int(c["sent"].split(":")[1]) + int(s["sent"].split(":")[1])


@pytest.mark.shunt
def test_a_established_connections_outlive_shuntd(world):
    """SIGKILL shuntd in the middle of three two-way streams, an idle
    connection, one whose server sits in recv(), one driven by epoll, and
    one from another process that sends its first byte only after shuntd
    is dead to a server waiting in epoll: every byte arrives intact both
    ways, then shutdown and close work."""
    world.started = True
    c, s, q = world.client, world.server, world.quiet
    q.send("open qq quiet")
    q.expect("opened qq")
    s.expect("accepted qq")
    for name, kind in [(n, "stream") for n in STREAMS] + [("idle", "idle"), ("blk", "blocked"),
                                                          ("ep", "epoll")] + \
            [(n, "hand") for n in HANDS]:
        c.send(f"open {name} {kind}")
        c.expect(f"opened {name}")
        s.expect(f"accepted {name}")
    # Queued on the two listeners nobody accepts on yet (one for a thread
    # in accept(), one for the epoll loop).
    for name, port in zip(QUEUED, (world.port_q, world.port_qe)):
        c.send(f"open {name} hand {port}")
        c.expect(f"opened {name}")
    st = world.status()
    mine = [x for x in st["connections"] if x.get("client_pid") == c.pid]
    assert len(mine) == len(LIVE + HANDS + QUEUED), st
    assert all(x["transport"] == "shm" for x in mine), st
    time.sleep(0.5)                      # the streams are moving
    world.kill_daemon()
    time.sleep(0.3)                      # ... and keep moving without shuntd
    for p in (c, s, q):
        p.send("go")
        p.expect("ok go")
    time.sleep(0.5)
    for p in (c, s, q):
        p.send("stop")
        p.expect("ok stop")
    cr, sr = c.reports(LIVE), s.reports(LIVE + ["qq"])
    cr.update(q.reports(["qq"]))
    total = sum(same_bytes(cr[n], sr[n], n) for n in LIVE + ["qq"])
    print(f"verified {total} bytes across the kill")
    assert all(int(cr[n]["sent"].split(":")[1]) > 0 for n in LIVE)
    for p in (c, s):
        assert p.proc.poll() is None
        assert "error" not in " ".join(p.lines), p.lines


@pytest.mark.shunt
def test_b_new_connections_use_the_kernel_while_shuntd_is_dead(world):
    """Without shuntd: connects between shunt processes (running ones and
    new ones) and a new listen() work, over the kernel, with no error the
    program sees; and an idle process does not spin retrying."""
    world.continue_scenario()
    c, s = world.client, world.server
    assert world.daemon is None and os.path.exists(world.socket)
    # What shuntd had queued died with it: accept() neither fails nor spins on it.
    s.send("resume")
    s.expect("ok resume")
    c.send("open k1 echo")
    c.expect("opened k1")
    s.send("listen2")
    port2 = int(s.expect("port2").split()[1])
    c.send(f"open k2 echo {port2}")
    c.expect("opened k2")
    cr, sr = c.reports(["k1", "k2"]), s.reports(["k1", "k2"])
    for n in ("k1", "k2"):
        same_bytes(cr[n], sr[n], n)
    # A kernel connection is one ss did not list before (no companion
    # sockets are made without shuntd).
    before = established()
    c.send("open k3 hand")
    c.expect("opened k3")
    s.expect("accepted k3")
    new = established() - before
    assert any(f"pid={c.pid}," in l and f" 127.0.0.1:{world.port} " in l for l in new), new
    assert any(f"pid={s.pid}," in l and f"127.0.0.1:{world.port} " in l for l in new), new
    # New processes, started while nobody answers at the socket.
    total = world.run_pair("outage")
    assert total.get("shm_connect", 0) == 0 and total.get("kernel_connect", 0) >= 1, total
    assert total.get("kernel_accept", 0) >= 1 and total.get("fallback_nodaemon", 0) >= 1, total
    # Idle: every thread blocked (accept, recv on circuits and kernel sockets, stdin).
    time.sleep(1.2)                      # past one reconnect attempt
    check_idle({"client": c.pid, "server": s.pid}, "the client and server while shuntd is dead",
               seconds=1.0, most=5)
    for p in (c, s):
        assert "error" not in " ".join(p.lines), p.lines


@pytest.mark.shunt
@pytest.mark.parametrize("how", ["fork", "exec", "pass"])
def test_c_handing_on_while_shuntd_is_dead(world, how):
    """fork, exec and SCM_RIGHTS of a circuit while shuntd is dead: the
    connection keeps working, or the failure is reported (an error to the
    program, a line in the log, an orderly end for the peer); nothing
    hangs, and the other connections of the process are not touched (a
    child closing what it inherited, as subprocess does before exec, must
    not end them)."""
    world.continue_scenario()
    c, s = world.client, world.server
    name = {"fork": "f1", "exec": "e1", "pass": "p1"}[how]
    c.send(f"{how} {name}")
    child = c.expect("child ").split()
    c.expect(f"handed {name}")
    sr = s.reports([name])[name]
    print(f"{how} while shuntd is dead: child says {' '.join(child)}; server {sr}")
    if child[1] == "ok":
        sent, nsent, recv, nrecv = child[2:6]
        assert f"{sent}:{nsent}" == sr["recv"] and f"{recv}:{nrecv}" == sr["sent"], (child, sr)
        assert sr["eof"] == "1" and sr["err"] == "-", sr
    else:
        # Not carried: the program was told (an error, not silence), and so was the log.
        assert child[1] == "error", child
        why = {"fork": "fork while shuntd is unreachable"}.get(how, "cannot move onto the kernel")
        assert why in c.stderr(), c.stderr()
        assert sr["eof"] == "1" and sr["err"] == "-", sr
    assert c.proc.poll() is None and s.proc.poll() is None
    # The connection the client did not hand on still carries bytes.
    c.send("ping h0")
    assert c.expect("pong h0") == "pong h0"


@pytest.mark.shunt
def test_d_restarted_shuntd_serves_again_without_leaks(world):
    """shuntd started again on the same path (the dead one's socket file is
    replaced; a live one is never displaced) serves new processes and the
    ones that ran through the outage, and gives every descriptor back."""
    world.continue_scenario()
    c, s = world.client, world.server
    d2 = world.start_daemon()
    # Once the probe that saw it answer is gone, its only socket is the control socket.
    wait_for(lambda: sum(t.startswith("socket:") for t in fd_targets(d2.pid)) == 1,
             "shuntd to forget the probe")
    fresh_targets = fd_targets(d2.pid)
    fresh = len(fresh_targets)
    # A second daemon on a live one's socket refuses, and the live one stays.
    third = subprocess.run([str(world.shunt), "daemon", "--socket", world.socket],
                           capture_output=True, text=True, timeout=HANG_S,
                           env=world.tools.plain_env())
    assert third.returncode != 0 and "already" in third.stderr, third.stderr
    assert daemon_answers(world.socket) and d2.poll() is None
    # New processes get shared memory.
    pair = world.run_pair("restart")
    total = pair
    assert total.get("shm_connect", 0) >= 1 and total.get("shm_accept", 0) >= 1, total
    # The processes that ran through it find the new daemon at their next
    # connect (the server: to itself, through its epoll listener), and
    # register their listeners again; the thread blocked in accept() on the
    # other one is woken to wait on the new registration.
    s.send("dial d0")
    a, b = s.reports(["d0"])["d0"], s.reports(["d0"])["d0"]
    same_bytes(a, b, "d0")
    c.send(f"open r0 echo {world.port_ep}")     # nothing for the accept() thread yet
    cr, sr = c.reports(["r0"]), s.reports(["r0"])
    same_bytes(cr["r0"], sr["r0"], "r0")
    time.sleep(1.1)                      # a reconnect is tried at most once a second

    def shm_between():
        st = world.status()
        return [x for x in st["connections"]
                if x.get("client_pid") == c.pid and x.get("server_pid") == s.pid]
    for name, port in (("r1", world.port), ("r2", world.port_ep)):
        c.send(f"open {name} hand {port}")
        c.expect(f"opened {name}")
        s.expect(f"accepted {name}")
    mine = shm_between()
    assert len(mine) == 2 and all(x["transport"] == "shm" for x in mine), world.status()
    for name in ("r1", "r2"):
        c.send(f"close {name}")
        assert c.expect(f"closed {name}") == f"closed {name} eof=1"
    s.reports(["r1", "r2"])
    wait_for(lambda: not shm_between(), "the circuits to go")
    st = world.status()
    pids = {x["pid"] for x in st["sessions"]}
    assert {c.pid, s.pid} <= pids, st
    assert any(l["session"] for l in st["listeners"]), st
    base = fd_targets(d2.pid)
    # Many connections, all closed: the daemon's descriptors come back.
    names = [f"m{i}" for i in range(8)]
    for n in names:
        c.send(f"open {n} echo")
    cr, sr = c.reports(names), s.reports(names)
    for n in names:
        same_bytes(cr[n], sr[n], n)
    wait_for(lambda: not shm_between(), "the circuits to go")
    wait_for(lambda: len(fd_targets(d2.pid)) == len(base),
             f"shuntd's descriptors to come back to {len(base)}")
    # Connections from before the restart close cleanly (a stale close must not
    # touch anything of the new daemon's).
    for n in ("h0", "k3"):
        c.send(f"close {n}")
        assert c.expect(f"closed {n}") == f"closed {n} eof=1"
    s.reports(["h0", "k3"])
    for n in QUEUED:                     # nobody will ever accept them
        c.send(f"drop {n}")
        c.expect(f"dropped {n}")
    for p in (c, s, world.quiet):
        p.send("quit")
        assert p.proc.wait(timeout=HANG_S) == 0, p.stderr()
        assert "error" not in " ".join(p.lines), p.lines
    wait_for(lambda: not {c.pid, s.pid, world.quiet.pid} &
             {x["pid"] for x in world.status()["sessions"]}, "the sessions to end")
    left = fd_targets(d2.pid)
    print(f"shuntd fds: fresh {fresh}, with two sessions {len(base)}, at the end {len(left)}")
    # What it keeps of its own namespace once a session lived there (src/daemon/netns.c,
    # shuntd_netns_put): the namespace, its rtnetlink socket and its directory.
    kind = lambda t: re.sub(r"\[\d+\]$", "", t)
    kept = collections.Counter(["net:", "socket:", "/memfd:shunt-directory (deleted)"])
    assert collections.Counter(map(kind, left)) == collections.Counter(map(kind, fresh_targets)) + kept, \
        f"shuntd holds {len(left)} descriptors, {fresh} when it started: {sorted(left)}"
    # Its directory of listened ports lives as long as it does; nothing else shared stays.
    assert not [t for t in left if "memfd" in t and "shunt-directory" not in t], left
    st = world.status()
    assert st["connections"] == [] or all(x["transport"] == "kernel" for x in st["connections"]), st
    _, cstats = world.tools.read_stats(c.stats)
    _, sstats = world.tools.read_stats(s.stats)
    print(f"client stats {cstats}\nserver stats {sstats}")
    before = len(LIVE + HANDS + QUEUED)
    assert cstats.get("shm_connect", 0) >= before + 10, cstats   # r1, r2, m0..m7
    assert cstats.get("kernel_connect", 0) >= 3, cstats
    # The new daemon counts the circuits it made, and only those.
    made = pair["shm_connect"] + cstats["shm_connect"] - before + sstats.get("shm_connect", 0)
    assert st["totals"]["circuits_total"] == made, (st["totals"], made)
    # Stopped cleanly, a sanitizer build reports leaks and errors here.
    d2.send_signal(signal.SIGTERM)
    assert d2.wait(timeout=HANG_S) == 0
    log = d2.log.read_text(errors="replace")
    assert not any(m in log for m in SANITIZER), log[-4000:]


@pytest.mark.shunt
def test_e_a_daemon_removes_only_its_own_socket_file(build_dir, tmp_path):
    """When someone removed a daemon's socket and lock files by hand and a
    second daemon took the path, the first one's exit must leave the second
    one's socket file alone (before, it unlinked the path whatever it was)."""
    shuntd = str(build_dir / "src" / "daemon" / "shuntd")
    path = str(tmp_path / "s.sock")
    first = subprocess.Popen([shuntd, "--socket", path], stderr=subprocess.DEVNULL)
    second = None
    try:
        wait_for(lambda: daemon_answers(path), "the first shuntd")
        os.unlink(path)
        os.unlink(path + ".lock")
        second = subprocess.Popen([shuntd, "--socket", path], stderr=subprocess.DEVNULL)
        wait_for(lambda: daemon_answers(path), "the second shuntd")
        first.terminate()
        assert first.wait(timeout=HANG_S) == 0
        assert daemon_answers(path), "the first daemon's exit removed the second one's socket"
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def _run_daemon(build_dir, tmp_path, *args):
    shuntd = str(build_dir / "src" / "daemon" / "shuntd")
    path = str(tmp_path / "s.sock")
    log = tmp_path / "shuntd.log"
    proc = subprocess.Popen([shuntd, "--socket", path, *args], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    wait_for(lambda: daemon_answers(path), "shuntd")
    return proc, log


def _exit_of(proc, log, act):
    """Do @act to shuntd @proc (from _run_daemon), then its exit status and
    log once it ended by itself (within HANG_S: else it is killed)."""
    try:
        act()
        rc = proc.wait(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rc, log.read_text(errors="replace")


@pytest.mark.parametrize("how", ["SIGTERM", "idle", "SIGSEGV", "SIGABRT"])
def test_f_every_exit_says_why(build_dir, tmp_path, how):
    """Whatever ends shuntd, its log's last word says what: a signal (and
    who sent it), idleness, or a crash with its backtrace, after which it
    still dies of that signal."""
    args = ["--idle-exit", "1"] if how == "idle" else []
    proc, log = _run_daemon(build_dir, tmp_path, *args)

    def act():
        if how != "idle":
            os.kill(proc.pid, getattr(signal, how))

    rc, said = _exit_of(proc, log, act)
    if how == "SIGTERM":
        assert rc == 0 and f"exiting: signal 15 (SIGTERM) from pid {os.getpid()}" in said, said
    elif how == "idle":
        assert rc == 0 and "exiting: no client for 1000 ms" in said, said
    elif "AddressSanitizer" in said:
        pytest.skip("sanitizer build: ASan reports crashes itself")
    else:
        sig = getattr(signal, how)
        assert rc == -sig, (rc, said)
        assert f"dying of signal {sig} ({how[3:]})" in said and "backtrace:" in said, said
        assert "shuntd(" in said or "main" in said or "0x" in said, said


# A listener's holder, driven by lines on stdin: "listen2" makes a second
# listener (a request to shuntd: a dead one is noticed there), "accept"
# takes one connection and echoes 5 bytes on it.
QUEUED_SERVER = """\
import socket, sys
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(8)
print(ls.getsockname()[1], flush=True)
for line in sys.stdin:
    if line.strip() == "listen2":
        other = socket.socket()
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        print("listening", flush=True)
    elif line.strip() == "accept":
        ls.settimeout(5)
        try:
            c, _ = ls.accept()
            c.settimeout(5)
            c.sendall(c.recv(5))
            print("echoed", flush=True)
        except OSError as e:
            print("error", type(e).__name__, flush=True)
"""

QUEUED_CLIENT = """\
import socket, sys
for word in (b"first", b"hello"):
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    print("connected", flush=True)
    sys.stdin.readline()
    c.settimeout(10)
    c.sendall(word)
    print("got", c.recv(5).decode() or "EOF", flush=True)
    c.close()
"""


@pytest.mark.shunt
def test_g_a_connection_queued_in_a_channel_outlives_shuntd(build_dir, shunt_bin, tools,
                                                            tmp_path):
    """A connection a client queued in its channel just before shuntd
    died is shared memory both processes hold (the server mapped the
    channel when it accepted the first connection): the server's accept()
    still takes it after it noticed that shuntd is gone (before, it dropped
    its channels and their doorbell count then, and the client waited for
    an answer for ever), and after a new shuntd is there."""
    sock = str(tmp_path / "s.sock")
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=sock, SHUNT_STATS=str(tmp_path / "stats.jsonl"), SHUNT_LOG="info")
    procs = []

    def start(argv):
        p = Proc(argv, env, tmp_path / f"p{len(procs)}.stderr")
        procs.append(p)
        return p

    daemon = start([build_dir / "src" / "daemon" / "shuntd", "--socket", sock])
    try:
        for restart in (False, True):
            if daemon.proc.poll() is not None:
                daemon = start([build_dir / "src" / "daemon" / "shuntd", "--socket", sock])
            wait_for(lambda: daemon_answers(sock), "shuntd")
            server = start([shunt_bin, "run", "--no-daemon", "--", PYTHON, "-c", QUEUED_SERVER])
            port = server.expect("")
            client = start([shunt_bin, "run", "--no-daemon", "--", PYTHON, "-c", QUEUED_CLIENT,
                            port])
            client.expect("connected")
            server.send("accept")
            client.send("go")
            assert server.expect("") == "echoed", server.stderr()
            assert client.expect("got") == "got first", client.stderr()
            client.expect("connected")
            os.kill(daemon.pid, signal.SIGKILL)
            daemon.proc.wait()
            server.send("listen2")
            server.expect("listening")
            if restart:
                daemon = start([build_dir / "src" / "daemon" / "shuntd", "--socket", sock])
                wait_for(lambda: daemon_answers(sock), "the new shuntd")
                time.sleep(1.1)              # a new session is tried at most once a second
                server.send("listen2")       # the server's next request finds it
                server.expect("listening")
                assert "registered again" in server.stderr(), server.stderr()
            server.send("accept")
            client.send("go")
            assert server.expect("") == "echoed", server.stderr()
            assert client.expect("got") == "got hello", client.stderr()
            server.proc.stdin.close()
            for p in (client, server):
                assert p.proc.wait(timeout=HANG_S) == 0, p.stderr()
        _, total = tools.read_stats(tmp_path / "stats.jsonl")
        assert total.get("shm_accept", 0) == 4, total
    finally:
        for p in procs:
            p.stop()


@pytest.mark.shunt
def test_h_a_server_that_asks_nothing_finds_a_new_shuntd(build_dir, shunt_bin, tools,
                                                         tmp_path):
    """A server that asks shuntd nothing after shuntd dies (it only accepts,
    and its clients came through a channel) learns that its session is over
    from a kernel connection its listener accepts (it looks at most once a
    second), and registers its listener with the next shuntd: connections go
    over shared memory again. Before, it kept believing in the dead session,
    and every connection went over the kernel for as long as it lived."""
    sock = str(tmp_path / "s.sock")
    storm = build_dir / "tests" / "control" / "storm"
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=sock, SHUNT_LOG="info")
    procs = []

    def start(argv, name):
        p = Proc(argv, env, tmp_path / f"{name}.stderr")
        procs.append(p)
        return p

    def circuits():
        out = subprocess.run([str(shunt_bin), "status", "--json"], env=env, capture_output=True,
                             text=True, timeout=HANG_S)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["totals"]["circuits_total"]

    shuntd = [build_dir / "src" / "daemon" / "shuntd", "--socket", sock]
    daemon = start(shuntd, "shuntd.0")
    try:
        wait_for(lambda: daemon_answers(sock), "shuntd")
        portfile = tmp_path / "port"
        server = start([shunt_bin, "run", "--no-daemon", "--", storm, "server", portfile],
                       "server")
        wait_for(lambda: portfile.exists() and portfile.read_text().strip(), "the server")
        client = start([shunt_bin, "run", "--no-daemon", "--", storm, "client",
                        portfile.read_text().strip(), 1], "client")
        client.expect("ready")
        client.send("run 20 0")
        assert client.expect("done").startswith("done ok=20 ")
        assert circuits() == 20
        time.sleep(0.2)                  # nothing left for the server to ask
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.proc.wait()
        daemon = start(shuntd, "shuntd.1")
        wait_for(lambda: daemon_answers(sock), "the new shuntd")
        deadline = time.monotonic() + 10
        while True:
            before = circuits()
            client.send("run 20 0")
            assert client.expect("done").startswith("done ok=20 ")
            if circuits() - before == 20:
                break
            assert time.monotonic() < deadline, \
                f"connections still go over the kernel\nserver: {server.stderr()}"
            time.sleep(0.1)
        assert "registered again" in server.stderr(), server.stderr()
    finally:
        for p in procs:
            p.stop()


def test_f_a_parent_that_dies_before_naming_its_child_leaves_no_ticket(build_dir, tmp_path):
    """A process that sends FORK and dies before FORK_DONE (killed inside
    fork): its ticket, which a child that lives would claim at once, is let
    go a second later, so it holds nothing open and shuntd still exits when
    idle. The session speaks the protocol itself (guess_ids.py)."""
    from guess_ids import HDR, VERSION, Session, hello
    fork_type = 14                      # SHUNT_MSG_FORK: unanswered
    proc, log = _run_daemon(build_dir, tmp_path, "--idle-exit", "1", "--log", "debug")

    def act():
        sess = Session(str(tmp_path / "s.sock"))
        status, me, _, fds = hello(sess)
        for fd in fds:
            os.close(fd)
        assert status == 0 and me, status
        body = struct.pack("<QQ", 0x1234567 | 1, 0x5a5a)
        sess.sock.send(HDR.pack(fork_type, VERSION, HDR.size + len(body), 99, 0) + body)
        sess.sock.close()               # gone, FORK_DONE never sent

    rc, said = _exit_of(proc, log, act)
    assert rc == 0 and "exiting: no client for 1000 ms" in said, said
    assert "its parent went before naming the child; released" in said, said


@pytest.mark.parametrize("when", ["after", "before"])
def test_f_a_child_that_dies_before_claiming_leaves_no_ticket(build_dir, tmp_path, when):
    """A fork's child that dies before it claims its ticket: shuntd, told
    its pid (FORK_DONE), watches it only once it has not claimed the ticket
    soon after (20 ms; most claim within a millisecond), and lets the ticket
    go when it dies, whether it died after the watch began or before. The
    session speaks the protocol itself (guess_ids.py); the child is ours."""
    from guess_ids import HDR, VERSION, Session, hello
    fork_type, fork_done_type = 14, 15  # SHUNT_MSG_FORK, _FORK_DONE: unanswered
    proc, log = _run_daemon(build_dir, tmp_path, "--idle-exit", "1", "--log", "debug")
    child = subprocess.Popen(["sleep", "60"])

    def act():
        try:
            sess = Session(str(tmp_path / "s.sock"))
            status, me, _, fds = hello(sess)
            for fd in fds:
                os.close(fd)
            assert status == 0 and me, status
            name = 0x7654321 | 1
            body = struct.pack("<QQ", name, 0x5a5a)
            sess.sock.send(HDR.pack(fork_type, VERSION, HDR.size + len(body), 99, 0) + body)
            body = struct.pack("<QiI", name, child.pid, 0)
            sess.sock.send(HDR.pack(fork_done_type, VERSION, HDR.size + len(body), 100, 0) +
                           body)
            if when == "after":
                time.sleep(0.5)         # watched by now
            sess.sock.close()           # the parent goes; the ticket has a child to wait for
        finally:
            child.kill()
            child.wait()

    rc, said = _exit_of(proc, log, act)
    assert rc == 0 and "exiting: no client for 1000 ms" in said, said
    if when == "after":
        assert f"pid {child.pid} exited before claiming it" in said, said
    assert "its parent went before naming the child" not in said, said
