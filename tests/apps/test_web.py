# SPDX-License-Identifier: MIT
"""nginx (a master and two workers, sendfile on) serving small files and a
100 MiB one to curl, wget and wrk, plain and under `shunt run` (nginx and
the client both): over one keep-alive connection and over a connection per
request (`Connection: close`, wget --no-http-keep-alive). The statuses and
the bodies' sha256 must be the same both ways; wrk must see no socket error
and no non-2xx answer either way (its rates are not compared). Under shunt,
the SHUNT_STATS lines must show that the bodies went through shared memory,
which for nginx means through its sendfile path.

    python3 -m pytest tests/apps/test_web.py -m plain   # the programs alone
    python3 -m pytest tests/apps/test_web.py            # and under shunt
"""

import hashlib
import os
import pathlib
import random
import re
import signal

import pytest

from apps_lib import (assert_stats, free_port, need, nginx_conf, plain_mode, record,  # noqa: F401
                      run_client, servers, shunt_mode, version_of)

BIG = "big.bin"
BIG_SIZE = 100 << 20
# name -> size; the small ones below one ring, one across several, one not
# a multiple of anything.
SMALL = {"index.html": 612, "small.bin": 1000, "medium.bin": 300_000, "odd.bin": 65_537}
MISSING = "missing.bin"
WRK_ARGS = ["-t", "2", "-c", "10", "-d", "2s"]

# Plain results per scene, so that the shunt tests compare with the run the
# plain tests already made instead of making it again.
_plain = {}


@pytest.fixture(scope="module")
def www(tmp_path_factory):
    """The served files, made once for the module: random small files and a
    100 MiB one of a seeded pattern (cheap to make, with no period a
    misplaced chunk could hide in). Returns (directory, {name: sha256})."""
    d = tmp_path_factory.mktemp("www")
    rng = random.Random(20261121)
    sums = {}
    for name, size in SMALL.items():
        data = rng.randbytes(size)
        (d / name).write_bytes(data)
        sums[name] = hashlib.sha256(data).hexdigest()
    h = hashlib.sha256()
    with open(d / BIG, "wb") as f:
        for _ in range(BIG_SIZE >> 20):
            chunk = rng.randbytes(1 << 20)
            h.update(chunk)
            f.write(chunk)
    sums[BIG] = h.hexdigest()
    # nginx workers run as root (apps_lib.nginx_conf), so a private directory is fine.
    return d, sums


@pytest.fixture
def web_tools(need):
    return need(["nginx", "curl", "wget", "wrk"], ["nginx", "curl", "wget", "wrk"])


def start_nginx(mode, servers, tmp_path, www_dir, nginx):
    """nginx for `mode` on a fresh port; returns (server, port)."""
    port = free_port()
    d = tmp_path / f"nginx-{mode.name}"
    d.mkdir()
    (d / "nginx.conf").write_text(nginx_conf(d, port, www_dir, sendfile=True, access_log=False))
    srv = servers(f"nginx-{mode.name}",
                  mode.argv([nginx, "-p", d, "-e", d / "error.log", "-c", d / "nginx.conf"]),
                  mode.env("nginx"), d)
    srv.wait_port(port)
    return srv, port


def output_of(srv):
    """What a server that has been stopped wrote, both streams (its log
    files are closed by then)."""
    return "".join(pathlib.Path(f.name).read_text(errors="replace")[-3000:]
                   for f in (srv.out, srv.err))


def stop_nginx(srv):
    # SIGQUIT: graceful; the workers finish and exit normally (their stats lines).
    rc = srv.stop(signal.SIGQUIT)
    assert rc == 0, f"nginx exit status {rc} after SIGQUIT\n" + output_of(srv)


def digest(path):
    """sha256 of a file that is then removed (100 MiB copies add up), or None."""
    if not path.exists():
        return None
    with open(path, "rb") as f:
        d = hashlib.file_digest(f, "sha256").hexdigest()
    path.unlink()
    return d


# ---- the scenes: each returns what must be the same plain and under shunt

