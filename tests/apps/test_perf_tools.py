# SPDX-License-Identifier: MIT
"""Network benchmark tools as plain programs, plain and under `shunt run`
(server and client both): iperf3 one stream each way (-R) and four streams
(-P 4), and sockperf's ping-pong, throughput and under-load clients against
`sockperf server`. Only correctness is checked, never a rate: the tools exit
0, report no error, and their two ends agree on what was moved (iperf3's
JSON: the bytes the receiver counted are the same at both ends, and no more
than were sent; sockperf: every message the client sent was handled by the
server, and none was dropped, duplicated or out of order). Under shunt the
SHUNT_STATS lines must show shared memory.

    python3 -m pytest tests/apps/test_perf_tools.py -m plain   # the tools alone
    python3 -m pytest tests/apps/test_perf_tools.py            # and under shunt
"""

import json
import pathlib
import re
import signal
import subprocess
import time

import pytest

from apps_lib import (START_TIMEOUT_S, STOP_TIMEOUT_S, assert_stats, free_port,  # noqa: F401
                      listening, need, plain_mode, record, run_client, servers, shunt_mode,
                      version_of)


# Plain results per case, so that the shunt tests compare with the run the
# plain tests already made instead of making it again (sockperf's client
# alone takes 3 s: it waits 2 s before its warm-up, and cannot be told less).
_plain = {}


def plain_once(key, run):
    """run() for the plain mode, once per module and `key`."""
    if key not in _plain:
        _plain[key] = run()
    return _plain[key]


def failure(e):
    """A matrix cell for a failed test: the first line of what went wrong."""
    lines = str(e).strip().splitlines()
    return "FAIL: " + (lines[0][:100] if lines else type(e).__name__)


