# SPDX-License-Identifier: MIT
"""The real programs bench/apps.py drives: how each server is configured,
started, found listening and stopped, which client measurements run against
it, how their output is parsed, and the targets from the issue.

A program is a Program; each client run is a Measurement whose parser turns
the client's stdout into flat metrics ({"get_p50_us": 47.0, ...}) or raises
ParseError naming what was missing or wrong (a client that reports errors
is a failed run, not a slow one)."""

import json
import os
import re
import shutil
import signal


class ParseError(Exception):
    pass


class Measurement:
    """One client command against a running server.

    argv(port, quick) -> the client's argv (without taskset/shunt);
    parse(stdout, stderr) -> {metric: number};
    min_connects: shared-memory connects the client must have made under
    shunt (its connections; extra ones such as redis-benchmark's CONFIG
    probe are allowed);
    timeout(quick) -> seconds before the client is killed."""

    def __init__(self, name, label, argv, parse, min_connects, timeout):
        self.name = name
        self.label = label
        self.argv = argv
        self.parse = parse
        self.min_connects = min_connects
        self.timeout = timeout


class Program:
    """A server and its measurements.

    commands: executables that must exist (looked up in PATH and /usr/sbin);
    packages: the Debian packages that provide them (for the skip message);
    setup(dir, port) -> the server's argv (writes config files into dir);
    stop_signal: what makes the server exit normally (atexit handlers run,
    so libshunt writes its SHUNT_STATS line); None: it exits by itself after
    its one client (iperf3 -s -1)."""

    def __init__(self, name, commands, packages, setup, measurements, stop_signal,
                 note=None, pinned=True):
        self.name = name
        # Pinned: server on --server-cpu, client on --client-cpu. Not
        # pinned: the scheduler places them (the busy shapes, where more
        # processes than CPUs run).
        self.pinned = pinned
        self.commands = commands
        self.packages = packages
        self.setup = setup
        self.measurements = measurements
        self.stop_signal = stop_signal
        self.note = note


def which(cmd):
    return shutil.which(cmd) or shutil.which(cmd, path="/usr/sbin:/sbin")


def missing_commands(program):
    return [c for c in program.commands if not which(c)]


# --- redis ----------------------------------------------------------------

REDIS_N_C1 = 100000
REDIS_N_C50 = 500000
REDIS_QUICK_N_C1 = 20000
REDIS_QUICK_N_C50 = 100000
# redis-benchmark 7.0 keeps latencies in an HdrHistogram created with
# hdr_init(10 us, ...): its lowest discernible value 10 us gives buckets
# 8 us wide below 16 ms, and a percentile is printed as the bucket's
# highest value. A p50 of 0.007 ms therefore means "below 8 us".
REDIS_HIST_BUCKET_US = 8


def redis_setup(d, port):
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", d, "--logfile", os.path.join(d, "redis.log"),
            "--daemonize", "no"]


def redis_argv(conns, n_full, n_quick):
    def argv(port, quick):
        return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-c", str(conns),
                "-n", str(n_quick if quick else n_full), "-t", "set,get",
                "--csv", "--precision", "3"]
    return argv


def redis_parse(conns):
    def parse(out, err):
        rows = [line.strip() for line in out.splitlines() if line.startswith('"')]
        if len(rows) < 2:
            raise ParseError("redis-benchmark printed no CSV (stderr: %s)" % err.strip()[-300:])
        head = [h.strip('"') for h in rows[0].split(",")]
        metrics = {}
        for row in rows[1:]:
            cells = dict(zip(head, [c.strip('"') for c in row.split(",")]))
            test = cells.get("test", "").lower()
            if test not in ("get", "set"):
                continue
            try:
                rps = float(cells["rps"])
                metrics[test + "_rps"] = rps
                for key in ("avg", "min", "p50", "p95", "p99", "max"):
                    metrics["%s_%s_us" % (test, key)] = 1000 * float(cells[key + "_latency_ms"])
            except (KeyError, ValueError) as e:
                raise ParseError("redis-benchmark CSV row %r: %s" % (row, e))
            if conns == 1 and rps > 0:
                # One request in flight: the wall time per request, a mean
                # that is not limited by the histogram's 8 us buckets.
                metrics[test + "_wall_us"] = 1e6 / rps
        for test in ("get", "set"):
            if test + "_rps" not in metrics:
                raise ParseError("redis-benchmark printed no %s row" % test.upper())
        return metrics
    return parse


