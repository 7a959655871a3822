# SPDX-License-Identifier: MIT
"""Hostile peers. A program that maps its own circuit and writes garbage
indices, headers, state bits, options and lock words into it, or never
reads, or dies in the middle of a message (tests/control/hostile.c), while
its victim (tests/control/victim.c) keeps calling recv, send, poll and
epoll_wait with timeouts: the victim never crashes, every call returns
data, EOF or an error a TCP socket can have, a timeout still times out,
every byte it receives is one the hostile side put in the ring, and once
the hostile is gone even calls without a timeout end. Circuits are never
files anyone can open, and no other process can obtain one from shuntd.

Then lies told to a listener's holders and to shuntd: a hostile client
spoils the channel it has to a victim listener (tests/control/echod.c)
while honest clients of another process (tests/control/honest.c) connect
to it, and a hostile process lies in its own journal and through the
eventfds it shares with shuntd. Each such test runs a shuntd of its own."""

import json
import os
import pathlib
import signal
import subprocess
import time
import types

import pytest

from conftest import session_processes
from control_lib import LineProc, check_idle, shuntd_env

# Every call of the victim waits at most this long for the peer (SO_RCVTIMEO,
# SO_SNDTIMEO, poll and epoll timeouts); it runs its calls for BUDGET_MS, while
# the hostile writes garbage for HOSTILE_MS.
TIMEOUT_MS = 100
BUDGET_MS = 700
HOSTILE_MS = 500
# A call that takes longer than this hangs: not slowness on a busy machine.
HANG_S = 5.0

RECV_OPS = {"recv", "recv_dontwait", "recv_peek", "recv_waitall", "read_nonblock",
            "late_dontwait", "drain_recv"}
# What a TCP socket may say when its peer misbehaves or goes.
PEER_ERRORS = {"ECONNRESET", "EPIPE", "ETIMEDOUT", "ECONNREFUSED", "ENOTCONN"}
SO_ERRORS = {0, 104, 32, 110, 111}  # none, ECONNRESET, EPIPE, ETIMEDOUT, ECONNREFUSED
READ_LEN = {"recv": 4096, "recv_dontwait": 4096, "recv_peek": 4096, "recv_waitall": 8192,
            "read_nonblock": 4096, "late_dontwait": 4096, "drain_recv": 4096}

GARBAGE_MODES = ["indices", "own-index", "header", "state", "opts", "lock-dead", "lock-foreign",
                 "lock-self", "random", "spam"]


