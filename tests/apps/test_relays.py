# SPDX-License-Identifier: MIT
"""socat and ncat, plain and under `shunt run` (every program of a scene
both ways): as relays in front of a Python server (socat with a child per
connection, ncat --keep-open with --sh-exec running an ncat client per
connection, whose standard input and output are the accepted connection
handed over exec), and as one-shot clients and listeners moving a 10 MiB
file to disk (`ncat --send-only` into `ncat -l --recv-only`, `socat -u`
into `socat -u TCP-LISTEN`) or to a server that answers only after the
client's half-close (ncat and socat shut down their sending side at the
end of their input and still read the answer). Bytes are compared by
sha256 with what was sent, and with the plain run; under shunt, the
SHUNT_STATS lines must show shared memory.

    python3 -m pytest tests/apps/test_relays.py -m plain   # the programs alone
    python3 -m pytest tests/apps/test_relays.py            # and under shunt
"""

import hashlib
import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from apps_lib import (START_TIMEOUT_S, STOP_TIMEOUT_S, assert_stats, free_port,  # noqa: F401
                      listening, need, plain_mode, record, run_client, servers, shunt_mode,
                      version_of)

FILE_SIZE = 10 << 20

# A server of either kind, on a port it picks: "echo" sends back what it
# reads; "hash" reads to EOF (the client's half-close), then answers
# "<length> <sha256>" and closes.
SERVER = textwrap.dedent("""\
    # server: KIND PORTFILE
    import hashlib, os, socketserver, sys

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            h, n = hashlib.sha256(), 0
            while True:
                b = self.request.recv(1 << 16)
                if not b:
                    break
                if kind == "echo":
                    self.request.sendall(b)
                else:
                    h.update(b)
                    n += len(b)
            if kind == "hash":
                self.request.sendall(f"{n} {h.hexdigest()}\\n".encode())

    kind, portfile = sys.argv[1], sys.argv[2]
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    socketserver.ThreadingTCPServer.daemon_threads = True
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as srv:
        with open(portfile + ".tmp", "w") as f:
            f.write(str(srv.server_address[1]))
        os.rename(portfile + ".tmp", portfile)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            pass
    """)

# Connections to a server of either kind (through a relay): each sends SIZE
# seeded bytes and checks what comes back. "echo" and "hash" half-close after
# sending and read to EOF; "echo-steps" sends 32 KiB at a time and reads it
# back before sending more, then closes (for a relay that ends the connection
# at a half-close and blocks on its pipes: ncat --sh-exec). One JSON line.
CLIENT = textwrap.dedent("""\
    # client: KIND PORT CONNS SIZE PARALLEL
    import hashlib, json, random, socket, sys, threading

    kind, port, conns, size, parallel = sys.argv[1], *map(int, sys.argv[2:6])
    results = {}
    STEP = 32 << 10

    def one(i):
        data = random.Random(i).randbytes(size)
        want = f"{size} {hashlib.sha256(data).hexdigest()}\\n".encode() \\
            if kind == "hash" else data
        got = bytearray()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            def send():
                try:
                    s.sendall(data)
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the receiving side says what went wrong
            if kind == "echo-steps":
                for at in range(0, size, STEP):
                    s.sendall(data[at:at + STEP])
                    while len(got) < min(at + STEP, size):
                        b = s.recv(1 << 16)
                        if not b:
                            break
                        got += b
            else:
                t = threading.Thread(target=send)
                t.start()
                while True:
                    b = s.recv(1 << 16)
                    if not b:
                        break
                    got += b
                t.join()
            s.close()
            results[i] = (got == want, None)
        except OSError as e:
            results[i] = (False, type(e).__name__)

    todo = list(range(conns))
    def worker():
        while todo:
            try:
                i = todo.pop()
            except IndexError:
                return
            one(i)
    ts = [threading.Thread(target=worker) for _ in range(parallel)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps({"conns": len(results), "intact": sum(ok for ok, _ in results.values()),
                      "errors": sorted({e for _, e in results.values() if e})}))
    """)

RELAY_CONNS, RELAY_PARALLEL = 12, 4
# Bytes per connection; step by step, each step waits out delayed ACKs.
RELAY_SIZE = {"echo": 1 << 20, "hash": 1 << 20, "echo-steps": 256 << 10}


