# SPDX-License-Identifier: MIT
"""Wake-ups are never lost when several threads of one process sleep in
poll()/select() on their own connections. Under shunt they all sleep on
one process-wide wake-up source; the thread that wakes first handles every
pending notice, and must pass the wake-up on to the others, or they sleep
until their timeout (found with memcslap --concurrency=2: 5 s stalls).

Python's socket timeouts wait in poll() before every recv and send; two
threads each doing round trips with an echo server show a lost wake-up as
a round trip that takes the whole timeout instead of well under a
millisecond. The bound (1 s, against a 3 s timeout) detects a hang, not a
slowness.
"""

import json
import socket
import subprocess
import sys
import textwrap
import time

import pytest

SERVER = textwrap.dedent("""\
    import socket, sys, threading
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(16)
    print(ls.getsockname()[1], flush=True)
    def serve(c):
        while (b := c.recv(65536)):
            c.sendall(b)
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
    """)

CLIENT = textwrap.dedent("""\
    import json, socket, sys, threading, time
    port, rounds = int(sys.argv[1]), int(sys.argv[2])
    slow = []
    def run(t):
        s = socket.create_connection(("127.0.0.1", port))
        s.settimeout(3)
        for i in range(rounds):
            start = time.monotonic()
            s.sendall(b"x" * 10)
            n = 0
            while n < 10:
                n += len(s.recv(100))
            if time.monotonic() - start > 1:
                slow.append((t, i))
        s.close()
    ts = [threading.Thread(target=run, args=(t,)) for t in range(2)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    print(json.dumps({"slow": slow}))
    """)

ROUNDS = 3000


@pytest.mark.parametrize("mode", ["plain", pytest.param("shunt", marks=pytest.mark.shunt)])
def test_threads_in_poll_all_woken(mode, tools, shunt_session, shunt_cli, tmp_path):
    (tmp_path / "srv.py").write_text(SERVER)
    (tmp_path / "cli.py").write_text(CLIENT)
    if mode == "shunt":
        env, prefix = shunt_session.env(), [str(shunt_cli()), "run", "--"]
    else:
        env, prefix = tools.plain_env(), []
    srv = subprocess.Popen(prefix + [sys.executable, str(tmp_path / "srv.py")], env=env,
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        port = int(srv.stdout.readline())
        time.sleep(0.1)  # its listener registered with shuntd
        res = tools.run(prefix + [sys.executable, str(tmp_path / "cli.py"), str(port),
                                  str(ROUNDS)], env, timeout=120)
        assert res.rc == 0, res.describe()
        slow = json.loads(res.stdout.decode().splitlines()[-1])["slow"]
        assert slow == [], f"round trips that waited for their poll timeout: {slow}"
    finally:
        srv.kill()
        srv.wait()
