# SPDX-License-Identifier: MIT
"""Tenants, policy, limits and observability, checked end to end: a shuntd
started here with a policy file, servers and clients under `shunt run` as
different uids (setpriv) and in different cgroups, and what they, the
daemon's log, `shunt status` and the Prometheus metrics then say.

Tenants come from what shuntd verifies (SO_PEERCRED uid, /proc cgroup and
network namespace), so the tests change those facts, never anything the
library could claim. Needs root (setpriv to another uid, cgroup v2 moves);
skips loudly without.

    python3 -m pytest tests/control/test_policy.py
"""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

NOBODY = 65534
CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup/unified")
START_TIMEOUT_S = 10
RUN_TIMEOUT_S = 60

# A server: accepts connections on PORT, echoes each, until killed.
SERVER = textwrap.dedent("""\
    import socket, sys, threading
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((sys.argv[1], int(sys.argv[2])))
    srv.listen(64)
    print("listening", flush=True)
    def echo(c):
        with c:
            while True:
                b = c.recv(65536)
                if not b:
                    return
                c.sendall(b)
    while True:
        c, _ = srv.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()
    """)

# A client: N connections to HOST PORT held open together, a message echoed on
# each; prints one JSON line: the outcome of every connect, in order. With
# "nonblock", connect is non-blocking and the outcome comes from SO_ERROR.
CLIENT = textwrap.dedent("""\
    import errno, json, os, select, socket, sys, time
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    nonblock = len(sys.argv) > 4 and sys.argv[4] == "nonblock"
    hold = float(os.environ.get("HOLD", "0"))
    socks, out = [], []
    for i in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if nonblock:
                s.setblocking(False)
                rc = s.connect_ex((host, port))
                first = errno.errorcode.get(rc, "0")
                select.select([], [s], [], 10)
                err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                s.setblocking(True)
                if err:
                    out.append(first + "/" + errno.errorcode[err])
                    continue
            else:
                s.connect((host, port))
            msg = os.urandom(1000 + i)
            s.sendall(msg)
            got = b""
            while len(got) < len(msg):
                b = s.recv(65536)
                if not b:
                    break
                got += b
            out.append("ok" if got == msg else "corrupt")
            socks.append(s)
        except OSError as e:
            out.append(errno.errorcode.get(e.errno, str(e.errno)))
    if hold:
        print(json.dumps(out), flush=True)
        time.sleep(hold)
    else:
        print(json.dumps(out), flush=True)
    """)


def stats_of(path):
    total = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                for k, v in json.loads(line).items():
                    if k != "pid" and isinstance(v, int) and not isinstance(v, bool):
                        total[k] = total.get(k, 0) + v
    return total


