# SPDX-License-Identifier: MIT
"""memcached (two worker threads), plain and under `shunt run`, driven by
libmemcached-tools (memccp, memccat, memcexist, memcrm, memcstat, and the
load generators memcslap and memcaslap, each several threads) and by a
small Python client speaking the text protocol (set, get, multi-get, incr,
decr, add, append, delete on 100 keys, values up to 500 KB, every byte
checked). Server and clients are both under shunt in the shunt round; what
the clients see, and what the server counted, must be what they were plain,
and the SHUNT_STATS lines must show that the connections went through
shared memory.

    python3 -m pytest tests/apps/test_memcached.py -m plain   # the programs alone
    python3 -m pytest tests/apps/test_memcached.py            # and under shunt
"""

import hashlib
import json
import os
import re
import signal
import sys
import textwrap

import pytest

from apps_lib import (CLIENT_TIMEOUT_S, assert_stats, free_port, matrix_row,  # noqa: F401
                      need, plain_mode, run_client, servers, shunt_mode, version_of)

# Files memccp stores under their names: text, binary, near the 1 MB item limit.
MC_FILES = {"small.txt": None, "medium.bin": 300_000, "large.bin": 900_000}
SLAP_KEYS, SLAP_THREADS = 1000, 2
ASLAP_OPS, ASLAP_THREADS, ASLAP_CONC = 10000, 2, 8
# Server counters that the same clients move the same way every time.
MC_COUNTERS = ("cmd_get", "cmd_set", "get_hits", "get_misses", "delete_hits",
               "delete_misses", "incr_hits", "incr_misses", "decr_hits", "curr_items",
               "total_connections")

PY_KEYS = 100

PY_CLIENT = textwrap.dedent("""\
    # memcached text protocol: PORT KEYS -> one JSON line
    import hashlib, json, random, socket, sys

    port, n = int(sys.argv[1]), int(sys.argv[2])
    s = socket.create_connection(("127.0.0.1", port))
    f = s.makefile("rb")
    replies = []            # every reply line that is not a value's data
    intact = misses = 0

    def value(i):           # up to 99 * 5000 + 6 bytes, the same every run
        return random.Random(i).randbytes(i * 5000 + i % 7)

    def send(line, data=None):
        s.sendall(line.encode() + b"\\r\\n" + (b"" if data is None else data + b"\\r\\n"))

    def reply():
        r = f.readline().rstrip(b"\\r\\n").decode()
        replies.append(r)
        return r

    def values():
        \"\"\"The VALUE blocks of a get, up to END: {key: (flags, data)}.\"\"\"
        got = {}
        while (r := reply()) != "END":
            _, key, flags, size = r.split()
            data = f.read(int(size) + 2)
            assert data.endswith(b"\\r\\n"), r
            got[key] = (int(flags), data[:-2])
        return got

    def check(got, keys):
        global intact, misses
        for i in keys:
            have = got.get(f"key:{i}")
            if have is None:
                misses += 1
            elif have == (i, value(i)):
                intact += 1

    for i in range(n):
        send(f"set key:{i} {i} 0 {len(value(i))}", value(i))
        reply()
    for i in range(n):                                  # one by one
        send(f"get key:{i}")
        check(values(), [i])
    for b in range(0, n, 10):                           # ten at a time
        send("get " + " ".join(f"key:{i}" for i in range(b, b + 10)))
        check(values(), range(b, b + 10))
    mark = len(replies)
    send("set counter 0 0 1", b"0"); reply()
    for k in range(10):
        send(f"incr counter {k + 1}"); reply()
    send("decr counter 100"); reply()                   # floors at 0
    send("incr nosuch 1"); reply()
    send("incr key:1 1"); reply()                       # not a number
    send("add key:3 0 0 1", b"x"); reply()              # exists
    send("add fresh 7 0 3", b"new"); reply()
    send("append fresh 0 0 4", b"-end"); reply()
    send("prepend fresh 0 0 6", b"begin-"); reply()
    send("get fresh"); fresh = values()
    misc = replies[mark:]
    for i in range(0, n, 2):
        send(f"delete key:{i}"); reply()
    send("delete key:0"); reply()                       # gone already
    send("get " + " ".join(f"key:{i}" for i in range(10)))
    check(values(), range(10))                          # the odd ones are left
    send("quit")
    print(json.dumps({"intact": intact, "misses": misses,
                      "fresh": fresh["fresh"][1].decode() if "fresh" in fresh else None,
                      "replies": hashlib.sha256("\\n".join(replies).encode()).hexdigest(),
                      "misc": misc}))
    """)


@pytest.fixture
def mc_tools(need):
    return need(["memcached", "memccp", "memccat", "memcexist", "memcrm", "memcstat",
                 "memcslap", "memcaslap"], ["memcached", "libmemcached-tools"])


