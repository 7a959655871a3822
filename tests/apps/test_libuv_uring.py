# SPDX-License-Identifier: MIT
"""libuv programs whose event loop registers sockets through io_uring
(IORING_OP_EPOLL_CTL, libuv 1.45 and later), plain and under `shunt run`:
an asyncio echo server and client on uvloop (PyPI's, which bundles a
current libuv), and Node.js with UV_USE_IO_URING=1 (a plain ring for
epoll_ctl, an SQPOLL ring for file reads). Server and client both under
shunt in the shunt round; many connections carry checksummed messages, and
every message must come back intact with the digest the plain round had;
SHUNT_STATS must show shared memory, and each program reports that its loop
had an io_uring ring (or the test proves nothing about that path).

uvloop comes from a virtual environment that scripts/setup makes
(build-apps/venv: Debian's python3 takes no pip installs, PEP 668); this
module makes it too when it is missing. Node.js is used if installed with
a libuv of 1.45 or later (Debian 12's nodejs links libuv 1.44: skipped).

    python3 -m pytest tests/apps/test_libuv_uring.py -m plain   # the programs alone
    python3 -m pytest tests/apps/test_libuv_uring.py            # and under shunt
"""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import textwrap
import time

import pytest

from apps_lib import (START_TIMEOUT_S, assert_stats, matrix_row, plain_mode,  # noqa: F401
                      run_client, servers, shunt_mode)

REPO = pathlib.Path(__file__).resolve().parents[2]
VENV = REPO / "build-apps" / "venv"
UVLOOP = "uvloop==0.23.0"
PIP_TIMEOUT_S = 600

# The loop's io_uring ring, seen from inside the process.
HAS_RING_PY = textwrap.dedent("""\
    def has_ring():
        import os
        for fd in os.listdir("/proc/self/fd"):
            try:
                if os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[io_uring]":
                    return True
            except OSError:
                pass
        return False
    """)

UV_SERVER = HAS_RING_PY + textwrap.dedent("""\
    # uvloop echo server: PORTFILE; SIGTERM stops it, exit 0
    import asyncio, json, os, signal, sys, uvloop

    async def echo(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            # Half-close first: libuv closes with syscall(SYS_close), which
            # is not what this test is about (the FIN goes with shutdown).
            writer.write_eof()
        finally:
            writer.close()

    async def main(portfile):
        srv = await asyncio.start_server(echo, "127.0.0.1", 0)
        with open(portfile + ".tmp", "w") as f:
            json.dump({"port": srv.sockets[0].getsockname()[1], "ring": has_ring()}, f)
        os.rename(portfile + ".tmp", portfile)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with srv:
            await stop.wait()

    uvloop.run(main(sys.argv[1]))
    """)

UV_CLIENT = HAS_RING_PY + textwrap.dedent("""\
    # uvloop echo client: PORT CONNS MESSAGES -> one JSON line
    import asyncio, hashlib, json, random, sys, uvloop

    async def one(port, c, messages):
        rnd = random.Random(c)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        h, intact, size = hashlib.sha256(), 0, 0
        for i in range(messages):
            # Mostly small, now and then bigger than any socket buffer.
            body = rnd.randbytes(rnd.randrange(1, 300_000 if i % 50 == 49 else 4096))
            msg = len(body).to_bytes(4, "big") + hashlib.sha256(body).digest() + body
            writer.write(msg)
            await writer.drain()
            got = await reader.readexactly(len(msg))
            n = int.from_bytes(got[:4], "big")
            intact += n == len(body) and hashlib.sha256(got[36:]).digest() == got[4:36]
            h.update(got)
            size += len(got)
        writer.write_eof()
        eof = await reader.read()
        writer.close()
        await writer.wait_closed()
        return intact, size, h.hexdigest(), eof

    async def main(port, conns, messages):
        res = await asyncio.gather(*(one(port, c, messages) for c in range(conns)))
        print(json.dumps({"conns": len(res), "intact": sum(r[0] for r in res),
                          "bytes": sum(r[1] for r in res),
                          "digest": hashlib.sha256("".join(r[2] for r in res).encode()).hexdigest(),
                          "eof": sorted({r[3].hex() for r in res}), "ring": has_ring()}))

    uvloop.run(main(*map(int, sys.argv[1:4])))
    """)

