# SPDX-License-Identifier: MIT
"""Hostile peers. A program that maps its own circuit and writes garbage
indices, headers, state bits, options and lock words into it, or never
reads, or dies in the middle of a message (tests/control/hostile.c), while
its victim (tests/control/victim.c) keeps calling recv, send, poll and
epoll_wait with timeouts: the victim never crashes, every call returns
data, EOF or an error a TCP socket can have, a timeout still times out,
every byte it receives is one the hostile side put in the ring, and once
the hostile is gone even calls without a timeout end. Circuits are never
files anyone can open, and no other process can obtain one from shuntd."""

import json
import os
import pathlib
import select
import signal
import subprocess
import time

import pytest

from conftest import session_processes

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


class Proc:
    """A helper process under `shunt run` whose JSON lines we read as they come."""

    def __init__(self, argv, env, errfile):
        self.argv = [str(a) for a in argv]
        # stderr in a file: a pipe nobody reads could fill up and stall the program.
        self.errfile = pathlib.Path(errfile)
        with open(self.errfile, "wb") as err:
            self.proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err,
                                         start_new_session=True)
        self.lines = []
        self._buf = b""

    @property
    def pid(self):
        return self.proc.pid

    def _read_some(self, timeout):
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            return False
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return None
        self._buf += chunk
        *done, self._buf = self._buf.split(b"\n")
        for line in done:
            try:
                self.lines.append(json.loads(line))
            except json.JSONDecodeError:
                raise AssertionError(f"{self.argv[-5:]}: not JSON: {line!r}") from None
        return True

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
            got = self._read_some(max(left, 0))
            if got is None or (got is False and left <= 0):
                raise AssertionError(f"no {event!r} within {timeout}s "
                                     f"({'exited' if got is None else 'timed out'}):\n"
                                     f"{self.describe()}")

    def finish(self, timeout):
        """Read to EOF and reap; the process is killed if it takes longer. Returns rc."""
        deadline = time.monotonic() + timeout
        while self._read_some(max(deadline - time.monotonic(), 0)):
            pass
        if self.proc.poll() is None:
            self.kill()
        return self.proc.wait()

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGKILL)
        self.proc.wait()

    def stderr(self):
        return self.errfile.read_text(errors="replace")

    def describe(self):
        return (f"$ {' '.join(self.argv)}\nrc {self.proc.poll()}\nlast lines: "
                f"{self.lines[-12:]}\nstderr: {self.stderr()[-3000:]}")

    def close(self):
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            f.close()


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
        p.close()


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
    victim.proc.stdin.write(b"go\n")
    victim.proc.stdin.flush()
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