@pytest.fixture
def inputs(tmp_path):
    """The same files and client script for both rounds."""
    d = tmp_path / "inputs"
    d.mkdir()
    for name, size in MC_FILES.items():
        data = b"hello, memcached\n" if size is None else os.urandom(size)
        (d / name).write_bytes(data)
    (d / "mc_client.py").write_text(PY_CLIENT)
    return d


def start_memcached(mode, servers, tmp_path, memcached):
    d = tmp_path / mode.name
    d.mkdir(exist_ok=True)
    port = free_port()
    # As root, memcached wants to be told which user to run as.
    user = ["-u", "root"] if os.geteuid() == 0 else []
    srv = servers(f"memcached-{mode.name}",
                  mode.argv([memcached, *user, "-l", "127.0.0.1", "-p", port, "-U", "0",
                             "-t", "2", "-m", "128"]),
                  mode.env("memcached"), d)
    srv.wait_port(port)
    return srv, port


def stop_memcached(srv):
    # SIGTERM: memcached exits normally (its stats line).
    rc = srv.stop(signal.SIGTERM)
    assert rc == 0, f"memcached exit status {rc} after SIGTERM\n" + srv.logs()


def run_status(mode, role, argv, tmp_path):
    """Like run_client, for a client whose non-zero exit is an answer (a
    missing key): (exit status, stdout); killed or timed out still fails."""
    res = mode.tools.run(mode.argv(argv), mode.env(role), CLIENT_TIMEOUT_S, cwd=tmp_path)
    if res.rc is None or res.rc < 0:
        pytest.fail(f"{role} failed ({mode.name}):\n" + res.describe(), pytrace=False)
    return res.rc, res.stdout


def server_counters(mode, tools, port, tmp_path):
    out = run_client(mode, "libmemcached-tools",
                     [tools["memcstat"], f"--servers=127.0.0.1:{port}"], tmp_path).stdout
    got = dict(re.findall(r"^\s*(\w+): (\d+)$", out.decode(), re.M))
    return {k: int(got[k]) for k in MC_COUNTERS if k in got}


# ---- libmemcached-tools

TOOL_CONNECTIONS = 1 + len(MC_FILES) + 1 + 1 + 1 + SLAP_THREADS + ASLAP_CONC  # at least


def tools_round(mode, servers, tmp_path, tools, inputs):
    """What libmemcached-tools print and exit with, as a dict."""
    srv, port = start_memcached(mode, servers, tmp_path, tools["memcached"])
    opt = f"--servers=127.0.0.1:{port}"
    names = list(MC_FILES)

    def run(tool, *args):
        return run_client(mode, "libmemcached-tools", [tools[tool], opt, *args], tmp_path).stdout

    seen = {"memccp": run("memccp", *[inputs / n for n in names])}
    for n in names:
        out = run("memccat", n)
        # memccat writes the value and a newline.
        seen[f"memccat {n}"] = (len(out), hashlib.sha256(out[:-1]).hexdigest())
    seen["memcexist"] = run_status(mode, "libmemcached-tools", [tools["memcexist"], opt, names[0]],
                                   tmp_path)
    seen["memcrm"] = run("memcrm", names[0])
    seen["memcexist after memcrm"] = run_status(mode, "libmemcached-tools",
                                                [tools["memcexist"], opt, names[0]], tmp_path)
    slap = run("memcslap", "--test=get", f"--concurrency={SLAP_THREADS}",
               f"--execute-number={SLAP_KEYS}").decode()
    seen["memcslap"] = re.findall(r"Time to (\w+) +(\d+) keys(?: by +(\d+) threads)?", slap)
    aslap = run("memcaslap", "-s", f"127.0.0.1:{port}", "-T", ASLAP_THREADS, "-c", ASLAP_CONC,
                "-x", ASLAP_OPS, "-X", 100).decode()
    seen["memcaslap"] = re.findall(r"^(cmd_get|cmd_set|get_misses|written_bytes|read_bytes): (\d+)",
                                   aslap, re.M)
    seen["counters"] = server_counters(mode, tools, port, tmp_path)
    stop_memcached(srv)
    return seen


def tools_scene_ok(seen, inputs):
    """What a correct round looks like, whatever the transport."""
    names = list(MC_FILES)
    for n in names:
        data = (inputs / n).read_bytes()
        assert seen[f"memccat {n}"] == (len(data) + 1, hashlib.sha256(data).hexdigest()), n
    assert seen["memcexist"][0] == 0 and seen["memcexist after memcrm"][0] != 0, seen
    assert seen["memcslap"] == [("set", str(SLAP_KEYS), ""),
                                ("get", str(SLAP_THREADS * SLAP_KEYS), str(SLAP_THREADS))], \
        seen["memcslap"]
    aslap = dict(seen["memcaslap"])
    assert int(aslap["cmd_get"]) + int(aslap["cmd_set"]) == ASLAP_OPS, aslap
    assert aslap["get_misses"] == "0", aslap
    c = seen["counters"]
    assert c["cmd_get"] == len(names) + SLAP_THREADS * SLAP_KEYS + int(aslap["cmd_get"]), c
    assert c["get_misses"] == 0 and c["delete_hits"] == 1, c


