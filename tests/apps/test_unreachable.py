# SPDX-License-Identifier: MIT
"""Programs the preload cannot reach, talking to programs under shunt: they
must still work, over the kernel, and `shunt run` must say why they are not
accelerated. Each scene runs plain, then with every program under
`shunt run` (the unreachable one too, as a user would run it):

- busybox (Debian's busybox-static: no dynamic loader, so no LD_PRELOAD):
  `busybox nc` as a client of a Python server under shunt, and `busybox nc
  -l` as the server of a Python client under shunt;
- a set-user-ID copy of socat. The loader ignores LD_PRELOAD when the
  kernel marks the exec secure (AT_SECURE), which it does when the
  program's effective user or group is not our real one, or when file
  capabilities raise a non-root user's privileges. Running as root, a
  set-user-ID-root copy would not do (euid 0 = ruid 0), nor would file
  capabilities (root already has them all): the copy is owned by `nobody`
  and set-user-ID, so it runs with euid nobody, ruid root, and AT_SECURE.
  The test checks that with LD_SHOW_AUXV (which a secure exec ignores)
  and skips, saying so, if the kernel did not mark it (a nosuid mount, or
  not root and so unable to give the copy away);
- a Go program (built here with `go build`; Go makes its system calls
  itself, not through libc) as client and as server.

While the connection is open, `shunt status --json` must list it as a
kernel connection of the shunt side's process, with no shunt process at the
other end and no shared-memory circuit; the shunt side's SHUNT_STATS show a
kernel connect or accept and no shared memory; the unreachable program
writes no SHUNT_STATS line (the library never ran in it). Bytes are
compared by sha256 with what was sent, and with the plain run.

    python3 -m pytest tests/apps/test_unreachable.py -m plain   # the programs alone
    python3 -m pytest tests/apps/test_unreachable.py            # and under shunt
"""

import hashlib
import json
import os
import pathlib
import pwd
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from apps_lib import (CLIENT_TIMEOUT_S, START_TIMEOUT_S, STOP_TIMEOUT_S, free_port,  # noqa: F401
                      listening, need, plain_mode, record, servers, shunt_mode, version_of)

SIZE = 4 << 20
DATA = random.Random(4).randbytes(SIZE)
SHA = hashlib.sha256(DATA).hexdigest()

# The shunt side when the unreachable program is the client: one connection,
# read to EOF (the client's half-close), answer "<length> <sha256>", close.
HASH_SERVER = textwrap.dedent("""\
    # hash server: PORTFILE
    import hashlib, os, socket, sys
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(s.getsockname()[1]))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
    c, _ = s.accept()
    h, n = hashlib.sha256(), 0
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        h.update(b)
        n += len(b)
    c.sendall(f"{n} {h.hexdigest()}\\n".encode())
    c.close()
    """)

# The shunt side when the unreachable program is the server: connect, send
# the first half, say "open" and wait for a line on stdin (the test looks at
# shunt status meanwhile), send the rest, half-close, read to EOF.
HELD_CLIENT = textwrap.dedent("""\
    # held client: PORT SIZE
    import random, socket, sys
    port, size = int(sys.argv[1]), int(sys.argv[2])
    data = random.Random(4).randbytes(size)
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(data[:size // 2])
    print("open", flush=True)
    sys.stdin.readline()
    s.sendall(data[size // 2:])
    s.shutdown(socket.SHUT_WR)
    while s.recv(1 << 16):
        pass
    print("done", flush=True)
    """)