class Daemon:
    """A shuntd of this test: its own socket in a directory every uid can
    reach, a policy file, its log, its metrics on a Unix socket."""

    def __init__(self, build_dir, base, policy, extra=()):
        self.build = build_dir
        self.dir = base
        self.socket = str(base / "shuntd.sock")
        self.config = base / "shuntd.conf"
        self.config.write_text(policy)
        # Metrics on a Unix socket here, unless the test says where.
        self.metrics = None if "--metrics" in extra else str(base / "metrics.sock")
        self.log_path = base / "shuntd.log"
        self.log_file = open(self.log_path, "ab")
        argv = [build_dir / "src" / "daemon" / "shuntd", "--socket", self.socket,
                "--config", self.config, "--log", "info", *extra]
        if self.metrics:
            argv += ["--metrics", "unix:" + self.metrics]
        self.proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL,
                                     stdout=self.log_file, stderr=self.log_file,
                                     env=self.env(), start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (os.path.exists(self.socket) and
                   (not self.metrics or os.path.exists(self.metrics))):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()  # not stopped by the fixture: it never got there
                self.proc.wait()
                pytest.fail("shuntd did not start:\n" + self.log(), pytrace=False)
            time.sleep(0.02)
        self.children = []
        self.runs = 0

    def log(self):
        if not self.log_file.closed:
            self.log_file.flush()
        return self.log_path.read_text(errors="replace")

    def env(self, stats=None):
        env = {k: v for k, v in os.environ.items()
               if k != "LD_PRELOAD" and not k.startswith("SHUNT_")}
        env["SHUNT_SOCKET"] = str(self.dir / "shuntd.sock")
        if stats is not None:
            env["SHUNT_STATS"] = str(stats)
        return env

    def argv(self, argv, uid=None, cgroup=None):
        """argv under shunt run, as @uid, in @cgroup (a directory under CGROUP_ROOT)."""
        cmd = [str(self.build / "src" / "cli" / "shunt"), "run", "--", *map(str, argv)]
        if cgroup is not None:
            cmd = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(cgroup)] + cmd
        if uid is not None:
            cmd = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"] + cmd
        return cmd

    def stats_path(self, name):
        self.runs += 1
        p = self.dir / f"{name}.{self.runs}.stats.jsonl"
        return p

    def server(self, port, uid=None, cgroup=None, host="0.0.0.0"):
        """An echo server under shunt; returns (process, stats path)."""
        script = self.dir / "server.py"
        script.write_text(SERVER)
        stats = self.stats_path("server")
        out = open(self.dir / f"server.{self.runs}.out", "wb")
        p = subprocess.Popen(self.argv([sys.executable, script, host, port], uid, cgroup),
                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                             env=self.env(stats), start_new_session=True)
        self.children.append(p)
        deadline = time.monotonic() + START_TIMEOUT_S
        while b"listening" not in pathlib.Path(out.name).read_bytes():
            if p.poll() is not None or time.monotonic() > deadline:
                pytest.fail("server did not start:\n" +
                            pathlib.Path(out.name).read_text(errors="replace"), pytrace=False)
            time.sleep(0.02)
        # Its listener is registered once listen() returned; give the
        # daemon's registration a moment to be visible to connects.
        time.sleep(0.1)
        return p, stats

    def client(self, host, port, n=1, uid=None, cgroup=None, nonblock=False, hold=None,
               log=None):
        """Run the client to completion (or, with @hold, until it printed and
        then in the background): (outcomes, stats totals, process). Its
        stderr is in self.client_stderr; @log sets its SHUNT_LOG."""
        script = self.dir / "client.py"
        script.write_text(CLIENT)
        stats = self.stats_path("client")
        env = self.env(stats)
        if log:
            env["SHUNT_LOG"] = log
        argv = self.argv([sys.executable, script, host, port, n] +
                         (["nonblock"] if nonblock else []), uid, cgroup)
        if hold:
            env["HOLD"] = str(hold)
            out = open(self.dir / f"client.{self.runs}.out", "wb")
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                 stderr=subprocess.STDOUT, env=env, start_new_session=True)
            self.children.append(p)
            deadline = time.monotonic() + RUN_TIMEOUT_S
            while b"\n" not in pathlib.Path(out.name).read_bytes():
                if p.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("client failed:\n" + pathlib.Path(out.name).read_text(),
                                pytrace=False)
                time.sleep(0.02)
            line = pathlib.Path(out.name).read_text().splitlines()[0]
            return json.loads(line), stats, p
        res = subprocess.run(argv, env=env, capture_output=True, text=True,
                             timeout=RUN_TIMEOUT_S)
        self.client_stderr = res.stderr
        assert res.returncode == 0, res.stdout + res.stderr + self.log()
        return json.loads(res.stdout.splitlines()[-1]), stats_of(stats), None

    def status(self, *args):
        res = subprocess.run([str(self.build / "src" / "cli" / "shunt"), "status", "--json",
                              "--socket", self.socket, *args], capture_output=True, text=True,
                             timeout=10)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    def scrape(self):
        """The metrics page, as {'name{labels}': value}."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.metrics)
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                data += b
        head, _, body = data.decode().partition("\r\n\r\n")
        assert head.startswith("HTTP/1.") and " 200 " in head.splitlines()[0], head
        assert "text/plain; version=0.0.4" in head, head
        return parse_metrics(body)

    def reload(self, policy):
        self.config.write_text(policy)
        mark = len(self.log())
        os.kill(self.proc.pid, signal.SIGHUP)
        deadline = time.monotonic() + 5
        # Its verdict names the file, loaded or refused ("SIGHUP: reading the
        # policy again" comes first and does not).
        while self.config.name not in self.log()[mark:]:
            assert time.monotonic() < deadline, "no verdict after SIGHUP:\n" + self.log()
            time.sleep(0.02)
        return self.log()[mark:]

    def stop(self):
        for p in self.children:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log_file.close()


def parse_metrics(text):
    """Prometheus text format 0.0.4: every sample line; HELP/TYPE checked present."""
    samples, typed = {}, set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            base = name.split("{")[0]
            assert base in typed, f"sample {name} without a # TYPE line"
            samples[name] = float(value)
    return samples


@pytest.fixture
def daemon(build_dir):
    """daemon(policy_text, *extra_args) starts a shuntd; stopped at the end."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv: tenants are told apart by uid and cgroup")
    if not (build_dir / "src" / "daemon" / "shuntd").exists():
        pytest.fail(f"shuntd not built in {build_dir}", pytrace=False)
    started = []
    base = pathlib.Path(tempfile.mkdtemp(prefix="shunt-pol-"))
    base.chmod(0o777)  # other uids reach the socket and write their stats here

    def start(policy, *extra):
        sub = base / str(len(started))
        sub.mkdir()
        sub.chmod(0o777)
        d = Daemon(build_dir, sub, policy, extra)
        started.append(d)
        return d
    yield start
    for d in started:
        d.stop()
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            assert marker not in d.log(), d.log()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def cgroups():
    """cgroups(name) makes a cgroup v2 directory for this test; removed at the end."""
    if not (CGROUP_ROOT / "cgroup.procs").exists():
        pytest.skip(f"no cgroup v2 hierarchy at {CGROUP_ROOT}")
    top = CGROUP_ROOT / f"shunt-t-{os.getpid()}-{time.monotonic_ns()}"
    try:
        top.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a cgroup under {CGROUP_ROOT}: {e}")
    made = []

    def make(name):
        d = top / name
        d.mkdir()
        made.append(d)
        return d
    yield make
    # Processes are gone by now (the daemon fixture stopped them); move any
    # straggler out before removing.
    for d in made + [top]:
        for _ in range(50):
            try:
                d.rmdir()
                break
            except OSError:
                for pid in (d / "cgroup.procs").read_text().split() if d.exists() else []:
                    (CGROUP_ROOT / "cgroup.procs").write_text(pid)
                time.sleep(0.05)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- tenants by uid, and the default policy