class Proc(LineProc):
    """A helper process under `shunt run` whose JSON lines we read as they come."""

    def parse(self, raw):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            raise AssertionError(f"{self.argv[-5:]}: not JSON: {raw!r}") from None

    def expect(self, event, timeout=10):
        """Wait for the line {"event": event}; return it."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if line.get("event") == event:
                    return line
                if line.get("event") == "error":
                    raise AssertionError(f"{self.describe()}")
            left = deadline - time.monotonic()
            got = self.read_some(max(left, 0))
            if got is None or (got is False and left <= 0):
                raise AssertionError(f"no {event!r} within {timeout}s "
                                     f"({'exited' if got is None else 'timed out'}):\n"
                                     f"{self.describe()}")

    def finish(self, timeout):
        """Read to EOF and reap; the process is killed if it takes longer. Returns rc."""
        deadline = time.monotonic() + timeout
        while self.read_some(max(deadline - time.monotonic(), 0)):
            pass
        if self.proc.poll() is None:
            self.kill()
        return self.proc.wait()

    def describe(self):
        return (f"$ {' '.join(self.argv)}\nrc {self.proc.poll()}\nlast lines: "
                f"{self.lines[-12:]}\nstderr: {self.stderr()[-3000:]}")


@pytest.fixture
def pair(build_dir, shunt_cli, shunt_session, tmp_path):
    """Start a victim and a hostile peer under shunt; both are stopped at the end."""
    started = []
    shunt = shunt_cli()
    control = build_dir / "tests" / "control"
    env = shunt_session.env(tmp_path / "stats.jsonl")

    def start(mode, hostile_listens=False, budget_ms=BUDGET_MS):
        victim_args = [TIMEOUT_MS, budget_ms]
        hostile_args = [mode]
        if hostile_listens:
            hostile = Proc([shunt, "run", "--", control / "hostile", "listen", "-", mode, 0,
                            HOSTILE_MS], env, tmp_path / "hostile.err")
            started.append(hostile)
            port = hostile.expect("listening")["port"]
            victim = Proc([shunt, "run", "--", control / "victim", "connect", port] +
                          victim_args, env, tmp_path / "victim.err")
            started.append(victim)
        else:
            victim = Proc([shunt, "run", "--", control / "victim", "listen", "-"] + victim_args,
                          env, tmp_path / "victim.err")
            started.append(victim)
            port = victim.expect("listening")["port"]
            # `shunt run` execs the program: the pid we started is the victim's.
            hostile = Proc([shunt, "run", "--", control / "hostile", "connect", port] +
                           hostile_args + [victim.pid, HOSTILE_MS], env,
                           tmp_path / "hostile.err")
            started.append(hostile)
        victim.expect("connected")
        return victim, hostile

    yield start
    for p in started:
        p.stop()


def calls(victim):
    return [line for line in victim.lines if "op" in line]


def check_victim(victim, rc, exact=False):
    """What every mode requires of the victim. Returns its calls."""
    err = victim.stderr()
    assert rc == 0, f"victim: {'killed by signal %d' % -rc if rc < 0 else 'exit %d' % rc}\n" \
                    f"{victim.describe()}"
    assert "runtime error" not in err, f"UBSan in the victim:\n{err[-4000:]}"
    ops = calls(victim)
    assert ops, victim.describe()
    for c in ops:
        op, ret, e = c["op"], c["ret"], c["err"]
        assert c["ms"] < HANG_S * 1000, f"{op} hung for {c['ms']:.0f} ms: {c}"
        if op in RECV_OPS:
            assert ret <= READ_LEN[op], c
            assert c["bad"] == 0, f"{op} returned bytes no ring held: {c}"
            assert c["guard"], f"{op} wrote past the bytes it returned: {c}"
            if exact:
                assert c["exact"], f"{op} returned bytes the hostile never sent there: {c}"
        if ret < 0:
            # Phase 2 has no timeouts: EAGAIN there would be a lie about O_NONBLOCK.
            allowed = PEER_ERRORS | ({"EAGAIN"} if not op.startswith("drain") else set())
            if op in ("poll_in", "poll_out", "epoll_wait", "fionread", "so_error"):
                allowed = set()
            assert e in allowed, f"{op} failed with {e}, which it must not: {c}"
        if op in ("poll_in", "poll_out", "epoll_wait"):
            assert ret in (0, 1), c
            assert not c.get("revents", 0) & 0x20, f"POLLNVAL: {c}"
        if op == "so_error":
            assert c["value"] in SO_ERRORS, c
        if op == "fionread":
            assert 0 <= c["value"] <= 64 << 20, c
    drain = [c for c in ops if c["op"] == "drain_recv"]
    assert drain and drain[-1]["ret"] <= 0, f"no EOF or error once the peer was gone: {drain[-3:]}"
    sends = [c for c in ops if c["op"] == "drain_send"]
    assert sends and sends[-1]["ret"] < 0, \
        f"sends to a peer that is gone kept working: {sends}\n{victim.describe()}"
    return ops


def check_reset_is_readable(ops):
    """Once the victim found the indices impossible (a reset: ECONNRESET
    from the first call to notice, EOF or EPIPE after), the socket is
    readable for good: poll and level-triggered epoll say so at once, as for
    a reset kernel socket, though no notice of it comes from the peer."""
    ends = [i for i, c in enumerate(ops) if c["err"] == "ECONNRESET"]
    assert ends, f"the garbage indices went unnoticed: {ops}"
    after = [c for c in ops[ends[0]:] if c["op"] in ("poll_in", "epoll_wait")]
    assert all(c["ret"] == 1 for c in after), after


def run_mode(pair, mode, hostile_listens=False, started=None, linger=0.2):
    """Run the victim's phase 1 against a hostile in @mode (or finish the
    pair @started), then its phase 2, killing the hostile @linger seconds
    into it. Returns the victim, its exit status, the hostile and its exit
    status before we killed it (None: it was running)."""
    victim, hostile = started or pair(mode, hostile_listens)
    victim.expect("phase1", timeout=3 + HANG_S * 2)
    if mode == "exit-mid":
        hrc = hostile.proc.wait(timeout=HANG_S)  # it kills itself
    else:
        hrc = hostile.proc.poll()  # the others keep up their lies until killed
    # Phase 2's calls have no timeout, in effect: the hostile's end must end them.
    victim.send("go")
    time.sleep(linger)
    hostile.kill()
    hostile.finish(timeout=10)
    rc = victim.finish(timeout=20)
    herr = hostile.stderr()
    assert "runtime error" not in herr, f"UBSan in the hostile's libshunt:\n{herr[-4000:]}"
    return victim, rc, hostile, hrc


@pytest.mark.shunt
@pytest.mark.parametrize("mode", GARBAGE_MODES)
def test_garbage_in_the_circuit(pair, mode):
    """The hostile connects and writes garbage into the circuit for a while,
    producing ink bytes meanwhile, keeps up its worst lies, and is killed."""
    locked_out = mode in ("lock-foreign", "lock-self")
    victim, rc, hostile, hrc = run_mode(pair, mode, linger=0.5 if locked_out else 0.2)
    assert hrc is None, hostile.describe()
    ops = check_victim(victim, rc)
    if mode == "indices":
        check_reset_is_readable(ops)
    if locked_out:
        # With no timeout set, a non-blocking call still does not wait for
        # the lock the live hostile holds for it (nor for the hostile to die).
        late = [c for c in ops if c["op"] == "late_dontwait"]
        assert late and late[0]["err"] == "EAGAIN", late


@pytest.mark.shunt
@pytest.mark.parametrize("mode", ["indices", "random", "lock-dead"])
def test_garbage_from_the_acceptor(pair, mode):
    """The same from the other end: the victim connected, the hostile accepted."""
    victim, rc, hostile, hrc = run_mode(pair, mode, hostile_listens=True)
    assert hrc is None, hostile.describe()
    ops = check_victim(victim, rc)
    if mode == "indices":
        check_reset_is_readable(ops)


@pytest.mark.shunt
def test_peer_that_stops_reading(pair):
    """A peer that sends 1000 bytes and never reads: the victim gets exactly
    those bytes; its blocking sends fill the ring and then time out with
    EAGAIN, poll for POLLOUT times out, and all of it ends once the peer is
    killed."""
    victim, rc, hostile, hrc = run_mode(pair, "stall")
    assert hrc is None and hostile.expect("sent"), hostile.describe()
    ops = check_victim(victim, rc, exact=True)
    assert victim.lines[-1]["received"] == 1000, victim.describe()
    phase1 = ops[:next(i for i, c in enumerate(ops) if c["op"].startswith("drain"))]
    assert any(c["op"] == "send" and c["err"] == "EAGAIN" for c in phase1), phase1
    assert any(c["op"] == "send_dontwait" and c["err"] == "EAGAIN" for c in phase1), phase1
    assert any(c["op"] == "poll_out" and c["ret"] == 0 for c in phase1), phase1
    assert any(c["op"] == "recv" and c["err"] == "EAGAIN" for c in phase1), phase1


@pytest.mark.shunt
def test_peer_killed_mid_message(pair):
    """A peer SIGKILLed in the middle of a 4 MiB send: the victim reads a
    prefix of what it sent, byte for byte, then EOF or ECONNRESET."""
    victim, rc, hostile, hrc = run_mode(pair, "exit-mid")
    assert hrc == -signal.SIGKILL, hostile.describe()
    ops = check_victim(victim, rc, exact=True)
    sent = hostile.expect("sending")["bytes"]
    assert 0 < victim.lines[-1]["received"] <= sent, victim.describe()
    ends = [c for c in ops if c["op"] in RECV_OPS and c["op"] != "recv_peek"
            and (c["ret"] == 0 or c["err"] not in ("", "EAGAIN"))]
    assert ends and all(c["ret"] == 0 or c["err"] == "ECONNRESET" for c in ends), ends


@pytest.mark.shunt
def test_lie_that_the_connection_moved_onto_the_kernel(pair):
    """A peer that sets the victim's KERNEL bit, which only shuntd may set
    once it moved the connection onto the ends' kernel sockets. The victim
    checks with its kernel socket (still in TCP repair mode: a lie) and
    resets the connection instead of moving onto it."""
    victim, rc, hostile, hrc = run_mode(pair, "kernel-bit")
    assert hrc is None, hostile.describe()
    check_victim(victim, rc)


# ---- circuits are nobody else's business

def comm(pid):
    try:
        return pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


SHARED = ("shunt-circuit", "shunt-channel")  # memfds that hold connections' bytes


def circuit_mappings(pid):
    """(address range, path) of the mappings of @pid that hold connections:
    circuits, and channels (whose slots are circuits)."""
    out = []
    for line in pathlib.Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and any(name in fields[5] for name in SHARED):
            out.append((fields[0], fields[5]))
    return out


@pytest.mark.shunt
def test_circuits_are_anonymous(pair, shunt_session):
    """During a connection no file appears under /dev/shm, no process of
    ours maps or holds one, and the ends and shuntd map the circuit only as
    a deleted memfd. The ends hold no descriptor of it either."""
    before = set(os.listdir("/dev/shm"))
    victim, hostile = pair("stall", budget_ms=1500)
    hostile.expect("sent")
    daemons = [p for p in session_processes(shunt_session.socket) if comm(p) == "shuntd"]
    assert daemons, "no shuntd runs for this session"
    mapped = {}
    for pid in [victim.pid, hostile.pid] + daemons:
        maps = pathlib.Path(f"/proc/{pid}/maps").read_text()
        assert "/dev/shm" not in maps, f"{comm(pid)} maps a /dev/shm file:\n{maps}"
        mapped[pid] = circuit_mappings(pid)
        assert all(path in (f"/memfd:{n} (deleted)" for n in SHARED) for _, path in mapped[pid]), \
            (comm(pid), mapped[pid])
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        assert not [t for t in links if "/dev/shm" in t], (comm(pid), links)
        if pid not in daemons:
            assert not [t for t in links if any(n in t for n in SHARED)], (comm(pid), links)
    assert mapped[victim.pid] and mapped[hostile.pid], mapped
    assert any(mapped[d] for d in daemons), mapped
    # Only ours: other programs on this machine may use /dev/shm meanwhile.
    new = {n for n in set(os.listdir("/dev/shm")) - before if "shunt" in n.lower()}
    assert not new, f"files appeared under /dev/shm: {new}"
    victim, rc, hostile, hrc = run_mode(pair, "stall", started=(victim, hostile))
    check_victim(victim, rc, exact=True)


PROBE_OTHER_UID = r"""
import errno, json, os, sys
out = {}
for path in json.loads(sys.argv[1]):
    try:
        if path.endswith("/fd") or path.endswith("/map_files"):
            os.listdir(path)
        else:
            os.close(os.open(path, os.O_RDWR))
        out[path] = "opened"
    except OSError as e:
        out[path] = errno.errorcode.get(e.errno, str(e.errno))
