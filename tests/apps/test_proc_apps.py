# SPDX-License-Identifier: MIT
"""Real programs that share sockets between processes, plain and under
`shunt run`: nginx (a master and two workers accepting on one inherited
listener) serving files to curl; a forking Python socketserver (a child per
connection, holding the accepted socket its parent closed) driven by a Python
client; socat relaying between two connections, with and without a child per
connection. What the clients see must be the same both ways, and the
SHUNT_STATS lines must show that the connections went through shared memory.

    python3 -m pytest tests/apps/test_proc_apps.py -m plain   # the programs alone
    python3 -m pytest tests/apps/test_proc_apps.py            # and under shunt
"""

import hashlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from apps_lib import (START_TIMEOUT_S, STOP_TIMEOUT_S, assert_stats, free_port,  # noqa: F401
                      listening, matrix_row, need, nginx_conf, plain_mode, run_client, servers,
                      shunt_mode, version_of)

# ---- nginx: master + 2 workers, curl

# Files served: name -> size. Several per curl run, so one connection
# carries several requests (keep-alive), and a missing one for a 404.
NGINX_FILES = {"small.bin": 1000, "medium.bin": 300_000, "large.bin": 8 << 20}
NGINX_CURLS = 6


def nginx_setup(tmp_path, port):
    d = tmp_path / "nginx"
    (d / "www").mkdir(parents=True)
    for name, size in NGINX_FILES.items():
        (d / "www" / name).write_bytes(os.urandom(size))
    (d / "nginx.conf").write_text(nginx_conf(d, port, d / "www"))
    return d


def nginx_round(mode, tmp_path, servers, nginx, curl, www_src=None):
    """Start nginx, fetch every file (and a missing one) NGINX_CURLS times with
    curl, stop nginx gracefully. Returns [(name, status, sha256)] and the
    nginx directory."""
    port = free_port()
    d = nginx_setup(tmp_path / mode.name, port)
    if www_src is not None:  # the same bytes in both modes
        for name in NGINX_FILES:
            (d / "www" / name).write_bytes((www_src / name).read_bytes())
    srv = servers(f"nginx-{mode.name}", mode.argv([nginx, "-p", d, "-e", d / "error.log",
                                                   "-c", d / "nginx.conf"]),
                  mode.env("nginx"), d)
    srv.wait_port(port)
    results = []
    names = list(NGINX_FILES) + ["missing.bin"]
    for i in range(NGINX_CURLS):
        out = tmp_path / mode.name / f"curl{i}"
        out.mkdir()
        argv = [curl, "-sS", "--no-progress-meter", "-w", r"%{http_code}\n"]
        for name in names:
            argv += ["-o", out / name, f"http://127.0.0.1:{port}/{name}"]
        res = run_client(mode, "curl", argv, tmp_path)
        codes = res.stdout.decode().split()
        assert len(codes) == len(names), res.describe()
        for name, code in zip(names, codes):
            f = out / name
            digest = hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else None
            results.append((name, code, digest))
    # SIGQUIT: graceful; workers finish and exit normally (their stats lines).
    rc = srv.stop(signal.SIGQUIT)
    assert rc == 0, f"nginx exit status {rc} after SIGQUIT\n" + srv.logs()
    return results, d


@pytest.fixture
def nginx_tools(need):
    paths = need(["nginx", "curl"], ["nginx", "curl"])
    return paths["nginx"], paths["curl"]


@pytest.mark.plain
def test_nginx_plain(tools, tmp_path, servers, nginx_tools):
    """The scene itself: nginx serves every file intact, 404 for the missing one."""
    nginx, curl = nginx_tools
    results, d = nginx_round(plain_mode(tools), tmp_path, servers, nginx, curl)
    for name, code, digest in results:
        if name in NGINX_FILES:
            want = hashlib.sha256((d / "www" / name).read_bytes()).hexdigest()
            assert (code, digest) == ("200", want), (name, code)
        else:
            assert code == "404", (name, code)


@pytest.mark.shunt
def test_nginx_two_workers(tools, tmp_path, servers, nginx_tools, shunt_session, shunt_cli,
                           request):
    """nginx (master, 2 workers) and curl both under shunt: the same statuses
    and bytes as plain; curl's connections went through shared memory, and the
    workers, forked after the master made the listener, accepted them."""
    with matrix_row(request, "nginx (master + 2 workers)", version_of([nginx_tools[0], "-v"]),
                    "curl " + version_of([nginx_tools[1], "--version"]).split()[1]):
        nginx, curl = nginx_tools
        plain, pdir = nginx_round(plain_mode(tools), tmp_path, servers, nginx, curl)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted, _ = nginx_round(mode, tmp_path, servers, nginx, curl, www_src=pdir / "www")
        assert shunted == plain, "nginx under shunt served something else than plain"
        total_bytes = NGINX_CURLS * sum(NGINX_FILES.values())
        assert_stats(mode, "curl", shm_connect=NGINX_CURLS, shm_rx_bytes=total_bytes)
        assert_stats(mode, "nginx", shm_accept=NGINX_CURLS, shm_tx_bytes=total_bytes)


