# SPDX-License-Identifier: MIT
"""redis-server, plain and under `shunt run`, driven by its own clients:
redis-cli (single commands, a script on stdin, a binary 1 MiB value in and
out, a mass insert with --pipe, and the server's digest of its whole
dataset) and redis-benchmark (SET and GET, pipelined by 16, and 50 clients
one request at a time). Server and clients are both under shunt in the
shunt round; what the clients see must be what they saw plain, and the
SHUNT_STATS lines must show that the connections went through shared memory.

    python3 -m pytest tests/apps/test_redis.py -m plain   # the programs alone
    python3 -m pytest tests/apps/test_redis.py            # and under shunt
"""

import hashlib
import os
import re
import signal

import pytest

from apps_lib import (assert_stats, free_port, matrix_row, need,  # noqa: F401
                      plain_mode, run_client, servers, shunt_mode, version_of)

BIG_SIZE = 1 << 20          # the binary value, set from stdin with redis-cli -x
PIPE_KEYS = 5000            # --pipe: SET and RPUSH per key, then an INCR
BENCH_REQUESTS = 20000      # per redis-benchmark test (SET, GET)
BENCH_RUNS = {"pipelined": ["-P", "16"], "clients": ["-c", "50"]}
BENCH_CLIENTS = 50          # redis-benchmark's default, and -c 50

# redis-cli reads one command a line from stdin when it is not a terminal.
CLI_SCRIPT = """\
SET a 1
INCR a
INCRBY a 10
DECR a
APPEND s hello
APPEND s " world"
STRLEN s
GETRANGE s 0 4
LPUSH l x y z
RPUSH l tail
LRANGE l 0 -1
LLEN l
HSET h f1 v1 f2 v2
HGETALL h
SADD set m1 m2 m3 m2
SCARD set
ZADD z 1 one 2 two 3 three
ZRANGE z 0 -1 WITHSCORES
GET missing
SET "sp ace" "va lue"
GET "sp ace"
EXISTS a l h set z missing
NOSUCHCOMMAND x
DEL a s
TYPE l
"""


def resp(*args):
    """One command in the Redis protocol, as --pipe wants it."""
    out = [f"*{len(args)}\r\n".encode()]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += [f"${len(a)}\r\n".encode(), a, b"\r\n"]
    return b"".join(out)


def with_stdin(path, argv):
    """argv with `path` on its stdin (run_client gives /dev/null): sh opens
    the file and execs argv, so only argv writes a SHUNT_STATS line."""
    return ["sh", "-c", 'exec "$@" < "$0"', path] + [str(a) for a in argv]


@pytest.fixture
def redis_tools(need):
    return need(["redis-server", "redis-cli", "redis-benchmark"],
                ["redis-server", "redis-tools"])


@pytest.fixture
def inputs(tmp_path):
    """The same input files for both rounds."""
    d = tmp_path / "inputs"
    d.mkdir()
    (d / "big.bin").write_bytes(os.urandom(BIG_SIZE))
    (d / "script.txt").write_text(CLI_SCRIPT)
    cmds = []
    for i in range(PIPE_KEYS):
        cmds.append(resp("SET", f"key:{i}", f"value:{i}:" + "v" * (i % 200)))
        cmds.append(resp("RPUSH", "pipelist", i))
    cmds.append(resp("INCRBY", "pipecount", PIPE_KEYS))
    (d / "pipe.resp").write_bytes(b"".join(cmds))
    return d


def start_redis(mode, servers, tmp_path, redis_server):
    """redis-server on a fresh port with no persistence, in its own directory."""
    d = tmp_path / mode.name / "redis"
    d.mkdir(parents=True)
    port = free_port()
    srv = servers(f"redis-{mode.name}",
                  mode.argv([redis_server, "--save", "", "--appendonly", "no",
                             "--port", port, "--bind", "127.0.0.1", "--dir", d,
                             # DEBUG DIGEST, for clients whose peer address is local
                             "--enable-debug-command", "local"]),
                  mode.env("redis-server"), d)
    srv.wait_port(port)
    return srv, port