print(json.dumps(out))
"""


@pytest.mark.shunt
def test_another_uid_cannot_reach_a_circuit(pair, tools):
    """A process of another uid gets EACCES or EPERM for everything in /proc
    through which the victim's circuit could be reached: its descriptors
    (the library's hidden ones too), its mappings, its memory."""
    victim, hostile = pair("stall", budget_ms=1500)
    hostile.expect("sent")
    proc = f"/proc/{victim.pid}"
    ranges = [r for r, _ in circuit_mappings(victim.pid)]
    assert ranges
    paths = [f"{proc}/fd", f"{proc}/mem", f"{proc}/map_files"]
    paths += [f"{proc}/map_files/{r}" for r in ranges]
    paths += [f"{proc}/fd/{fd}" for fd in os.listdir(f"{proc}/fd")]
    res = tools.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                     "/usr/bin/python3", "-c", PROBE_OTHER_UID, json.dumps(paths)],
                    tools.plain_env(), timeout=30)
    assert res.rc == 0, res.describe()
    seen = json.loads(res.stdout)
    assert set(seen) == set(paths) and all(v in ("EACCES", "EPERM") for v in seen.values()), seen
    victim, rc, hostile, hrc = run_mode(pair, "stall", started=(victim, hostile))
    check_victim(victim, rc, exact=True)


