# SPDX-License-Identifier: MIT
"""Direct channels (docs/connect.md) when a client holds more connections to
one listener than a channel has slots: with `shuntd --channel-slots 16`, a
process that holds 100 connections open at once, each echoing its own
bytes, gets them all over shared memory through further channels (more
than one shunt-channel mapping while they are open, no connect left to the
kernel), the same as it does on the kernel; and after they close, the next
100 reuse the slots rather than growing without end."""

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.shunt

SLOTS = 16
CONNS = 100

# On each "round", holds CONNS connections open at once, each echoed, and
# prints a summary with the channels it maps while they are all open (after
# they close, a full channel's mapping goes when shuntd has seen its
# connections end, so a count then would depend on timing).
PROGRAM = textwrap.dedent("""\
    import socket, sys

    conns = int(sys.argv[1])
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(conns)
    accepted = []

    def channels():
        with open("/proc/self/maps") as f:
            return len({l.split()[4] for l in f if "shunt-channel" in l})

    def one_round():
        # Each accepted before the next connect: a channel's queue never
        # fills (that would send a connect to shuntd, as a SYN to wait).
        del accepted[:]
        cs = []
        for _ in range(conns):
            cs.append(socket.create_connection(ls.getsockname()))
            accepted.append(ls.accept()[0])
        good = 0
        for i, c in enumerate(cs):
            c.sendall(b"%06d" % i)
        by_tag = {}
        for s in accepted:
            tag = s.recv(6)
            s.sendall(tag)
            by_tag[tag] = s
        for i, c in enumerate(cs):
            good += c.recv(6) == b"%06d" % i
        open_channels = channels()
        for s in cs + accepted:
            s.close()
        return good, len(by_tag), open_channels

    for line in sys.stdin:
        if line.strip() == "round":
            good, distinct, open_channels = one_round()
            print("echoed %d distinct %d" % (good, distinct), flush=True)
            print("channels %d" % open_channels, flush=True)
    """)


