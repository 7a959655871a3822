# SPDX-License-Identifier: MIT
"""libuv programs, plain and under shunt: a C program on Debian's libuv1, the
same protocol in Node.js, and in Python on uvloop (a current libuv, which
adds descriptors to its epoll set through io_uring). Each is server and
client of itself (tests/apps/uvecho.{c,js,py}): many requests over a few
kept-alive connections, then one connection per request, every body echoed
with its checksum; between requests the server writes each body to a file
and reads it back (libuv closes sockets with the raw close system call, and
a descriptor number the library mistook for a dead connection would send a
file's bytes to the peer). Afterwards the server holds no circuit mapping
and no descriptor more than before, and shuntd's memory is back where it
was.

SHUNT_APPS_LIGHT=1 (the reruns of scripts/test) makes the runs smaller.
"""

import os
import pathlib
import shutil
import signal
import subprocess
import time

import pytest

from conftest import SPARES_MAX, spare_inodes
from apps_lib import (assert_stats, matrix_row, plain_mode, run_client, servers,  # noqa: F401
                      shunt_mode, version_of)

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
LIGHT = bool(os.environ.get("SHUNT_APPS_LIGHT"))
CONNS = 8
MAXBODY = 2048
# Requests per run: 100,000 over kept-alive connections, then 100,000
# connections of one request each; the reruns of scripts/test (sanitizers,
# an ordinary user) take fewer.
SIZES = {"c": (100_000, 100_000), "node": (100_000, 100_000), "uvloop": (100_000, 100_000)}
LIGHT_SIZES = {"c": (20_000, 10_000), "node": (10_000, 5_000), "uvloop": (10_000, 5_000)}
SHUNTD_GROWTH_MAX = 4 << 20  # bytes; a leak of 40 bytes per connection would show


def venv_python():
    """A Python that has uvloop (scripts/setup makes build-apps/venv), or None."""
    for py in (REPO / "build-apps" / "venv" / "bin" / "python",):
        if py.exists() and subprocess.run([py, "-c", "import uvloop"],
                                          capture_output=True).returncode == 0:
            return py
    return None


def runtime_argv(runtime, build_dir):
    """(argv prefix, version for the matrix), or a skip saying what is missing."""
    if runtime == "c":
        prog = build_dir / "tests" / "apps" / "uvecho"
        if not prog.exists():
            pytest.skip(f"{prog} not built: Debian's libuv1-dev is missing (scripts/setup)")
        ver = subprocess.run(["pkg-config", "--modversion", "libuv"], capture_output=True,
                             text=True).stdout.strip() or "?"
        return [prog], f"libuv {ver} (Debian libuv1)"
    if runtime == "node":
        node = shutil.which("node") or shutil.which("nodejs")
        if not node:
            pytest.skip("no node: install nodejs (scripts/setup)")
        return [node, HERE / "uvecho.js"], "Node.js " + version_of([node, "--version"])
    py = venv_python()
    if not py:
        pytest.skip("no Python with uvloop at build-apps/venv (scripts/setup makes it)")
    ver = subprocess.run([py, "-c", "import uvloop; print(uvloop.__version__)"],
                         capture_output=True, text=True).stdout.strip()
    return [py, HERE / "uvecho.py"], f"uvloop {ver} (its own libuv) on Python"


def wait_line(server, prefix, timeout=15):
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in pathlib.Path(server.out.name).read_text(errors="replace").splitlines():
            if line.startswith(prefix):
                return line
        if server.proc.poll() is not None:
            break
        time.sleep(0.02)
    pytest.fail(f"{server.name}: no {prefix!r} line\n" + server.logs(), pytrace=False)


def footprint(pid):
    """(circuit mappings, descriptors but spare kernel halves, those) of process pid."""
    with open(f"/proc/{pid}/maps") as f:
        circuits = sum("shunt-circuit" in line for line in f)
    kept = len(spare_inodes(pid))
    return circuits, len(os.listdir(f"/proc/{pid}/fd")) - kept, kept


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def settled_rss(pid, before, timeout=5.0):
    """shuntd's resident size once what it keeps warm a while is given
    back: a channel's freed slots keep their pages (which shuntd has
    touched) until the channel has been quiet for a second
    (src/daemon/chan_pages.c). A leak stays, and shows at the deadline."""
    deadline = time.monotonic() + timeout
    first = rss(pid)
    while True:
        now = rss(pid)
        if now - before < SHUNTD_GROWTH_MAX or time.monotonic() > deadline:
            print(f"shuntd resident: {before} before, {first} at the end, {now} settled; "
                  f"{rss_parts(pid)}")
            return now
        time.sleep(0.2)


def rss_parts(pid):
    """What shuntd's resident memory is (its heap, or channel pages it
    touched), for the message of a failure."""
    with open(f"/proc/{pid}/status") as f:
        return " ".join(line.split(":")[0] + "=" + line.split()[1]
                        for line in f if line.startswith(("RssAnon", "RssFile", "RssShmem")))