@pytest.mark.shunt
def test_no_process_obtains_another_connections_circuit(pair, shunt_cli, shunt_session,
                                                        repo_root, tools, tmp_path):
    """A third process under shunt, of the same uid, asks shuntd for
    circuits, links, accepts and fork tickets by guessing ids (and by the
    real ones `shunt status` shows): it gets errors, never a circuit or
    another session's link, and the connection it aimed at goes on."""
    victim, hostile = pair("stall", budget_ms=1500)
    hostile.expect("sent")
    st = subprocess.run([str(shunt_cli()), "status", "--json"], env=shunt_session.env(),
                        capture_output=True, text=True, timeout=10)
    assert st.returncode == 0, st.stderr
    st = json.loads(st.stdout)
    mine = [c for c in st["connections"] if c.get("server_pid") == victim.pid]
    assert mine and mine[0]["transport"] == "shm", st
    real = [mine[0]["circuit"]] + [s["session"] for s in st["sessions"]
                                   if s["pid"] in (victim.pid, hostile.pid)]
    res = tools.run([shunt_cli(), "run", "--", "/usr/bin/python3",
                     repo_root / "tests" / "control" / "guess_ids.py",
                     shunt_session.socket, 40] + real,
                    shunt_session.env(tmp_path / "probe.stats"), timeout=30)
    assert res.rc == 0, res.describe()
    replies = [json.loads(line) for line in res.stdout.splitlines()]
    assert {r["req"] for r in replies} == {"HELLO", "ACCEPT", "LINK", "CLOSE", "DOWNGRADE",
                                            "LINK_NEXT", "CLAIM"}, replies
    for r in replies:
        assert not [f for f in r["fds"] if any(n in f for n in SHARED)], \
            f"a circuit was handed out: {r}"
        if r["req"] in ("HELLO", "CLAIM"):
            # Only its own session's daemon link and journal (memfds and eventfds),
            # and shuntd's directory, which every session reads.
            assert r["status"] == 0 and sorted(r["fds"]) == \
                ["/memfd:shunt-directory (deleted)", "/memfd:shunt-journal (deleted)",
                 "/memfd:shunt-link (deleted)", "anon_inode:[eventfd]",
                 "anon_inode:[eventfd]"], r
            assert r["req"] == "HELLO" or r["claim"] < 0, f"a ticket was claimed: {r}"
        elif r["req"] == "LINK_NEXT":
            assert r["status"] == 2 and not r["fds"], r  # SHUNT_NONE
        elif r["req"] == "DOWNGRADE" and r["id"] != real[0]:
            # 0 for a circuit some other test moved onto the kernel already: nothing done.
            assert r["status"] <= 0 and not r["fds"], r
        else:
            assert r["status"] < 0 and not r["fds"], f"{r['req']} of a guessed id answered: {r}"
    victim, rc, hostile, hrc = run_mode(pair, "stall", started=(victim, hostile))
    assert hrc is None, hostile.describe()
    check_victim(victim, rc, exact=True)
    assert victim.lines[-1]["received"] == 1000, victim.describe()


