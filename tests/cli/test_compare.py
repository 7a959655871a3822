# SPDX-License-Identifier: MIT
"""`shunt compare` on real pairs: redis-server with redis-benchmark, nginx
with wrk. Both runs print; the JSON parses; its numbers are the programs'
own (each throughput line's values appear in that run's output, and what
the client's counters say went over shared memory is what wrk says it
read); and failures (a server that never listens, a client that fails,
no second --) are reported as such."""

import json
import re
import shutil
import socket
import subprocess

import pytest

pytestmark = pytest.mark.shunt


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(*tools):
    for t in tools:
        if not shutil.which(t):
            pytest.skip(f"{t} is not installed (scripts/setup installs it)")


@pytest.fixture
def compare(shunt_cli, shunt_session, tools):
    def run(*args, timeout=180):
        env = shunt_session.env()
        env["COLUMNS"] = "200"
        return tools.run([shunt_cli(), "compare", *args], env, timeout=timeout)
    return run


def redis_pair(port):
    return (["--", "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
            ["--", "redis-benchmark", "-p", str(port), "-n", "20000", "-t", "set,get", "-q"])


def test_redis_json(compare):
    need("redis-server", "redis-benchmark")
    server, client = redis_pair(free_port())
    res = compare("--json", *server, *client)
    assert res.rc == 0, res.describe()
    data = json.loads(res.stdout)
    assert data["server"][0] == "redis-server" and data["client"][0] == "redis-benchmark"
    plain, shunt = data["plain"], data["shunt"]
    for run in (plain, shunt):
        assert run["ran"] and run["exit"] == 0 and run["error"] is None, run
        assert run["seconds"] > 0
        assert "SET:" in run["output"] and "GET:" in run["output"], run["output"]
    assert plain["shm_bytes"] == 0 and plain["client"]["processes"] == 0
    c = shunt["client"]
    assert c["processes"] == 1 and c["shm_connect"] > 0 and c["kernel_connect"] == 0, c
    assert shunt["shm_bytes"] == c["shm_tx_bytes"] + c["shm_rx_bytes"] > 0
    # 20000 SETs and 20000 GETs of 3 bytes: at least their requests went out.
    assert c["shm_tx_bytes"] >= 2 * 20000 * len("*3\r\n$3\r\nSET\r\n"), c
    rates = {r["line"]: r for r in data["throughput"]}
    assert set(rates) == {"SET: # requests per second, p# =# msec".replace("p# =", "p#="),
                          "GET: # requests per second, p#=# msec"}, rates
    for r in data["throughput"]:
        for mode in ("plain", "shunt"):
            assert f"{r[mode]:.2f} requests per second" in data[mode]["output"], (r, mode)


def test_redis_side_by_side(compare):
    need("redis-server", "redis-benchmark")
    server, client = redis_pair(free_port())
    res = compare(*server, *client)
    assert res.rc == 0, res.describe()
    out = res.stdout.decode()
    header = next(l for l in out.splitlines() if "plain (kernel TCP)" in l)
    assert "under shunt run" in header
    rows = [l for l in out.splitlines() if l.startswith(("SET:", "GET:"))]
    assert len(rows) == 2 and all(" | " in r and r.count("requests per second") == 2
                                  for r in rows), out
    times = re.search(r"^time: ([\d.]+) s +\| time: ([\d.]+) s \(([\d.]+)x\)", out, re.M)
    assert times, out
    assert re.search(r"\| shared memory: (\d+) of \1 connections", out), out
    assert "throughput, as the client reports it" in out


NGINX_CONF = """daemon off;
master_process on;
worker_processes 1;
pid {dir}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {dir}/body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  server {{ listen 127.0.0.1:{port}; root {dir}; }}
}}
"""


def mib(text):
    value, unit = re.match(r"([\d.]+)([KMG]?B)", text).groups()
    return float(value) * {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[unit]


def test_nginx_wrk_json_numbers_are_wrks(compare, tmp_path):
    need("nginx", "wrk")
    port = free_port()
    (tmp_path / "index.html").write_text("x" * 2000)
    (tmp_path / "nginx.conf").write_text(NGINX_CONF.format(dir=tmp_path, port=port))
    res = compare("--json", "--port", str(port), "--", "nginx", "-c", str(tmp_path / "nginx.conf"),
                  "-p", str(tmp_path), "--", "wrk", "-t1", "-c2", "-d1",
                  f"http://127.0.0.1:{port}/index.html")
    assert res.rc == 0, res.describe()
    data = json.loads(res.stdout)
    for mode in ("plain", "shunt"):
        out = data[mode]["output"]
        m = re.search(r"(\d+) requests in ([\d.]+)s, ([\d.]+[KMG]?B) read", out)
        assert m, out
        rate = next(r for r in data["throughput"] if r["line"].startswith("Requests/sec"))
        assert re.search(rf"Requests/sec:\s+{rate[mode]:.2f}\n", out), (rate, out)
    shunt = data["shunt"]
    read = mib(re.search(r"requests in [\d.]+s, ([\d.]+[KMG]?B) read", shunt["output"]).group(1))
    rx = shunt["client"]["shm_rx_bytes"]
    # wrk rounds to two decimals of its unit; responses in flight when its
    # second ended were received but not counted by wrk.
    assert read * 0.98 - 10240 <= rx <= read * 1.05 + 10240, (rx, read, shunt["output"])
    assert shunt["client"]["shm_connect"] >= 2 and shunt["client"]["kernel_connect"] == 0


def test_plot(compare, tmp_path):
    need("redis-server", "redis-benchmark")
    res = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], capture_output=True)
    if res.returncode:
        pytest.skip("python3-matplotlib is not installed")
    server, client = redis_pair(free_port())
    png = tmp_path / "compare.png"
    res = compare("--plot", str(png), *server, *client)
    assert res.rc == 0, res.describe()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_server_that_never_listens(compare):
    res = compare("--json", "--wait", "0.5", "--", "sleep", "30", "--", "true", timeout=60)
    assert res.rc == 1, res.describe()
    data = json.loads(res.stdout)
    for mode in ("plain", "shunt"):
        assert not data[mode]["ran"] and "did not listen" in data[mode]["error"], data[mode]


def test_failing_client(compare):
    need("redis-server")
    port = free_port()
    res = compare("--json", "--", "redis-server", "--port", str(port), "--save", "", "--",
                  "sh", "-c", "echo half; exit 3")
    assert res.rc == 1, res.describe()
    data = json.loads(res.stdout)
    assert data["plain"]["exit"] == 3 and data["shunt"]["exit"] == 3
    assert data["plain"]["output"] == data["shunt"]["output"] == "half\n"


def test_usage(compare):
    res = compare("--", "redis-server", timeout=30)
    assert res.rc == 2 and b"-- SERVER" in res.stderr, res.describe()