UV_CONNS, UV_MESSAGES = 50, 200


def venv_python():
    """The virtual environment's python with uvloop importable, made (and
    uvloop installed from PyPI) if need be; skips, saying why, when it
    cannot be."""
    py = VENV / "bin" / "python"
    check = [str(py), "-c", "import uvloop"]
    if py.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return py
    why = None
    try:
        if not py.exists():
            res = subprocess.run(["/usr/bin/python3", "-m", "venv", str(VENV)],
                                 capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
            if res.returncode != 0:
                why = "python3 -m venv failed (install python3-venv): " + \
                      (res.stderr.strip().splitlines() or ["?"])[-1]
        if why is None:
            res = subprocess.run([str(py), "-m", "pip", "install", "-q", UVLOOP],
                                 capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
            if res.returncode != 0:
                why = f"pip install {UVLOOP} failed: " + \
                      (res.stderr.strip().splitlines() or ["?"])[-1]
    except (OSError, subprocess.TimeoutExpired) as e:
        why = str(e)
    if why or subprocess.run(check, capture_output=True).returncode != 0:
        pytest.skip(f"no uvloop in {VENV} ({why or 'not importable'}); run scripts/setup")
    return py


def libuv_version(py):
    """uvloop's bundled libuv, as "1.51.0"."""
    res = subprocess.run([str(py), "-c", "import uvloop.loop as l; print(l.libuv_get_version())"],
                         capture_output=True, text=True)
    try:
        v = int(res.stdout.strip())
        return f"{v >> 16}.{(v >> 8) & 255}.{v & 255}"
    except ValueError:
        return "?"


@pytest.fixture
def scripts(tmp_path):
    d = tmp_path / "scripts"
    d.mkdir()
    for name, text in (("uv_server.py", UV_SERVER), ("uv_client.py", UV_CLIENT),
                       ("node_echo.js", NODE_ECHO)):
        (d / name).write_text(text)
    return d


def start_by_portfile(mode, servers, tmp_path, name, argv, role, env=None):
    """A server that writes {"port": ..., "ring": ...} to a file (given last)."""
    portfile = tmp_path / f"{name}-{mode.name}.port"
    srv = servers(f"{name}-{mode.name}", mode.argv(argv + [portfile]), env or mode.env(role),
                  tmp_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not portfile.exists():
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{name} ({mode.name}) did not start\n" + srv.logs(), pytrace=False)
        time.sleep(0.05)
    return srv, json.loads(portfile.read_text())


def uvloop_round(mode, servers, tmp_path, scripts, py):
    srv, info = start_by_portfile(mode, servers, tmp_path, "uvloop-server",
                                  [py, scripts / "uv_server.py"], "uvloop-server")
    res = run_client(mode, "uvloop-client", [py, scripts / "uv_client.py", info["port"],
                                             UV_CONNS, UV_MESSAGES], tmp_path)
    rc = srv.stop(signal.SIGTERM)
    assert rc == 0, f"uvloop server exit status {rc} after SIGTERM\n" + srv.logs()
    seen = json.loads(res.stdout)
    seen["server_ring"] = info["ring"]
    return seen


@pytest.mark.plain
def test_uvloop_echo_plain(tools, servers, tmp_path, scripts):
    """The scene itself: every message intact, and both loops have a ring."""
    py = venv_python()
    seen = uvloop_round(plain_mode(tools), servers, tmp_path, scripts, py)
    n = UV_CONNS * UV_MESSAGES
    assert (seen["conns"], seen["intact"], seen["eof"]) == (UV_CONNS, n, [""]), seen
    assert seen["ring"] and seen["server_ring"], \
        f"uvloop's libuv ({libuv_version(py)}) made no io_uring ring: this test proves nothing"


@pytest.mark.shunt
def test_uvloop_echo(tools, servers, tmp_path, scripts, shunt_session, shunt_cli, request):
    """uvloop server and client both under shunt: every message back intact
    with the plain round's digest, every connection in shared memory, and
    each loop registered its sockets through its io_uring ring."""
    py = venv_python()
    with matrix_row(request, "uvloop asyncio echo server (io_uring epoll_ctl)",
                    f"uvloop {UVLOOP.split('==')[1]}, libuv {libuv_version(py)}",
                    f"uvloop asyncio client, {UV_CONNS} connections"):
        plain = uvloop_round(plain_mode(tools), servers, tmp_path, scripts, py)
        assert plain["ring"] and plain["server_ring"], "no io_uring ring in the plain round"
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = uvloop_round(mode, servers, tmp_path, scripts, py)
        assert shunted == plain, f"under shunt: {shunted}, plain: {plain}"
        assert_stats(mode, "uvloop-client", shm_connect=UV_CONNS,
                     shm_tx_bytes=plain["bytes"], shm_rx_bytes=plain["bytes"])
        assert_stats(mode, "uvloop-server", shm_accept=UV_CONNS,
                     shm_tx_bytes=plain["bytes"], shm_rx_bytes=plain["bytes"])


# ---- Node.js, UV_USE_IO_URING=1

NODE_ECHO = textwrap.dedent("""\
    // node echo: server PORTFILE | client PORT CONNS MESSAGES
    const net = require('net'), fs = require('fs'), crypto = require('crypto');
    function hasRing() {
        return fs.readdirSync('/proc/self/fd').some(fd => {
            try { return fs.readlinkSync('/proc/self/fd/' + fd) === 'anon_inode:[io_uring]'; }
            catch (e) { return false; }
        });
    }
    // Deterministic bodies: message i of connection c.
    function body(c, i) {
        const n = 1 + (c * 7919 + i * 104729) % (i % 25 == 24 ? 200000 : 3000);
        const b = Buffer.alloc(n);
        for (let k = 0; k < n; k++) b[k] = (c * 31 + i * 17 + k * 13) & 255;
        return b;
    }
    const [role, ...args] = process.argv.slice(2);
    if (role === 'server') {
        const srv = net.createServer(s => {
            s.on('data', d => s.write(d));
            s.on('end', () => s.end());
        });
        srv.listen(0, '127.0.0.1', () => {
            const out = args[0];
            fs.writeFileSync(out + '.tmp', JSON.stringify({port: srv.address().port, ring: hasRing()}));
            fs.renameSync(out + '.tmp', out);
        });
        process.on('SIGTERM', () => srv.close(() => process.exit(0)));
    } else {
        const [port, conns, messages] = args.map(Number);
        let done = 0, intact = 0, bytes = 0, fileReads = 0;
        const digests = new Array(conns);
        for (let c = 0; c < conns; c++) {
            const h = crypto.createHash('sha256');
            const sock = net.connect(port, '127.0.0.1');
            let i = 0, want = null, got = [];
            const next = async () => {
                // A file read through the ring between messages.
                if (i % 20 === 0) { await fs.promises.readFile(__filename); fileReads++; }
                want = Buffer.concat([Buffer.from(crypto.createHash('sha256').update(body(c, i)).digest()), body(c, i)]);
                got = [];
                sock.write(want);
            };
            sock.on('connect', next);
            sock.on('data', d => {
                got.push(d);
                const all = Buffer.concat(got);
                if (all.length < want.length) return;
                intact += all.equals(want);
                bytes += all.length;
                h.update(all);
                if (++i < messages) next(); else sock.end();
            });
            sock.on('end', () => {});
            sock.on('close', () => {
                digests[c] = h.digest('hex');
                if (++done === conns)
                    console.log(JSON.stringify({conns, intact, bytes, fileReads, ring: hasRing(),
                        digest: crypto.createHash('sha256').update(digests.join('')).digest('hex')}));
            });
        }
    }
    """)

NODE_CONNS, NODE_MESSAGES = 40, 100


def node_with_uring_libuv():
    """(node path, version, libuv version), or skip: libuv 1.45 made io_uring
    epoll_ctl batching."""
    node = shutil.which("node")
    if not node:
        pytest.skip("node not installed (Debian 12's nodejs has libuv 1.44, without io_uring "
                    "anyway); a Node.js with libuv >= 1.45 exercises this path")
    res = subprocess.run([node, "-p", "process.version + ' ' + process.versions.uv"],
                         capture_output=True, text=True)
    try:
        version, uv = res.stdout.split()
        major, minor = map(int, uv.split(".")[:2])
    except ValueError:
        pytest.skip(f"cannot tell node's libuv version: {res.stdout!r} {res.stderr!r}")
    if (major, minor) < (1, 45):
        pytest.skip(f"node {version} has libuv {uv}: io_uring came with libuv 1.45")
    return node, version, uv


def node_round(mode, servers, tmp_path, scripts, node):
    def env(role):
        e = dict(mode.env(role))
        e["UV_USE_IO_URING"] = "1"
        return e
    srv, info = start_by_portfile(mode, servers, tmp_path, "node-server",
                                  [node, scripts / "node_echo.js", "server"], "node-server",
                                  env("node-server"))
    argv = mode.argv([node, scripts / "node_echo.js", "client", info["port"], NODE_CONNS,
                      NODE_MESSAGES])
    res = mode.tools.run(argv, env("node-client"), 120, cwd=tmp_path)
    if res.timed_out or res.rc != 0:
        pytest.fail(f"node client failed ({mode.name}):\n" + res.describe(), pytrace=False)
    rc = srv.stop(signal.SIGTERM)
    assert rc == 0, f"node server exit status {rc} after SIGTERM\n" + srv.logs()
    seen = json.loads(res.stdout)
    seen["server_ring"] = info["ring"]
    return seen


@pytest.mark.plain
def test_node_uring_echo_plain(tools, servers, tmp_path, scripts):
    node, _, _ = node_with_uring_libuv()
    seen = node_round(plain_mode(tools), servers, tmp_path, scripts, node)
    n = NODE_CONNS * NODE_MESSAGES
    assert (seen["conns"], seen["intact"]) == (NODE_CONNS, n), seen
    assert seen["ring"] and seen["server_ring"], "node made no io_uring ring with UV_USE_IO_URING=1"


@pytest.mark.shunt
def test_node_uring_echo(tools, servers, tmp_path, scripts, shunt_session, shunt_cli, request):
    """Node.js server and client under shunt with UV_USE_IO_URING=1: its
    epoll_ctl ring and its SQPOLL file ring both work, every message comes
    back intact with the plain round's digest, connections in shared memory."""
    node, version, uv = node_with_uring_libuv()
    with matrix_row(request, "node net echo server (UV_USE_IO_URING=1)",
                    f"node {version}, libuv {uv}",
                    f"node net client, {NODE_CONNS} connections, fs reads"):
        plain = node_round(plain_mode(tools), servers, tmp_path, scripts, node)
        assert plain["ring"] and plain["server_ring"], "no io_uring ring in the plain round"
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = node_round(mode, servers, tmp_path, scripts, node)
        assert shunted == plain, f"under shunt: {shunted}, plain: {plain}"
        assert_stats(mode, "node-client", shm_connect=NODE_CONNS,
                     shm_tx_bytes=plain["bytes"], shm_rx_bytes=plain["bytes"])
        assert_stats(mode, "node-server", shm_accept=NODE_CONNS,
                     shm_tx_bytes=plain["bytes"], shm_rx_bytes=plain["bytes"])
