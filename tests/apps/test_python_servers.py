# SPDX-License-Identifier: MIT
"""Servers from Python's standard library, plain and under `shunt run`:
`python3 -m http.server` (a thread per request) fetched with urllib from
several threads; an asyncio echo server with an asyncio client of 50
concurrent connections; a non-blocking echo server on each of select(),
poll() and epoll (the selectors module) with threads of blocking socket
clients. Server and client are both under shunt in the shunt round; what
the clients see must be what they saw plain, and the SHUNT_STATS lines must
show that the connections went through shared memory.

    python3 -m pytest tests/apps/test_python_servers.py -m plain   # the programs alone
    python3 -m pytest tests/apps/test_python_servers.py            # and under shunt
"""

import hashlib
import json
import os
import signal
import sys
import textwrap
import time

import pytest

from apps_lib import (START_TIMEOUT_S, assert_stats, free_port, matrix_row,  # noqa: F401
                      plain_mode, run_client, servers, shunt_mode)

PYTHON = f"python3 {sys.version.split()[0]}"

# ---- http.server and urllib

# Served files: path -> size (None: a fixed text). No index.html: / lists.
HTTP_FILES = {"hello.txt": None, "random.bin": 5 << 20, "medium.bin": 200_000,
              "space name.txt": None, "sub/nested.txt": None, "empty.bin": 0}
# What the client asks for; /sub redirects to /sub/, a listing.
HTTP_PATHS = ["/", "/hello.txt", "/random.bin", "/medium.bin", "/space%20name.txt",
              "/sub", "/sub/", "/sub/nested.txt", "/empty.bin", "/missing", "/hello.txt?q=1"]
HTTP_ROUNDS, HTTP_THREADS = 3, 4
HTTP_REQUESTS = HTTP_ROUNDS * (len(HTTP_PATHS) + 2)   # /sub is two requests; one HEAD a round

HTTP_CLIENT = textwrap.dedent("""\
    # urllib client: PORT ROUNDS THREADS PATH... -> one JSON list, sorted
    import concurrent.futures, hashlib, json, sys, urllib.error, urllib.request

    port, rounds, threads = map(int, sys.argv[1:4])
    paths = sys.argv[4:]
    base = f"http://127.0.0.1:{port}"
    # Headers that say the same thing every time (not Date, Server, Last-Modified).
    KEEP = ("Content-Type", "Content-Length", "Location", "Connection")

    def fetch(job):
        n, method, path = job
        req = urllib.request.Request(base + path, method=method)
        try:
            with urllib.request.urlopen(req) as r:
                status, headers, body, url = r.status, r.headers, r.read(), r.url
        except urllib.error.HTTPError as e:
            status, headers, body, url = e.code, e.headers, e.read(), e.url
        return [n, method, path, url.removeprefix(base), status,
                {k: headers[k] for k in KEEP if k in headers},
                len(body), hashlib.sha256(body).hexdigest()]

    jobs = [(n, "GET", p) for n in range(rounds) for p in paths]
    jobs += [(n, "HEAD", "/random.bin") for n in range(rounds)]
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        out = list(ex.map(fetch, jobs))
    print(json.dumps(sorted(out)))
    """)


def http_files(tmp_path):
    d = tmp_path / "www"
    for name, size in HTTP_FILES.items():
        p = d / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(f"this is {name}\n".encode() if size is None else os.urandom(size))
    return d


def http_round(mode, servers, tmp_path, www, scripts):
    port = free_port()
    srv = servers(f"http-server-{mode.name}",
                  mode.argv([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                             "--directory", www, port]),
                  mode.env("http-server"), tmp_path)
    srv.wait_port(port)
    res = run_client(mode, "urllib", [sys.executable, scripts / "http_client.py", port,
                                      HTTP_ROUNDS, HTTP_THREADS] + HTTP_PATHS, tmp_path)
    # SIGINT: http.server says "Keyboard interrupt received" and exits 0 (its stats line).
    rc = srv.stop(signal.SIGINT)
    assert rc == 0, f"http.server exit status {rc} after SIGINT\n" + srv.logs()
    return json.loads(res.stdout)


