# SPDX-License-Identifier: MIT
"""Integration tests of the core: what a user of `shunt run` sees beyond the
socket calls themselves. An idle connection costs no CPU; `shunt status`
shows each connection with its processes, addresses, transport and bytes;
nothing is left behind when processes exit or are killed; `shunt run` starts
a daemon when none runs and still works when none can be had."""

import json
import os
import pathlib
import select
import signal
import socket
import struct
import subprocess
import time

import pytest

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Peer:
    """A tests/integration/peer process whose stdout lines we can wait for."""

    def __init__(self, argv, env):
        self.proc = subprocess.Popen([str(a) for a in argv], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.lines = []

    @property
    def pid(self):
        return self.proc.pid

    def expect(self, prefix, timeout=10):
        """Wait for a stdout line starting with prefix; return it."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise AssertionError(f"pid {self.pid}: no line {prefix!r} within {timeout}s; "
                                     f"got {self.lines}, stderr {self.stderr_tail()}")
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"pid {self.pid} exited ({self.proc.wait()}) before "
                                     f"{prefix!r}; got {self.lines}, stderr {self.stderr_tail()}")
            self.lines.append(line.strip())

    def stderr_tail(self):
        if self.proc.poll() is None:
            return "(running)"
        return self.proc.stderr.read()[-2000:]

    def cpu_ticks(self):
        with open(f"/proc/{self.pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture
def peers(build_dir, shunt_cli, shunt_session, tmp_path):
    """Start a peer server and client, plain or under shunt; all stopped at the end."""
    started = []
    shunt = shunt_cli()
    peer = build_dir / "tests" / "integration" / "peer"

    def start(server_bytes, client_bytes, mode="recv", shunt_server=True, shunt_client=True,
              env=None, client_mode=None):
        env = env or shunt_session.env(tmp_path / "stats.jsonl")
        portfile = tmp_path / f"port{len(started)}"
        plain = {k: v for k, v in env.items() if k != "SHUNT_SOCKET"}
        server = Peer(([shunt, "run", "--"] if shunt_server else []) +
                      [peer, "server", portfile, server_bytes, mode],
                      env if shunt_server else plain)
        started.append(server)
        deadline = time.monotonic() + 10
        while not portfile.exists() or not portfile.read_text().strip():
            assert time.monotonic() < deadline, f"server never listened: {server.stderr_tail()}"
            time.sleep(0.01)
        port = portfile.read_text().strip()
        client = Peer(([shunt, "run", "--"] if shunt_client else []) +
                      [peer, "client", port, client_bytes, client_mode or mode],
                      env if shunt_client else plain)
        started.append(client)
        client.expect("sent")
        server.expect("sent")
        return server, client

    yield start
    for p in started:
        p.stop()


def status(shunt_cli, env):
    out = subprocess.run([str(shunt_cli()), "status", "--json"], env=env, capture_output=True,
                         text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait_for(cond, timeout=5, what="condition"):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@pytest.mark.shunt
@pytest.mark.parametrize("mode", ["recv", "poll", "epoll"])
def test_idle_connection_costs_no_cpu(peers, mode):
    """Both ends blocked on an idle circuit (in recv, poll or epoll_wait) for
    5 s use at most two clock ticks each: they sleep, they do not spin."""
    server, client = peers(100, 100, mode)
    time.sleep(1)  # past the spin-then-yield phase
    before = (server.cpu_ticks(), client.cpu_ticks())
    time.sleep(5)
    after = (server.cpu_ticks(), client.cpu_ticks())
    used = [b - a for a, b in zip(before, after)]
    assert all(u <= 2 for u in used), \
        f"idle {mode} used {used} ticks of 1/{CLK_TCK} s in 5 s (server, client)"


@pytest.mark.shunt
def test_status_shows_the_circuit_and_its_bytes(peers, shunt_cli, shunt_session):
    server, client = peers(3000, 7000)
    st = status(shunt_cli, shunt_session.env())
    mine = [c for c in st["connections"]
            if c["transport"] == "shm" and c["client_pid"] == client.pid]
    assert len(mine) == 1, st
    c = mine[0]
    assert c["server_pid"] == server.pid
    assert c["state"] == "established"
    assert c["client_to_server_bytes"] == 7000 and c["server_to_client_bytes"] == 3000
    assert c["server"].startswith("127.0.0.1:") and c["client"].startswith("127.0.0.1:")
    pids = {s["pid"] for s in st["sessions"]}
    assert {server.pid, client.pid} <= pids


# Holds N connections to itself open until stdin ends.
HOLD_MANY = """
import socket, sys
n = int(sys.argv[1])
ls = socket.socket()
ls.bind(("127.0.0.1", 0))
ls.listen(n)
cs = [socket.create_connection(ls.getsockname()) for _ in range(n)]
ss = [ls.accept()[0] for _ in range(n)]
print("ready", flush=True)
sys.stdin.read()
"""


STATUS, STATUS_CONN, STATUS_END = 7, 10, 11  # include/shunt/proto.h
PROTO_HDR = struct.Struct("<HHIIi")  # type, version, len, seq, status
PROTO_VERSION = 7


def slow_status(sock_path, pause):
    """STATUS asked as `shunt status` asks it, by a client that reads
    nothing for @pause s: the record types it then gets, in order."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(sock_path)
    s.settimeout(5)
    s.send(PROTO_HDR.pack(STATUS, PROTO_VERSION, PROTO_HDR.size + 8, 1, 0) + bytes(8))
    time.sleep(pause)
    types = []
    try:
        while not types or types[-1] != STATUS_END:
            data = s.recv(512)
            if not data:
                break
            types.append(PROTO_HDR.unpack_from(data)[0])
    except socket.timeout:
        pass
    finally:
        s.close()
    return types


@pytest.mark.shunt
def test_status_of_many_connections_is_whole(shunt_cli, shunt_session, tmp_path):
    """More connections than the status socket holds records at once (its
    send buffer takes a few hundred), to a client that is slow to read:
    shuntd sends them as the client reads them, all of them and the end,
    rather than dropping what did not fit and leaving it waiting forever."""
    n = 1000
    prog = subprocess.Popen([str(shunt_cli()), "run", "--", "/usr/bin/python3", "-c", HOLD_MANY,
                             str(n)], env=shunt_session.env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        line = prog.stdout.readline()
        assert line.strip() == "ready", prog.stderr.read() if prog.poll() is not None else line
        types = slow_status(shunt_session.socket, 0.5)
        assert types and types[-1] == STATUS_END, \
            f"no end of the status after {len(types)} records"
        assert types.count(STATUS_CONN) >= n, (types.count(STATUS_CONN), n)
        # And `shunt status` itself, reading as fast as it can.
        out = subprocess.run([str(shunt_cli()), "status", "--json"], env=shunt_session.env(),
                             capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr
        mine = [c for c in json.loads(out.stdout)["connections"] if c["client_pid"] == prog.pid]
        assert len(mine) == n, f"{len(mine)} of {n} connections listed"
    finally:
        prog.stdin.close()
        prog.wait(timeout=20)


@pytest.mark.shunt
def test_kernel_connection_shown_as_kernel(peers, shunt_cli, shunt_session):
    """A shunt client of a server without shunt: a kernel connection, and
    status says so."""
    server, client = peers(10, 20, shunt_server=False)
    st = status(shunt_cli, shunt_session.env())
    mine = [c for c in st["connections"] if c.get("pid") == client.pid]
    assert mine and all(c["transport"] == "kernel" for c in mine), st
    assert mine[0]["state"] == "established" and mine[0]["bytes_sent"] == 20


@pytest.mark.shunt
@pytest.mark.parametrize("how", ["exit", "kill"])
def test_nothing_left_after_processes_go(peers, shunt_cli, shunt_session, how):
    """When the client closes and exits, or is killed (shuntd buries its end),
    the server sees EOF after every byte, and once both are gone the daemon
    holds no circuit and no listener of theirs. (The server sends nothing:
    a client dying with unread data would be a reset, as with the kernel.)"""
    server, client = peers(0, 4000, client_mode="close" if how == "exit" else "recv")
    pids = {server.pid, client.pid}
    if how == "kill":
        os.killpg(client.pid, signal.SIGKILL)
    assert server.expect("eof") == "eof after 4000 bytes"
    assert server.proc.wait(timeout=10) == 0

    def gone():
        st = status(shunt_cli, shunt_session.env())
        return (not any(c.get("client_pid") in pids or c.get("server_pid") in pids
                        for c in st["connections"])
                and not any(s["pid"] in pids for s in st["sessions"]))
    wait_for(gone, what="the daemon to forget both processes")


@pytest.mark.shunt
def test_embedded_daemon_started_when_none_runs(build_dir, shunt_cli, tools, tmp_path):
    """shunt run with nobody at the control socket starts a daemon, and the
    programs get shared memory through it."""
    from conftest import ShuntSession
    sess = ShuntSession(tmp_path)
    assert not os.path.exists(sess.socket)
    stats = tmp_path / "stats.jsonl"
    try:
        res = tools.run([shunt_cli(), "run", "--", build_dir / "tests" / "semantics" / "t_reset"],
                        sess.env(stats), timeout=60)
        assert res.rc == 0, res.describe()
        _, total = tools.read_stats(stats)
        assert total.get("shm_connect", 0) >= 1, total
        assert os.path.exists(sess.socket)
    finally:
        sess.stop_daemons()


@pytest.mark.shunt
def test_no_daemon_means_the_kernel(build_dir, shunt_cli, tools, tmp_path):
    """No daemon and none started: every connection goes to the kernel, the
    program's output is what it is without shunt, the counters say why, and
    so does one line on stderr."""
    prog = build_dir / "tests" / "semantics" / "t_reset"
    env = tools.plain_env()
    plain = tools.run([prog], env, timeout=60)
    env["SHUNT_SOCKET"] = str(tmp_path / "nobody" / "shuntd.sock")
    env["SHUNT_STATS"] = str(tmp_path / "stats.jsonl")
    res = tools.run([shunt_cli(), "run", "--no-daemon", "--", prog], env, timeout=60)
    assert res.rc == 0 and res.stdout == plain.stdout, res.describe()
    _, total = tools.read_stats(tmp_path / "stats.jsonl")
    assert total.get("shm_connect", 0) == 0 and total.get("kernel_connect", 0) >= 1, total
    assert total.get("fallback_nodaemon", 0) >= 1, total
    # Said once, at the default log level, with the reason and the fix.
    said = [line for line in res.stderr.decode(errors="replace").splitlines()
            if "stays on the kernel" in line]
    assert len(said) == 1, res.describe()
    assert "no shuntd answers" in said[0] and "shunt run" in said[0], said


@pytest.mark.shunt
@pytest.mark.parametrize("cmd", [[], ["run"], ["daemon"], ["status"]])
def test_help(shunt_cli, tools, cmd):
    res = tools.run([shunt_cli()] + cmd + ["--help"], tools.plain_env(), timeout=10)
    assert res.rc == 0, res.describe()
    assert b"usage:" in res.stdout