CURL_NAMES = ["index.html", "small.bin", BIG, "medium.bin", MISSING, "odd.bin", "small.bin"]


def curl_scene(mode, tmp_path, port, tools, keepalive):
    """One curl fetching CURL_NAMES: on one connection, or with
    `Connection: close` (a connection per request; curl counts them).
    Returns [(name, status, sha256, connections made)]."""
    out = tmp_path / f"curl-{mode.name}-{keepalive}"
    out.mkdir()
    argv = [tools["curl"], "-sS", "-w", r"%{http_code} %{num_connects}\n"]
    if not keepalive:
        argv += ["-H", "Connection: close"]
    for i, name in enumerate(CURL_NAMES):
        argv += ["-o", out / f"{i}-{name}", f"http://127.0.0.1:{port}/{name}"]
    res = run_client(mode, "curl", argv, tmp_path)
    lines = res.stdout.decode().splitlines()
    assert len(lines) == len(CURL_NAMES), res.describe()
    return [(name, *line.split()[:1], digest(out / f"{i}-{name}"), int(line.split()[1]))
            for i, (name, line) in enumerate(zip(CURL_NAMES, lines))]


WGET_NAMES = ["index.html", BIG, "medium.bin", "odd.bin"]


def wget_scene(mode, tmp_path, port, tools, keepalive):
    """One wget fetching WGET_NAMES, then one asking for a missing file (exit
    8, server error). Returns [(name, sha256)] and the missing one's exit
    status and error line."""
    out = tmp_path / f"wget-{mode.name}-{keepalive}"
    flags = [] if keepalive else ["--no-http-keep-alive"]
    run_client(mode, "wget", [tools["wget"], "-nv", "-P", out] + flags
               + [f"http://127.0.0.1:{port}/{n}" for n in WGET_NAMES], tmp_path)
    got = [(n, digest(out / n)) for n in WGET_NAMES]
    res = mode.tools.run(mode.argv([tools["wget"], "-nv", "-O", os.devnull] + flags
                                   + [f"http://127.0.0.1:{port}/{MISSING}"]),
                         mode.env("wget"), 60, cwd=tmp_path)
    errors = [ln for ln in res.stderr.decode(errors="replace").splitlines() if "ERROR" in ln]
    return got, (res.rc, [re.sub(r"^.*?ERROR", "ERROR", ln) for ln in errors])


def wrk_scene(mode, tmp_path, port, tools, keepalive):
    """wrk, 10 connections for 2 s on a small file; with `Connection: close`
    nginx closes after each answer and wrk opens another connection. Returns
    the error lines wrk printed ("Socket errors: ...", "Non-2xx or 3xx
    responses: ...") and whether it made requests at all."""
    argv = [tools["wrk"]] + WRK_ARGS
    if not keepalive:
        argv += ["-H", "Connection: close"]
    res = run_client(mode, "wrk", argv + [f"http://127.0.0.1:{port}/small.bin"], tmp_path)
    text = res.stdout.decode(errors="replace")
    m = re.search(r"^\s*(\d+) requests in ", text, re.M)
    assert m, "no request count in wrk's output\n" + res.describe()
    errors = [ln.strip() for ln in text.splitlines()
              if "Socket errors" in ln or "Non-2xx" in ln]
    return {"requests": int(m.group(1)) > 0, "errors": errors}


SCENES = {"curl": curl_scene, "wget": wget_scene, "wrk": wrk_scene}


def web_round(mode, servers, tmp_path, www_dir, tools, client, keepalive):
    srv, port = start_nginx(mode, servers, tmp_path, www_dir, tools["nginx"])
    try:
        got = SCENES[client](mode, tmp_path, port, tools, keepalive)
    except BaseException:
        srv.stop(signal.SIGKILL)
        raise
    stop_nginx(srv)
    return got