@pytest.fixture
def scripts(tmp_path):
    d = tmp_path / "scripts"
    d.mkdir()
    for name, text in (("http_client.py", HTTP_CLIENT), ("asyncio_server.py", ASYNCIO_SERVER),
                       ("asyncio_client.py", ASYNCIO_CLIENT),
                       ("selectors_server.py", SELECTORS_SERVER),
                       ("socket_client.py", SOCKET_CLIENT)):
        (d / name).write_text(text)
    return d


@pytest.mark.plain
def test_http_server_plain(tools, servers, tmp_path, scripts):
    """The scene itself: every file intact with its type and length, the
    listings, the redirect, 404 for the missing file, a HEAD without body."""
    www = http_files(tmp_path)
    seen = http_round(plain_mode(tools), servers, tmp_path, www, scripts)
    assert len(seen) == HTTP_ROUNDS * (len(HTTP_PATHS) + 1)
    for n, method, path, url, status, headers, size, digest in seen:
        name = path.split("?")[0].lstrip("/").replace("%20", " ")
        if name in HTTP_FILES and method == "GET":
            data = (www / name).read_bytes()
            assert (status, size, digest) == (200, len(data),
                                              hashlib.sha256(data).hexdigest()), path
            assert headers["Content-Length"] == str(len(data)), (path, headers)
        elif path == "/missing":
            assert status == 404, seen
        elif path == "/sub":
            assert (url, status) == ("/sub/", 200), (url, status)
        elif method == "HEAD":
            assert (status, size, headers["Content-Length"]) == (200, 0, str(5 << 20)), headers
        else:
            assert status == 200 and headers["Content-Type"].startswith("text/html"), path


@pytest.mark.shunt
def test_http_server(tools, servers, tmp_path, scripts, shunt_session, shunt_cli, request):
    """http.server and the urllib client both under shunt: the same statuses,
    headers and bodies as plain; each request's connection went through
    shared memory, and the handler threads sent the files over it."""
    with matrix_row(request, "python3 -m http.server (ThreadingHTTPServer)", PYTHON,
                    f"{PYTHON} urllib.request, {HTTP_THREADS} threads"):
        www = http_files(tmp_path)
        plain = http_round(plain_mode(tools), servers, tmp_path, www, scripts)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = http_round(mode, servers, tmp_path, www, scripts)
        for p, s in zip(plain, shunted):
            assert s == p, f"under shunt: {s}, plain: {p}"
        assert len(shunted) == len(plain)
        body_bytes = HTTP_ROUNDS * sum(size or 0 for size in HTTP_FILES.values())
        assert_stats(mode, "urllib", shm_connect=HTTP_REQUESTS, shm_rx_bytes=body_bytes)
        assert_stats(mode, "http-server", shm_accept=HTTP_REQUESTS, shm_tx_bytes=body_bytes)


# ---- asyncio echo server and client

ASYNCIO_SERVER = textwrap.dedent("""\
    # asyncio echo server: PORTFILE; SIGTERM stops it, exit 0
    import asyncio, os, signal, sys

    async def echo(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def main(portfile):
        srv = await asyncio.start_server(echo, "127.0.0.1", 0)
        with open(portfile + ".tmp", "w") as f:
            f.write(str(srv.sockets[0].getsockname()[1]))
        os.rename(portfile + ".tmp", portfile)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with srv:
            await stop.wait()

    asyncio.run(main(sys.argv[1]))
    """)

ASYNCIO_CLIENT = textwrap.dedent("""\
    # asyncio echo client: PORT CONNS MESSAGES -> one JSON line
    import asyncio, hashlib, json, random, sys

    async def one(port, c, messages):
        rnd = random.Random(c)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        h, intact, size = hashlib.sha256(), 0, 0
        for i in range(messages):
            # Mostly small, now and then bigger than any socket buffer.
            msg = rnd.randbytes(rnd.randrange(1, 300_000 if i % 50 == 49 else 4096))
            writer.write(msg)
            await writer.drain()
            got = await reader.readexactly(len(msg))
            h.update(got)
            intact += got == msg
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
                          "eof": sorted({r[3].hex() for r in res})}))

    asyncio.run(main(*map(int, sys.argv[1:4])))
    """)

ASYNCIO_CONNS, ASYNCIO_MESSAGES = 50, 200


