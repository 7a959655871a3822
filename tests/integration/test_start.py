# SPDX-License-Identifier: MIT
"""The library's start is lazy (src/preload/init.c). A program that never
makes or meets a socket, as most of what a shell script or make runs, pays
the loading only: the library makes no system call of its own in it (not
the seccomp check's read of /proc/self/status, not a word to shuntd, not
its fault handlers), and the program's output is the kernel's. The first
call that can involve a socket starts it, once."""

import shutil

import pytest

# Several processes, none with a socket: a pipe, a fork and exec per command.
SCRIPT = "cat /etc/hostname | grep -c . ; ls / > /dev/null; printf 'x\\n' | sed s/x/y/; env true"
# What the start does: the seccomp check, the table size, a word to shuntd.
START = ("/proc/self/status", "/proc/sys/fs/nr_open", "connect(")


def traced(tools, argv, env, trace):
    """argv under strace -f (the calls a start makes); its result and the
    trace's lines, each starting with the pid that made the call."""
    strace = shutil.which("strace")
    if not strace:
        pytest.skip("SKIPPED LOUDLY: no strace (scripts/setup installs it)")
    res = tools.run([strace, "-f", "-qq", "-o", trace,
                     "-e", "trace=openat,connect,rt_sigaction,execve"] + argv, env, timeout=60)
    return res, trace.read_text().splitlines()


def from_sh(lines):
    """The trace from the script's shell on (not shunt run's own calls)."""
    first = next(i for i, line in enumerate(lines) if 'execve("/bin/sh"' in line or
                 'execve("/usr/bin/sh"' in line)
    return lines[first:]


@pytest.mark.shunt
def test_a_program_without_sockets_is_left_alone(shunt_cli, shunt_session, tools, tmp_path):
    plain, plain_lines = traced(tools, ["sh", "-c", SCRIPT], tools.plain_env(),
                                tmp_path / "plain")
    assert plain.rc == 0, plain.describe()
    res, lines = traced(tools, [shunt_cli(), "run", "--", "sh", "-c", SCRIPT],
                        shunt_session.env(), tmp_path / "trace")
    assert res.rc == 0 and res.stdout == plain.stdout, res.describe()
    # The programs of the script ran with the library (the trace saw each exec).
    ran = {line.split()[0] for line in lines if "execve(" in line}
    assert len(ran) >= 6, lines
    # ...and past the exec of the first one (shunt run's), none started it.
    script, plain_script = from_sh(lines), from_sh(plain_lines)
    started = [line for line in script if any(s in line for s in START)]
    assert not started, started
    # The fault handlers the start would install: only the programs' own (grep has one).
    faults = [sum("rt_sigaction(SIG" + sig in line for line in t) for t in (plain_script, script)
              for sig in ("SEGV", "BUS")]
    assert faults[:2] == faults[2:], (faults, script)


@pytest.mark.shunt
def test_the_first_socket_call_starts_it(shunt_cli, shunt_session, tools, tmp_path):
    """The same trace tells a start when there is one: a program whose one
    socket call comes last starts the library then, once."""
    prog = "import os, socket; os.listdir('/'); socket.socket().close()"
    res, lines = traced(tools, [shunt_cli(), "run", "--", "/usr/bin/python3", "-c", prog],
                        shunt_session.env(), tmp_path / "trace")
    assert res.rc == 0, res.describe()
    python = next(i for i, line in enumerate(lines) if 'execve("/usr/bin/python3"' in line)
    checks = [line for line in lines[python:] if "/proc/self/status" in line]
    assert len(checks) == 1, lines[python:]