# ---- channels and journals: lies told to a listener's holders and to shuntd

# The hostile spoils its channel for CHAN_HOSTILE_MS while honest clients
# connect for HONEST_MS from another process; each honest connection must be
# accepted and echoed within HONEST_HANG_S (honest.c).
CHAN_HOSTILE_MS = 500
HONEST_MS = 700
HONEST_HANG_MS = 3000
# Ticks of CPU (1/CLK_TCK s) a process may use in IDLE_S once nothing is
# left to do: a spin would use all of them.
IDLE_S = 1.0
IDLE_TICKS = 10
AF_INET = 2

# Each mode with the accept() that suits it best (both kinds are covered;
# "level" accepts once per level-triggered readiness of poll()).
CHAN_MODES = [
    ("chan-indices", "block"),
    ("chan-entries", "nonblock"),
    ("chan-states", "block"),
    ("chan-header", "nonblock"), ("chan-head", "block"), ("chan-head", "nonblock"),
    ("chan-doorbell", "block"),
    ("chan-drain", "nonblock"),
    ("chan-uncounted", "block"), ("chan-uncounted", "nonblock"), ("chan-uncounted", "level"),
    ("chan-block", "nonblock"),
    ("chan-v6-peer", "block"), ("chan-kernel-bit", "nonblock"),
]


def vm_rss_kib(pid):
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


