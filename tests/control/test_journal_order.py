# SPDX-License-Identifier: MIT
"""Entries of one journal are applied once each, in their order, whatever
order the threads that wrote them raced in (src/daemon/journal.c).

A process connects to itself (tests/control/selfconn.c) 20,000 times: a
thread spins on a non-blocking accept4() and closes what it takes, so it
often journals ACCEPTED before the connecting thread journals CONNECTED,
and both ends' CLOSED follow in the same journal. shuntd, reading the
ACCEPTED entry first, once read the rest of that journal nested inside it:
the acceptor's CLOSED came before its hold existed, and the connection
stayed held until the process exited (1 to 3 in 5,000 on this machine).

Asserted: every connection went over shared memory, and once the process
has closed them all, with the process still alive, shuntd holds none of
them.
"""

import time

import pytest

from control_lib import HANG_S, SANITIZER, shuntd_world, wait_for

pytestmark = pytest.mark.shunt

COUNT = 20000
# Closed ends are read from the journal within a tick (10 ms): this is plenty.
SETTLE_S = 10


def test_self_connections_all_let_go(shuntd_world, build_dir):
    stats = shuntd_world.dir / "stats.jsonl"
    proc = shuntd_world.run_lines([build_dir / "tests" / "control" / "selfconn", COUNT],
                                  stats, "selfconn")
    deadline = time.monotonic() + HANG_S * 4
    while not proc.lines:
        proc.read_until(deadline, "the connections")
    assert proc.lines == [f"done {COUNT}"], (proc.lines, proc.stderr())

    def held():
        return shuntd_world.status()["connections"]

    try:
        wait_for(lambda: not held(), "shuntd to let go of every connection", SETTLE_S)
    except AssertionError:
        left = held()
        raise AssertionError(f"{len(left)} of {COUNT} connections still held: {left[:3]}")
    assert shuntd_world.status()["totals"]["circuits_total"] == COUNT
    proc.send("")
    assert proc.proc.wait(timeout=HANG_S) == 0, proc.stderr()
    for d in shuntd_world.daemons:
        text = d.log.read_text(errors="replace")
        assert not any(s in text for s in SANITIZER), text[-3000:]
    _, total = shuntd_world.tools.read_stats(stats)
    assert total.get("shm_connect", 0) == COUNT, total