def test_default_same_tenant_by_uid(daemon):
    """Built-in policy: one tenant per uid; within it shared memory, across it
    the kernel (whose own rules then apply), with the reason counted and logged."""
    d = daemon("")
    port = free_port()
    d.server(port)
    out, st, _ = d.client("127.0.0.1", port, 2)
    assert out == ["ok", "ok"]
    assert st.get("shm_connect") == 2 and st.get("fallback_policy", 0) == 0, st
    out, st, _ = d.client("127.0.0.1", port, 2, uid=NOBODY)
    assert out == ["ok", "ok"]
    assert st.get("shm_connect", 0) == 0 and st.get("fallback_policy") == 2, st
    log = d.log()
    assert f"(tenant uid:{NOBODY})" in log and "left to the kernel by the default policy " \
        "(different tenants)" in log, log
    m = d.scrape()
    assert m['shunt_connects_total{transport="shm",tenant="uid:0"}'] == 2, m
    assert m[f'shunt_connects_total{{transport="kernel",tenant="uid:{NOBODY}",'
             'reason="policy"}'] == 2, m
    assert m['shunt_policy_denials_total{action="kernel"}'] == 2, m
    # Nothing is wrong, so nothing is said by default; at SHUNT_LOG=info the
    # client hears who the tenants are and the rule that would allow them.
    assert "left to the kernel" not in d.client_stderr, d.client_stderr
    d.client("127.0.0.1", port, 1, uid=NOBODY, log="info")
    hint = f"from = uid:{NOBODY}, to = uid:0, action = allow"
    assert f"tenant uid:{NOBODY} to tenant uid:0 is left to the kernel by the default " \
        f"policy (same-tenant)" in d.client_stderr and hint in d.client_stderr, d.client_stderr
    # shunt status says the same, per pair, with the rule to add.
    st = d.status()
    pairs = [p for p in st["policy"] if p["from"] == f"uid:{NOBODY}" and p["to"] == "uid:0"]
    assert len(pairs) == 1 and pairs[0]["connects"] == 3 and pairs[0]["outcome"] == "kernel", st
    assert pairs[0]["decided_by"] == "the default policy (same-tenant)", pairs
    assert f"from = uid:{NOBODY}\nto = uid:0\naction = allow" in pairs[0]["allow_rule"], pairs
    assert st["totals"]["fallbacks"]["policy"] == 3 and st["totals"]["policy_kernel"] == 3, st
    text = subprocess.run([str(d.build / "src" / "cli" / "shunt"), "status", "--socket",
                           d.socket], capture_output=True, text=True, timeout=10).stdout
    assert "BY POLICY" in text and f"[rule uid-{NOBODY}-to-uid-0]" in text, text
    assert "connects left to the kernel (policy 3)" in text, text


