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

from control_lib import HANG_S, SANITIZER, LineProc, ShuntdWorld, wait_for

pytestmark = pytest.mark.shunt

COUNT = 20000
# Closed ends are read from the journal within a tick (10 ms): this is plenty.
SETTLE_S = 10


@pytest.fixture
def world(build_dir, shunt_bin, tools, tmp_path):
    w = ShuntdWorld(shunt_bin, build_dir, tmp_path, tools,
                    [build_dir / "src" / "daemon" / "shuntd"])
    w.start_daemon()
    yield w
    w.close()


def test_self_connections_all_let_go(world, build_dir):
    stats = world.dir / "stats.jsonl"
    proc = LineProc([world.shunt, "run", "--no-daemon", "--",
                     build_dir / "tests" / "control" / "selfconn", COUNT],
                    world.env(stats), world.dir / "selfconn.stderr")
    world.procs.append(proc)
    deadline = time.monotonic() + HANG_S * 4
    while not proc.lines:
        proc.read_until(deadline, "the connections")
    assert proc.lines == [f"done {COUNT}"], (proc.lines, proc.stderr())

    def held():
        return world.status()["connections"]

    try:
        wait_for(lambda: not held(), "shuntd to let go of every connection", SETTLE_S)
    except AssertionError:
        left = held()
        raise AssertionError(f"{len(left)} of {COUNT} connections still held: {left[:3]}")
    assert world.status()["totals"]["circuits_total"] == COUNT
    proc.send("")
    assert proc.proc.wait(timeout=HANG_S) == 0, proc.stderr()
    for d in world.daemons:
        text = d.log.read_text(errors="replace")
        assert not any(s in text for s in SANITIZER), text[-3000:]
    _, total = world.tools.read_stats(stats)
    assert total.get("shm_connect", 0) == COUNT, total
