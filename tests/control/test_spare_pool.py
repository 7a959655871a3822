# SPDX-License-Identifier: MIT
"""How many spare kernel halves a process keeps (src/preload/spare.c;
docs/connect.md, "Spare kernel halves"): up to 64 per address family while
the library's descriptors have a reserve above the program's limit, and at
most 1/64 of the program's range when they take numbers of its own (16 of
1,024), since the program then reaches EMFILE that many early.

tests/control/spare_pool.c sets its descriptor limits, accepts N
connections, closes them, and accepts N more; it prints how many of the
new accepted sockets are old ones' (the same inode). The kernel alone
never reuses one, so the plain run says 0.
"""

import subprocess
import time

import pytest

from control_lib import HANG_S, shuntd_world

pytestmark = pytest.mark.shunt


def reused(world, build_dir, count, soft, hard, shunt=True):
    argv = [str(build_dir / "tests" / "control" / "spare_pool"), str(count), str(soft), str(hard)]
    if shunt:
        argv = [str(world.shunt), "run", "--no-daemon", "--"] + argv
    out = subprocess.run(argv, env=world.env(), capture_output=True, text=True, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    word, k = out.stdout.split()
    assert word == "reused", out.stdout
    return int(k)


# A connection that lasts 100 ms has a companion made of its half, which then
# goes with it: a slow run may keep a few less than all.
@pytest.mark.parametrize("soft,hard,count,least,most", [
    (1024, 4096, 40, 33, 40),   # a reserve above the limit: all 40 kept (16 before)...
    (1024, 4096, 100, 64, 64),  # ...up to 64
    (1024, 1024, 40, 9, 16),    # no room above: at most 1/64 of 1,024
])
def test_spares_kept(shuntd_world, build_dir, soft, hard, count, least, most):
    assert reused(shuntd_world, build_dir, count, soft, hard, shunt=False) == 0
    assert least <= reused(shuntd_world, build_dir, count, soft, hard) <= most


def test_spares_after_restart(shuntd_world, build_dir):
    """Spares kept under a shuntd that died wait for a journal that nobody
    will read again: they must not keep the next session's out of the pool
    (they held the pool's place for good before stop 29)."""
    count = 40
    stats = shuntd_world.dir / "stats.jsonl"
    proc = shuntd_world.run_lines([build_dir / "tests" / "control" / "spare_pool", count,
                                   1024, 4096, "restart"], stats, "spare_pool")
    proc.read_until(time.monotonic() + HANG_S, "closed")
    assert proc.lines.pop(0) == "closed", proc.history
    shuntd_world.kill_daemon()
    shuntd_world.start_daemon()
    proc.send("go")
    proc.read_until(time.monotonic() + HANG_S + 10, "reused")
    word, k = proc.lines.pop(0).split()
    assert word == "reused", proc.history
    assert proc.proc.wait(timeout=HANG_S) == 0, proc.stderr()
    _, total = shuntd_world.tools.read_stats(stats)
    # All three rounds on shared memory, or the halves were never spares.
    assert total.get("shm_accept", 0) >= 3 * count, total
    assert 33 <= int(k) <= count, (k, proc.stderr())
