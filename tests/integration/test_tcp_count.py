# SPDX-License-Identifier: MIT
"""The kernel's byte counts of a TCP connection, which a switch between the
kernel and a circuit at a byte boundary rests on (docs/transports.md):
src/common/tcp_count.c must say exactly what each end wrote and read,
after every call, while data sits queued, unacknowledged, lost and
retransmitted, and a direction switched at the sender's count must be
found by the receiver's count alone (tests/integration/tcp_count.c checks
every byte of the stream where it lands).

Over loopback as anyone; between two network namespaces over a veth pair
whose queues drop packets (a token bucket with a short queue, so that TCP
retransmits) as root, skipped, saying so, otherwise. The kernel's own
retransmission counter must have moved there, or the run proved nothing
about loss."""

import os
import shutil
import subprocess

import pytest

OPS = "30000"


def _probe(build_dir, *args, ns_prefix=()):
    res = subprocess.run([*ns_prefix, str(build_dir / "tests" / "integration" / "tcp_count"),
                          "--ops", OPS, *args], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"tcp_count {' '.join(args)}: {res.stderr.strip()[-2000:]}"
    words = res.stdout.split()
    assert words[:1] == ["ok"], res.stdout
    checks = int(words[1])
    # Every call of both ends was followed by a check of both counts.
    assert checks >= int(OPS), res.stdout
    return checks


@pytest.mark.parametrize("fork", ["0", "1"], ids=["one_process", "two_processes"])
@pytest.mark.parametrize("seed", ["1", "2"])
def test_counts_over_loopback(build_dir, fork, seed):
    _probe(build_dir, "--seed", seed, "--fork", fork)


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _retransmitted(ns):
    out = subprocess.run(["ip", "netns", "exec", ns, "nstat", "-az", "TcpRetransSegs"],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if line.startswith("TcpRetransSegs"):
            return int(line.split()[1])
    raise AssertionError(f"nstat printed no TcpRetransSegs: {out}")


@pytest.fixture
def lossy_link():
    """Two namespaces, a veth pair between them, and on each side a token
    bucket whose short queue drops what overflows it."""
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: not root: no network namespaces for the lossy link")
    for tool in ("ip", "tc", "nstat"):
        if not shutil.which(tool):
            pytest.skip(f"SKIPPED LOUDLY: no `{tool}` (iproute2) for the lossy link")
    tag = f"{os.getpid() % 100000}"
    a, b = f"shunt-tca-{tag}", f"shunt-tcb-{tag}"
    made = []
    try:
        for ns in (a, b):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", f"tca{tag}", "netns", a, "type", "veth", "peer", "name", f"tcb{tag}",
            "netns", b)
        for ns, dev, cidr in ((a, f"tca{tag}", "10.77.0.2/24"), (b, f"tcb{tag}", "10.77.0.1/24")):
            _ip("-n", ns, "addr", "add", cidr, "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            res = subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
                                  "rate", "300mbit", "burst", "16kb", "limit", "24kb"],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                pytest.skip(f"SKIPPED LOUDLY: no token bucket qdisc here: {res.stderr.strip()}")
        yield a, b
    finally:
        for ns in made:
            _ip("netns", "del", ns, check=False)


@pytest.mark.parametrize("fork", ["0", "1"], ids=["one_process", "two_processes"])
def test_counts_across_a_lossy_link(build_dir, lossy_link, fork):
    client_ns, server_ns = lossy_link
    before = _retransmitted(client_ns) + _retransmitted(server_ns)
    _probe(build_dir, "--seed", "3", "--fork", fork, "--ns-client", client_ns,
           "--ns-server", server_ns, "--addr", "10.77.0.1")
    after = _retransmitted(client_ns) + _retransmitted(server_ns)
    assert after > before, "no segment was retransmitted: the link lost nothing"