GO_PROGRAM = textwrap.dedent("""\
    // gotcp client|server HOST:PORT: like nc, stdin to the connection (then
    // a half-close) and the connection to stdout; the server takes one.
    package main

    import (
    \t"io"
    \t"net"
    \t"os"
    )

    func main() {
    \tif len(os.Args) != 3 {
    \t\tos.Stderr.WriteString("usage: gotcp client|server HOST:PORT\\n")
    \t\tos.Exit(2)
    \t}
    \tvar c net.Conn
    \tvar err error
    \tif os.Args[1] == "server" {
    \t\tvar ln net.Listener
    \t\tif ln, err = net.Listen("tcp", os.Args[2]); err == nil {
    \t\t\tc, err = ln.Accept()
    \t\t}
    \t} else {
    \t\tc, err = net.Dial("tcp", os.Args[2])
    \t}
    \tif err != nil {
    \t\tpanic(err)
    \t}
    \tconn := c.(*net.TCPConn)
    \tdone := make(chan error)
    \tgo func() {
    \t\t_, err := io.Copy(conn, os.Stdin)
    \t\tif err == nil {
    \t\t\terr = conn.CloseWrite()
    \t\t}
    \t\tdone <- err
    \t}()
    \tif _, err := io.Copy(os.Stdout, conn); err != nil {
    \t\tpanic(err)
    \t}
    \tif err := <-done; err != nil {
    \t\tpanic(err)
    \t}
    }
    """)

WARNING = {
    "static": "is statically linked: its sockets stay on the kernel",
    "secure": "is set-user-ID: the loader ignores LD_PRELOAD, its sockets stay on the kernel",
    "go": "is a Go program (raw system calls): its sockets stay on the kernel",
}


def failure(e):
    """A matrix cell for a failed test: the first line of what went wrong."""
    lines = str(e).strip().splitlines()
    return "FAIL: " + (lines[0][:100] if lines else type(e).__name__)


# ---- the unreachable programs

@pytest.fixture
def busybox(need):
    path = need(["busybox"], ["busybox-static"])["busybox"]
    if not is_static(path):
        pytest.skip(f"{path} is not statically linked; install busybox-static")
    return path


