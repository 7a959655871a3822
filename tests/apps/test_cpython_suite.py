# SPDX-License-Identifier: MIT
"""CPython's own socket tests (Lib/test/test_socket.py,
test_socketserver.py and test_asyncore.py, from Debian's
libpython3-testsuite), plain and under shunt: the kernel is the oracle, so
every test must end the same way in both runs, and under shunt the
connections they make between their threads must have gone through shared
memory. About 840 tests: options, timeouts, non-blocking calls, sendmsg and
recvmsg with ancillary data, shutdown, half-closed and reset connections,
urgent data, forking servers, socket pairs, the Unix domain, and more.

A test program we did not write: it runs in a network namespace of its own
with only loopback (`unshare -n`), so nothing it tries reaches beyond this
machine. Needs root for that; skipped, saying so, otherwise. Under shunt,
`shunt run` starts a shuntd of its own in that namespace (a private socket
path), so that a connection can move onto the kernel there, as in any one
namespace (urgent data makes it: test_asyncore). The vsock tests are left
out (this machine has no vsock transport: they wait forever, plain too).

Checked the same way by hand (stop 31) and left out of the suite for its
time: test_asyncio (2,368 tests, 60 s each way; 311 connections through
shared memory), test_ssl, test_ftplib, test_imaplib, test_poplib,
test_smtplib, test_xmlrpc, test_httplib, test_httpservers, test_logging,
test_selectors, test_poll, test_epoll and test_select all end the same way
plain and under shunt.
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from apps_lib import _apt, matrix_row, plain_mode, shunt_mode  # noqa: F401

RESULT = re.compile(r"^(FAIL|ERROR|UNEXPECTED SUCCESS): (\w+) \(([\w.]+)\)", re.M)
RAN = re.compile(r"^Ran (\d+) tests? in ", re.M)
SKIPPED = re.compile(r"^(?:OK|FAILED) \(.*?skipped=(\d+)", re.M)
PACKAGE = f"libpython{sys.version_info.major}.{sys.version_info.minor}-testsuite"


def _has_suite():
    res = subprocess.run([sys.executable, "-c", "import test.test_socket"],
                         capture_output=True, text=True)
    return res.returncode == 0


@pytest.fixture(scope="module")
def cpython_suite():
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: not root: no network namespace of its own for CPython's "
                    "socket tests")
    for tool in ("unshare", "ip"):
        if not shutil.which(tool):
            pytest.skip(f"SKIPPED LOUDLY: no `{tool}` to give CPython's tests a namespace")
    if not _has_suite():
        res = _apt(["install", "--no-install-recommends", PACKAGE])
        if not _has_suite():
            why = res.stderr.strip().splitlines()[-1:] if res is not None else ["no apt-get"]
            pytest.skip(f"SKIPPED LOUDLY: CPython's test suite ({PACKAGE}) is not installed "
                        f"and could not be: {why}")
    return sys.executable


MODULES = ["test_socket", "test_socketserver", "test_asyncore"]


def _run(mode, python, tmp_path):
    """The tests in a namespace with only loopback (so the network resource
    reaches nothing beyond it); their failures and totals."""
    inner = shlex.join(map(str, mode.argv([python, "-m", "test", "--timeout", "120", "-u", "all",
                                           "-v", "-i", "*VSOCK*", *MODULES])))
    argv = ["unshare", "-n", "sh", "-c", f"ip link set lo up && exec {inner}"]
    env = mode.env("cpython")
    if mode.shunt:
        # A shuntd of the namespace's own, started by shunt run, which ends when idle.
        env["SHUNT_SOCKET"] = str(tmp_path / "ns-shuntd.sock")
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900,
                         cwd=tmp_path)
    out = res.stdout + res.stderr
    ran = RAN.findall(out)
    # unittest's summary of each module.
    assert len(ran) == len(MODULES), \
        f"{mode.name}: {len(ran)} of {len(MODULES)} modules said how many tests ran " \
        f"(exit {res.returncode}):\n{out[-3000:]}"
    failed = sorted({f"{m[0]}: {m[2]}" for m in RESULT.findall(out)})
    skipped = sum(int(n) for n in SKIPPED.findall(out))
    return res.returncode, sum(int(n) for n in ran), skipped, failed, out


def test_cpython_socket_tests(request, tools, shunt_session, shunt_cli, cpython_suite, tmp_path):
    python = cpython_suite
    version = f"CPython {sys.version.split()[0]}"
    with matrix_row(request, "CPython test_socket, test_socketserver, test_asyncore", version,
                    "themselves (their threads and forks)"):
        rc_k, run_k, skip_k, failed_k, out_k = _run(plain_mode(tools), python, tmp_path)
        assert run_k >= 800, f"plain: only {run_k} tests ran:\n{out_k[-3000:]}"
        shunt = shunt_mode(tools, shunt_session, shunt_cli)
        rc_s, run_s, skip_s, failed_s, out_s = _run(shunt, python, tmp_path)
        assert (run_s, skip_s) == (run_k, skip_k), \
            f"tests run/skipped: kernel {run_k}/{skip_k}, shunt {run_s}/{skip_s}"
        assert failed_s == failed_k, \
            f"outcomes differ: kernel {failed_k}, shunt {failed_s}\n{out_s[-4000:]}"
        assert rc_s == rc_k, f"exit status: kernel {rc_k}, shunt {rc_s}"
        _, total = shunt.totals("cpython")
        # Its threaded TCP tests connect over loopback: those went through shared memory.
        assert total.get("shm_connect", 0) >= 100 and total.get("shm_accept", 0) >= 100, total