@pytest.mark.plain
def test_memcached_tools_plain(tools, servers, tmp_path, mc_tools, inputs):
    """The scene itself: files stored and read back intact, a removed key
    gone, the load generators served every request."""
    tools_scene_ok(tools_round(plain_mode(tools), servers, tmp_path, mc_tools, inputs), inputs)


@pytest.mark.shunt
def test_memcached_tools(tools, servers, tmp_path, mc_tools, inputs, shunt_session, shunt_cli,
                         request):
    """memcached and libmemcached-tools both under shunt: the same outputs,
    exit statuses and server counters as plain; every tool's connections
    (the threads of memcslap and memcaslap too) went through shared memory."""
    with matrix_row(request, "memcached (-t 2)", version_of([mc_tools["memcached"], "-V"]),
                    "libmemcached-tools " + version_of([mc_tools["memccp"], "--version"])
                    .split("libmemcached v")[-1].rstrip(")")
                    + " (memccp, memccat, memcexist, memcrm, memcstat, memcslap, memcaslap)"):
        plain = tools_round(plain_mode(tools), servers, tmp_path, mc_tools, inputs)
        tools_scene_ok(plain, inputs)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = tools_round(mode, servers, tmp_path, mc_tools, inputs)
        for key in plain:
            assert shunted[key] == plain[key], \
                f"{key} under shunt: {shunted[key]!r:.300}, plain: {plain[key]!r:.300}"
        stored = sum((inputs / n).stat().st_size for n in MC_FILES)
        assert_stats(mode, "libmemcached-tools", shm_connect=TOOL_CONNECTIONS,
                     shm_tx_bytes=stored, shm_rx_bytes=stored)
        assert_stats(mode, "memcached", shm_accept=TOOL_CONNECTIONS, shm_rx_bytes=stored)


# ---- a Python text-protocol client

def py_round(mode, servers, tmp_path, tools, inputs):
    srv, port = start_memcached(mode, servers, tmp_path, tools["memcached"])
    res = run_client(mode, "python-client", [sys.executable, inputs / "mc_client.py", port,
                                             PY_KEYS], tmp_path)
    seen = json.loads(res.stdout)
    seen["counters"] = server_counters(mode, tools, port, tmp_path)
    stop_memcached(srv)
    return seen


PY_BYTES = sum(i * 5000 + i % 7 for i in range(PY_KEYS))


@pytest.mark.plain
def test_memcached_python_plain(tools, servers, tmp_path, mc_tools, inputs):
    """The scene itself: every value read back intact (one by one, ten at a
    time, the odd ones after the even ones were deleted), the replies of
    the counter and of the storage commands as memcached documents them."""
    seen = py_round(plain_mode(tools), servers, tmp_path, mc_tools, inputs)
    assert (seen["intact"], seen["misses"]) == (2 * PY_KEYS + 5, 5), seen
    assert seen["fresh"] == "begin-new-end", seen
    assert seen["misc"] == ["STORED"] + [str(sum(range(k + 2))) for k in range(10)] + [
        "0", "NOT_FOUND", "CLIENT_ERROR cannot increment or decrement non-numeric value",
        "NOT_STORED", "STORED", "STORED", "STORED", "VALUE fresh 7 13", "END"], seen["misc"]


@pytest.mark.shunt
def test_memcached_python(tools, servers, tmp_path, mc_tools, inputs, shunt_session, shunt_cli,
                          request):
    """memcached and the Python client both under shunt: every reply the same
    as plain (their digest), every value intact, the same server counters;
    the client's connection went through shared memory, values and all."""
    with matrix_row(request, "memcached (-t 2)", version_of([mc_tools["memcached"], "-V"]),
                    "python3 text-protocol client (" + version_of([sys.executable, "--version"])
                    + ")"):
        plain = py_round(plain_mode(tools), servers, tmp_path, mc_tools, inputs)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = py_round(mode, servers, tmp_path, mc_tools, inputs)
        assert shunted == plain, f"under shunt: {shunted}, plain: {plain}"
        # Each value goes out once and comes back twice.
        assert_stats(mode, "python-client", shm_connect=1, shm_tx_bytes=PY_BYTES,
                     shm_rx_bytes=2 * PY_BYTES)
        assert_stats(mode, "memcached", shm_accept=2, shm_rx_bytes=PY_BYTES,
                     shm_tx_bytes=2 * PY_BYTES)