def failure(e):
    """A matrix cell for a failed test: the first line of what went wrong."""
    lines = str(e).strip().splitlines()
    return "FAIL: " + (lines[0][:100] if lines else type(e).__name__)


@pytest.fixture
def scripts(tmp_path):
    d = tmp_path / "scripts"
    d.mkdir()
    (d / "server.py").write_text(SERVER)
    (d / "client.py").write_text(CLIENT)
    return d


@pytest.fixture(scope="module")
def payload(tmp_path_factory):
    """A 10 MiB file of seeded bytes and its sha256."""
    path = tmp_path_factory.mktemp("payload") / "payload.bin"
    data = random.Random(10).randbytes(FILE_SIZE)
    path.write_bytes(data)
    return path, hashlib.sha256(data).hexdigest()


@pytest.fixture
def relay_tools(need):
    return need(["socat", "ncat"], ["socat", "ncat"])


def start_server(mode, servers, scripts, tmp_path, kind):
    portfile = tmp_path / f"{mode.name}-{kind}.port"
    srv = servers(f"{kind}-server-{mode.name}",
                  mode.argv([sys.executable, scripts / "server.py", kind, portfile]),
                  mode.env("server"), tmp_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not portfile.exists():
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{kind} server ({mode.name}) did not start\n" + srv.logs(),
                        pytrace=False)
        time.sleep(0.02)
    return srv, int(portfile.read_text())


def wait_listening(srv, port):
    """Until `srv` listens on port, from /proc/net/tcp: a probe connection
    would be a client to a listener that takes one."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not listening(port):
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{srv.name} did not listen on {port}\n" + srv.logs(), pytrace=False)
        time.sleep(0.02)


def output_of(srv):
    """What a server that has been stopped wrote, both streams (its log
    files are closed by then)."""
    return "".join(pathlib.Path(f.name).read_text(errors="replace")[-3000:]
                   for f in (srv.out, srv.err))


def wait_exit(srv):
    """The exit status of a program that ends by itself; killed (None) if not."""
    try:
        return srv.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        srv.stop(signal.SIGKILL)
        return None


# ---- relays

def relay_argv(tool, tools, port, backend):
    if tool == "socat":
        return [tools["socat"], f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork",
                f"TCP:127.0.0.1:{backend}"]
    # A child per connection, its standard input and output the connection.
    return [tools["ncat"], "-l", "127.0.0.1", str(port), "--keep-open",
            "--sh-exec", f"exec {tools['ncat']} 127.0.0.1 {backend}"]


def group_members(pgid):
    """Pids of the processes in process group `pgid` (from /proc/PID/stat)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the name: state, ppid, pgrp.
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry))
    return pids