def start_by_portfile(mode, servers, tmp_path, name, argv, role):
    """A server that writes the port it bound to a file (given last)."""
    portfile = tmp_path / f"{name}-{mode.name}.port"
    srv = servers(f"{name}-{mode.name}", mode.argv(argv + [portfile]), mode.env(role), tmp_path)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not portfile.exists():
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{name} ({mode.name}) did not start\n" + srv.logs(), pytrace=False)
        time.sleep(0.05)
    return srv, int(portfile.read_text())


def asyncio_round(mode, servers, tmp_path, scripts):
    srv, port = start_by_portfile(mode, servers, tmp_path, "asyncio-server",
                                  [sys.executable, scripts / "asyncio_server.py"],
                                  "asyncio-server")
    res = run_client(mode, "asyncio-client", [sys.executable, scripts / "asyncio_client.py",
                                              port, ASYNCIO_CONNS, ASYNCIO_MESSAGES], tmp_path)
    rc = srv.stop(signal.SIGTERM)
    assert rc == 0, f"asyncio server exit status {rc} after SIGTERM\n" + srv.logs()
    return json.loads(res.stdout)


@pytest.mark.plain
def test_asyncio_echo_plain(tools, servers, tmp_path, scripts):
    seen = asyncio_round(plain_mode(tools), servers, tmp_path, scripts)
    n = ASYNCIO_CONNS * ASYNCIO_MESSAGES
    assert (seen["conns"], seen["intact"], seen["eof"]) == (ASYNCIO_CONNS, n, [""]), seen


@pytest.mark.shunt
def test_asyncio_echo(tools, servers, tmp_path, scripts, shunt_session, shunt_cli, request):
    """An asyncio echo server and an asyncio client of 50 concurrent
    connections (one epoll loop each side), both under shunt: every message
    back intact, the same digest as plain, every connection in shared memory."""
    with matrix_row(request, "python3 asyncio echo server (start_server)", PYTHON,
                    f"{PYTHON} asyncio client, {ASYNCIO_CONNS} connections"):
        plain = asyncio_round(plain_mode(tools), servers, tmp_path, scripts)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = asyncio_round(mode, servers, tmp_path, scripts)
        assert shunted == plain, f"under shunt: {shunted}, plain: {plain}"
        assert_stats(mode, "asyncio-client", shm_connect=ASYNCIO_CONNS,
                     shm_tx_bytes=plain["bytes"], shm_rx_bytes=plain["bytes"])
        assert_stats(mode, "asyncio-server", shm_accept=ASYNCIO_CONNS,
                     shm_tx_bytes=plain["bytes"], shm_rx_bytes=plain["bytes"])


# ---- a selectors echo server, blocking socket clients

SELECTORS_SERVER = textwrap.dedent("""\
    # non-blocking echo server: KIND (select|poll|epoll) PORTFILE; SIGTERM stops it, exit 0
    import os, selectors, signal, socket, sys

    kind, portfile = sys.argv[1], sys.argv[2]
    sel = {"select": selectors.SelectSelector, "poll": selectors.PollSelector,
           "epoll": selectors.EpollSelector}[kind]()
    stop = False

    def on_term(*_):
        global stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    ls.setblocking(False)
    sel.register(ls, selectors.EVENT_READ, None)
    with open(portfile + ".tmp", "w") as f:
        f.write(str(ls.getsockname()[1]))
    os.rename(portfile + ".tmp", portfile)
    pending = {}                    # connection -> bytes not yet echoed

    def update(c):
        sel.modify(c, selectors.EVENT_READ | (selectors.EVENT_WRITE if pending[c] else 0), None)

    while not stop:
        for key, ev in sel.select(timeout=0.2):
            s = key.fileobj
            if s is ls:
                try:
                    c, _ = ls.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                pending[c] = b""
                sel.register(c, selectors.EVENT_READ, None)
                continue
            if ev & selectors.EVENT_WRITE and pending[s]:
                try:
                    n = s.send(pending[s])
                    pending[s] = pending[s][n:]
                except BlockingIOError:
                    pass
            if ev & selectors.EVENT_READ:
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except ConnectionError:
                    data = b""
                if not data:
                    # The client is done sending: finish echoing, then close.
                    s.setblocking(True)
                    s.sendall(pending.pop(s))
                    sel.unregister(s)
                    s.close()
                    continue
                pending[s] += data
            if s in pending:
                update(s)
    """)