def stop_redis(srv):
    # SIGTERM: redis shuts down and exits normally (its stats line).
    rc = srv.stop(signal.SIGTERM)
    assert rc == 0, f"redis-server exit status {rc} after SIGTERM\n" + srv.logs()


# ---- redis-cli

CLI_SINGLE = [["PING"], ["SET", "greeting", "hello"], ["GET", "greeting"],
              ["INCR", "counter"], ["INCR", "counter"], ["LPUSH", "list", "a", "b", "c"],
              ["LRANGE", "list", "0", "-1"], ["DBSIZE"]]
CLI_CONNECTIONS = len(CLI_SINGLE) + 7   # and the seven runs after them in cli_round


def cli_round(mode, servers, tmp_path, tools, inputs):
    """Everything redis-cli sees, as a dict of byte strings and digests."""
    redis_server, redis_cli = tools["redis-server"], tools["redis-cli"]
    srv, port = start_redis(mode, servers, tmp_path, redis_server)
    cli = [redis_cli, "-h", "127.0.0.1", "-p", port]

    def run(argv):
        return run_client(mode, "redis-cli", argv, tmp_path).stdout

    seen = {"single": [run(cli + args) for args in CLI_SINGLE]}
    seen["script"] = run(with_stdin(inputs / "script.txt", cli))
    seen["set_big"] = run(with_stdin(inputs / "big.bin", cli + ["-x", "SET", "big"]))
    big = run(cli + ["GET", "big"])
    # Not a terminal: the raw bytes, then a newline.
    seen["get_big"] = (len(big), hashlib.sha256(big[:-1]).hexdigest(), big[-1:])
    seen["pipe"] = run(with_stdin(inputs / "pipe.resp", cli + ["--pipe"]))
    seen["after_pipe"] = run(cli + ["DBSIZE"]), run(cli + ["LLEN", "pipelist"])
    # The server's own digest of its whole dataset: same data, same digest.
    seen["digest"] = run(cli + ["DEBUG", "DIGEST"])
    stop_redis(srv)
    return seen


@pytest.mark.plain
def test_redis_cli_plain(tools, servers, tmp_path, redis_tools, inputs):
    """The scene itself: the replies redis-cli prints, the big value intact,
    every piped command answered without error."""
    seen = cli_round(plain_mode(tools), servers, tmp_path, redis_tools, inputs)
    assert seen["single"] == [b"PONG\n", b"OK\n", b"hello\n", b"1\n", b"2\n", b"3\n",
                              b"c\nb\na\n", b"3\n"], seen["single"]
    script = seen["script"].decode()
    assert "12\n" in script and "va lue\n" in script and "ERR unknown command" in script, script
    want = hashlib.sha256((inputs / "big.bin").read_bytes()).hexdigest()
    assert seen["set_big"] == b"OK\n"
    assert seen["get_big"] == (BIG_SIZE + 1, want, b"\n")
    assert f"errors: 0, replies: {2 * PIPE_KEYS + 1}".encode() in seen["pipe"], seen["pipe"]
    keys = 3 + 5 + 1 + PIPE_KEYS + 2   # single, script (after DEL), big, SETs, list, count
    assert seen["after_pipe"] == (f"{keys}\n".encode(), f"{PIPE_KEYS}\n".encode())
    assert re.fullmatch(rb"[0-9a-f]{40}\n", seen["digest"]), seen["digest"]


