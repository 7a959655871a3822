# SPDX-License-Identifier: MIT
"""Helpers for the real-program tests in tests/apps: installing what a test
needs, starting servers and stopping them by pid, running clients plain or
under `shunt run` with a SHUNT_STATS file per program role, and recording a
row of the compatibility matrix (docs/compatibility.md, written at the end of
a run by tests/conftest.py).

A module rather than tests/apps/conftest.py: a second conftest module would
shadow tests/conftest.py for `from conftest import ...`, which
tests/integration uses, whenever both directories are collected. Test
modules import the fixtures they use from here (`from apps_lib import
servers, need`), which makes pytest see them.
"""

import contextlib
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

import pytest

# ---- installing what a test needs
#
# (Here rather than in tests/apps/conftest.py: a second conftest module
# would shadow tests/conftest.py for `from conftest import ...`, which
# tests/integration uses, whenever both directories are collected.)

APT_TIMEOUT_S = 600


def _apt(args, timeout=APT_TIMEOUT_S):
    """Run apt-get as root (or through passwordless sudo); the CompletedProcess,
    or None when neither is possible."""
    if os.geteuid() == 0:
        prefix = []
    elif shutil.which("sudo") and subprocess.run(
            ["sudo", "-n", "true"], capture_output=True).returncode == 0:
        prefix = ["sudo", "-n"]
    else:
        return None
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(prefix + ["apt-get", "-y", "-q"] + args, env=env,
                          capture_output=True, text=True, timeout=timeout)