def test_rules_allow_kernel_refuse(daemon):
    """Rules, first match wins: allow one uid pair across tenants, leave one
    address to the kernel, refuse a port range (connect fails with
    ECONNREFUSED, blocking or not, as the rule says)."""
    port, refused = free_port(), free_port()
    d = daemon(textwrap.dedent(f"""\
        [policy]
        default = same-tenant
        [rule refuse-admin]
        port = {refused}
        action = refuse
        [rule second-address-kernel]
        dst = 127.0.0.2/32
        action = kernel
        [rule nobody-to-root]
        from = uid:{NOBODY}
        to = uid:0
        action = allow
        """))
    d.server(port)
    d.server(refused)
    out, st, _ = d.client("127.0.0.1", port, 2, uid=NOBODY)
    assert out == ["ok", "ok"] and st.get("shm_connect") == 2, (out, st)
    out, st, _ = d.client("127.0.0.2", port, 1, uid=NOBODY)
    assert out == ["ok"] and st.get("fallback_policy") == 1 and not st.get("shm_connect"), st
    out, st, _ = d.client("127.0.0.1", refused, 1)
    assert out == ["ECONNREFUSED"] and st.get("policy_refused") == 1, (out, st)
    out, st, _ = d.client("127.0.0.1", refused, 1, nonblock=True)
    assert out == ["EINPROGRESS/ECONNREFUSED"], out
    assert "refused by rule refuse-admin" in d.log(), d.log()
    assert "left to the kernel by rule second-address-kernel" in d.log(), d.log()
    assert d.scrape()['shunt_policy_denials_total{action="refuse"}'] == 2


# ---- tenants by cgroup

def test_tenants_by_cgroup(daemon, cgroups):
    """Same uid, different cgroups: two tenants. Within one, shared memory;
    across, the kernel; a rule allows one direction."""
    a, b = cgroups("a"), cgroups("b")
    rel = lambda p: "/" + str(p.relative_to(CGROUP_ROOT))  # noqa: E731
    policy = textwrap.dedent(f"""\
        [tenant web]
        cgroup = {rel(a)}
        [tenant db]
        cgroup = {rel(b)}
        """)
    d = daemon(policy)
    port = free_port()
    d.server(port, cgroup=b)
    out, st, _ = d.client("127.0.0.1", port, 1, cgroup=b)
    assert out == ["ok"] and st.get("shm_connect") == 1, st
    out, st, _ = d.client("127.0.0.1", port, 1, cgroup=a)
    assert out == ["ok"] and st.get("fallback_policy") == 1, st
    assert "(tenant web)" in d.log() and "(tenant db)" in d.log(), d.log()
    # The policy changes under a running daemon with SIGHUP.
    said = d.reload(policy + "[rule web-to-db]\nfrom = web\nto = db\naction = allow\n")
    assert "1 rules" in said, said
    out, st, _ = d.client("127.0.0.1", port, 1, cgroup=a)
    assert out == ["ok"] and st.get("shm_connect") == 1, st
    # A broken file on reload: the daemon says why and keeps the policy it had.
    said = d.reload("[rule x]\naction = sideways\n")
    assert "shuntd.conf" in said and d.proc.poll() is None, said
    out, st, _ = d.client("127.0.0.1", port, 1, cgroup=a)
    assert out == ["ok"] and st.get("shm_connect") == 1, st