REDIS = Program(
    "redis", ["redis-server", "redis-benchmark"], ["redis-server", "redis-tools"],
    redis_setup,
    [Measurement("c1", "redis-benchmark GET/SET, 1 connection",
                 redis_argv(1, REDIS_N_C1, REDIS_QUICK_N_C1), redis_parse(1), 1,
                 lambda quick: 60 if quick else 240),
     Measurement("c50", "redis-benchmark GET/SET, 50 connections",
                 redis_argv(50, REDIS_N_C50, REDIS_QUICK_N_C50), redis_parse(50), 50,
                 lambda quick: 60 if quick else 240)],
    signal.SIGTERM,
    note="redis-benchmark's percentiles have %d us resolution (HdrHistogram from 10 us); "
         "*_wall_us = 1/rps is the mean time per request with 1 connection"
         % REDIS_HIST_BUCKET_US)


# --- nginx + wrk ------------------------------------------------------------

NGINX_FILE = "1k.bin"
NGINX_FILE_BYTES = 1024
NGINX_CONF = """\
daemon off;
master_process on;
worker_processes {workers};
{user}
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush off;
    keepalive_timeout 65;
    keepalive_requests 100000000;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
    }}
}}
"""
WRK_CONNS = 10
WRK_S = 5
WRK_QUICK_S = 1


def nginx_setup(d, port, workers=2):
    os.makedirs(os.path.join(d, "www"), exist_ok=True)
    with open(os.path.join(d, "www", NGINX_FILE), "wb") as f:
        f.write(os.urandom(NGINX_FILE_BYTES))
    # As root nginx runs its workers as nobody, who cannot read our
    # private temporary directory.
    user = "user root;" if os.geteuid() == 0 else ""
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(NGINX_CONF.format(dir=d, port=port, user=user, workers=workers))
    return ["nginx", "-c", conf, "-p", d, "-e", os.path.join(d, "error.log")]


def wrk_argv(port, quick, threads=1, conns=WRK_CONNS, headers=()):
    return ["wrk", "-t", str(threads), "-c", str(conns),
            "-d", "%ds" % (WRK_QUICK_S if quick else WRK_S),
            *[arg for h in headers for arg in ("-H", h)],
            "--latency", "http://127.0.0.1:%d/%s" % (port, NGINX_FILE)]


UNIT_US = {"us": 1.0, "ms": 1e3, "s": 1e6, "m": 60e6}


def wrk_time_us(text):
    m = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text)
    if not m:
        raise ParseError("wrk time %r" % text)
    return float(m.group(1)) * UNIT_US[m.group(2)]


def wrk_parse(out, err):
    metrics = {}
    m = re.search(r"^Requests/sec:\s+([0-9.]+)", out, re.M)
    if not m:
        raise ParseError("wrk printed no Requests/sec (stderr: %s)" % err.strip()[-300:])
    metrics["rps"] = float(m.group(1))
    m = re.search(r"^\s+(\d+) requests in ([0-9.]+)(\w+), ([0-9.]+\w+) read", out, re.M)
    if m:
        metrics["requests"] = int(m.group(1))
    m = re.search(r"^\s+Latency\s+(\S+)\s+(\S+)\s+(\S+)", out, re.M)
    if m:
        metrics["lat_avg_us"] = wrk_time_us(m.group(1))
        metrics["lat_max_us"] = wrk_time_us(m.group(3))
    for pct in ("50", "90", "99"):
        m = re.search(r"^\s+%s%%\s+(\S+)" % pct, out, re.M)
        if m:
            metrics["lat_p%s_us" % pct] = wrk_time_us(m.group(1))
    problems = []
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m and any(int(x) for x in m.groups()):
        problems.append(m.group(0))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        problems.append(m.group(0))
    if metrics.get("requests", 1) == 0:
        problems.append("0 requests")
    if problems:
        raise ParseError("wrk: " + "; ".join(problems))
    return metrics