class Daemon:
    """A shuntd of the test's own: lies told to it stay out of other tests,
    and its log and memory are the test's alone to judge."""

    def __init__(self, build_dir, tmp_path, tools):
        self.socket = str(tmp_path / "shuntd.sock")
        self.log = tmp_path / "shuntd.log"
        self.tools = tools
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([str(build_dir / "src" / "daemon" / "shuntd"),
                                          "--socket", self.socket],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=tools.plain_env(), start_new_session=True)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket):
            assert self.proc.poll() is None, self.log_text()
            assert time.monotonic() < deadline, "shuntd never made its socket"
            time.sleep(0.02)

    @property
    def pid(self):
        return self.proc.pid

    def env(self, stats=None):
        return shuntd_env(self.tools, self.socket, stats)

    def log_text(self):
        return self.log.read_text(errors="replace")

    def status(self, shunt, timeout=5):
        """`shunt status --json`, which must answer within @timeout s."""
        try:
            st = subprocess.run([str(shunt), "status", "--json", "--socket", self.socket],
                                env=self.env(), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"shuntd did not answer `shunt status` within {timeout} s; "
                                 f"its kernel stack: {self.wchan()}\n{self.log_text()[-3000:]}") \
                from None
        assert st.returncode == 0, f"shunt status: {st.stderr}\n{self.log_text()[-3000:]}"
        return json.loads(st.stdout)

    def wchan(self):
        try:
            return pathlib.Path(f"/proc/{self.pid}/wchan").read_text()
        except OSError as e:
            return str(e)

    def check_alive(self, shunt):
        log = self.log_text()
        assert self.proc.poll() is None and "dying of signal" not in log, \
            f"shuntd died (rc {self.proc.poll()}):\n{log[-4000:]}"
        self.status(shunt)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait()
        log = self.log_text()
        assert "dying of signal" not in log, log[-4000:]
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            assert marker not in log, f"shuntd reported a sanitizer error:\n{log[-4000:]}"


@pytest.fixture
def world(build_dir, shunt_cli, tools, tmp_path):
    """A shuntd of our own, and a way to start echod, honest clients and
    hostile peers under `shunt run` against it; all stopped at the end."""
    daemon = Daemon(build_dir, tmp_path, tools)
    shunt = shunt_cli()
    control = build_dir / "tests" / "control"
    started = []
    names = iter(range(1000))

    def run(prog, *args):
        n = next(names)
        p = Proc([shunt, "run", "--", control / prog] + list(args),
                 daemon.env(tmp_path / f"{prog}.{n}.stats"), tmp_path / f"{prog}.{n}.err")
        started.append(p)
        return p

    w = types.SimpleNamespace(daemon=daemon, shunt=shunt, run=run)
    yield w
    for p in started:
        p.stop()
    daemon.stop()


def honest_results(proc, timeout):
    """Wait for an honest client's end: its summary, and its failed connections."""
    done = proc.expect("done", timeout=timeout)
    assert proc.finish(timeout=5) == 0, proc.describe()
    assert done["connections"] > 0, f"no connection was even tried:\n{proc.describe()}"
    return done, [line for line in proc.lines if line.get("event") == "conn"]


def check_honest(result, who):
    done, failed = result
    assert not failed and done["ok"] == done["connections"], \
        f"{who}: {len(failed)} of {done['connections']} honest connections failed: {failed[:5]}"
    assert done["max_ms"] < HONEST_HANG_MS, f"{who}: an honest connection took {done}"


def echod_stats(echod):
    echod.send("stats")
    n = len([line for line in echod.lines if line.get("event") == "stats"])
    deadline = time.monotonic() + 10
    while len([line for line in echod.lines if line.get("event") == "stats"]) == n:
        left = deadline - time.monotonic()
        assert left > 0 and echod.read_some(left) is not None, \
            f"echod did not answer:\n{echod.describe()}"
    return [line for line in echod.lines if line.get("event") == "stats"][-1]


def served_all(echod, timeout=5):
    """Wait until echod has served every connection it accepted (each is
    over within its 2 s timeouts); its counters then."""
    deadline = time.monotonic() + timeout
    while True:
        stats = echod_stats(echod)
        if stats["served"] == stats["accepted"] or time.monotonic() > deadline:
            return stats
        time.sleep(0.1)