def wait_listening(srv, port):
    """Until `srv` listens on port, seen in /proc/net/tcp: a probe connection
    would be taken for a client (iperf3 -1 would end on it)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not listening(port):
        if srv.proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{srv.name} did not listen on {port}\n" + srv.logs(), pytrace=False)
        time.sleep(0.02)


def output_of(srv):
    """What a server that has been stopped wrote, both streams."""
    return "".join(pathlib.Path(f.name).read_text(errors="replace") for f in (srv.out, srv.err))


def wait_exit(srv):
    """The exit status of a server that ends by itself (None if it did not)."""
    try:
        return srv.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None


# ---- iperf3

IPERF_CASES = {"one stream": [], "one stream -R": ["-R"], "-P 4": ["-P", "4"],
               "-P 4 -R": ["-P", "4", "-R"]}


def iperf_round(mode, servers, tmp_path, iperf3, args):
    """An iperf3 server for one test (-1) and a 1 s client, both -J. Returns
    what must hold both ways, and the bytes moved (for assert_stats)."""
    port = free_port()
    srv = servers(f"iperf3-{mode.name}-{'_'.join(args) or 'single'}",
                  mode.argv([iperf3, "-s", "-1", "-J", "-B", "127.0.0.1", "-p", port]),
                  mode.env("iperf3-server"), tmp_path)
    wait_listening(srv, port)
    res = run_client(mode, "iperf3-client", [iperf3, "-c", "127.0.0.1", "-p", port, "-t", "1",
                                             "-J"] + args, tmp_path)
    rc = wait_exit(srv)
    assert rc == 0, f"iperf3 server exit status {rc}\n" + srv.logs()
    client = json.loads(res.stdout)
    server = json.loads(pathlib.Path(srv.out.name).read_bytes())
    for who, j in (("client", client), ("server", server)):
        assert "error" not in j, f"iperf3 {who} ({mode.name}): {j['error']}"
    ce, se = client["end"], server["end"]
    sent, received = ce["sum_sent"]["bytes"], ce["sum_received"]["bytes"]
    # The receiver counts when the test ends, with data still in flight:
    # fewer bytes than were sent, but both ends report the same counts.
    assert 0 < received <= sent, (mode.name, args, sent, received)
    assert se["sum_received"]["bytes"] == received or se["sum_sent"]["bytes"] == sent, \
        (mode.name, args, ce["sum_sent"], ce["sum_received"], se["sum_sent"], se["sum_received"])
    streams = len(ce["streams"])
    return {"streams": streams}, received


@pytest.fixture
def iperf3(need):
    return need(["iperf3"], ["iperf3"])["iperf3"]


@pytest.mark.plain
@pytest.mark.parametrize("case", IPERF_CASES)
def test_iperf3_plain(tools, servers, tmp_path, iperf3, case):
    got, _ = plain_once(("iperf3", case), lambda: iperf_round(
        plain_mode(tools), servers, tmp_path, iperf3, IPERF_CASES[case]))
    assert got["streams"] == (4 if "-P" in IPERF_CASES[case] else 1), got


@pytest.mark.shunt
@pytest.mark.parametrize("case", IPERF_CASES)
def test_iperf3(request, tools, servers, tmp_path, iperf3, shunt_session, shunt_cli, case):
    """iperf3 server and client under shunt: the same streams as plain, the
    two ends agree, and the data and control connections (one each way for
    a stream, plus the control one) were shared-memory ones."""
    args = IPERF_CASES[case]
    version = version_of([iperf3, "--version"], "iperf").split(" (")[0]
    try:
        plain, _ = plain_once(("iperf3", case), lambda: iperf_round(
            plain_mode(tools), servers, tmp_path, iperf3, args))
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted, received = iperf_round(mode, servers, tmp_path, iperf3, args)
        assert shunted == plain
        conns = 1 + plain["streams"]
        sender, receiver = (("iperf3-server", "iperf3-client") if "-R" in args
                            else ("iperf3-client", "iperf3-server"))
        assert_stats(mode, "iperf3-client", shm_connect=conns)
        assert_stats(mode, "iperf3-server", shm_accept=conns)
        assert_stats(mode, sender, shm_tx_bytes=received)
        assert_stats(mode, receiver, shm_rx_bytes=received)
    except BaseException as e:
        record(request.config, "iperf3 -s", version, f"iperf3 -c {case}", failure(e), "shm")
        raise
    record(request.config, "iperf3 -s", version, f"iperf3 -c {case}", "pass", "shm")


# ---- sockperf

# sockperf sizes its table of send times for (1 + seconds) x --mps messages
# (ping-pong's default "max" counts as a few hundred thousand a second), and
# exits with "ERROR: _seqN > m_maxSequenceNo" once a faster run overflows it:
# under shunt, ping-pong has reached 3.5 million round trips a second here
# (5 million messages in the 1.4 s with warm-up). 5,000,000 makes room for
# 10 million, at 160 MB of table; under-load is paced at that rate, which is
# as fast as it goes.
SOCKPERF_MPS = "--mps=5000000"
SOCKPERF_CASES = {
    "ping-pong": ["ping-pong", "-m", "64", SOCKPERF_MPS],
    "throughput": ["throughput", "-m", "1400"],
    "under-load": ["under-load", SOCKPERF_MPS],
}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sockperf_numbers(text):
    """The counters of sockperf's summary lines: SentMessages,
    ReceivedMessages ([Total Run]), dropped/duplicated/out-of-order, 'Total of N
    messages sent' (throughput) and 'Total N messages received and handled'
    (server)."""
    text = ANSI.sub("", text)
    got = {}
    m = re.search(r"\[Total Run\].*SentMessages=(\d+); ReceivedMessages=(\d+)", text)
    if m:
        got["sent"], got["received"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"Total of (\d+) messages sent", text)
    if m:
        got["sent"] = int(m.group(1))
    for what in ("dropped", "duplicated", "out-of-order"):
        counts = re.findall(rf"# {what} messages = (\d+)", text)
        if counts:
            got[what] = sum(map(int, counts))
    m = re.search(r"Total (\d+) messages received and handled", text)
    if m:
        got["handled"] = int(m.group(1))
    errors = [ln for ln in text.splitlines() if "ERROR" in ln]
    if errors:
        got["error lines"] = errors
    return got


def sockperf_round(mode, servers, tmp_path, sockperf, case):
    """`sockperf server` on a fresh port, one 1 s client of `case`, then the
    server stopped with SIGINT (it prints what it handled). Returns what must
    hold both ways, and the messages handled."""
    port = free_port()
    srv = servers(f"sockperf-{mode.name}-{case}",
                  mode.argv([sockperf, "server", "--tcp", "-i", "127.0.0.1", "-p", port]),
                  mode.env("sockperf-server"), tmp_path)
    wait_listening(srv, port)
    res = run_client(mode, "sockperf-client",
                     [sockperf] + SOCKPERF_CASES[case] + ["--tcp", "-i", "127.0.0.1", "-p", port,
                                                         "-t", "1"], tmp_path)
    # The client has exited: whatever it sent is in the server's socket, or
    # handled. Give the server a moment to read the rest before stopping it
    # (it stops reading at SIGINT).
    time.sleep(0.5)
    rc = srv.stop(signal.SIGINT)
    server_log = output_of(srv)
    assert rc == 0, f"sockperf server exit status {rc}\n" + server_log
    c = sockperf_numbers(res.stdout.decode(errors="replace") + res.stderr.decode(errors="replace"))
    s = sockperf_numbers(server_log)
    where = f"sockperf {case} ({mode.name}):\n{res.describe()}\n{server_log}"
    assert "error lines" not in c and "error lines" not in s, where
    assert c.get("sent", 0) > 0, where
    if case != "throughput":
        assert c.get("received", 0) > 0, where
        assert (c.get("dropped"), c.get("duplicated"), c.get("out-of-order")) == (0, 0, 0), where
    # sockperf counts a message as sent before its send() returns, and keeps
    # counting it when the end-of-test SIGALRM interrupts that send (its
    # handler has no SA_RESTART: EINTR, nothing sent). So one message fewer
    # may be handled, when the last send was waiting for room; under shunt
    # (a 256 KiB ring) it waits more often than with the kernel's larger
    # buffers. Under shunt the caller also checks the library's byte counts.
    handled = s.get("handled", -1)
    assert c["sent"] - 1 <= handled <= c["sent"], (
        "the server handled other than the client sent\n" + where)
    return {"all handled": True}, handled


@pytest.fixture
def sockperf(need):
    return need(["sockperf"], ["sockperf"])["sockperf"]


@pytest.mark.plain
@pytest.mark.parametrize("case", SOCKPERF_CASES)
def test_sockperf_plain(tools, servers, tmp_path, sockperf, case):
    plain_once(("sockperf", case),
               lambda: sockperf_round(plain_mode(tools), servers, tmp_path, sockperf, case))


@pytest.mark.shunt
@pytest.mark.parametrize("case", SOCKPERF_CASES)
def test_sockperf(request, tools, servers, tmp_path, sockperf, shunt_session, shunt_cli, case):
    """sockperf server and client under shunt: every message the client sent
    was handled, none dropped, duplicated or reordered, as plain, and over
    shared memory."""
    version = version_of([sockperf, "--version"], "version")
    # Bytes per message: -m, or sockperf's smallest (its header).
    size = int(SOCKPERF_CASES[case][2]) if SOCKPERF_CASES[case][1] == "-m" else 14
    try:
        plain, _ = plain_once(("sockperf", case), lambda: sockperf_round(
            plain_mode(tools), servers, tmp_path, sockperf, case))
        mode = shunt_mode(tools, shunt_session, shunt_cli)
        shunted, handled = sockperf_round(mode, servers, tmp_path, sockperf, case)
        assert shunted == plain
        # At least every message handled went over shared memory, and what
        # the client's library sent is exactly what the server's received.
        assert_stats(mode, "sockperf-client", shm_connect=1, shm_tx_bytes=handled * size)
        assert_stats(mode, "sockperf-server", shm_accept=1, shm_rx_bytes=handled * size)
        sent_bytes = mode.totals("sockperf-client")[1].get("shm_tx_bytes")
        assert sent_bytes == mode.totals("sockperf-server")[1].get("shm_rx_bytes"), sent_bytes
    except BaseException as e:
        record(request.config, "sockperf server", version, f"sockperf {case}", failure(e), "shm")
        raise
    record(request.config, "sockperf server", version, f"sockperf {case}", "pass", "shm")