def ensure_commands(commands, packages):
    """Make sure every name in `commands` is on PATH (or in /usr/sbin),
    installing the Debian `packages` with apt-get if one is missing; skip the
    test, saying what is missing and why it could not be installed, when that
    fails. Returns {command: path}."""
    def where(cmd):
        return shutil.which(cmd) or shutil.which(cmd, path="/usr/sbin:/sbin")

    missing = [c for c in commands if not where(c)]
    if missing:
        why = None
        try:
            res = _apt(["install", "--no-install-recommends"] + list(packages))
            if res is not None and res.returncode != 0:
                # A stale package list is the usual reason: refresh it once.
                upd = _apt(["update"])
                if upd is not None and upd.returncode == 0:
                    res = _apt(["install", "--no-install-recommends"] + list(packages))
            if res is None:
                why = "not root and no passwordless sudo to run apt-get"
            elif res.returncode != 0:
                why = f"apt-get install {' '.join(packages)} failed: " + \
                      (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        except (OSError, subprocess.TimeoutExpired) as e:
            why = f"apt-get: {e}"
        missing = [c for c in commands if not where(c)]
        if missing:
            pytest.skip(f"{', '.join(missing)} not installed and could not be installed "
                        f"({why or 'the packages do not provide it'}); "
                        f"install {' '.join(packages)}")
    return {c: where(c) for c in commands}


@pytest.fixture(scope="session")
def need():
    """need(commands, packages): see ensure_commands."""
    return ensure_commands


START_TIMEOUT_S = 15
STOP_TIMEOUT_S = 15
CLIENT_TIMEOUT_S = 90

# ---- programs we start, and stop by their pid

def free_port():
    """A port nobody listens on right now (the program binds it just after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A long-running program in its own session (so its children go with
    it), output in files under `logdir`."""

    def __init__(self, name, argv, env, logdir, cwd=None):
        self.name = name
        self.out = open(logdir / f"{name}.out", "wb")
        self.err = open(logdir / f"{name}.err", "wb")
        self.proc = subprocess.Popen([str(a) for a in argv], env=env, cwd=cwd,
                                     stdin=subprocess.DEVNULL, stdout=self.out,
                                     stderr=self.err, start_new_session=True)

    @property
    def pid(self):
        return self.proc.pid

    def logs(self):
        """The tails of its output files (also after stop())."""
        for f in (self.out, self.err):
            if not f.closed:
                f.flush()
        return (f"--- {self.name} stdout ---\n"
                + pathlib.Path(self.out.name).read_text(errors="replace")[-3000:]
                + f"\n--- {self.name} stderr ---\n"
                + pathlib.Path(self.err.name).read_text(errors="replace")[-3000:])

    def wait_port(self, port, timeout=START_TIMEOUT_S):
        """Until something accepts on 127.0.0.1:port (a kernel connection from
        this process, which runs without shunt)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited ({self.proc.returncode}) before listening\n"
                            + self.logs(), pytrace=False)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        pytest.fail(f"{self.name} not listening on {port} after {timeout}s\n" + self.logs(),
                    pytrace=False)

    def stop(self, sig=signal.SIGTERM):
        """Ask it to go with `sig`; its whole session is killed if it is not
        gone in STOP_TIMEOUT_S. Returns the exit status (None when killed)."""
        rc = None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
                rc = self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
            except ProcessLookupError:
                rc = self.proc.wait()
        else:
            rc = self.proc.returncode
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # leftovers of its session
        except (ProcessLookupError, PermissionError):
            pass
        if self.proc.poll() is None:
            self.proc.wait()
        self.out.close()
        self.err.close()
        return rc


@pytest.fixture
def servers():
    """Start servers with servers(name, argv, env, logdir); all stopped at the end."""
    started = []

    def start(*args, **kw):
        s = Server(*args, **kw)
        started.append(s)
        return s
    yield start
    for s in started:
        s.stop(signal.SIGKILL)


class Mode:
    """How to run programs: plain, or under `shunt run` with a stats file per
    program role."""

    def __init__(self, name, tools, shunt_session=None, cli=None):
        self.name = name
        self.tools = tools
        self.session = shunt_session
        self.cli = cli
        self.stats = {}

    @property
    def shunt(self):
        return self.session is not None

    def env(self, role):
        """The environment for a program of `role`; under shunt, every
        program of one role appends to the same stats file."""
        if not self.shunt:
            return self.tools.plain_env()
        if role not in self.stats:
            self.stats[role] = self.session.new_stats_path(f"apps-{role}")
        return self.session.env(self.stats[role])

    def argv(self, argv):
        return ([self.cli, "run", "--"] if self.shunt else []) + list(argv)

    def totals(self, role):
        """Summed SHUNT_STATS counters of every process of `role` that wrote a line."""
        lines, total = self.tools.read_stats(self.stats[role])
        return lines, total


def plain_mode(tools):
    return Mode("plain", tools)


def shunt_mode(tools, shunt_session, shunt_cli):
    return Mode("shunt", tools, shunt_session, shunt_cli())


def run_client(mode, role, argv, tmp_path, timeout=CLIENT_TIMEOUT_S):
    res = mode.tools.run(mode.argv(argv), mode.env(role), timeout, cwd=tmp_path)
    if res.timed_out or res.rc != 0:
        pytest.fail(f"{role} failed ({mode.name}):\n" + res.describe(), pytrace=False)
    return res


def assert_stats(mode, role, **minimum):
    """Every counter in `minimum` at least that much, summed over the role's lines."""
    lines, total = mode.totals(role)
    assert lines, (f"{role}: no SHUNT_STATS line in {mode.stats[role]}: the library was not "
                   "loaded or the process did not exit normally")
    low = {k: (total.get(k, 0), v) for k, v in minimum.items() if total.get(k, 0) < v}
    assert not low, f"{role}: counters below their minimum (got, wanted): {low}; all: {total}"



def listening(port):
    """Whether a socket listens on 127.0.0.1:port, from /proc/net/tcp (no connect)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(line.split()[1] == want and line.split()[3] == "0A"
                   for line in f.readlines()[1:])



# ---- nginx

_NGINX_CONF = """\
daemon off;
master_process on;
worker_processes 2;
{user}
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {access_log};
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    default_type application/octet-stream;
{sendfile}    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
    }}
}}
"""


def nginx_conf(d, port, root, sendfile=False, access_log=True):
    """An nginx.conf for a test: in the foreground, a master and 2 workers,
    every file it writes under directory `d`, serving `root` on
    127.0.0.1:`port`; with `sendfile`, files go out through sendfile()."""
    # As root, nginx would run its workers as nobody, who cannot read a
    # private temporary directory.
    user = "user root;" if os.geteuid() == 0 else ""
    return _NGINX_CONF.format(
        user=user, dir=d, port=port, root=root,
        access_log=f"{d}/access.log" if access_log else "off",
        sendfile="    sendfile on;\n    tcp_nopush on;\n" if sendfile else "")


# ---- the compatibility matrix

def record(config, program, version, client, result, transport):
    """One row of docs/compatibility.md: `program` (and its `version`) driven
    by `client`; `result` ("pass", "FAIL: why", "skipped: why") and the
    `transport` its connections used under shunt ("shm", "kernel", ...).
    Rows are written when the whole of tests/apps ran (tests/conftest.py)."""
    config.shunt_compat_rows.append({"program": program, "version": version, "client": client,
                                     "result": result, "transport": transport})


@contextlib.contextmanager
def matrix_row(request, program, version, client, transport="shm"):
    """Record one row for the test body inside: "pass" when it completes,
    "FAIL: <first line of the error>" when it raises (and re-raise); a skip
    records nothing here (tests/conftest.py records skips)."""
    try:
        yield
    except pytest.skip.Exception:
        raise
    except BaseException as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:120]
        record(request.config, program, version, client, f"FAIL: {first}", transport)
        raise
    record(request.config, program, version, client, "pass", transport)


def version_of(argv, pattern=None):
    """The first line of `argv`'s output (or the first line matching
    `pattern`), for the matrix; "?" when it cannot be had."""
    try:
        res = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    for line in (res.stdout + res.stderr).splitlines():
        if line.strip() and (pattern is None or pattern in line):
            return line.strip()
    return "?"