def wait_children_done(relay):
    """Until the relay's children for the connections are gone: each writes
    its SHUNT_STATS line as it exits, and stopping the relay kills what is
    left of its process group (a child still shutting its connection to the
    server down after the client had all its data, which then wrote no line)."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while set(group_members(relay.proc.pid)) - {relay.proc.pid}:
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)


def relay_round(mode, servers, scripts, tmp_path, tools, tool, kind):
    """Client of `kind` -> relay (socat or ncat) -> Python server."""
    backend, bport = start_server(mode, servers, scripts, tmp_path, kind.split("-")[0])
    port = free_port()
    relay = servers(f"{tool}-relay-{mode.name}-{kind}",
                    mode.argv(relay_argv(tool, tools, port, bport)), mode.env("relay"), tmp_path)
    wait_listening(relay, port)
    res = run_client(mode, "client", [sys.executable, scripts / "client.py", kind, port,
                                      RELAY_CONNS, RELAY_SIZE[kind], RELAY_PARALLEL], tmp_path)
    wait_children_done(relay)
    rc = relay.stop(signal.SIGTERM)
    assert rc in (0, 143, -signal.SIGTERM), f"{tool} exit status {rc}\n" + output_of(relay)
    rc = backend.stop(signal.SIGINT)
    assert rc == 0, f"server exit status {rc}\n" + output_of(backend)
    return json.loads(res.stdout)


# ncat -l --sh-exec ends the connection when the client half-closes, and
# blocks on a full pipe to its child while that child blocks on the other
# (plain as under shunt): its client goes step by step, without half-close.
RELAYS = [("socat", "echo"), ("socat", "hash"), ("ncat", "echo-steps")]
RELAY_IDS = [f"{t}-{k}" for t, k in RELAYS]
RELAY_LABEL = {"socat": "socat TCP-LISTEN,fork relay", "ncat": "ncat -l -k --sh-exec relay"}
GOOD = {"conns": RELAY_CONNS, "intact": RELAY_CONNS, "errors": []}


def tool_version(tools, tool):
    if tool == "socat":
        return version_of([tools["socat"], "-V"], "socat version").split(" on ")[0]
    return version_of([tools["ncat"], "--version"], "Version").split(" (")[0]


@pytest.mark.plain
@pytest.mark.parametrize("tool,kind", RELAYS, ids=RELAY_IDS)
def test_relay_plain(tools, servers, scripts, tmp_path, relay_tools, tool, kind):
    got = relay_round(plain_mode(tools), servers, scripts, tmp_path, relay_tools, tool, kind)
    assert got == GOOD, got


@pytest.mark.shunt
@pytest.mark.parametrize("tool,kind", RELAYS, ids=RELAY_IDS)
def test_relay(request, tools, servers, scripts, tmp_path, relay_tools, shunt_session, shunt_cli,
               tool, kind):
    """Client, relay and server under shunt: every connection intact (through
    socat, with the half-close carried to the hash server), and the client's
    connections to the relay and the relay's to the server (ncat's: those of
    the ncat client its shell child runs per connection) were shared-memory
    ones."""
    client = {"echo": "python3 socket client (echo, half-close)",
              "hash": "python3 socket client (half-close, then a digest back)",
              "echo-steps": "python3 socket client (echo)"}[kind]
    try:
        got = relay_round(plain_mode(tools), servers, scripts, tmp_path, relay_tools, tool, kind)
        assert got == GOOD, f"plain: {got}"
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        got = relay_round(mode, servers, scripts, tmp_path, relay_tools, tool, kind)
        assert got == GOOD, f"under shunt: {got}"
        assert_stats(mode, "client", shm_connect=RELAY_CONNS)
        assert_stats(mode, "relay", shm_accept=RELAY_CONNS, shm_connect=RELAY_CONNS)
        assert_stats(mode, "server", shm_accept=RELAY_CONNS)
    except BaseException as e:
        record(request.config, RELAY_LABEL[tool], tool_version(relay_tools, tool), client,
               failure(e), "shm")
        raise
    record(request.config, RELAY_LABEL[tool], tool_version(relay_tools, tool), client,
           "pass", "shm")


# ---- one-shot clients: a file to disk, a file to a server that answers after EOF

def listener_argv(tool, tools, port):
    """A listener for one connection that writes what it receives to stdout."""
    if tool == "socat":
        return [tools["socat"], "-u", f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr", "STDOUT"]
    return [tools["ncat"], "-l", "127.0.0.1", str(port), "--recv-only"]


def sender_argv(tool, tools, port, half_close=False):
    """A client sending its standard input. One-way (socat -u, ncat
    --send-only), or both ways: at the end of its input it shuts down its
    sending side and keeps reading until the server closes (socat waits
    -t seconds for that, 0.5 by default: far more here)."""
    if tool == "socat":
        return ([tools["socat"], "-t", "60", "-", f"TCP:127.0.0.1:{port}"] if half_close
                else [tools["socat"], "-u", "-", f"TCP:127.0.0.1:{port}"])
    return ([tools["ncat"], "127.0.0.1", str(port)] if half_close
            else [tools["ncat"], "--send-only", "127.0.0.1", str(port)])


def run_stdin(mode, role, argv, stdin_path, tmp_path):
    """run_client with standard input from a file (through sh: the helper
    gives programs /dev/null)."""
    return run_client(mode, role, ["sh", "-c", 'exec "$@" < "$0"', stdin_path] + argv, tmp_path)


def to_disk_round(mode, servers, tmp_path, tools, sender, listener, payload):
    """`sender` sends the payload to `listener`, which writes it to disk.
    Returns the written file's sha256 and both exit statuses."""
    port = free_port()
    srv = servers(f"{listener}-listener-{mode.name}-{sender}",
                  mode.argv(listener_argv(listener, tools, port)), mode.env("listener"),
                  tmp_path)
    wait_listening(srv, port)
    run_stdin(mode, "sender", sender_argv(sender, tools, port), payload[0], tmp_path)
    rc = wait_exit(srv)
    with open(srv.out.name, "rb") as f:
        got = hashlib.file_digest(f, "sha256").hexdigest()
    return {"sha256": got, "listener exit": rc}