NGINX = Program(
    "nginx", ["nginx", "wrk"], ["nginx", "wrk"], nginx_setup,
    [Measurement("wrk_c10", "wrk keep-alive, 1 KiB file, %d connections, 1 thread" % WRK_CONNS,
                 wrk_argv, wrk_parse, WRK_CONNS, lambda quick: 60)],
    signal.SIGTERM,
    note="2 workers (both on the server CPU), sendfile on, access_log off")


# --- the busy shapes: more processes than CPUs, nothing pinned ------------------

BUSY_NGINX_WORKERS = 8
BUSY_WRK_THREADS = 8
BUSY_WRK_CONNS = 64

NGINX_BUSY = Program(
    "nginx-busy", ["nginx", "wrk"], ["nginx", "wrk"],
    lambda d, port: nginx_setup(d, port, workers=BUSY_NGINX_WORKERS),
    [Measurement("wrk_t8_c64", "wrk keep-alive, 1 KiB file, %d threads, %d connections"
                 % (BUSY_WRK_THREADS, BUSY_WRK_CONNS),
                 lambda port, quick: wrk_argv(port, quick, BUSY_WRK_THREADS, BUSY_WRK_CONNS),
                 wrk_parse, BUSY_WRK_CONNS, lambda quick: 60)],
    signal.SIGTERM,
    note="%d workers and %d wrk threads on 2 CPUs, unpinned" % (BUSY_NGINX_WORKERS,
                                                                BUSY_WRK_THREADS),
    pinned=False)

BUSY_REDIS_CLIENTS = 8
BUSY_REDIS_CONNS = 4
BUSY_REDIS_N = 100000
BUSY_REDIS_QUICK_N = 20000


def redis_busy_argv(port, quick):
    """BUSY_REDIS_CLIENTS redis-benchmark processes at once, from one shell."""
    one = " ".join(redis_argv(BUSY_REDIS_CONNS, BUSY_REDIS_N, BUSY_REDIS_QUICK_N)(port, quick))
    # Each to a file of its own, so their tables do not interleave.
    return ["sh", "-c", 't=$(mktemp -d) && for i in $(seq %d); do %s > "$t/$i" & done; wait; '
            'cat "$t"/*; rm -r "$t"' % (BUSY_REDIS_CLIENTS, one)]