# ---- limits

def test_connection_limit_falls_back(daemon):
    """max_connections: connections past the limit go to the kernel and
    work; status, metrics and the log say so; closing makes room again."""
    d = daemon(textwrap.dedent("""\
        [tenant root]
        uid = 0
        max_connections = 2
        """))
    port = free_port()
    d.server(port)
    out, stats, holder = d.client("127.0.0.1", port, 4, hold=30)
    assert out == ["ok"] * 4, out
    st = d.status()
    shm = [c for c in st["connections"] if c["transport"] == "shm"]
    assert len(shm) == 2, st["connections"]
    assert st["totals"]["limit_fallbacks"] == 2, st["totals"]
    assert "max_connections reached" in d.log(), d.log()
    m = d.scrape()
    assert m['shunt_connections{transport="shm",tenant="root"}'] == 2, m
    assert m['shunt_connects_total{transport="kernel",tenant="root",'
             'reason="limit_connections"}'] == 2, m
    os.killpg(holder.pid, signal.SIGKILL)
    holder.wait()
    deadline = time.monotonic() + 5
    while d.scrape()['shunt_connections{transport="shm",tenant="root"}'] != 0:
        assert time.monotonic() < deadline, "the tenant's connections were not released"
        time.sleep(0.05)
    out, st, _ = d.client("127.0.0.1", port, 2)
    assert out == ["ok", "ok"] and st.get("shm_connect") == 2, st


def test_memory_limit_falls_back(daemon):
    """max_memory: circuits are charged to the connecting tenant; the circuit
    that would pass the limit goes to the kernel instead."""
    d = daemon("[tenant root]\nuid = 0\nmax_memory = 1M\n", "--ring-size", "262144")
    port = free_port()
    d.server(port)
    out, st, holder = d.client("127.0.0.1", port, 3, hold=30)
    assert out == ["ok"] * 3, out
    m = d.scrape()
    assert m['shunt_connections{transport="shm",tenant="root"}'] == 1, m
    assert 512 << 10 <= m['shunt_memory_bytes{tenant="root"}'] <= 1 << 20, m
    assert m['shunt_connects_total{transport="kernel",tenant="root",'
             'reason="limit_memory"}'] == 2, m
    assert "max_memory reached" in d.log(), d.log()


# ---- observability

def test_status_filters(daemon):
    """shunt status --tenant/--pid/--transport keep only the matching
    connections (an end in that tenant or process, or on that transport)."""
    d = daemon("")
    port = free_port()
    srv, _ = d.server(port)
    _, _, root_client = d.client("127.0.0.1", port, 1, hold=30)
    _, _, nobody_client = d.client("127.0.0.1", port, 1, uid=NOBODY, hold=30)
    everything = d.status()
    tenants = {s["pid"]: s["tenant"] for s in everything["sessions"]}
    assert f"uid:{NOBODY}" in tenants.values() and "uid:0" in tenants.values(), everything
    shm = d.status("--transport", "shm")["connections"]
    assert shm and all(c["transport"] == "shm" for c in shm), shm
    kern = d.status("--transport", "kernel")["connections"]
    assert kern and all(c["transport"] == "kernel" for c in kern), kern
    mine = d.status("--tenant", f"uid:{NOBODY}")
    assert mine["connections"], mine
    assert all(c["transport"] == "kernel" for c in mine["connections"]), mine
    by_pid = d.status("--pid", str(root_client.pid))["connections"]
    assert [c["transport"] for c in by_pid] == ["shm"], by_pid
    assert d.status("--pid", "1")["connections"] == []
    text = subprocess.run([str(d.build / "src" / "cli" / "shunt"), "status", "--socket",
                           d.socket, "--tenant", "uid:0"], capture_output=True, text=True,
                          timeout=10)
    assert text.returncode == 0 and "uid:0" in text.stdout, text.stdout + text.stderr