def expected(client, keepalive, sums):
    """What a correct nginx gives each scene (the plain run must match it)."""
    if client == "curl":
        # The first request opens the connection; with keep-alive the rest
        # reuse it (after the 404 too), with `Connection: close` each opens one.
        return [(n, "404" if n == MISSING else "200", sums.get(n, "nginx's 404 page"),
                 1 if (i == 0 or not keepalive) else 0)
                for i, n in enumerate(CURL_NAMES)]
    if client == "wget":
        return [(n, sums[n]) for n in WGET_NAMES], (8, ["ERROR 404: Not Found."])
    return {"requests": True, "errors": []}


def plain_result(tools, servers, tmp_path, www, web_tools, client, keepalive):
    key = (client, keepalive)
    if key not in _plain:
        got = web_round(plain_mode(tools), servers, tmp_path, www[0], web_tools, client,
                        keepalive)
        want = expected(client, keepalive, www[1])
        if client == "curl":  # curl saved the body of the 404 answer too
            want = [(n, code, got[i][2] if n == MISSING else d, c)
                    for i, (n, code, d, c) in enumerate(want)]
        assert got == want, f"plain {client}: {got}"
        _plain[key] = got
    return _plain[key]


def versions(web_tools, client):
    """nginx's version and the client's, short, for the matrix."""
    nginx = version_of([web_tools["nginx"], "-v"], "nginx version").split(": ")[-1]
    if client == "wrk":
        return nginx, version_of([web_tools["wrk"], "-v"], "wrk").split(" [")[0]
    return nginx, version_of([web_tools[client], "--version"]).split(" (")[0].split(" built")[0]


def failure(e):
    """A matrix cell for a failed test: the first line of what went wrong."""
    lines = str(e).strip().splitlines()
    return "FAIL: " + (lines[0][:100] if lines else type(e).__name__)


SCENE_IDS = [("curl", True), ("curl", False), ("wget", True), ("wget", False),
             ("wrk", True), ("wrk", False)]
IDS = [f"{c}-{'keepalive' if k else 'close'}" for c, k in SCENE_IDS]


@pytest.mark.plain
@pytest.mark.parametrize("client,keepalive", SCENE_IDS, ids=IDS)
def test_web_plain(tools, servers, tmp_path, www, web_tools, client, keepalive):
    """The scene itself: every status and body as nginx must serve them."""
    plain_result(tools, servers, tmp_path, www, web_tools, client, keepalive)


@pytest.mark.shunt
@pytest.mark.parametrize("client,keepalive", SCENE_IDS, ids=IDS)
def test_web(request, tools, servers, tmp_path, www, web_tools, shunt_session, shunt_cli,
             client, keepalive):
    """nginx and the client under shunt: what the client got is what it got
    plain, and the bodies travelled through shared memory (nginx's sendfile
    into a circuit)."""
    nginx_version, client_version = versions(web_tools, client)
    label = f"{client} ({'keep-alive' if keepalive else 'Connection: close'})"
    if client == "wget" and not keepalive:
        label = "wget (--no-http-keep-alive)"
    try:
        plain = plain_result(tools, servers, tmp_path, www, web_tools, client, keepalive)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = web_round(mode, servers, tmp_path, www[0], web_tools, client, keepalive)
        assert shunted == plain, f"{client} under shunt got something else than plain"
        sizes = dict(SMALL, **{BIG: BIG_SIZE})
        if client == "curl":
            conns = sum(c for *_, c in plain)
            body = sum(sizes.get(n, 0) for n in CURL_NAMES)
        elif client == "wget":
            conns = 1 if keepalive else len(WGET_NAMES)
            body = sum(sizes[n] for n in WGET_NAMES)
        else:
            conns, body = 10, 0
        assert_stats(mode, client, shm_connect=conns, shm_rx_bytes=body)
        assert_stats(mode, "nginx", shm_accept=conns, shm_tx_bytes=body)
    except BaseException as e:
        record(request.config, "nginx (2 workers, sendfile)", nginx_version,
               f"{label}, {client_version}", failure(e), "shm")
        raise
    record(request.config, "nginx (2 workers, sendfile)", nginx_version,
           f"{label}, {client_version}", "pass", "shm")