def redis_busy_parse(out, err):
    """The clients' CSV tables one after another: requests/s summed, the
    worst p99 and the median p50 of the clients."""
    tables = [t for t in re.split(r'(?m)^(?="test",)', out) if t.strip().startswith('"test"')]
    if len(tables) != BUSY_REDIS_CLIENTS:
        raise ParseError("%d of %d redis-benchmark tables (stderr: %s)" % (
            len(tables), BUSY_REDIS_CLIENTS, err.strip()[-300:]))
    each = [redis_parse(BUSY_REDIS_CONNS)(t, err) for t in tables]
    metrics = {}
    for test in ("get", "set"):
        metrics[test + "_rps"] = sum(m[test + "_rps"] for m in each)
        metrics[test + "_p99_us"] = max(m[test + "_p99_us"] for m in each)
        metrics[test + "_p50_us"] = sorted(m[test + "_p50_us"] for m in each)[len(each) // 2]
    return metrics


REDIS_BUSY = Program(
    "redis-busy", ["redis-server", "redis-benchmark"], ["redis-server", "redis-tools"],
    redis_setup,
    [Measurement("p8", "%d redis-benchmark processes at once, %d connections each"
                 % (BUSY_REDIS_CLIENTS, BUSY_REDIS_CONNS),
                 redis_busy_argv, redis_busy_parse, BUSY_REDIS_CLIENTS * BUSY_REDIS_CONNS,
                 lambda quick: 120 if quick else 300)],
    signal.SIGTERM,
    note="%d client processes and the server on 2 CPUs, unpinned" % BUSY_REDIS_CLIENTS,
    pinned=False)


# --- a connection per request (issue 12) -------------------------------------

CLOSE_WRK_CONNS = 10
CLOSE_REDIS_CONNS = 10
CLOSE_REDIS_N = 50000
CLOSE_REDIS_QUICK_N = 10000

NGINX_CLOSE = Program(
    "nginx-close", ["nginx", "wrk"], ["nginx", "wrk"], nginx_setup,
    [Measurement("wrk_close_c10", "wrk, Connection: close, 1 KiB file, %d connections, "
                 "1 thread" % CLOSE_WRK_CONNS,
                 lambda port, quick: wrk_argv(port, quick, 1, CLOSE_WRK_CONNS,
                                              headers=["Connection: close"]),
                 wrk_parse, CLOSE_WRK_CONNS, lambda quick: 60)],
    signal.SIGTERM,
    note="a new connection for every request (wrk reconnects after each response); "
         "2 workers")


def redis_close_argv(port, quick):
    return redis_argv(CLOSE_REDIS_CONNS, CLOSE_REDIS_N, CLOSE_REDIS_QUICK_N)(port, quick) + \
        ["-k", "0"]


REDIS_CLOSE = Program(
    "redis-close", ["redis-server", "redis-benchmark"], ["redis-server", "redis-tools"],
    redis_setup,
    [Measurement("k0_c%d" % CLOSE_REDIS_CONNS, "redis-benchmark -k 0 (a connection per "
                 "request), %d clients" % CLOSE_REDIS_CONNS,
                 redis_close_argv, redis_parse(CLOSE_REDIS_CONNS), CLOSE_REDIS_CONNS,
                 lambda quick: 120 if quick else 300)],
    signal.SIGTERM,
    note="redis-benchmark -k 0: every request on a new connection")


# --- sockperf ---------------------------------------------------------------

SOCKPERF_S = 5
SOCKPERF_QUICK_S = 1
# sockperf sizes its table of send times as --mps x duration and aborts with
# "_seqN > m_maxSequenceNo" when more round trips happen; without --mps a
# ping-pong assumes at most ~600k/s, far below shunt's rate. 10M/s is never
# reached, so no round trip waits for pacing.
SOCKPERF_MPS = 10000000
SOCKPERF_MSG = 64


def sockperf_setup(d, port):
    return ["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(port)]


def sockperf_argv(port, quick):
    return ["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", str(port),
            "-m", str(SOCKPERF_MSG), "-t", str(SOCKPERF_QUICK_S if quick else SOCKPERF_S),
            "--mps", str(SOCKPERF_MPS), "--full-rtt"]


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sockperf_parse(out, err):
    text = ANSI.sub("", out + "\n" + err)
    m = re.search(r"ERROR: (.*)", text)
    if m:
        raise ParseError("sockperf: ERROR: " + m.group(1).strip())
    metrics = {}
    m = re.search(r"avg-rtt=([0-9.]+)", text)
    if not m:
        raise ParseError("sockperf printed no avg-rtt: %s" % text.strip()[-300:])
    metrics["avg_rtt_us"] = float(m.group(1))
    for name, key in (("50.000", "p50"), ("99.000", "p99"), ("99.900", "p99.9")):
        m = re.search(r"percentile %s =\s+([0-9.]+)" % re.escape(name), text)
        if not m:
            raise ParseError("sockperf printed no percentile %s" % name)
        metrics["%s_rtt_us" % key] = float(m.group(1))
    m = re.search(r"<MIN> observation =\s+([0-9.]+)", text)
    if m:
        metrics["min_rtt_us"] = float(m.group(1))
    m = re.search(r"\[Valid Duration\] RunTime=([0-9.]+) sec; SentMessages=(\d+); "
                  r"ReceivedMessages=(\d+)", text)
    if m:
        metrics["round_trips"] = int(m.group(3))
        metrics["round_trips_per_s"] = int(m.group(3)) / float(m.group(1))
    m = re.search(r"# dropped messages = (\d+); # duplicated messages = (\d+); "
                  r"# out-of-order messages = (\d+)", text)
    if m and any(int(x) for x in m.groups()):
        raise ParseError("sockperf: " + m.group(0))
    return metrics


SOCKPERF = Program(
    "sockperf", ["sockperf"], ["sockperf"], sockperf_setup,
    [Measurement("pp64", "sockperf ping-pong TCP %d B" % SOCKPERF_MSG, sockperf_argv,
                 sockperf_parse, 1, lambda quick: 60 if quick else 90)],
    signal.SIGINT,
    note="--mps %d (see SOCKPERF_MPS), --full-rtt: round trips, not half of them"
         % SOCKPERF_MPS)


# --- iperf3 -----------------------------------------------------------------

IPERF_S = 5
IPERF_QUICK_S = 1


def iperf_setup(d, port):
    return ["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)]


def iperf_argv(port, quick):
    return ["iperf3", "-c", "127.0.0.1", "-p", str(port),
            "-t", str(IPERF_QUICK_S if quick else IPERF_S), "-J"]


def iperf_parse(out, err):
    try:
        doc = json.loads(out)
    except ValueError:
        raise ParseError("iperf3 printed no JSON (stderr: %s)" % err.strip()[-300:])
    if doc.get("error"):
        raise ParseError("iperf3: " + doc["error"])
    try:
        end = doc["end"]
        metrics = {"recv_bps": float(end["sum_received"]["bits_per_second"]),
                   "sent_bps": float(end["sum_sent"]["bits_per_second"]),
                   "recv_bytes": int(end["sum_received"]["bytes"])}
    except (KeyError, TypeError, ValueError) as e:
        raise ParseError("iperf3 JSON without end.sum_received: %s" % e)
    cpu = end.get("cpu_utilization_percent") or {}
    for k in ("host_total", "remote_total"):
        if k in cpu:
            metrics["cpu_%s_pct" % k] = cpu[k]
    return metrics


IPERF3 = Program(
    "iperf3", ["iperf3"], ["iperf3"], iperf_setup,
    [Measurement("stream", "iperf3 single stream", iperf_argv, iperf_parse, 2,
                 lambda quick: 60)],
    None,
    note="server -s -1: it exits after its one test")


# --- memcached + memaslap ---------------------------------------------------

MEMASLAP_S = 5
MEMASLAP_QUICK_S = 1
MEMCACHED_THREADS = 1


def memcached_setup(d, port):
    argv = ["memcached", "-l", "127.0.0.1", "-p", str(port), "-U", "0",
            "-t", str(MEMCACHED_THREADS), "-m", "256"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    return argv


def memaslap_cmd():
    # Debian 12 ships memaslap as memcaslap (libmemcached-tools).
    return "memcaslap" if which("memcaslap") else "memaslap"


def memaslap_argv(conns):
    def argv(port, quick):
        return [memaslap_cmd(), "-s", "127.0.0.1:%d" % port, "-T", "1", "-c", str(conns),
                "-t", "%ds" % (MEMASLAP_QUICK_S if quick else MEMASLAP_S)]
    return argv


def memaslap_parse(out, err):
    m = re.search(r"Run time: ([0-9.]+)s Ops: (\d+) TPS: (\d+)", out)
    if not m:
        raise ParseError("memaslap printed no 'Run time ... TPS' line (stderr: %s)"
                         % err.strip()[-300:])
    metrics = {"tps": float(m.group(3)), "ops": int(m.group(2))}
    m = re.search(r"^get_misses: (\d+)", out, re.M)
    if m:
        metrics["get_misses"] = int(m.group(1))
    if metrics["ops"] == 0:
        raise ParseError("memaslap: 0 operations")
    return metrics


MEMCACHED = Program(
    "memcached", ["memcached"], ["memcached", "libmemcached-tools"], memcached_setup,
    [Measurement("c1", "memaslap 90% get / 10% set, 1 connection", memaslap_argv(1),
                 memaslap_parse, 1, lambda quick: 60),
     Measurement("c16", "memaslap 90% get / 10% set, 16 connections", memaslap_argv(16),
                 memaslap_parse, 16, lambda quick: 60)],
    signal.SIGTERM,
    note="memcached -t %d; no target, reported only" % MEMCACHED_THREADS)


def memcached_missing():
    """memaslap (memcaslap in Debian 12) is the client; without it the
    program is skipped."""
    return None if which("memcaslap") or which("memaslap") else \
        "neither memcaslap nor memaslap installed (Debian: libmemcached-tools)"


PROGRAMS = [REDIS, NGINX, SOCKPERF, IPERF3, MEMCACHED, NGINX_BUSY, REDIS_BUSY, NGINX_CLOSE,
            REDIS_CLOSE]
PROGRAM_NAMES = [p.name for p in PROGRAMS]


def program_missing(program):
    """Why the program cannot run here, or None."""
    miss = missing_commands(program)
    if miss:
        return "%s not installed (Debian: apt install %s)" % (
            ", ".join(miss), " ".join(program.packages))
    if program is MEMCACHED:
        return memcached_missing()
    return None


# --- targets ----------------------------------------------------------------

class Target:
    """shunt against kernel on the median of one metric. better "lower":
    value = kernel / shunt (how many times lower shunt is); "higher":
    value = shunt / kernel. Either way PASS means value >= need."""

    def __init__(self, name, program, measurement, metric, better, need, description):
        self.name = name
        self.program = program
        self.measurement = measurement
        self.metric = metric
        self.better = better
        self.need = need
        self.description = description


TARGETS = [
    Target("redis_get_p50_c1", "redis", "c1", "get_p50_us", "lower", 5,
           "redis GET p50 latency, 1 connection: shunt <= 1/5 of kernel"),
    Target("redis_set_p50_c1", "redis", "c1", "set_p50_us", "lower", 5,
           "redis SET p50 latency, 1 connection: shunt <= 1/5 of kernel"),
    Target("redis_get_rps_c50", "redis", "c50", "get_rps", "higher", 2,
           "redis GET requests/s, 50 connections: shunt >= 2x kernel"),
    Target("redis_set_rps_c50", "redis", "c50", "set_rps", "higher", 2,
           "redis SET requests/s, 50 connections: shunt >= 2x kernel"),
    Target("nginx_rps_c10", "nginx", "wrk_c10", "rps", "higher", 2,
           "nginx + wrk, 1 KiB, keep-alive, 10 connections: requests/s shunt >= 2x kernel"),
    Target("sockperf_avg_rtt", "sockperf", "pp64", "avg_rtt_us", "lower", 20,
           "sockperf ping-pong TCP 64 B, mean round trip: shunt >= 20x lower"),
    Target("sockperf_p50_rtt", "sockperf", "pp64", "p50_rtt_us", "lower", 20,
           "sockperf ping-pong TCP 64 B, p50 round trip: shunt >= 20x lower"),
    Target("iperf3_bps", "iperf3", "stream", "recv_bps", "higher", 2,
           "iperf3 single stream, bits/s received: shunt >= 2x kernel"),
    Target("nginx_busy_rps", "nginx-busy", "wrk_t8_c64", "rps", "higher", 1,
           "nginx, 8 workers, wrk 8 threads 64 connections, unpinned: requests/s >= kernel"),
    Target("nginx_busy_p99", "nginx-busy", "wrk_t8_c64", "lat_p99_us", "lower", 1,
           "nginx, 8 workers, wrk 8 threads 64 connections, unpinned: p99 <= kernel"),
    Target("redis_busy_get_rps", "redis-busy", "p8", "get_rps", "higher", 1,
           "redis, 8 redis-benchmark processes, unpinned: GET requests/s >= kernel"),
    Target("redis_busy_set_rps", "redis-busy", "p8", "set_rps", "higher", 1,
           "redis, 8 redis-benchmark processes, unpinned: SET requests/s >= kernel"),
    Target("redis_busy_get_p99", "redis-busy", "p8", "get_p99_us", "lower", 1,
           "redis, 8 redis-benchmark processes, unpinned: worst GET p99 <= kernel"),
    Target("redis_busy_set_p99", "redis-busy", "p8", "set_p99_us", "lower", 1,
           "redis, 8 redis-benchmark processes, unpinned: worst SET p99 <= kernel"),
    Target("nginx_close_rps", "nginx-close", "wrk_close_c10", "rps", "higher", 1.5,
           "nginx + wrk, Connection: close, 10 connections: requests/s >= 1.5x kernel"),
    Target("redis_close_get_rps", "redis-close", "k0_c10", "get_rps", "higher", 1.5,
           "redis-benchmark -k 0, 10 clients: GET requests/s >= 1.5x kernel"),
    Target("redis_close_set_rps", "redis-close", "k0_c10", "set_rps", "higher", 1.5,
           "redis-benchmark -k 0, 10 clients: SET requests/s >= 1.5x kernel"),
]

# What each program's table rows and plot panels show: (measurement,
# metric, label, unit divisor, unit, better).
PANELS = {
    "redis": [("c1", "get_p50_us", "GET p50, 1 conn", 1, "us", "lower"),
              ("c1", "set_p50_us", "SET p50, 1 conn", 1, "us", "lower"),
              ("c1", "get_wall_us", "GET 1/rps, 1 conn", 1, "us", "lower"),
              ("c1", "set_wall_us", "SET 1/rps, 1 conn", 1, "us", "lower"),
              ("c50", "get_rps", "GET req/s, 50 conns", 1, "req/s", "higher"),
              ("c50", "set_rps", "SET req/s, 50 conns", 1, "req/s", "higher"),
              ("c50", "get_p50_us", "GET p50, 50 conns", 1, "us", "lower")],
    "nginx": [("wrk_c10", "rps", "req/s, 10 conns", 1, "req/s", "higher"),
              ("wrk_c10", "lat_p50_us", "p50 latency, 10 conns", 1, "us", "lower"),
              ("wrk_c10", "lat_p99_us", "p99 latency, 10 conns", 1, "us", "lower")],
    "sockperf": [("pp64", "avg_rtt_us", "mean RTT 64 B", 1, "us", "lower"),
                 ("pp64", "p50_rtt_us", "p50 RTT 64 B", 1, "us", "lower"),
                 ("pp64", "p99_rtt_us", "p99 RTT 64 B", 1, "us", "lower"),
                 ("pp64", "round_trips_per_s", "round trips/s", 1, "/s", "higher")],
    "iperf3": [("stream", "recv_bps", "received, 1 stream", 1e9, "Gbit/s", "higher")],
    "memcached": [("c1", "tps", "ops/s, 1 conn", 1, "ops/s", "higher"),
                  ("c16", "tps", "ops/s, 16 conns", 1, "ops/s", "higher")],
    "nginx-busy": [("wrk_t8_c64", "rps", "req/s, 8 workers, 64 conns", 1, "req/s", "higher"),
                   ("wrk_t8_c64", "lat_p50_us", "p50 latency", 1, "us", "lower"),
                   ("wrk_t8_c64", "lat_p99_us", "p99 latency", 1, "us", "lower")],
    "redis-busy": [("p8", "get_rps", "GET req/s, 8 clients", 1, "req/s", "higher"),
                   ("p8", "set_rps", "SET req/s, 8 clients", 1, "req/s", "higher"),
                   ("p8", "get_p99_us", "worst GET p99", 1, "us", "lower"),
                   ("p8", "set_p99_us", "worst SET p99", 1, "us", "lower")],
    "nginx-close": [("wrk_close_c10", "rps", "req/s, Connection: close", 1, "req/s", "higher"),
                    ("wrk_close_c10", "lat_p99_us", "p99 latency", 1, "us", "lower")],
    "redis-close": [("k0_c10", "get_rps", "GET req/s, -k 0", 1, "req/s", "higher"),
                    ("k0_c10", "set_rps", "SET req/s, -k 0", 1, "req/s", "higher"),
                    ("k0_c10", "get_p99_us", "GET p99, -k 0", 1, "us", "lower")],
}