def shuntd_pid(session):
    from conftest import session_processes
    for pid in session_processes(session.socket):
        try:
            if pathlib.Path(f"/proc/{pid}/comm").read_text().strip() == "shuntd":
                return pid
        except OSError:
            continue
    return None


def run_all(mode, prefix, runtime, servers, tmp_path, session=None):  # noqa: F811
    """Server up, a warm-up client, then the two big runs; returns the
    clients' outputs and the server's last line (and, under shunt, what the
    server and shuntd held before and after)."""
    files = tmp_path / f"files-{mode.name}"
    files.mkdir()
    srv = servers(f"uvecho-{runtime}-{mode.name}", mode.argv(prefix + ["server", files]),
                  mode.env("server"), tmp_path)
    port = wait_line(srv, "port ").split()[1]
    keep, per = (LIGHT_SIZES if LIGHT else SIZES)[runtime]
    out = []
    # The warm-up makes whatever the server keeps for good (its libuv pool,
    # the library's notice hub and links) before the baseline is taken.
    out.append(run_client(mode, "client", prefix + ["client", port, CONNS, 200, MAXBODY,
                                                    "perreq"], tmp_path).stdout)
    before = footprint(srv.pid)
    daemon = shuntd_pid(session) if session else None
    daemon_before = rss(daemon) if daemon else 0
    for total, how in ((keep, "keepalive"), (per, "perreq")):
        res = run_client(mode, "client", prefix + ["client", port, CONNS, total, MAXBODY, how],
                         tmp_path, timeout=600)
        out.append(res.stdout)
    after = footprint(srv.pid)
    daemon_after = settled_rss(daemon, daemon_before) if daemon else 0
    rc = srv.stop(signal.SIGTERM)
    last = wait_line(srv, "served ")
    assert rc == 0, f"server exit {rc}\n" + srv.logs()
    return out, last, (before, after, daemon_before, daemon_after, 200 + keep + per)


@pytest.mark.shunt
@pytest.mark.parametrize("runtime", ["c", "node", "uvloop"])
def test_libuv_echo(runtime, request, tools, build_dir, shunt_session, shunt_cli, servers,
                    tmp_path, sanitized):
    prefix, version = runtime_argv(runtime, build_dir)
    with matrix_row(request, f"uvecho ({runtime})", version,
                    "itself: keep-alive and a connection per request, files between", "shm"):
        plain = run_all(plain_mode(tools), prefix, runtime, servers, tmp_path)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunt = run_all(mode, prefix, runtime, servers, tmp_path, shunt_session)
        assert shunt[0] == plain[0], (plain[0], shunt[0])
        total = shunt[2][4]
        assert plain[1] == shunt[1] == f"served {total} files_ok {total} files_bad 0", \
            (plain[1], shunt[1])
        # Every connection on shared memory, nothing on the kernel.
        _, srv = mode.totals("server")
        _, cli = mode.totals("client")
        conns = CONNS + 200 + (SIZES if not LIGHT else LIGHT_SIZES)[runtime][1]
        assert srv.get("shm_accept", 0) >= conns and not srv.get("kernel_accept"), srv
        assert cli.get("shm_connect", 0) >= conns and not cli.get("kernel_connect"), cli
        before, after, d_before, d_after, _ = shunt[2]
        assert after[:2] == before[:2] and after[2] <= SPARES_MAX, \
            f"server (circuit mappings, descriptors, spare halves): {before} -> {after}"
        # ASan keeps freed memory in quarantine, so shuntd's resident size
        # grows there without a leak; its LeakSanitizer report at exit (which
        # the shunt_session fixture reads) stands for this check instead.
        if not sanitized:
            # (What the growth was made of is in the captured output.)
            assert d_after - d_before < SHUNTD_GROWTH_MAX, (d_before, d_after)


def test_node_emfile_trick(tools, shunt_session, shunt_cli, tmp_path):
    """libuv's answer to EMFILE in a Node.js server whose limit leaves no
    room above it (tests/apps/uvemfile.js): the client process sees its
    connection end, under shunt as plain, and through shared memory."""
    node = shutil.which("node") or shutil.which("nodejs")
    if not node:
        pytest.skip("no node: install nodejs (scripts/setup)")
    argv = ["prlimit", "--nofile=256:256", "--", node, HERE / "uvemfile.js"]
    out = {}
    for mode in (plain_mode(tools), shunt_mode(tools, shunt_session, shunt_cli)):
        res = run_client(mode, "uvemfile", argv, tmp_path)
        out[mode.name] = res.stdout.decode(errors="replace")
        if mode.shunt:
            assert_stats(mode, "uvemfile", shm_connect=1, shm_accept=1)
    assert out["plain"] == ("server: filled up EMFILE\nclient: closed\n"
                            "server: the client exited with 0\n"), out["plain"]
    assert out["shunt"] == out["plain"]
