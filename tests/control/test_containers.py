# SPDX-License-Identifier: MIT
"""Containers: processes in different network namespaces of one host get
shared-memory connections when one connects to an address the other listens
on in its own namespace, reached over a veth pair or a bridge; and a
connection never lands on a listener in a namespace its address does not
reach. Each scenario runs plain, then under `shunt run`, and both must print
the same (tests/control/nsprobe: addresses, request, reply, errno).

Needs root (`ip netns add`, veth pairs, bridges): skipped, saying so,
without. Every namespace is ours (shunt-t-<pid>-<name>) and removed at the
end; every address and bridge lives inside them: nothing is sent from the
root namespace, whose default route would take 10.x traffic off the machine.
One shuntd runs in the root namespace for the whole module."""

import os
import pathlib
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import ShuntSession, plain_env, read_stats, run_captured

pytestmark = pytest.mark.shunt

PORT = 7301


def _ip(*args, check=True):
    return subprocess.run(["ip", *map(str, args)], capture_output=True, text=True,
                          timeout=20, check=check)


class Net:
    """The namespaces, veth pairs and bridges a test makes; all removed by
    cleanup(), and only those."""

    def __init__(self):
        self.prefix = f"shunt-t-{os.getpid()}-"
        self.created = []

    def ns(self, short):
        name = self.prefix + short
        _ip("netns", "add", name)
        self.created.append(name)
        _ip("-n", name, "link", "set", "lo", "up")
        return name

    def veth(self, ns1, dev1, ns2, dev2):
        """A veth pair made directly in the two namespaces, both ends up."""
        _ip("link", "add", dev1, "netns", ns1, "type", "veth", "peer", "name", dev2,
            "netns", ns2)
        _ip("-n", ns1, "link", "set", dev1, "up")
        _ip("-n", ns2, "link", "set", dev2, "up")

    def addr(self, ns, dev, cidr):
        extra = ["nodad"] if ":" in cidr else []
        _ip("-n", ns, "addr", "add", cidr, "dev", dev, *extra)

    def bridge(self, ns, dev):
        _ip("-n", ns, "link", "add", dev, "type", "bridge")
        _ip("-n", ns, "link", "set", dev, "up")

    def port(self, ns, dev, bridge):
        _ip("-n", ns, "link", "set", dev, "master", bridge)

    def cleanup(self):
        for name in reversed(self.created):
            _ip("netns", "del", name, check=False)
        self.created.clear()


def _can_make_namespaces():
    if os.geteuid() != 0:
        return "not root"
    if not shutil.which("ip"):
        return "no `ip` (iproute2)"
    probe = f"shunt-t-{os.getpid()}-probe"
    res = _ip("netns", "add", probe, check=False)
    if res.returncode != 0:
        return f"`ip netns add` is not permitted here: {res.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


