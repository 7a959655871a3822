# SPDX-License-Identifier: MIT
"""An accepted connection whose close went to shuntd by message, because
the journal was full, keeps no spare kernel half (src/preload/spare.c;
docs/connect.md, "Spare kernel halves").

A spare is handed out again once shuntd has read the journal past the
end's CLOSED, since until then shuntd may still look for that end's socket
in the process. A CLOSED the journal had no room for goes by message,
which no journal mark covers: its half once went to the spares all the
same, and the next accept took it as soon as shuntd read the full journal,
maybe before the message.

tests/control/spare_full.c, under shunt, makes 520 connections to itself;
shuntd is stopped (SIGSTOP); the program makes one more (the victim),
closes the 520 on both ends, more CLOSED entries than the journal holds,
then closes the victim. shuntd goes on, and the next accepted connection
must be a new socket (another inode), not the victim's half; the one after
it must be the previous one's (spares still work, so the first comparison
means something).
"""

import os
import signal
import time

import pytest

from control_lib import HANG_S, SANITIZER, shuntd_world

pytestmark = pytest.mark.shunt

# Both ends of each journal a CLOSED: 1,040 entries, more than the 1,024
# a journal holds, on fewer circuits than a channel's 1,024 slots; the ones
# past it go to the stopped shuntd as messages, few enough for the session
# socket's buffer (a send that found it full would wait for shuntd).
COUNT = 520
# Every connection made before the stop had its companion made by then
# (100 ms after its accept; 520 of them).
SETTLE_S = 1.0


def ask(proc, line, word):
    """Send @line; the words of the answer, which starts with @word."""
    proc.send(line)
    proc.read_until(time.monotonic() + HANG_S * 4, word)
    got = proc.lines.pop(0).split()
    assert got[0] == word, (got, proc.stderr())
    return got[1:]


def test_full_journal_keeps_no_spare(shuntd_world, build_dir):
    stats = shuntd_world.dir / "stats.jsonl"
    proc = shuntd_world.run_lines([build_dir / "tests" / "control" / "spare_full", COUNT],
                                  stats, "spare_full")
    ask(proc, "start", "ready")
    time.sleep(SETTLE_S)
    os.kill(shuntd_world.daemon.pid, signal.SIGSTOP)
    try:
        victim = ask(proc, "fill", "closed")[0]
    finally:
        os.kill(shuntd_world.daemon.pid, signal.SIGCONT)
    first = ask(proc, "next", "next")[0]
    second = ask(proc, "next", "next")[0]
    proc.proc.stdin.close()
    assert proc.proc.wait(timeout=HANG_S) == 0, proc.stderr()
    _, total = shuntd_world.tools.read_stats(stats)
    # Every connection on shared memory: the victim too, or nothing was tested.
    assert total.get("shm_connect", 0) == COUNT + 3, total
    assert first != victim, "the victim's half, closed by message, was handed out again"
    assert second == first, "no spare was handed out at all: the test proves nothing"
    for d in shuntd_world.daemons:
        text = d.log.read_text(errors="replace")
        assert not any(s in text for s in SANITIZER), text[-3000:]