@pytest.mark.shunt
def test_nginx_status_shows_listener(tools, tmp_path, servers, nginx_tools, shunt_session,
                                     shunt_cli):
    """While nginx runs under shunt, `shunt status --json` lists its listener,
    and a keep-alive connection from a client under shunt as a shared-memory
    circuit to a worker (an nginx process other than the master)."""
    nginx, _ = nginx_tools
    mode = shunt_mode(tools, shunt_session, shunt_cli)
    port = free_port()
    d = nginx_setup(tmp_path, port)
    srv = servers("nginx", mode.argv([nginx, "-p", d, "-e", d / "error.log",
                                      "-c", d / "nginx.conf"]), mode.env("nginx"), d)
    srv.wait_port(port)
    client = servers("client", mode.argv([sys.executable, "-c", textwrap.dedent(f"""
        import socket, sys, time
        s = socket.create_connection(("127.0.0.1", {port}))
        s.sendall(b"GET /small.bin HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
        got = b""
        while len(got) < {NGINX_FILES["small.bin"]} or b"\\r\\n\\r\\n" not in got:
            got += s.recv(65536)
        print("ok", flush=True)
        time.sleep(60)
        """)]), mode.env("client"), tmp_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while b"ok" not in pathlib.Path(client.out.name).read_bytes():
        assert time.monotonic() < deadline, "client got no answer\n" + client.logs() + srv.logs()
        assert client.proc.poll() is None, client.logs()
        time.sleep(0.05)
    out = subprocess.run([str(shunt_cli()), "status", "--json"], env=shunt_session.env(),
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    st = json.loads(out.stdout)
    client.stop(signal.SIGKILL)
    srv.stop(signal.SIGQUIT)
    addr = f"127.0.0.1:{port}"
    assert any(l["address"] == addr for l in st["listeners"]), st["listeners"]
    nginx_pids = {s["pid"] for s in st["sessions"] if s["comm"].startswith("nginx")}
    mine = [c for c in st["connections"]
            if c["transport"] == "shm" and c["client_pid"] == client.pid]
    assert len(mine) == 1, st["connections"]
    assert mine[0]["server_pid"] in nginx_pids - {srv.pid}, \
        f"the circuit should end in a worker: {mine[0]}, nginx pids {nginx_pids}"


# ---- a forking Python socketserver, and socat

ECHO_SERVER = textwrap.dedent("""\
    # echo server: MODE (forking|threading) PORTFILE
    import os, socketserver, sys

    class Echo(socketserver.BaseRequestHandler):
        def handle(self):
            while True:
                b = self.request.recv(65536)
                if not b:
                    return
                self.request.sendall(b)

    mode, portfile = sys.argv[1], sys.argv[2]
    cls = socketserver.ForkingTCPServer if mode == "forking" else socketserver.ThreadingTCPServer
    cls.allow_reuse_address = True
    with cls(("127.0.0.1", 0), Echo) as srv:
        with open(portfile + ".tmp", "w") as f:
            f.write(str(srv.server_address[1]))
        os.rename(portfile + ".tmp", portfile)
        try:
            srv.serve_forever()
        except KeyboardInterrupt:
            pass
    """)

ECHO_CLIENT = textwrap.dedent("""\
    # echo client: PORT CONNS SIZE PARALLEL -> one JSON line
    import hashlib, json, random, socket, sys, threading

    port, conns, size, parallel = map(int, sys.argv[1:5])
    results = {}

    def one(i):
        data = random.Random(i).randbytes(size)
        got = bytearray()
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            def send():
                try:
                    s.sendall(data)
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass  # the receiving side says what went wrong
            t = threading.Thread(target=send)
            t.start()
            while True:
                b = s.recv(65536)
                if not b:
                    break
                got += b
            t.join()
            s.close()
            results[i] = (len(got), got == data, None)
        except OSError as e:
            results[i] = (len(got), False, type(e).__name__)

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
    print(json.dumps({"conns": len(results),
                      "intact": sum(ok for _, ok, _ in results.values()),
                      "bytes": sum(n for n, _, _ in results.values()),
                      "errors": sorted({e for _, _, e in results.values() if e})}))
    """)

ECHO_CONNS, ECHO_SIZE, ECHO_PARALLEL = 24, 200_000, 4


@pytest.fixture
def scripts(tmp_path):
    d = tmp_path / "scripts"
    d.mkdir()
    (d / "echo_server.py").write_text(ECHO_SERVER)
    (d / "echo_client.py").write_text(ECHO_CLIENT)
    return d


def start_echo_server(mode, servers, scripts, tmp_path, kind):
    portfile = tmp_path / f"{mode.name}-{kind}.port"
    srv = servers(f"echo-{kind}-{mode.name}",
                  mode.argv([sys.executable, scripts / "echo_server.py", kind, portfile]),
                  mode.env(f"echo-{kind}"), tmp_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not portfile.exists():
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"echo server ({mode.name}) did not start\n" + srv.logs(), pytrace=False)
        time.sleep(0.05)
    return srv, int(portfile.read_text())


def echo_client(mode, scripts, tmp_path, port, conns=ECHO_CONNS):
    res = run_client(mode, "echo-client", [sys.executable, scripts / "echo_client.py", port,
                                           conns, ECHO_SIZE, ECHO_PARALLEL], tmp_path)
    return json.loads(res.stdout)


def forking_round(mode, servers, scripts, tmp_path):
    srv, port = start_echo_server(mode, servers, scripts, tmp_path, "forking")
    summary = echo_client(mode, scripts, tmp_path, port)
    # SIGINT: serve_forever ends, the server exits normally (its stats line).
    rc = srv.stop(signal.SIGINT)
    assert rc == 0, f"echo server exit status {rc}\n" + srv.logs()
    return summary


@pytest.mark.plain
def test_forking_socketserver_plain(tools, servers, scripts, tmp_path):
    summary = forking_round(plain_mode(tools), servers, scripts, tmp_path)
    assert summary == {"conns": ECHO_CONNS, "intact": ECHO_CONNS,
                       "bytes": ECHO_CONNS * ECHO_SIZE, "errors": []}, summary


@pytest.mark.shunt
def test_forking_socketserver(tools, servers, scripts, tmp_path, shunt_session, shunt_cli,
                              request):
    """socketserver.ForkingTCPServer: the parent accepts and closes its copy,
    a forked child echoes on the connection. Client and server under shunt:
    the same as plain, and the connections were shared-memory ones."""
    with matrix_row(request, "python3 socketserver.ForkingTCPServer",
                    version_of([sys.executable, "--version"]), "python3 socket client"):
        plain = forking_round(plain_mode(tools), servers, scripts, tmp_path)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = forking_round(mode, servers, scripts, tmp_path)
        assert shunted == plain
        assert_stats(mode, "echo-client", shm_connect=ECHO_CONNS,
                     shm_rx_bytes=ECHO_CONNS * ECHO_SIZE)
        assert_stats(mode, "echo-forking", shm_accept=ECHO_CONNS)


def socat_round(mode, servers, scripts, tmp_path, socat, fork):
    """client -> socat (relay) -> threading echo server. Without fork socat
    serves one connection and exits; with fork, a child per connection."""
    backend, bport = start_echo_server(mode, servers, scripts, tmp_path, "threading")
    rport = free_port()
    listen = f"TCP-LISTEN:{rport},bind=127.0.0.1,reuseaddr" + (",fork" if fork else "")
    relay = servers(f"socat-{mode.name}-{fork}",
                    mode.argv([socat, listen, f"TCP:127.0.0.1:{bport}"]),
                    mode.env("socat"), tmp_path)
    # No probe connection: a socat without fork would spend itself on it.
    deadline = time.monotonic() + START_TIMEOUT_S
    while not listening(rport):
        if relay.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail("socat did not listen\n" + relay.logs(), pytrace=False)
        time.sleep(0.05)
    conns = ECHO_CONNS if fork else 1
    summary = echo_client(mode, scripts, tmp_path, rport, conns)
    if fork:
        rc = relay.stop(signal.SIGTERM)
    else:
        try:
            rc = relay.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
        relay.stop(signal.SIGKILL)
    assert rc in (0, 143, -signal.SIGTERM), f"socat exit status {rc}\n" + relay.logs()
    backend.stop(signal.SIGINT)
    return summary


@pytest.fixture
def socat_bin(need):
    return need(["socat"], ["socat"])["socat"]


@pytest.mark.plain
@pytest.mark.parametrize("fork", [False, True], ids=["single", "fork"])
def test_socat_relay_plain(tools, servers, scripts, tmp_path, socat_bin, fork):
    summary = socat_round(plain_mode(tools), servers, scripts, tmp_path, socat_bin, fork)
    n = ECHO_CONNS if fork else 1
    assert summary == {"conns": n, "intact": n, "bytes": n * ECHO_SIZE, "errors": []}, summary


@pytest.mark.shunt
@pytest.mark.parametrize("fork", [False, True], ids=["single", "fork"])
def test_socat_relay(tools, servers, scripts, tmp_path, socat_bin, shunt_session, shunt_cli,
                     fork, request):
    """socat between a client and an echo server, all under shunt: the same
    bytes as plain; the client's and socat's connections (accepted, and made
    to the backend, in a forked child with fork) were shared-memory ones."""
    with matrix_row(request, f"socat relay ({'fork' if fork else 'single'})",
                    version_of([socat_bin, "-V"], "socat version"), "python3 socket client"):
        plain = socat_round(plain_mode(tools), servers, scripts, tmp_path, socat_bin, fork)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = socat_round(mode, servers, scripts, tmp_path, socat_bin, fork)
        assert shunted == plain
        n = ECHO_CONNS if fork else 1
        assert_stats(mode, "echo-client", shm_connect=n, shm_rx_bytes=n * ECHO_SIZE)
        assert_stats(mode, "socat", shm_accept=n, shm_connect=n)