def half_close_round(mode, servers, scripts, tmp_path, tools, sender, payload):
    """`sender` sends the payload to the hash server and prints its answer."""
    srv, port = start_server(mode, servers, scripts, tmp_path, "hash")
    res = run_stdin(mode, "sender", sender_argv(sender, tools, port, half_close=True),
                    payload[0], tmp_path)
    rc = srv.stop(signal.SIGINT)
    assert rc == 0, f"server exit status {rc}\n" + output_of(srv)
    return {"answer": res.stdout.decode(errors="replace")}


ONE_SHOT = [("ncat", "ncat"), ("socat", "socat"), ("ncat", "socat"), ("socat", "ncat"),
            ("ncat", "hash"), ("socat", "hash")]
ONE_SHOT_IDS = [f"{s}-to-{r}" for s, r in ONE_SHOT]


def one_shot_round(mode, servers, scripts, tmp_path, tools, sender, receiver, payload):
    if receiver == "hash":
        return half_close_round(mode, servers, scripts, tmp_path, tools, sender, payload)
    return to_disk_round(mode, servers, tmp_path, tools, sender, receiver, payload)


def one_shot_expected(receiver, payload):
    if receiver == "hash":
        return {"answer": f"{FILE_SIZE} {payload[1]}\n"}
    return {"sha256": payload[1], "listener exit": 0}


def one_shot_labels(tools, sender, receiver):
    """(program, version, client) of the matrix row."""
    how = {"ncat": "ncat --send-only", "socat": "socat -u"}
    if receiver == "hash":
        client = f"{sender} (stdin EOF: half-close, then reads the answer)"
        return "python3 socketserver (answers after EOF)", "Python " + sys.version.split()[0], \
            f"{client}, {tool_version(tools, sender)}"
    program = {"ncat": "ncat -l --recv-only", "socat": "socat -u TCP-LISTEN"}[receiver]
    return program, tool_version(tools, receiver), \
        f"{how[sender]} 10 MiB file, {tool_version(tools, sender)}"


@pytest.mark.plain
@pytest.mark.parametrize("sender,receiver", ONE_SHOT, ids=ONE_SHOT_IDS)
def test_one_shot_plain(tools, servers, scripts, tmp_path, relay_tools, payload, sender, receiver):
    got = one_shot_round(plain_mode(tools), servers, scripts, tmp_path, relay_tools, sender,
                         receiver, payload)
    assert got == one_shot_expected(receiver, payload)


@pytest.mark.shunt
@pytest.mark.parametrize("sender,receiver", ONE_SHOT, ids=ONE_SHOT_IDS)
def test_one_shot(request, tools, servers, scripts, tmp_path, relay_tools, payload, shunt_session,
                  shunt_cli, sender, receiver):
    """Sender and receiver under shunt: the file arrives whole (the sender's
    end of input is the end of the stream), and over shared memory."""
    program, version, client = one_shot_labels(relay_tools, sender, receiver)
    try:
        want = one_shot_expected(receiver, payload)
        got = one_shot_round(plain_mode(tools), servers, scripts, tmp_path, relay_tools, sender,
                             receiver, payload)
        assert got == want, f"plain: {got}"
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        got = one_shot_round(mode, servers, scripts, tmp_path, relay_tools, sender, receiver,
                             payload)
        assert got == want, f"under shunt: {got}"
        assert_stats(mode, "sender", shm_connect=1, shm_tx_bytes=FILE_SIZE)
        assert_stats(mode, "server" if receiver == "hash" else "listener", shm_accept=1,
                     shm_rx_bytes=FILE_SIZE)
    except BaseException as e:
        record(request.config, program, version, client, failure(e), "shm")
        raise
    record(request.config, program, version, client, "pass", "shm")
