# SPDX-License-Identifier: MIT
"""Helpers of the tests in tests/control that run a shuntd of their own and
look at the processes around it (test_daemon_fault.py, test_storm.py,
test_hostile.py): processes driven by lines on stdin whose stdout lines are
read as they come, a shuntd that a test kills and starts again, waiting
with a deadline, whether a shuntd answers on its socket, what a process
holds, whether an idle process spins.

A module rather than tests/control/conftest.py, for the reason
tests/apps/apps_lib.py gives (a second conftest module would shadow
tests/conftest.py for `from conftest import ...`). Test modules import from
it by name (`from control_lib import wait_for`): pytest puts tests/control,
the directory of the test modules, on sys.path, as it does for
test_slow_shuntd.py's `from test_channels import spawn_shuntd`. Its name
does not start with test_, so pytest does not collect it.
"""

import json
import os
import pathlib
import select
import signal
import socket
import subprocess
import time

import pytest

HANG_S = 30  # a step that takes longer than this is hung
CLK_TCK = os.sysconf("SC_CLK_TCK")
# What a sanitizer build writes to a process's stderr or shuntd's log.
SANITIZER = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


class LineProc:
    """A process (in a session of its own) driven by lines on its stdin,
    whose stdout lines we take as they come, its stderr in a file."""

    def __init__(self, argv, env, stderr_path):
        self.argv = [str(a) for a in argv]
        self.stderr_path = pathlib.Path(stderr_path)
        # stderr in a file: a pipe nobody reads could fill up and stall the program.
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(self.argv, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=err, text=True,
                                         start_new_session=True)
        self.lines = []      # read and not taken yet, as parse() made them
        self.history = []    # every line read, for messages
        self._partial = b""

    @property
    def pid(self):
        return self.proc.pid

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def parse(self, raw):
        """What one line of output (bytes, without its newline) becomes in
        self.lines: its text, stripped."""
        return raw.decode().strip()

    def read_some(self, timeout):
        """Wait up to timeout (>= 0) seconds for output and add the whole
        lines that came to self.lines, read from the descriptor itself (a
        buffered reader would hide lines select() cannot see). True when
        something came, False when nothing did in time, None at EOF."""
        fd = self.proc.stdout.fileno()
        if not select.select([fd], [], [], timeout)[0]:
            return False
        data = os.read(fd, 65536)
        if not data:
            return None
        self._partial += data
        *done, self._partial = self._partial.split(b"\n")
        for raw in done:
            self.lines.append(self.parse(raw))
            self.history.append(self.lines[-1])
        return True

    def read_until(self, deadline, what):
        """read_some until the monotonic deadline; fail the test, naming
        what we waited for, when the process says nothing by then or exits."""
        left = deadline - time.monotonic()
        got = self.read_some(left) if left > 0 else False
        if got is False:
            raise AssertionError(f"pid {self.pid}: hung waiting for {what}; "
                                 f"lines {self.history[-20:]}\nstderr: {self.stderr()[-3000:]}")
        if got is None:
            raise AssertionError(f"pid {self.pid} exited ({self.proc.poll()}) waiting for {what};"
                                 f" lines {self.history[-20:]}\nstderr: {self.stderr()[-3000:]}")

    def stderr(self):
        return self.stderr_path.read_text(errors="replace")

    def kill(self):
        """SIGKILL the process's session, if it still runs, and reap it."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()

    def stop(self):
        """kill(), and close our ends of its pipes."""
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


class ShuntdWorld:
    """A shuntd of the test's own, which the test may kill (SIGKILL) and
    start again on the same socket, and the processes the test starts to
    use it (self.procs, LineProcs); close() stops them all."""

    def __init__(self, shunt, build_dir, directory, tools, daemon_argv, hang_s=HANG_S):
        """daemon_argv: the command that starts a shuntd, without --socket
        and --log; hang_s: how long a start or `shunt status` may take."""
        self.shunt, self.build_dir, self.dir, self.tools = shunt, build_dir, directory, tools
        self.socket = str(directory / "shuntd.sock")
        self.daemon_argv = [str(a) for a in daemon_argv]
        self.hang_s = hang_s
        self.daemon = None      # the one that runs, if any
        self.daemons = []       # every one started, each with its .log
        self.procs = []

    def env(self, stats=None):
        return shuntd_env(self.tools, self.socket, stats)

    def start_daemon(self):
        """Start a shuntd (its log: shuntd.N.log in our directory) and wait
        until it answers on the socket; its Popen, now self.daemon."""
        log = self.dir / f"shuntd.{len(self.daemons)}.log"
        with open(log, "wb") as f:
            d = subprocess.Popen(self.daemon_argv + ["--socket", self.socket, "--log", "info"],
                                 stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                 env=self.tools.plain_env(), start_new_session=True)
        d.log = log
        self.daemons.append(d)
        wait_for(lambda: daemon_answers(self.socket) or d.poll() is not None, "shuntd to answer",
                 self.hang_s)
        assert d.poll() is None, f"shuntd exited: {log.read_text()}"
        self.daemon = d
        return d

    def run_lines(self, argv, stats, name):
        """`shunt run --no-daemon -- argv` as a LineProc, ended at close(),
        with SHUNT_STATS in @stats and its stderr in NAME.stderr here."""
        proc = LineProc([self.shunt, "run", "--no-daemon", "--"] + list(argv), self.env(stats),
                        self.dir / f"{name}.stderr")
        self.procs.append(proc)
        return proc

    def kill_daemon(self):
        """SIGKILL the shuntd that runs, as a crash would end it."""
        os.kill(self.daemon.pid, signal.SIGKILL)
        self.daemon.wait()
        self.daemon = None

    def status(self):
        """`shunt status --json` of our shuntd, parsed."""
        out = subprocess.run([str(self.shunt), "status", "--json"], env=self.env(),
                             capture_output=True, text=True, timeout=self.hang_s)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def close(self):
        for p in self.procs:
            p.stop()
        for d in self.daemons:
            if d.poll() is None:
                d.kill()
                d.wait()


@pytest.fixture
def shuntd_world(build_dir, shunt_bin, tools, tmp_path):
    """A ShuntdWorld with one shuntd of the build running, options left at
    their defaults; everything it started is ended after the test. A test
    module takes it by importing it (`from control_lib import shuntd_world`)."""
    w = ShuntdWorld(shunt_bin, build_dir, tmp_path, tools,
                    [build_dir / "src" / "daemon" / "shuntd"])
    w.start_daemon()
    yield w
    w.close()


def shuntd_env(tools, sock, stats=None):
    """The environment of a process that uses the shuntd at socket sock:
    ours without shunt settings (tools.plain_env), SHUNT_SOCKET, and
    SHUNT_STATS when a stats file is given."""
    env = tools.plain_env()
    env["SHUNT_SOCKET"] = sock
    if stats:
        env["SHUNT_STATS"] = str(stats)
    return env


def wait_for(cond, what, timeout=HANG_S):
    """Poll cond every 50 ms until it holds; fail the test, naming what,
    after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def daemon_answers(path):
    """Whether a shuntd accepts a connection on its socket at path now."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def fd_targets(pid):
    """What each descriptor of pid refers to ('socket:[123]', '/memfd:x
    (deleted)', ...), sorted; descriptors closed while we look are left out."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return sorted(out)


def cpu_ticks(pid):
    """utime + stime of every thread of pid, in ticks of 1/CLK_TCK s."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def check_idle(pids, what, seconds, most):
    """The processes pids ({name: pid}) have nothing left to do: fail the
    test when one uses more than most ticks of CPU in the next seconds (a
    spin would use all of them). The ticks each used, by name."""
    before = {name: cpu_ticks(pid) for name, pid in pids.items()}
    time.sleep(seconds)
    used = {name: cpu_ticks(pid) - before[name] for name, pid in pids.items()}
    print(f"idle CPU of {what}: {used} ticks of 1/{CLK_TCK} s in {seconds} s")
    assert all(u <= most for u in used.values()), \
        f"{what}: {used} ticks of 1/{CLK_TCK} s used in {seconds} s of idleness: spinning"
    return used
