# SPDX-License-Identifier: MIT
"""Helpers of the tests in tests/control that run a shuntd of their own and
look at the processes around it (test_daemon_fault.py, test_storm.py,
test_hostile.py): waiting with a deadline, whether a shuntd answers on its
socket, what a process holds.

A module rather than tests/control/conftest.py, for the reason
tests/apps/apps_lib.py gives (a second conftest module would shadow
tests/conftest.py for `from conftest import ...`). Test modules import from
it by name (`from control_lib import wait_for`): pytest puts tests/control,
the directory of the test modules, on sys.path, as it does for
test_slow_shuntd.py's `from test_channels import spawn_shuntd`. Its name
does not start with test_, so pytest does not collect it.
"""

import os
import socket
import time

HANG_S = 30  # a step that takes longer than this is hung
# What a sanitizer build writes to a process's stderr or shuntd's log.
SANITIZER = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


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