def is_static(path):
    """No PT_INTERP program header: read the ELF header and program headers."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2:
            return False
        phoff = int.from_bytes(head[32:40], "little")
        phentsize = int.from_bytes(head[54:56], "little")
        phnum = int.from_bytes(head[56:58], "little")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    return all(int.from_bytes(table[i:i + 4], "little") != 3  # PT_INTERP
               for i in range(0, len(table), phentsize))


@pytest.fixture
def setuid_socat(need, tmp_path):
    """A copy of socat, set-user-ID to nobody, that the loader runs in secure
    mode (see the module's docstring); skips when it cannot be had."""
    socat = need(["socat"], ["socat"])["socat"]
    if os.geteuid() != 0:
        pytest.skip("a set-user-ID program for another user needs root to chown it")
    try:
        nobody = pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user 'nobody' to give the set-user-ID copy to")
    copy = tmp_path / "socat-setuid"
    shutil.copy(socat, copy)
    try:
        os.chown(copy, nobody, -1)
        os.chmod(copy, 0o4755)  # after chown, which clears set-user-ID
    except OSError as e:
        pytest.skip(f"cannot make {copy} set-user-ID nobody: {e}")
    res = subprocess.run([copy, "-V"], capture_output=True, text=True, timeout=10,
                         env=dict(os.environ, LD_SHOW_AUXV="1"))
    if res.returncode != 0 or "AT_SECURE" in res.stdout + res.stderr:
        pytest.skip(f"the kernel did not run {copy} with AT_SECURE (a nosuid mount?): "
                    "the loader would honour LD_PRELOAD")
    return copy


def go_env(gocache):
    # No toolchain download, no module proxy: the local toolchain and std only.
    return dict(os.environ, GOCACHE=str(gocache), GOPATH=str(gocache.parent / "gopath"),
                GOTOOLCHAIN="local", GOPROXY="off", GOFLAGS="", CGO_ENABLED="0",
                GO111MODULE="off")


@pytest.fixture(scope="module")
def gotcp(tmp_path_factory, need):
    """GO_PROGRAM built with the local Go toolchain (apt's golang-go if none).
    The build cache lives in the temporary directory, kept across runs: a
    fresh one takes the standard library 10 s or more to build on 2 cores."""
    go = need(["go"], ["golang-go"])["go"]
    d = tmp_path_factory.mktemp("go")
    (d / "gotcp.go").write_text(GO_PROGRAM)
    cache = pathlib.Path(tempfile.gettempdir()) / f"shunt-tests-gocache-{os.getuid()}"
    res = subprocess.run([go, "build", "-o", d / "gotcp", d / "gotcp.go"], cwd=d,
                         env=go_env(cache / "build"), capture_output=True, text=True,
                         timeout=300)
    if res.returncode != 0:
        pytest.skip(f"go build failed, no Go program to test: {res.stderr.strip()[-500:]}")
    return d / "gotcp", version_of([go, "version"], "go version").split(" linux")[0]


# ---- the scenes

@pytest.fixture
def scripts(tmp_path):
    d = tmp_path / "scripts"
    d.mkdir()
    (d / "hash_server.py").write_text(HASH_SERVER)
    (d / "held_client.py").write_text(HELD_CLIENT)
    return d


class Proc:
    """A program with our pipe as stdin and files for stdout and stderr."""

    def __init__(self, name, argv, env, tmp_path, stdin=subprocess.PIPE):
        self.out = tmp_path / f"{name}.out"
        self.err = tmp_path / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen([str(a) for a in argv], env=env, cwd=tmp_path,
                                         stdin=stdin, stdout=out, stderr=err,
                                         start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def logs(self):
        return (f"--- stdout ---\n{self.out.read_bytes()[-2000:].decode(errors='replace')}\n"
                f"--- stderr ---\n{self.err.read_bytes()[-3000:].decode(errors='replace')}")

    def finish(self, timeout=CLIENT_TIMEOUT_S):
        """Close stdin and wait; the exit status (None if it had to be killed)."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()


@pytest.fixture
def procs():
    started = []

    def start(*args, **kw):
        p = Proc(*args, **kw)
        started.append(p)
        return p
    yield start
    for p in started:
        p.kill()


def status(mode, shunt_cli):
    out = subprocess.run([str(shunt_cli()), "status", "--json"], env=mode.session.env(),
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, f"shunt status --json failed: {out.stderr}"
    return json.loads(out.stdout)


def check_kernel_connection(mode, shunt_cli, pid, port, side):
    """While the connection is open: `shunt status` lists it as a kernel
    connection of process `pid` (the shunt side) to or from `port`, with no
    shunt process at the other end, and `pid` has no circuit."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        st = status(mode, shunt_cli)
        addr = f"127.0.0.1:{port}"
        mine = [c for c in st["connections"] if c["transport"] == "kernel" and c["pid"] == pid
                and c["remote" if side == "client" else "local"] == addr]
        if mine or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert mine, (f"shunt status shows no kernel connection of pid {pid} "
                  f"({side} side of port {port}): {json.dumps(st)[:3000]}")
    assert all(c["peer_pid"] == 0 for c in mine), mine
    # close-wait: the unreachable server half-closed at once (nothing to send).
    assert all(c["state"] in ("established", "close-wait") for c in mine), mine
    circuits = [c for c in st["connections"]
                if c["transport"] == "shm" and pid in (c["client_pid"], c["server_pid"])]
    assert not circuits, f"pid {pid} has shared-memory circuits: {circuits}"


def start_hash_server(mode, servers, scripts, tmp_path):
    portfile = tmp_path / f"hash-{mode.name}.port"
    srv = servers(f"hash-server-{mode.name}",
                  mode.argv([sys.executable, scripts / "hash_server.py", portfile]),
                  mode.env("shunt-side"), tmp_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not portfile.exists():
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"hash server ({mode.name}) did not start\n" + srv.logs(),
                        pytrace=False)
        time.sleep(0.02)
    return srv, int(portfile.read_text())


def client_scene(mode, servers, procs, scripts, tmp_path, shunt_cli, argv_of):
    """The unreachable program as a client (stdin to the connection, then a
    half-close; the answer to stdout) of the hash server. Returns the answer
    and the client's stderr."""
    srv, port = start_hash_server(mode, servers, scripts, tmp_path)
    client = procs(f"client-{mode.name}", mode.argv(argv_of(port)), mode.env("unreachable"),
                   tmp_path)
    try:
        client.proc.stdin.write(DATA[:SIZE // 2])
        client.proc.stdin.flush()
        if mode.shunt:
            check_kernel_connection(mode, shunt_cli, srv.pid, port, "server")
        client.proc.stdin.write(DATA[SIZE // 2:])
    except BrokenPipeError:
        pass  # it exited: its status and output say why
    rc = client.finish()
    assert rc == 0, f"client exit status {rc} ({mode.name})\n" + client.logs()
    try:  # it ends after its one connection
        rc = srv.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        rc = None
    assert rc == 0, f"hash server exit status {rc} ({mode.name})\n" + srv.logs()
    srv.stop()
    return client.out.read_text(errors="replace"), client.err.read_text(errors="replace")


def server_scene(mode, servers, procs, scripts, tmp_path, shunt_cli, argv_of):
    """The unreachable program as a server (the connection to stdout) of the
    held client. Returns the sha256 of what it wrote and its stderr."""
    port = free_port()
    # Nothing to send back: at the end of its input (at once) it half-closes.
    srv = procs(f"server-{mode.name}", mode.argv(argv_of(port)), mode.env("unreachable"),
                tmp_path, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not listening(port):
        assert srv.proc.poll() is None and time.monotonic() < deadline, \
            f"server did not listen on {port} ({mode.name})\n" + srv.logs()
        time.sleep(0.02)
    client = procs(f"held-client-{mode.name}",
                   mode.argv([sys.executable, scripts / "held_client.py", port, SIZE]),
                   mode.env("shunt-side"), tmp_path)
    while b"open" not in client.out.read_bytes():
        assert client.proc.poll() is None and time.monotonic() < deadline + CLIENT_TIMEOUT_S, \
            f"held client did not connect ({mode.name})\n" + client.logs() + srv.logs()
        time.sleep(0.02)
    if mode.shunt:
        check_kernel_connection(mode, shunt_cli, client.pid, port, "client")
    client.proc.stdin.write(b"go on\n")
    client.proc.stdin.flush()
    rc = client.finish()
    assert rc == 0, f"held client exit status {rc} ({mode.name})\n" + client.logs()
    rc = srv.finish()
    assert rc == 0, f"server exit status {rc} ({mode.name})\n" + srv.logs()
    with open(srv.out, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest(), srv.err.read_text(errors="replace")


def unreachable_scene(request, tools, servers, procs, scripts, tmp_path, shunt_session,
                      shunt_cli, side, argv_of, reason, row):
    """Plain, then under shunt, recording the matrix row `row`: (program,
    version, client)."""
    scene = client_scene if side == "client" else server_scene
    want = f"{SIZE} {SHA}\n" if side == "client" else SHA
    try:
        plain, _ = scene(plain_mode(tools), servers, procs, scripts, tmp_path, shunt_cli,
                         argv_of)
        assert plain == want, f"plain: {plain!r}"
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted, err = scene(mode, servers, procs, scripts, tmp_path, shunt_cli, argv_of)
        assert shunted == want, f"under shunt: {shunted!r}"
        # shunt run said why it cannot help, and the library never ran there.
        assert re.search(rf"^shunt: \S+ {re.escape(WARNING[reason])}$", err, re.M), err
        lines, _ = mode.totals("unreachable")
        assert not lines, f"a SHUNT_STATS line from the unreachable program: {lines}"
        lines, total = mode.totals("shunt-side")
        assert lines, "no SHUNT_STATS line from the shunt side"
        kernel = "kernel_accept" if side == "client" else "kernel_connect"
        assert total.get(kernel, 0) >= 1, total
        assert total.get("shm_connect", 0) + total.get("shm_accept", 0) == 0, total
        assert total.get("shm_tx_bytes", 0) + total.get("shm_rx_bytes", 0) == 0, total
    except BaseException as e:
        record(request.config, *row, failure(e), "kernel")
        raise
    record(request.config, *row, "pass", "kernel")


def busybox_version(busybox):
    return version_of([busybox], "BusyBox v").split(" multi-call")[0]


def scene_of(request, name):
    """(side, argv_of(port), reason, matrix row) of scene `name`; the
    fixtures it needs skip it when they cannot be had."""
    python = ("python3 socket server under shunt", "Python " + sys.version.split()[0])
    python_client = "python3 socket client under shunt"
    if name.startswith("busybox"):
        bb = request.getfixturevalue("busybox")
        if name == "busybox-nc-client":
            return ("client", lambda port: [bb, "nc", "127.0.0.1", port], "static",
                    (*python, f"busybox nc (static), {busybox_version(bb)}"))
        return ("server", lambda port: [bb, "nc", "-l", "-p", port, "127.0.0.1"], "static",
                ("busybox nc -l (static)", busybox_version(bb), python_client))
    if name == "setuid-socat-client":
        socat = request.getfixturevalue("setuid_socat")
        version = version_of([socat, "-V"], "socat version").split(" on ")[0]
        return ("client", lambda port: [socat, "-t", "60", "-", f"TCP:127.0.0.1:{port}"],
                "secure", (*python, f"socat, set-user-ID copy (AT_SECURE), {version}"))
    prog, version = request.getfixturevalue("gotcp")
    if name == "go-client":
        return ("client", lambda port: [prog, "client", f"127.0.0.1:{port}"], "go",
                (*python, f"Go net.Dial client, {version}"))
    return ("server", lambda port: [prog, "server", f"127.0.0.1:{port}"], "go",
            ("Go net.Listen server", version, python_client))


SCENES = ["busybox-nc-client", "busybox-nc-server", "setuid-socat-client", "go-client",
          "go-server"]


@pytest.mark.plain
@pytest.mark.parametrize("name", SCENES)
def test_unreachable_plain(request, tools, servers, procs, scripts, tmp_path, name):
    """The scene itself: the bytes arrive whole."""
    side, argv_of, _, _ = scene_of(request, name)
    scene = client_scene if side == "client" else server_scene
    got, _ = scene(plain_mode(tools), servers, procs, scripts, tmp_path, None, argv_of)
    assert got == (f"{SIZE} {SHA}\n" if side == "client" else SHA)


@pytest.mark.shunt
@pytest.mark.parametrize("name", SCENES)
def test_unreachable(request, tools, servers, procs, scripts, tmp_path, shunt_session,
                     shunt_cli, name):
    """The unreachable program and its peer under shunt run: the same bytes
    as plain, over a kernel connection while shunt run said why."""
    side, argv_of, reason, row = scene_of(request, name)
    unreachable_scene(request, tools, servers, procs, scripts, tmp_path, shunt_session,
                      shunt_cli, side, argv_of, reason, row)


# ---- what shunt run says

@pytest.mark.shunt
@pytest.mark.parametrize("kind", ["static", "setuid", "go", "script", "dynamic"])
def test_run_says_unreachable(request, tools, tmp_path, shunt_session, shunt_cli, kind):
    """`shunt run` says, in one line on stderr, why a program will not load
    the preload, and runs it all the same; a dynamically linked program
    gets no such line."""
    if kind == "static":
        prog = request.getfixturevalue("busybox")
        argv, want = [prog, "true"], WARNING["static"]
    elif kind == "setuid":
        prog = request.getfixturevalue("setuid_socat")
        argv, want = [prog, "-V"], WARNING["secure"]
    elif kind == "go":
        prog = request.getfixturevalue("gotcp")[0]
        argv, want = [prog], WARNING["go"]  # its usage, exit 2
    elif kind == "script":
        busybox = request.getfixturevalue("busybox")
        prog = tmp_path / "script.sh"
        prog.write_text(f"#!{busybox} sh\necho ran\n")
        prog.chmod(0o755)
        argv = [prog]
        want = f"is a script for {busybox}, which {WARNING['static']}"
    else:
        prog = shutil.which("true")
        argv, want = ["true"], None
    mode = shunt_mode(tools, shunt_session, shunt_cli)
    res = tools.run(mode.argv(argv), mode.env("warned"), 30, cwd=tmp_path)
    check_said(res, prog, want, 2 if kind == "go" else 0)


def check_said(res, prog, want, rc=0):
    """res exited with rc, and said exactly one line `shunt: <prog> <want>`
    on stderr, or none when `want` is None."""
    assert res.rc == rc, res.describe()
    lines = [ln for ln in res.stderr.decode(errors="replace").splitlines()
             if ln.startswith("shunt: ")]
    if want is None:
        assert not lines, res.describe()
    else:
        assert lines == [f"shunt: {prog} {want}"], res.describe()


@pytest.mark.shunt
def test_run_says_file_capabilities(tools, need, shunt_cli):
    """File capabilities make an exec secure only for a non-root real user
    (root holds every capability already): `shunt run` as nobody says the
    loader will ignore LD_PRELOAD for a socat copy with cap_net_raw+ep, and
    as root it says nothing, as the loader then does load the preload. Both
    checked against the loader itself with LD_SHOW_AUXV, which a secure exec
    ignores."""
    paths = need(["setcap", "setpriv", "socat"], ["libcap2-bin", "util-linux", "socat"])
    if os.geteuid() != 0:
        pytest.skip("giving a file capabilities needs root")
    shunt = str(shunt_cli())
    d = pathlib.Path(tempfile.mkdtemp(prefix="shunt-caps-"))  # nobody must reach it
    try:
        d.chmod(0o755)
        copy = d / "socat-caps"
        shutil.copy(paths["socat"], copy)
        res = subprocess.run([paths["setcap"], "cap_net_raw+ep", copy], capture_output=True,
                             text=True)
        if res.returncode != 0:
            pytest.skip(f"setcap failed (no file capabilities here?): {res.stderr.strip()}")
        nobody = [paths["setpriv"], "--reuid", "nobody", "--regid", "nogroup", "--clear-groups"]
        # LD_SHOW_AUXV for the copy alone (setpriv is a dynamic program too).
        show = ["env", "LD_SHOW_AUXV=1", copy, "-V"]
        as_nobody = subprocess.run(nobody + show, env=tools.plain_env(), capture_output=True,
                                   text=True, timeout=10)
        as_root = subprocess.run(show, env=tools.plain_env(), capture_output=True, text=True,
                                 timeout=10)
        if as_nobody.returncode != 0:
            pytest.skip(f"nobody cannot run {copy}: {as_nobody.stderr.strip()[-300:]}")
        assert "AT_SECURE" not in as_nobody.stdout, "the kernel did not mark the exec secure"
        assert "AT_SECURE:            0" in as_root.stdout, as_root.stdout
        # --no-daemon: nobody has no daemon here; the warning does not depend on one.
        argv = ["run", "--no-daemon", "--", copy, "-V"]
        check_said(tools.run(nobody + [shunt] + argv, tools.plain_env(), 30, cwd=d), copy,
                   "has file capabilities: the loader ignores LD_PRELOAD, "
                   "its sockets stay on the kernel")
        check_said(tools.run([shunt] + argv, tools.plain_env(), 30, cwd=d), copy, None)
    finally:
        shutil.rmtree(d, ignore_errors=True)