def test_metrics_on_loopback_port(daemon):
    """--metrics HOST:PORT serves the same page over TCP on loopback."""
    port = free_port()
    d = daemon("", "--metrics", f"127.0.0.1:{port}")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        data = b""
        while (b := s.recv(65536)):
            data += b
    head, _, body = data.decode().partition("\r\n\r\n")
    assert " 200 " in head.splitlines()[0], head
    m = parse_metrics(body)
    assert m["shunt_sessions"] == 0 and "shunt_bytes_total" in m, m


def test_request_metrics(daemon):
    """The metrics count the requests shuntd handled by type, and the time
    they took: a server and a client of two connections asked HELLO (each),
    LISTEN (once) and CONNECT (the client's first connect, for its channel)."""
    d = daemon("")
    port = free_port()
    d.server(port)
    out, st, _ = d.client("127.0.0.1", port, 2)
    assert out == ["ok", "ok"] and st.get("shm_connect") == 2, st
    m = d.scrape()
    count = {t: m[f'shunt_requests_total{{type="{t}"}}'] for t in ("HELLO", "LISTEN", "CONNECT")}
    assert count["HELLO"] >= 2 and count["LISTEN"] == 1 and count["CONNECT"] >= 1, m
    for t, n in count.items():
        # Each took some time, and none a second (the test's whole run is less).
        assert 0 < m[f'shunt_request_seconds_total{{type="{t}"}}'] < n, (t, m)
    assert m['shunt_requests_total{type="EXEC_NEXT"}'] == 0, m
    assert m['shunt_request_seconds_total{type="EXEC_NEXT"}'] == 0, m


def test_bad_policy_refuses_to_start(build_dir, tmp_path):
    """A daemon never runs with a policy it could not read: it exits and
    names the file and line."""
    conf = tmp_path / "bad.conf"
    conf.write_text("[policy]\ndefault = allow\n[rule r]\nport = 99999\naction = allow\n")
    res = subprocess.run([str(build_dir / "src" / "daemon" / "shuntd"), "--socket",
                          str(tmp_path / "s.sock"), "--config", str(conf)],
                         capture_output=True, text=True, timeout=10)
    assert res.returncode != 0, res
    assert f"{conf}:4" in res.stderr and "port" in res.stderr, res.stderr
    assert not (tmp_path / "s.sock").exists()


def test_policy_check_explains(build_dir, tmp_path):
    """shunt policy check names the rule that decides, or the default."""
    conf = tmp_path / "p.conf"
    conf.write_text(textwrap.dedent("""\
        [tenant web]
        uid = 1000
        [tenant db]
        uid = 1001
        [rule deny-admin]
        to = db
        port = 9000-9100
        action = refuse
        [rule web-db]
        from = web
        to = db
        dst = 10.0.0.0/8
        action = allow
        """))
    shunt = str(build_dir / "src" / "cli" / "shunt")

    def check(*args):
        res = subprocess.run([shunt, "policy", "check", "--config", str(conf), *args],
                             capture_output=True, text=True, timeout=10)
        return res.returncode, res.stdout + res.stderr

    rc, out = check("web", "db@10.1.2.3", "5432")
    assert rc == 0 and "rule 'web-db'" in out and "=> allow" in out, out
    rc, out = check("uid:1000", "uid:1001@10.1.2.3", "9050")
    assert rc == 0 and "rule 'deny-admin'" in out and "=> refuse" in out, out
    rc, out = check("web", "db@192.168.1.1", "5432")
    assert rc == 0 and "default same-tenant" in out and "=> kernel" in out, out
    rc, out = check(f"pid:{os.getpid()}", "127.0.0.1", "80")
    assert rc == 0 and f"uid {os.geteuid()}" in out and "=> allow" in out, out
    rc, out = check("nosuch", "127.0.0.1", "80")
    assert rc == 1 and "no tenant 'nosuch'" in out, out
    rc, out = check("web", "127.0.0.1", "http")
    assert rc == 1 and "not a port" in out, out
