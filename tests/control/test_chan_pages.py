# SPDX-License-Identifier: MIT
"""A channel's freed slots give their memory back once the connections are
gone (docs/connect.md, "A slot's pages"). shuntd keeps a small connection's
pages for the next one in its slot, and gives them back once the channel
has been quiet for a second; a ring that carried more is emptied as soon as
its slot is free. Measured as a program sees it: the resident size of its
shunt-channel mappings, after 300 connections of 256 bytes and after 40 of
200 KiB, each echoed and checked, must fall back to what the channel's own
queue takes."""

import subprocess
import sys
import textwrap
import time

import pytest

from test_channels import spawn_shuntd

pytestmark = pytest.mark.shunt

# Resident KiB of the channel mappings with no connection in them: the
# channel's header, the queue entries used and the slot states (mapped twice:
# this process is the client and holds the listener), with room to spare. A
# slot kept warm is 12 KiB (24 here): 300 of them are about 7 MiB.
AT_REST_KIB = 512

PROGRAM = textwrap.dedent("""\
    import socket, sys, threading, time

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)

    def serve():
        while True:
            s, _ = ls.accept()
            n = int.from_bytes(s.recv(4, socket.MSG_WAITALL), "little")
            got = 0
            while got < n:
                b = s.recv(65536)
                if not b:
                    break
                got += len(b)
                s.sendall(b)
            s.close()

    threading.Thread(target=serve, daemon=True).start()

    def rss_kib():
        total, inside = 0, False
        with open("/proc/self/smaps") as f:
            for line in f:
                head = line.split()[0]
                if "-" in head and not head.endswith(":"):
                    inside = "shunt-channel" in line
                elif inside and head == "Rss:":
                    total += int(line.split()[1])
        return total

    def conns(count, size):
        good = 0
        data = bytes(range(256)) * (size // 256)
        for _ in range(count):
            c = socket.create_connection(ls.getsockname())
            c.sendall(len(data).to_bytes(4, "little") + data)
            back = bytearray()
            while len(back) < len(data):
                b = c.recv(65536)
                if not b:
                    break
                back += b
            good += bytes(back) == data
            c.close()
        return good

    def settle(limit, seconds):
        # The resident size once it is at most @limit, or the last seen.
        deadline = time.monotonic() + seconds
        while True:
            kib = rss_kib()
            if kib <= limit or time.monotonic() > deadline:
                return kib
            time.sleep(0.05)

    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "conns":
            print("echoed %d, resident %d" % (conns(int(cmd[1]), int(cmd[2])), rss_kib()),
                  flush=True)
        elif cmd[0] == "settle":
            print("settled %d" % settle(int(cmd[1]), float(cmd[2])), flush=True)
    """)


@pytest.fixture
def daemon(build_dir, tmp_path, tools):
    proc, sock = spawn_shuntd(build_dir, tmp_path, tools, "--log", "info")
    yield sock
    proc.terminate()
    proc.wait(timeout=10)


def test_freed_slots_give_memory_back(daemon, shunt_cli, tools, tmp_path):
    script = tmp_path / "pages.py"
    script.write_text(PROGRAM)
    stats = tmp_path / "stats.jsonl"
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=daemon, SHUNT_STATS=str(stats))
    commands = (f"conns 300 256\nsettle {AT_REST_KIB} 10\n"
                f"conns 40 204800\nsettle {AT_REST_KIB} 10\n")
    res = subprocess.run([str(shunt_cli()), "run", "--", sys.executable, str(script)],
                         input=commands, capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    out = res.stdout.split("\n")
    small, small_rest, big, big_rest = out[:4]
    assert small.startswith("echoed 300,") and big.startswith("echoed 40,"), out
    # Each settles within 10 s (a second of quiet after shuntd frees the slots).
    assert int(small_rest.split()[1]) <= AT_REST_KIB, out
    assert int(big_rest.split()[1]) <= AT_REST_KIB, out
    _, total = tools.read_stats(stats)
    assert total.get("shm_connect", 0) == 340, total