def check_served(echod, stats, honest_ok):
    """echod's view: no connection but honest, ink or empty ones; every
    accepted connection with the IPv4 addresses an IPv4 listener's have;
    each honest connection echoed once."""
    assert stats["served"] == stats["accepted"], f"connections never over: {stats}"
    conns = [line for line in echod.lines if line.get("event") == "conn"]
    bad = [c for c in conns if c["kind"] == "bad"]
    assert not bad and not stats["bad"], \
        f"connections that carried garbage as if honest: {stats} {bad[:5]}"
    odd = [c for c in conns if (c["family"], c["addrlen"], c["local_family"], c["local_len"])
           != (AF_INET, 16, AF_INET, 16)]
    assert not odd, f"accepted with addresses no IPv4 listener's connection has: {odd[:5]}"
    assert not stats["twice"], f"an honest connection was accepted twice: {stats}"
    assert stats["honest"] >= honest_ok, (stats, honest_ok)
    errors = [line for line in echod.lines if line.get("event") == "accept_error"]
    assert not errors and not stats["failed"], \
        f"accept() failed as no kernel listener does: {errors[:5]}"


def check_nothing_left(daemon, shunt):
    """Everyone is done (the hostile gone, the clients exited, echod closed
    every connection): shuntd holds none any more, each end told it so in
    its journal or by exiting. One left is a slot never given back, and
    shuntd's memory, the victim's and the channel's growing with each."""
    deadline = time.monotonic() + 2
    while True:
        conns = daemon.status(shunt)["connections"]
        if not conns or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not conns, f"{len(conns)} connections left at shuntd once all ended: {conns[:3]}"


@pytest.mark.shunt
@pytest.mark.parametrize("mode,accept", CHAN_MODES)
def test_garbage_in_the_channel(world, mode, accept):
    """A hostile client spoils the channel it shares with the victim's
    listener (queue indices and entries, slot states, the header, the
    queue's head as acceptors take entries, the doorbell) while honest clients of another process
    connect to the same listener through channels of their own: every
    honest connection is accepted and echoed in time, nothing the hostile
    wrote reaches the victim as an honest connection, a blocking accept()
    never says EAGAIN, and once the hostile is gone neither the victim nor
    shuntd spins, and both still serve."""
    echod = world.run("echod", accept)
    port = echod.expect("listening")["port"]
    hostile = world.run("hostile", "connect", port, mode, echod.pid, CHAN_HOSTILE_MS)
    hostile.expect("mapped")
    honest = world.run("honest", port, 1, HONEST_MS, 2)
    hostile.expect("done", timeout=CHAN_HOSTILE_MS / 1000 + 10)
    during = honest_results(honest, timeout=HONEST_MS / 1000 + HONEST_HANG_MS / 1000 + 5)
    check_honest(during, "while the hostile lied")
    # The lie that would leave the victim stuck or spinning, told when no
    # honest client runs; then the hostile goes.
    hostile.send("last")
    hostile.expect("last")
    hostile.kill()
    herr = hostile.stderr()
    assert "runtime error" not in herr, f"UBSan in the hostile's libshunt:\n{herr[-4000:]}"
    served_all(echod)
    check_idle({"echod": echod.pid, "shuntd": world.daemon.pid}, "the victim and shuntd",
               seconds=IDLE_S, most=IDLE_TICKS)
    # The listener is as good as new.
    after = world.run("honest", port, 2, 300, 1)
    after = honest_results(after, timeout=0.3 + HONEST_HANG_MS / 1000 + 5)
    check_honest(after, "after the hostile was gone")
    stats = served_all(echod)
    assert echod.proc.poll() is None, echod.describe()
    assert "runtime error" not in echod.stderr(), echod.stderr()[-4000:]
    check_served(echod, stats, during[0]["ok"] + after[0]["ok"])
    if accept == "block":
        assert stats["eagain"] == 0, f"a blocking accept() said EAGAIN: {stats}"
    else:
        assert stats["max_accept_ms"] < 1000, f"a non-blocking accept() waited: {stats}"
    check_nothing_left(world.daemon, world.shunt)
    world.daemon.check_alive(world.shunt)


JOURNAL_MS = 1000
# How much shuntd's resident memory may grow over an attack that tells it
# a few hundred thousand lies (unbounded growth would be megabytes).
RSS_SLACK_KIB = 1024


def echo_held(held):
    """One more echo on the held connection; it must come back whole."""
    n = len([line for line in held.lines if line.get("event") == "conn"])
    held.send("ping")
    deadline = time.monotonic() + HONEST_HANG_MS / 1000 + 5
    while len([line for line in held.lines if line.get("event") == "conn"]) == n:
        left = deadline - time.monotonic()
        assert left > 0 and held.read_some(left) is not None, held.describe()
    last = [line for line in held.lines if line.get("event") == "conn"][-1]
    assert last["ok"], f"the held connection broke: {last}"