@pytest.mark.shunt
def test_redis_cli(tools, servers, tmp_path, redis_tools, inputs, shunt_session, shunt_cli,
                   request):
    """redis-server and redis-cli both under shunt: every reply, the big
    value and the dataset digest as plain; every redis-cli connection went
    through shared memory, the big value and the pipe with it."""
    with matrix_row(request, "redis-server",
                    " ".join(version_of([redis_tools["redis-server"], "--version"]).split()[:3]),
                    version_of([redis_tools["redis-cli"], "--version"])):
        plain = cli_round(plain_mode(tools), servers, tmp_path, redis_tools, inputs)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = cli_round(mode, servers, tmp_path, redis_tools, inputs)
        for key in plain:
            assert shunted[key] == plain[key], f"redis-cli {key}: under shunt {shunted[key]!r:.300}"
        sent = BIG_SIZE + (inputs / "pipe.resp").stat().st_size
        assert_stats(mode, "redis-cli", shm_connect=CLI_CONNECTIONS, shm_tx_bytes=sent,
                     shm_rx_bytes=BIG_SIZE)
        assert_stats(mode, "redis-server", shm_accept=CLI_CONNECTIONS, shm_rx_bytes=sent,
                     shm_tx_bytes=BIG_SIZE)


# ---- redis-benchmark

def bench_round(mode, servers, tmp_path, tools):
    """For each redis-benchmark run, the requests it says it completed per
    test and any error it printed; then how many SET and GET the server ran."""
    srv, port = start_redis(mode, servers, tmp_path, tools["redis-server"])
    seen = {}
    for name, extra in BENCH_RUNS.items():
        res = run_client(mode, "redis-benchmark",
                         [tools["redis-benchmark"], "-h", "127.0.0.1", "-p", port,
                          "-t", "set,get", "-n", BENCH_REQUESTS] + extra, tmp_path)
        text = (res.stdout + res.stderr).decode(errors="replace")
        done = re.findall(r"====== (\w+) ======\s+(\d+) requests completed", text)
        errors = sorted({l.strip() for l in text.splitlines() if "rror" in l})
        seen[name] = ({test: int(n) for test, n in done}, errors)
    stats = run_client(mode, "redis-cli", [tools["redis-cli"], "-h", "127.0.0.1", "-p", port,
                                           "INFO", "commandstats"], tmp_path).stdout.decode()
    seen["calls"] = {cmd: int(n) for cmd, n in
                     re.findall(r"cmdstat_(set|get):calls=(\d+)", stats)}
    stop_redis(srv)
    return seen


@pytest.mark.plain
def test_redis_benchmark_plain(tools, servers, tmp_path, redis_tools):
    """The scene itself: each run completes every request, with no error,
    and the server ran exactly that many SET and GET."""
    seen = bench_round(plain_mode(tools), servers, tmp_path, redis_tools)
    for name in BENCH_RUNS:
        assert seen[name] == ({"SET": BENCH_REQUESTS, "GET": BENCH_REQUESTS}, []), seen[name]
    n = len(BENCH_RUNS) * BENCH_REQUESTS
    assert seen["calls"] == {"set": n, "get": n}, seen["calls"]


@pytest.mark.shunt
def test_redis_benchmark(tools, servers, tmp_path, redis_tools, shunt_session, shunt_cli,
                         request):
    """redis-server and redis-benchmark both under shunt: every request
    completed without error and run by the server, as plain (counts, never
    timings); each benchmark client's connection went through shared memory."""
    with matrix_row(request, "redis-server",
                    " ".join(version_of([redis_tools["redis-server"], "--version"]).split()[:3]),
                    version_of([redis_tools["redis-benchmark"], "--version"])):
        plain = bench_round(plain_mode(tools), servers, tmp_path, redis_tools)
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted = bench_round(mode, servers, tmp_path, redis_tools)
        assert shunted == plain, f"redis-benchmark under shunt: {shunted}, plain: {plain}"
        # Each test of each run opens BENCH_CLIENTS connections.
        conns = len(BENCH_RUNS) * 2 * BENCH_CLIENTS
        assert_stats(mode, "redis-benchmark", shm_connect=conns)
        assert_stats(mode, "redis-server", shm_accept=conns)