def run(argv, env, script_input):
    res = subprocess.run(argv, input=script_input, capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout.split("\n")


def spawn_shuntd(build_dir, tmp_path, tools, *args):
    """A shuntd of the test's own on tmp_path/shuntd.sock (its log beside
    it), once it serves: (process, socket path)."""
    sock = str(tmp_path / "shuntd.sock")
    log = open(tmp_path / "shuntd.log", "wb")
    proc = subprocess.Popen([str(build_dir / "src" / "daemon" / "shuntd"), "--socket", sock,
                             *args],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            env=tools.plain_env(), start_new_session=True)
    log.close()
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        assert proc.poll() is None, (tmp_path / "shuntd.log").read_text()
        assert time.monotonic() < deadline, "shuntd never made its socket"
        time.sleep(0.02)
    return proc, sock


@pytest.fixture
def daemon(build_dir, tmp_path, tools):
    proc, sock = spawn_shuntd(build_dir, tmp_path, tools, "--channel-slots", str(SLOTS),
                              "--log", "info")
    yield sock
    proc.terminate()
    proc.wait(timeout=10)
    text = (tmp_path / "shuntd.log").read_text(errors="replace")
    assert "dying of signal" not in text, text[-3000:]


def test_more_connections_than_slots(daemon, shunt_cli, tools, tmp_path):
    script = tmp_path / "hold.py"
    script.write_text(PROGRAM)
    plain = run([sys.executable, str(script), str(CONNS)], tools.plain_env(), "round\n")
    assert plain[1] == "channels 0", plain
    assert plain[0] == f"echoed {CONNS} distinct {CONNS}", plain

    stats = tmp_path / "stats.jsonl"
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=daemon, SHUNT_STATS=str(stats))
    out = run([str(shunt_cli()), "run", "--", sys.executable, str(script), str(CONNS)], env,
              "round\nround\nround\n")
    assert out[0] == out[2] == out[4] == plain[0], out
    first, second, third = (int(re.fullmatch(r"channels (\d+)", out[i]).group(1))
                            for i in (1, 3, 5))
    # 100 open at once need at least 7 channels of 16 slots (each mapped by
    # the client side and by the listener side of this one process).
    assert first >= -(-CONNS // SLOTS), out
    # Later rounds find the earlier rounds' slots free again: one channel
    # more at most (a slot whose close shuntd has not read yet), never a
    # growing count.
    assert min(second, third) >= -(-CONNS // SLOTS), out
    assert max(second, third) <= first + 1, out
    _, total = tools.read_stats(stats)
    assert total.get("shm_connect", 0) == 3 * CONNS, total
    assert total.get("kernel_connect", 0) == 0, total
    # Each accept came after its connect had queued the connection: the
    # listener asked shuntd only for each channel it did not have yet.
    assert 1 <= total.get("accept_asks", 0) <= max(first, second, third), total


def daemon_pid(sock):
    """The pid of the shuntd serving @sock."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].endswith(b"shuntd") and os.fsencode(sock) in argv:
            return int(entry)
    raise AssertionError(f"no shuntd serves {sock}")


def memfds(pid, name):
    """How many mappings (or, for shuntd, descriptors) of memfd @name pid holds."""
    with open(f"/proc/{pid}/maps") as f:
        maps = sum(f"/memfd:{name} " in line for line in f)
    fds = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            fds += os.readlink(f"/proc/{pid}/fd/{fd}").startswith(f"/memfd:{name} ")
        except OSError:
            pass
    return maps, fds


def test_clients_that_come_and_go_leave_no_channels(daemon, shunt_cli, build_dir, tools,
                                                    tmp_path):
    """Each client process gets a channel of its own to the listener. When
    it exits, shuntd lets go of it (before, shuntd kept its memfd open, and
    the server its mapping of hundreds of MiB of address space, as long as
    the listener lived: one per client process ever seen)."""
    storm = build_dir / "tests" / "control" / "storm"
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=daemon, SHUNT_STATS=str(tmp_path / "stats.jsonl"))
    portfile = tmp_path / "port"
    server = subprocess.Popen([str(shunt_cli()), "run", "--no-daemon", "--", str(storm), "server",
                               str(portfile)], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not (portfile.exists() and portfile.read_text().strip()):
            assert time.monotonic() < deadline and server.poll() is None, "no listener"
            time.sleep(0.02)
        shuntd = daemon_pid(daemon)
        for i in range(20):
            res = subprocess.run([str(shunt_cli()), "run", "--no-daemon", "--", str(storm),
                                  "client", portfile.read_text().strip(), "2"],
                                 input="run 10 0\nquit\n", capture_output=True, text=True,
                                 env=env, timeout=60)
            assert res.returncode == 0 and "done ok=10 " in res.stdout, res.stdout + res.stderr
        deadline = time.monotonic() + 10
        while ((memfds(server.pid, "shunt-channel")[0] > 1 or memfds(shuntd, "shunt-channel")[1])
               and time.monotonic() < deadline):
            time.sleep(0.05)
        # The last client's channel stays until the next client comes.
        assert memfds(server.pid, "shunt-channel")[0] <= 1, memfds(server.pid, "shunt-channel")
        assert memfds(shuntd, "shunt-channel") == (0, 0), memfds(shuntd, "shunt-channel")
    finally:
        server.kill()
        server.wait()
    _, total = tools.read_stats(tmp_path / "stats.jsonl")
    assert total.get("shm_connect", 0) == 200, total


# Accepts without ever sleeping (a non-blocking listener polled in a loop),
# echoes each connection until its client shuts it down, and on "count" prints how many
# shunt-channel mappings it holds.
BUSY_SERVER = textwrap.dedent("""\
    import select, socket, sys

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    ls.setblocking(False)
    print(ls.getsockname()[1], flush=True)
    while True:
        try:
            c, _ = ls.accept()
        except BlockingIOError:
            if select.select([sys.stdin], [], [], 0)[0]:
                if sys.stdin.readline().strip() != "count":
                    break
                with open("/proc/self/maps") as f:
                    print(sum("/memfd:shunt-channel " in l for l in f), flush=True)
            continue
        c.setblocking(True)
        while data := c.recv(65536):
            c.sendall(data)
        c.close()
""")


def test_a_server_that_never_sleeps_keeps_few_channels(daemon, shunt_cli, build_dir, tools):
    """A server unmaps the channels of clients that left when it next
    sleeps, off the way of the client that came (docs/connect.md): one
    that never sleeps still lets go of them once a few have waited, so
    that its mappings do not grow with every client process it ever saw."""
    storm = build_dir / "tests" / "control" / "storm"
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=daemon)
    server = subprocess.Popen([str(shunt_cli()), "run", "--no-daemon", "--", sys.executable,
                               "-c", BUSY_SERVER], env=env, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().strip()
        assert port.isdigit(), port
        for i in range(40):
            res = subprocess.run([str(shunt_cli()), "run", "--no-daemon", "--", str(storm),
                                  "client", port, "1"],
                                 input="run 1 0\nquit\n", capture_output=True, text=True,
                                 env=dict(env, SHUNT_STATS="/dev/null"), timeout=60)
            assert res.returncode == 0 and "done ok=1 " in res.stdout, res.stdout + res.stderr
        server.stdin.write("count\n")
        server.stdin.flush()
        held = int(server.stdout.readline())
        # The 16 set aside at most, the one just pruned past them, and the last client's.
        assert 1 <= held <= 18, held
    finally:
        server.kill()
        server.wait()


def test_a_new_process_asks_shuntd_twice(daemon, shunt_cli, build_dir, tools, tmp_path):
    """A process that connects once to a listener under shunt waits for
    shuntd twice: HELLO, then CONNECT, whose reply brings the channel and
    the link with the server; the connection itself goes through the
    channel. The server asks once per such client (ACCEPT, whose reply
    brings the client's channel and its link), and once more to be told
    that the client before it is gone. Until stop 21 the client
    also asked LINK_NEXT twice, and the server LINK_NEXT three times and
    ACCEPT again per client (docs/connect.md, "A process per
    connection")."""
    storm = build_dir / "tests" / "control" / "storm"
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=daemon)
    portfile = tmp_path / "port"
    server_stats = tmp_path / "server.jsonl"
    server = subprocess.Popen([str(shunt_cli()), "run", "--no-daemon", "--", str(storm), "server",
                               str(portfile)], env=dict(env, SHUNT_STATS=str(server_stats)),
                              stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, text=True)
    clients = 5
    try:
        deadline = time.monotonic() + 10
        while not (portfile.exists() and portfile.read_text().strip()):
            assert time.monotonic() < deadline and server.poll() is None, "no listener"
            time.sleep(0.02)
        for i in range(clients):
            res = subprocess.run([str(shunt_cli()), "run", "--no-daemon", "--", str(storm),
                                  "client", portfile.read_text().strip(), "1"],
                                 input="run 1 0\nquit\n", capture_output=True, text=True,
                                 env=dict(env, SHUNT_STATS=str(tmp_path / "clients.jsonl")),
                                 timeout=60)
            assert res.returncode == 0 and "done ok=1 " in res.stdout, res.stdout + res.stderr
        server.communicate("quit\n", timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    each, _ = tools.read_stats(tmp_path / "clients.jsonl")
    assert len(each) == clients, each
    for rec in each:
        assert rec["shm_connect"] == 1 and rec["ctl_asks"] == 2, rec
    (srv,), _ = tools.read_stats(server_stats)
    assert srv["shm_accept"] == clients, srv
    # HELLO and LISTEN, then per client its ACCEPT, and a LINK_NEXT to be
    # told the one before is gone (before stop 21: 2 + 5 per client).
    assert srv["ctl_asks"] <= 2 + 2 * clients, srv