@pytest.mark.shunt
def test_lies_in_the_journal(world, sanitized):
    """A hostile process writes garbage into its own journal and kicks
    shuntd: unknown types, connections of channels and slots that are not
    its own or in other generations, accepts of a listener it does not
    hold, CLOSED for the victim's circuits, tails far ahead and behind,
    descriptors and inodes that are not the connection's socket. shuntd
    survives and still answers, the victim's connections (one held across
    the attack, and new ones meanwhile) are neither closed nor reset, and
    shuntd's memory and log do not grow with the number of lies."""
    echod = world.run("echod", "block")
    port = echod.expect("listening")["port"]
    # Warm up, so that what shuntd keeps for any client is there before we measure.
    honest_results(world.run("honest", port, 4, 200, 2), timeout=10)
    held = world.run("honest", port, 3, "hold")
    held.expect("connected")
    echo_held(held)
    st = world.daemon.status(world.shunt)
    ids = [c["circuit"] for c in st["connections"] if c["server_pid"] == echod.pid]
    assert ids, st
    rss_before = vm_rss_kib(world.daemon.pid)
    log_before = len(world.daemon.log_text())
    hostile = world.run("hostile", "connect", port, "journal", echod.pid, JOURNAL_MS, *ids)
    hostile.expect("journal")
    honest = world.run("honest", port, 1, HONEST_MS, 2)
    done = hostile.expect("done", timeout=JOURNAL_MS / 1000 + 10)
    assert done["lies"] > 10000, done
    during = honest_results(honest, timeout=HONEST_MS / 1000 + HONEST_HANG_MS / 1000 + 5)
    hostile.kill()
    echo_held(held)
    check_honest(during, "while the hostile lied")
    # The hostile's session buried, and all it made with it.
    deadline = time.monotonic() + 5
    while any(s["pid"] == hostile.pid for s in world.daemon.status(world.shunt)["sessions"]):
        assert time.monotonic() < deadline, "the hostile's session outlived it"
        time.sleep(0.1)
    world.daemon.check_alive(world.shunt)
    grown = len(world.daemon.log_text()) - log_before
    assert grown < 16 << 10, \
        f"shuntd's log grew by {grown} bytes:\n{world.daemon.log_text()[-3000:]}"
    rss_after = vm_rss_kib(world.daemon.pid)
    # A sanitizer's quarantine keeps what is freed; its leak check judges that build.
    if not sanitized:
        assert rss_after - rss_before <= RSS_SLACK_KIB, \
            f"shuntd grew from {rss_before} to {rss_after} KiB ({done})"
    held.proc.stdin.close()
    assert held.finish(timeout=10) == 0, held.describe()
    stats = served_all(echod)
    check_served(echod, stats, during[0]["ok"])
    check_nothing_left(world.daemon, world.shunt)


@pytest.mark.shunt
@pytest.mark.parametrize("mode", ["self-bell", "kick-block"])
def test_eventfds_made_blocking(world, mode):
    """The eventfds shuntd shares with processes (a channel's bell with its
    client and the listener's holders, a journal's kick with its process)
    are one open file each: a process can clear their O_NONBLOCK for shuntd
    too. Then it keeps its own channel's bell full, with a thread blocked
    in write(), and has shuntd settle it again and again (accept() with
    nothing queued), or rings its kick and takes the count back before
    shuntd reads it (a read with nothing to read). shuntd must wait for
    neither: it still answers, and serves new connections."""
    hostile = world.run("hostile", "connect", 0, mode, world.daemon.pid, 1500)
    done = hostile.expect("done", timeout=15)
    world.daemon.check_alive(world.shunt)
    echod = world.run("echod", "block")
    port = echod.expect("listening")["port"]
    check_honest(honest_results(world.run("honest", port, 1, 300, 1),
                                timeout=0.3 + HONEST_HANG_MS / 1000 + 5), "after the hostile lied")
    hostile.kill()
    world.daemon.check_alive(world.shunt)
    # Each round asked shuntd (or would have): enough of them to have tried.
    assert done["rounds"] > 100, done
    if mode == "self-bell":
        assert done["accepted"], done