class World:
    """The module's daemon, and how to run nsprobe in a namespace, plain or
    under shunt."""

    def __init__(self, build_dir, shunt, directory):
        self.sess = ShuntSession(directory)
        self.shunt = shunt
        self.probe = build_dir / "tests" / "control" / "nsprobe"
        self.dir = pathlib.Path(directory)
        self.runs = 0
        self.servers = []
        log = open(self.sess.daemon_log, "ab")
        self.daemon = subprocess.Popen([str(shunt), "daemon", "--socket", self.sess.socket,
                                        "--log", os.environ.get("SHUNT_TEST_DAEMON_LOG", "info")],
                                       env=plain_env(), stdin=subprocess.DEVNULL,
                                       stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 10
        while not os.path.exists(self.sess.socket):
            assert self.daemon.poll() is None, f"shunt daemon exited: {self.log_tail()}"
            assert time.monotonic() < deadline, "shunt daemon never made its socket"
            time.sleep(0.02)

    def log_tail(self):
        try:
            return self.sess.daemon_log.read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def _argv(self, ns, under_shunt, args):
        pre = ["ip", "netns", "exec", ns]
        if under_shunt:
            pre += [str(self.shunt), "run", "--no-daemon", "--"]
        return pre + [str(self.probe), *map(str, args)]

    def _env(self, under_shunt):
        self.runs += 1
        stats = self.dir / f"run{self.runs}.stats.jsonl"
        return (self.sess.env(stats) if under_shunt else plain_env()), stats

    def server(self, ns, under_shunt, addr, tag, count=1, port=PORT):
        env, stats = self._env(under_shunt)
        proc = subprocess.Popen(self._argv(ns, under_shunt, ["server", addr, port, tag, count]),
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        srv = Server(proc, stats)
        self.servers.append(srv)
        srv.expect("listening")
        return srv

    def client(self, ns, under_shunt, addr, port=PORT, src=None):
        env, stats = self._env(under_shunt)
        args = ["client", addr, port] + ([src] if src else [])
        res = run_captured(self._argv(ns, under_shunt, args), env, timeout=20)
        assert res.rc == 0, res.describe()
        return res.stdout.decode().splitlines(), read_stats(stats)[1]

    def stop(self):
        for srv in self.servers:
            srv.kill()
        self.servers.clear()
        if self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()


class Server:
    def __init__(self, proc, stats):
        self.proc = proc
        self.stats_path = stats
        self.lines = []

    def expect(self, prefix, timeout=10):
        deadline = time.monotonic() + timeout
        while not any(line.startswith(prefix) for line in self.lines):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise AssertionError(f"server: no {prefix!r} in {timeout}s: {self.lines}")
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"server exited before {prefix!r}: {self.lines} "
                                     f"{self.proc.stderr.read()}")
            self.lines.append(line.rstrip("\n"))

    def finish(self, timeout=10):
        """Wait for it to exit; its lines and its SHUNT_STATS totals."""
        out, err = self.proc.communicate(timeout=timeout)
        assert self.proc.returncode == 0, f"server: exit {self.proc.returncode}: {out}{err}"
        self.lines += out.splitlines()
        return self.lines, read_stats(self.stats_path)[1]

    def kill(self):
        """Stop it if it still runs (only this process group, which we made)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.communicate()
        return self.lines


@pytest.fixture(scope="module")
def world(build_dir):
    why = _can_make_namespaces()
    if why:
        pytest.skip(f"container tests need network namespaces: {why}")
    shunt = build_dir / "src" / "cli" / "shunt"
    if not os.access(shunt, os.X_OK):
        pytest.fail(f"shunt CLI not built: {shunt} is missing", pytrace=False)
    directory = tempfile.mkdtemp(prefix="shunt-ns-")
    w = World(build_dir, shunt, directory)
    yield w
    w.stop()
    log = w.log_tail()
    for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
        assert marker not in log, f"shuntd reported a sanitizer error:\n{log}"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def net(world):
    n = Net()
    yield n
    for srv in world.servers:
        srv.kill()
    world.servers.clear()
    n.cleanup()


ADDR_LINE = re.compile(r"^(connected|accepted) local (\S+) (\d+) peer (\S+) (\d+)$")


def normalize(client_lines, server_lines):
    """Both sides' lines with the client's ephemeral port replaced by EPH
    (it differs from run to run), after checking that the server saw the
    port the client reports."""
    eph = None
    out = []
    for line in client_lines:
        m = ADDR_LINE.match(line)
        if m:
            eph = m.group(3)
            line = f"connected local {m.group(2)} EPH peer {m.group(4)} {m.group(5)}"
        out.append(line)
    for line in server_lines:
        m = ADDR_LINE.match(line)
        if m:
            assert eph is not None and m.group(5) == eph, (client_lines, server_lines)
            line = f"accepted local {m.group(2)} {m.group(3)} peer {m.group(4)} EPH"
        out.append(line)
    return out


def exchange(world, server_ns, listen_addr, tag, client_ns, dst, under_shunt, src=None):
    """One server, one client: (normalized lines, client stats, server stats)."""
    srv = world.server(server_ns, under_shunt, listen_addr, tag)
    lines, cstats = world.client(client_ns, under_shunt, dst, src=src)
    slines, sstats = srv.finish()
    return normalize(lines, slines), cstats, sstats


def differential(world, server_ns, listen_addr, tag, client_ns, dst, src=None):
    plain, _, _ = exchange(world, server_ns, listen_addr, tag, client_ns, dst, False, src)
    shunt, cstats, sstats = exchange(world, server_ns, listen_addr, tag, client_ns, dst, True,
                                     src)
    assert shunt == plain, f"plain:\n{plain}\nshunt:\n{shunt}\n{world.log_tail()}"
    return plain, cstats, sstats


def assert_shm(cstats, sstats, world, n=1):
    assert cstats.get("shm_connect", 0) == n and sstats.get("shm_accept", 0) == n, \
        f"not shared memory: client {cstats}, server {sstats}\n{world.log_tail()}"


@pytest.mark.parametrize("family", ["ipv4", "ipv6"])
def test_veth_pair(world, net, family):
    """A client in A connects to B's address across the A<->B veth pair:
    shared memory, with the addresses the kernel reports."""
    a, b = net.ns("a"), net.ns("b")
    net.veth(a, "va", b, "vb")
    if family == "ipv4":
        ips = ("10.99.1.1", "10.99.1.2", "/24")
    else:
        ips = ("fd00:99:1::1", "fd00:99:1::2", "/64")
    net.addr(a, "va", ips[0] + ips[2])
    net.addr(b, "vb", ips[1] + ips[2])
    wildcard = "0.0.0.0" if family == "ipv4" else "::"
    lines, cstats, sstats = differential(world, b, wildcard, "B", a, ips[1])
    assert lines[0] == f"connected local {ips[0]} EPH peer {ips[1]} {PORT}", lines
    assert "reply B:hello" in lines
    assert_shm(cstats, sstats, world)


def test_bridge(world, net):
    """A bridge in namespace S with A, B and C attached: A->B and C->B use
    shared memory (also from a second address of A the client binds to); so
    does S itself (its bridge is its way out) to B, and A to an address S
    has on the bridge."""
    s, a, b, c = net.ns("s"), net.ns("a"), net.ns("b"), net.ns("c")
    net.bridge(s, "br0")
    net.addr(s, "br0", "10.99.2.254/24")
    for i, (ns, name) in enumerate(((a, "a"), (b, "b"), (c, "c")), 1):
        net.veth(ns, "eth0", s, f"p{name}")
        net.port(s, f"p{name}", "br0")
        net.addr(ns, "eth0", f"10.99.2.{i}/24")
    for client, src in ((a, "10.99.2.1"), (c, "10.99.2.3"), (s, "10.99.2.254")):
        lines, cstats, sstats = differential(world, b, "10.99.2.2", "B", client, "10.99.2.2")
        assert lines[0] == f"connected local {src} EPH peer 10.99.2.2 {PORT}", lines
        assert_shm(cstats, sstats, world)
    net.addr(a, "eth0", "10.99.2.11/24")
    lines, cstats, sstats = differential(world, b, "0.0.0.0", "B", a, "10.99.2.2",
                                         src="10.99.2.11")
    assert lines[0] == f"connected local 10.99.2.11 EPH peer 10.99.2.2 {PORT}", lines
    assert_shm(cstats, sstats, world)
    lines, cstats, sstats = differential(world, s, "0.0.0.0", "S", a, "10.99.2.254")
    assert "reply S:hello" in lines
    assert_shm(cstats, sstats, world)


def test_address_conflict_on_a_bridge_goes_to_the_kernel(world, net):
    """B and C on one bridge both have 10.99.6.2 (a conflict the kernel
    settles by whichever ARP reply wins): under shunt the connection is the
    kernel's, never a guess. The same when the other holder of the address
    is the bridge's own namespace, where no process runs under shunt."""
    s, a, b, c = net.ns("s"), net.ns("a"), net.ns("b"), net.ns("c")
    net.bridge(s, "br0")
    for ns, name, ip in ((a, "a", "10.99.6.1"), (b, "b", "10.99.6.2"), (c, "c", "10.99.6.2")):
        net.veth(ns, "eth0", s, f"p{name}")
        net.port(s, f"p{name}", "br0")
        net.addr(ns, "eth0", ip + "/24")
    srv_b = world.server(b, True, "10.99.6.2", "B")
    srv_c = world.server(c, True, "10.99.6.2", "C")
    lines, cstats = world.client(a, True, "10.99.6.2")
    assert lines[-1] in ("reply B:hello", "reply C:hello"), lines
    assert cstats.get("shm_connect", 0) == 0 and cstats.get("kernel_connect", 0) == 1, cstats
    srv_b.kill()
    srv_c.kill()
    net.addr(b, "eth0", "10.99.6.3/24")
    net.addr(s, "br0", "10.99.6.3/24")
    srv_b = world.server(b, True, "0.0.0.0", "B")
    lines, cstats = world.client(a, True, "10.99.6.3")
    assert lines[-1] in ("reply B:hello", "connect ECONNREFUSED"), lines
    assert cstats.get("shm_connect", 0) == 0, cstats
    srv_b.kill()


def test_through_a_gateway_goes_to_the_kernel(world, net):
    """A reaches B through a router namespace R (a gateway on the route):
    conservative, the kernel carries it, with the same outcome."""
    a, r, b = net.ns("a"), net.ns("r"), net.ns("b")
    net.veth(a, "v0", r, "va")
    net.veth(b, "v0", r, "vb")
    net.addr(a, "v0", "10.99.7.1/24")
    net.addr(r, "va", "10.99.7.254/24")
    net.addr(r, "vb", "10.99.8.254/24")
    net.addr(b, "v0", "10.99.8.2/24")
    _ip("-n", a, "route", "add", "10.99.8.0/24", "via", "10.99.7.254")
    _ip("-n", b, "route", "add", "10.99.7.0/24", "via", "10.99.8.254")
    subprocess.run(["ip", "netns", "exec", r, "sh", "-c",
                    "echo 1 > /proc/sys/net/ipv4/ip_forward"],
                   check=True, capture_output=True, timeout=20)
    lines, cstats, sstats = differential(world, b, "0.0.0.0", "B", a, "10.99.8.2")
    assert lines[0] == f"connected local 10.99.7.1 EPH peer 10.99.8.2 {PORT}", lines
    assert cstats.get("shm_connect", 0) == 0 and sstats.get("shm_accept", 0) == 0, \
        (cstats, sstats)


def test_same_address_in_isolated_namespaces(world, net):
    """D and E both have 10.99.3.2 and listen on it, with no link between
    them: from F (linked only to D) a connection lands on D's listener, from
    E2 (linked only to E) on E's, never the other; from G, with no route to
    it, connect fails as it does plain."""
    d, e, f, e2, g = (net.ns(x) for x in ("d", "e", "f", "e2", "g"))
    for near, far in ((f, d), (e2, e)):
        net.veth(near, "v0", far, "v0")
        net.addr(near, "v0", "10.99.3.1/24")
        net.addr(far, "v0", "10.99.3.2/24")
    for under_shunt in (False, True):
        srv_d = world.server(d, under_shunt, "10.99.3.2", "D")
        srv_e = world.server(e, under_shunt, "10.99.3.2", "E")
        from_f, cstats_f = world.client(f, under_shunt, "10.99.3.2")
        assert from_f[-1] == "reply D:hello", from_f
        lines_d, sstats_d = srv_d.finish()
        assert any(x.startswith("accepted") for x in lines_d)
        assert not any(x.startswith("accepted") for x in srv_e.lines), srv_e.lines
        from_e2, cstats_e2 = world.client(e2, under_shunt, "10.99.3.2")
        assert from_e2[-1] == "reply E:hello", from_e2
        lines_e, sstats_e = srv_e.finish()
        assert sum(x.startswith("accepted") for x in lines_e) == 1, lines_e
        unreachable, cstats_g = world.client(g, under_shunt, "10.99.3.2")
        assert unreachable == ["connect ENETUNREACH"], unreachable
        if under_shunt:
            assert_shm(cstats_f, sstats_d, world)
            assert_shm(cstats_e2, sstats_e, world)
            assert cstats_g.get("shm_connect", 0) == 0, cstats_g


def test_loopback_listener_not_reached_from_another_namespace(world, net):
    """B listens on 127.0.0.1 only: from A, neither A's loopback nor B's
    veth address reaches it, plain or under shunt. Under shunt A's
    directory does not show B's loopback port either (it is in A's
    /proc/net/tcp no more than the kernel's): A's connects are left to the
    kernel without asking shuntd, as for a port nobody listens on."""
    a, b = net.ns("a"), net.ns("b")
    net.veth(a, "va", b, "vb")
    net.addr(a, "va", "10.99.4.1/24")
    net.addr(b, "vb", "10.99.4.2/24")
    for under_shunt in (False, True):
        srv = world.server(b, under_shunt, "127.0.0.1", "B")
        for dst in ("127.0.0.1", "10.99.4.2"):
            lines, cstats = world.client(a, under_shunt, dst)
            assert lines == ["connect ECONNREFUSED"], (dst, under_shunt, lines)
            assert cstats.get("shm_connect", 0) == 0, cstats
            if under_shunt:
                assert cstats.get("kernel_unlistened", 0) == 1, (dst, {k: v for k, v in cstats.items() if v})
        if under_shunt:
            # B's own directory shows it: a connect from B asks, and gets shared memory.
            lines, cstats = world.client(b, under_shunt, "127.0.0.1")
            assert cstats.get("shm_connect", 0) == 1 and not cstats.get("kernel_unlistened"), \
                (lines, cstats)
        assert srv.kill() == ["listening"]


def test_own_address_in_a_namespace(world, net):
    """Within one namespace other than shuntd's, a connection to its own
    veth address (not loopback) uses shared memory."""
    h, h2 = net.ns("h"), net.ns("h2")
    net.veth(h, "v0", h2, "v0")
    net.addr(h, "v0", "10.99.5.1/24")
    net.addr(h2, "v0", "10.99.5.2/24")
    lines, cstats, sstats = differential(world, h, "10.99.5.1", "H", h, "10.99.5.1")
    assert lines[0] == f"connected local 10.99.5.1 EPH peer 10.99.5.1 {PORT}", lines
    assert_shm(cstats, sstats, world)


EPHEMERAL = re.compile(r"^(connected local \S+) \d+ (peer .*)$")


def test_a_thread_that_moves_to_another_namespace(world, net):
    """A process whose thread moves to another namespace (setns) connects as
    the kernel does: a socket made after the move reaches that namespace's
    listener, one made before still reaches its own namespace's. Under shunt
    the session and its channels are the first namespace's, so the sockets
    made after the move are the kernel's (src/preload/netns.h); before stop
    30 they reached the first namespace's server."""
    a, b = net.ns("mva"), net.ns("mvb")
    runs = {}
    for under_shunt in (False, True):
        srv_a = world.server(a, under_shunt, "127.0.0.1", "A", count=2)
        srv_b = world.server(b, under_shunt, "127.0.0.1", "B")
        env, stats = world._env(under_shunt)
        res = run_captured(world._argv(a, under_shunt, ["move", "127.0.0.1", PORT,
                                                        f"/var/run/netns/{b}"]),
                           env, timeout=20)
        assert res.rc == 0, res.describe()
        lines = [EPHEMERAL.sub(r"\1 EPH \2", x) for x in res.stdout.decode().splitlines()]
        _, sstats_a = srv_a.finish()
        _, sstats_b = srv_b.finish()
        runs[under_shunt] = (lines, read_stats(stats)[1], sstats_a, sstats_b)
    plain, shunt = runs[False][0], runs[True][0]
    assert [x for x in plain if x.startswith("reply")] == ["reply A:hello", "reply B:hello",
                                                            "reply A:hello"], plain
    assert shunt == plain, f"plain:\n{plain}\nshunt:\n{shunt}"
    _, cstats, sstats_a, sstats_b = runs[True]
    # Before the move and on the socket made before it: shared memory, in A.
    assert cstats.get("shm_connect", 0) == 2, cstats
    assert sstats_a.get("shm_accept", 0) == 2, sstats_a
    assert sstats_b.get("kernel_accept", 0) == 1 and not sstats_b.get("shm_accept"), sstats_b
