# SPDX-License-Identifier: MIT
"""Shared pytest fixtures for tests/: where the build is, how to run a program
plain or under `shunt run` with a per-session daemon socket, and how to read
the SHUNT_STATS lines that processes under shunt append at exit."""

import json
import os
import pathlib
import signal
import subprocess
import tempfile
import time
import types
from dataclasses import dataclass

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent

# Longest path a sockaddr_un takes, less the terminating NUL.
SUN_PATH_MAX = 107


def pytest_configure(config):
    # Rows of the compatibility matrix the tests/apps tests record (apps_lib.record).
    config.shunt_compat_rows = []
    config.addinivalue_line(
        "markers", "plain: runs programs without shunt; works before the library exists")
    config.addinivalue_line(
        "markers", "shunt: runs programs under `shunt run`; needs build/src/cli/shunt")


@dataclass
class Result:
    """What one program run produced. rc is None when it was killed at its timeout."""
    argv: list
    rc: object
    stdout: bytes
    stderr: bytes
    elapsed: float

    @property
    def timed_out(self):
        return self.rc is None

    @property
    def status(self):
        """'exit 0', 'killed by signal 13' or 'killed at timeout'."""
        if self.timed_out:
            return "killed at timeout"
        return f"killed by signal {-self.rc}" if self.rc < 0 else f"exit {self.rc}"

    def describe(self, limit=4000):
        """Exit status and both streams, for an assertion message."""
        status = self.status
        out = self.stdout.decode(errors="replace")[-limit:]
        err = self.stderr.decode(errors="replace")[-limit:]
        return (f"$ {' '.join(map(str, self.argv))}\n[{status} after {self.elapsed:.1f}s]\n"
                f"--- stdout (tail) ---\n{out}\n--- stderr (tail) ---\n{err}")


def run_captured(argv, env, timeout, cwd=None):
    """Run argv to completion with stdout/stderr in files (not pipes: a daemon
    the program leaves behind must not keep us waiting for EOF). On timeout the
    whole process group is killed and rc is None."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=err, env=env, cwd=cwd,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            rc = None
        out.seek(0)
        err.seek(0)
        return Result(list(argv), rc, out.read(), err.read(), time.monotonic() - start)


def plain_env():
    """The environment for a run without shunt: ours, minus any preload and
    any shunt setting that could leak in from the caller."""
    env = dict(os.environ)
    for key in list(env):
        if key == "LD_PRELOAD" or key.startswith("SHUNT_"):
            del env[key]
    return env


def read_stats(path):
    """Parse a SHUNT_STATS file: (list of per-process dicts, summed counters).
    Raises ValueError naming the line when one is not a JSON object."""
    lines = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not JSON ({e}): {line.strip()!r}") from e
                if not isinstance(obj, dict):
                    raise ValueError(f"{path}:{n}: not a JSON object: {line.strip()!r}")
                lines.append(obj)
    total = {}
    for obj in lines:
        for key, value in obj.items():
            if key == "pid" or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            total[key] = total.get(key, 0) + value
    return lines, total


@pytest.fixture(scope="session")
def tools():
    """The helpers above, for test modules (fixtures rather than imports, so
    they do not depend on how pytest puts conftest.py on sys.path)."""
    return types.SimpleNamespace(run=run_captured, plain_env=plain_env,
                                 read_stats=read_stats)


@pytest.fixture(scope="session")
def repo_root():
    return REPO


@pytest.fixture(scope="session")
def build_dir():
    """$SHUNT_BUILD_DIR if set, else <repo>/build."""
    d = os.environ.get("SHUNT_BUILD_DIR")
    return pathlib.Path(d).resolve() if d else REPO / "build"


@pytest.fixture(scope="session")
def shunt_bin(build_dir):
    """Path of the shunt CLI; it may not exist (use shunt_cli to fail)."""
    return build_dir / "src" / "cli" / "shunt"


@pytest.fixture
def shunt_cli(shunt_bin):
    """A function to call in the test body: returns the CLI path, or fails the
    test (a failure, not a skip or a setup error) when it is missing, since a
    shunt test that did not run must not look like one that passed."""
    def check():
        if not os.access(shunt_bin, os.X_OK):
            pytest.fail(f"shunt CLI not built: {shunt_bin} is missing; build with "
                        "`meson setup build && ninja -C build` (or set SHUNT_BUILD_DIR). "
                        "Run only the plain half with `-m plain`.", pytrace=False)
        return shunt_bin
    return check


def _session_processes(sock_path):
    """Pids of processes whose environment names our daemon socket: only
    processes this session started (directly or through shunt run) carry it."""
    needle = b"\0SHUNT_SOCKET=" + os.fsencode(sock_path) + b"\0"
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in b"\0" + f.read() + b"\0":
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


class ShuntSession:
    """One daemon socket for the whole pytest session, and per-run stats files."""

    def __init__(self, directory):
        self.dir = pathlib.Path(directory)
        self.socket = str(self.dir / "shuntd.sock")
        self._runs = 0

    @property
    def daemon_log(self):
        """Where daemons `shunt run` starts for this session write their stderr."""
        return self.dir / "shuntd.log"

    def env(self, stats_path=None):
        env = plain_env()
        env["SHUNT_SOCKET"] = self.socket
        env["SHUNT_DAEMON_LOG"] = str(self.daemon_log)
        if stats_path is not None:
            env["SHUNT_STATS"] = str(stats_path)
        return env

    def new_stats_path(self, name):
        self._runs += 1
        path = self.dir / f"{name}.{self._runs}.stats.jsonl"
        if path.exists():
            path.unlink()
        return path

    def stop_daemons(self):
        pids = _session_processes(self.socket)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if os.path.exists(f"/proc/{p}")
                    and not _is_zombie(p)]
            time.sleep(0.05)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@pytest.fixture(scope="session")
def shunt_session(tmp_path_factory):
    """A fresh $SHUNT_SOCKET for this pytest session; daemons started for it
    are stopped at the end."""
    d = tmp_path_factory.mktemp("shunt")
    if len(str(d / "shuntd.sock")) > SUN_PATH_MAX:
        d = pathlib.Path(tempfile.mkdtemp(prefix="shunt-t-"))
    session = ShuntSession(d)
    yield session
    session.stop_daemons()
    # A sanitizer build of shuntd reports there; the clients would merely
    # have fallen back to the kernel, so look for it explicitly.
    if session.daemon_log.exists():
        log = session.daemon_log.read_text(errors="replace")
        for marker in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"):
            if marker in log:
                pytest.fail(f"shuntd reported a sanitizer error:\n{log[-4000:]}", pytrace=False)