SOCKET_CLIENT = textwrap.dedent("""\
    # blocking echo client: PORT THREADS CONNS_PER_THREAD MESSAGES -> one JSON line
    import hashlib, json, random, socket, sys, threading

    port, threads, per, messages = map(int, sys.argv[1:5])
    results = {}

    def conn(c):
        rnd = random.Random(c)
        h, intact, size = hashlib.sha256(), 0, 0
        with socket.create_connection(("127.0.0.1", port)) as s:
            for i in range(messages):
                msg = rnd.randbytes(rnd.randrange(1, 16384))
                s.sendall(msg)
                got = bytearray()
                while len(got) < len(msg):
                    b = s.recv(len(msg) - len(got))
                    if not b:
                        break
                    got += b
                h.update(got)
                intact += got == msg
                size += len(got)
            s.shutdown(socket.SHUT_WR)
            eof = s.recv(1)
        results[c] = (intact, size, h.hexdigest(), eof)

    def worker(t):
        for k in range(per):
            conn(t * per + k)

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    res = [results[c] for c in sorted(results)]
    print(json.dumps({"conns": len(res), "intact": sum(r[0] for r in res),
                      "bytes": sum(r[1] for r in res),
                      "digest": hashlib.sha256("".join(r[2] for r in res).encode()).hexdigest(),
                      "eof": sorted({r[3].hex() for r in res})}))
    """)

SOCK_THREADS, SOCK_PER_THREAD, SOCK_MESSAGES = 6, 4, 100
SOCK_CONNS = SOCK_THREADS * SOCK_PER_THREAD


def selectors_round(mode, servers, tmp_path, scripts, kind):
    srv, port = start_by_portfile(mode, servers, tmp_path, f"selectors-{kind}",
                                  [sys.executable, scripts / "selectors_server.py", kind],
                                  f"selectors-{kind}")
    res = run_client(mode, "socket-client", [sys.executable, scripts / "socket_client.py", port,
                                             SOCK_THREADS, SOCK_PER_THREAD, SOCK_MESSAGES],
                     tmp_path)
    rc = srv.stop(signal.SIGTERM)
    assert rc == 0, f"selectors server exit status {rc} after SIGTERM\n" + srv.logs()
    return json.loads(res.stdout)


SELECTOR_KINDS = ["select", "poll", "epoll"]


@pytest.mark.plain
@pytest.mark.parametrize("kind", SELECTOR_KINDS)
def test_selectors_echo_plain(tools, servers, tmp_path, scripts, kind):
    seen = selectors_round(plain_mode(tools), servers, tmp_path, scripts, kind)
    n = SOCK_CONNS * SOCK_MESSAGES
    assert (seen["conns"], seen["intact"], seen["eof"]) == (SOCK_CONNS, n, [""]), seen


@pytest.mark.shunt
@pytest.mark.parametrize("kind", SELECTOR_KINDS)
def test_selectors_echo(tools, servers, tmp_path, scripts, shunt_session, shunt_cli, request,
                        kind):
    """A single-threaded non-blocking echo server waiting in select(), poll()
    or epoll, and threads of blocking socket clients, both under shunt: every
    message back intact, the same digest as plain, every connection in
    shared memory."""
    with matrix_row(request, f"python3 selectors echo server ({kind})", PYTHON,
                    f"{PYTHON} blocking socket client, {SOCK_THREADS} threads"):
        plain = selectors_round(plain_mode(tools), servers, tmp_path, scripts, kind)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = selectors_round(mode, servers, tmp_path, scripts, kind)
        assert shunted == plain, f"under shunt: {shunted}, plain: {plain}"
        assert_stats(mode, "socket-client", shm_connect=SOCK_CONNS,
                     shm_tx_bytes=plain["bytes"], shm_rx_bytes=plain["bytes"])
        assert_stats(mode, f"selectors-{kind}", shm_accept=SOCK_CONNS,
                     shm_tx_bytes=plain["bytes"], shm_rx_bytes=plain["bytes"])
