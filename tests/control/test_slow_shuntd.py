# SPDX-License-Identifier: MIT
"""Connects never wait for a slow shuntd (issue 12; docs/connect.md, "When
shuntd is slow"). shuntd is stopped (SIGSTOP: the slowest shuntd there is)
while a client under shunt connects:

* to a port nobody listens on, and to a remote address: the directory that
  shuntd publishes says no listener could take them, so shuntd is not asked
  at all (kernel_unlistened counts every one);
* to a listener it already has a channel to, non-blocking: no question;
* non-blocking to a listener it has none to yet: the first connect waits
  for shuntd at most SHUNT_CONNECT_WAIT_US and then lets the kernel connect;
  from then on shuntd is late and nobody waits for it (late_waits is 1 for
  the whole process, fallback_late counts the rest);
* from a process started while shuntd is stopped: its HELLO is not answered,
  its first connect waits once, the others do not.

Every outcome (connected and echoed, or the errno) is the kernel's: the same
client runs plain first. Once shuntd runs again, the channel it answered
late is used: the next connects there are on shared memory.

Runs in a network namespace of its own with only lo (a remote address is
unreachable there, nothing leaves the machine): needs root, skipped
without."""

import os
import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from test_channels import spawn_shuntd
from test_containers import Net, _can_make_namespaces

pytestmark = pytest.mark.shunt

REMOTE = "10.9.8.7"

SERVER = textwrap.dedent("""\
    import socket, sys, threading

    def serve(ls):
        while True:
            s, _ = ls.accept()
            threading.Thread(target=echo, args=(s,), daemon=True).start()

    def echo(s):
        while True:
            b = s.recv(4096)
            if not b:
                break
            s.sendall(b)
        s.close()

    near = socket.socket()
    near.bind(("127.0.0.1", 0))          # reachable through loopback only
    near.listen(64)
    wide = socket.socket()
    wide.bind(("0.0.0.0", 0))            # any local address
    wide.listen(64)
    for ls in (near, wide):
        threading.Thread(target=serve, args=(ls,), daemon=True).start()
    print(near.getsockname()[1], wide.getsockname()[1], flush=True)
    sys.stdin.read()
    """)

CLIENT = textwrap.dedent("""\
    import errno, os, select, socket, sys

    ports = {"near": int(sys.argv[1]), "wide": int(sys.argv[2])}
    # A port bound and never listened on: nobody else can listen there meanwhile.
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    ports["closed"] = closed.getsockname()[1]

    def one(host, port, nonblock):
        s = socket.socket()
        try:
            if nonblock:
                s.setblocking(False)
                r = s.connect_ex((host, port))
                if r == errno.EINPROGRESS:
                    select.select([], [s], [], 10)
                    r = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if r:
                    return errno.errorcode[r]
                s.setblocking(True)
            else:
                s.connect((host, port))
            data = os.urandom(1000)
            s.sendall(data)
            got = b""
            while len(got) < len(data):
                b = s.recv(4096)
                if not b:
                    break
                got += b
            return "ok" if got == data else "bad echo"
        except OSError as e:
            return errno.errorcode[e.errno]
        finally:
            s.close()

    for line in sys.stdin:
        host, port, n, mode = line.split()
        seen = {}
        for _ in range(int(n)):
            r = one(host, ports[port], mode == "nonblock")
            seen[r] = seen.get(r, 0) + 1
        print(line.strip(), sorted(seen.items()), flush=True)
    """)


class Prog:
    def __init__(self, argv, env):
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, start_new_session=True)

    def line(self, timeout=30):
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            raise AssertionError(f"no answer in {timeout} s")
        line = self.proc.stdout.readline()
        assert line, self.proc.stderr.read()
        return line.strip()

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.line()

    def end(self):
        self.proc.stdin.close()
        rc = self.proc.wait(timeout=30)
        assert rc == 0, self.proc.stderr.read()


@pytest.fixture
def netns():
    why = _can_make_namespaces()
    if why:
        pytest.skip(f"needs its own network namespace: {why}")
    net = Net()
    try:
        yield net.ns("slow")
    finally:
        net.cleanup()


@pytest.fixture
def daemon(build_dir, tmp_path, tools):
    proc, sock = spawn_shuntd(build_dir, tmp_path, tools)
    yield proc, sock
    os.kill(proc.pid, signal.SIGCONT)
    proc.terminate()
    proc.wait(timeout=10)


# (command, whether shuntd is stopped first, whether it runs again first)
STEPS = [
    ("127.0.0.1 near 1 block", False, False),     # a session, the directory, a channel
    ("127.0.0.1 closed 20 block", True, False),   # nobody listens: not asked
    (f"{REMOTE} near 20 block", False, False),    # remote, only a loopback listener there
    ("127.0.0.1 near 20 nonblock", False, False),  # through the channel: not asked
    ("127.0.0.1 wide 20 nonblock", False, False),  # asked: waits once, then the kernel
    (f"{REMOTE} wide 5 block", False, False),     # shuntd is late: not asked
    ("127.0.0.1 wide 5 block", False, True),      # shuntd answers again: its late channel
]


def run_all(pre, env, tools, tmp_path, daemon_proc=None):
    """The client's steps against the server, both under @pre; the outputs,
    and a second client's started while shuntd was stopped."""
    srv_py, cli_py = tmp_path / "server.py", tmp_path / "client.py"
    srv_py.write_text(SERVER)
    cli_py.write_text(CLIENT)
    server = Prog(pre + [sys.executable, str(srv_py)], env)
    try:
        near, wide = server.line().split()
        client = Prog(pre + [sys.executable, str(cli_py), near, wide], env)
        out, late_out = [], None
        for cmd, stop, cont in STEPS:
            if stop and daemon_proc:
                os.kill(daemon_proc.pid, signal.SIGSTOP)
            if stop:
                # A process that starts now finds nobody answering its HELLO.
                late = Prog(pre + [sys.executable, str(cli_py), near, wide], env)
                late_out = late.ask("127.0.0.1 near 5 block")
                late.end()
            if cont and daemon_proc:
                os.kill(daemon_proc.pid, signal.SIGCONT)
                time.sleep(0.3)          # it answers what waited meanwhile
            out.append(client.ask(cmd))
        client.end()
    finally:
        server.proc.kill()
        server.proc.wait()
    return out, late_out


def test_connects_do_not_wait_for_a_stopped_shuntd(netns, daemon, shunt_cli, tools, tmp_path):
    pre = ["ip", "netns", "exec", netns]
    (tmp_path / "plain").mkdir()
    plain, plain_late = run_all(pre, tools.plain_env(), tools, tmp_path / "plain")
    assert plain[1].endswith("[('ECONNREFUSED', 20)]"), plain
    assert plain[2].endswith("[('ENETUNREACH', 20)]"), plain

    proc, sock = daemon
    stats = tmp_path / "stats.jsonl"
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=sock, SHUNT_STATS=str(stats))
    shunt_pre = pre + [str(shunt_cli()), "run", "--"]
    out, late_out = run_all(shunt_pre, env, tools, tmp_path, daemon_proc=proc)
    assert out == plain and late_out == plain_late, (out, plain, late_out, plain_late)

    per_pid, _ = tools.read_stats(stats)
    clients = [st for st in per_pid if st.get("kernel_unlistened") or st.get("fallback_late")]
    assert len(clients) == 2, per_pid
    main = max(clients, key=lambda st: st.get("kernel_unlistened", 0))
    late = min(clients, key=lambda st: st.get("kernel_unlistened", 0))
    # Never asked: the closed port and the remote address beside a loopback-only listener.
    assert main["kernel_unlistened"] == 40, main
    # One wait in vain for the whole process; the rest went straight to the kernel.
    assert main["late_waits"] == 1 and main["fallback_late"] == 20 + 5, main
    # The warm-up, the 20 through the channel, and the 5 through the channel answered late.
    assert main["shm_connect"] == 1 + 20 + 5, main
    assert late["late_waits"] == 1 and late["fallback_late"] == 5, late
    assert late.get("shm_connect", 0) == 0, late


FORK_CLOSE = textwrap.dedent("""\
    import os, socket, sys

    def echo_once(ls, port):
        c = socket.create_connection(("127.0.0.1", port))
        a, _ = ls.accept()
        c.sendall(b"x")
        a.sendall(a.recv(1))
        got = c.recv(1)
        a.close()
        c.close()
        return got == b"x"

    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    port = ls.getsockname()[1]
    warm = echo_once(ls, port)
    r, w = os.pipe()
    started_r, started_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(started_w, b"s")  # fork() returned here: the child has its session
        os.read(r, 1)
        ls.close()              # the child's copy: the parent still listens
        os._exit(7)
    os.read(started_r, 1)
    print("warm", warm, flush=True)
    sys.stdin.readline()        # shuntd is stopped now
    os.write(w, b"g")
    print("child closed and exited", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]),
          flush=True)
    sys.stdin.readline()        # shuntd runs again
    print("parent accepts", echo_once(ls, port), flush=True)
    ls.close()
    try:
        socket.create_connection(("127.0.0.1", port)).close()
        print("then connected", flush=True)
    except ConnectionRefusedError:
        print("then refused", flush=True)
    """)


def fork_close_scene(pre, env, tmp_path, daemon_proc=None):
    """FORK_CLOSE under @pre, shuntd (if given) stopped while the child
    closes its copy of the listener: every line the program printed."""
    prog_py = tmp_path / "fork_close.py"
    prog_py.write_text(FORK_CLOSE)
    prog = Prog(pre + [sys.executable, str(prog_py)], env)
    try:
        out = [prog.line()]
        if daemon_proc:
            os.kill(daemon_proc.pid, signal.SIGSTOP)
        prog.proc.stdin.write("\n")
        prog.proc.stdin.flush()
        # Within seconds while shuntd is stopped: the close did not wait for it.
        out.append(prog.line(timeout=10))
        if daemon_proc:
            os.kill(daemon_proc.pid, signal.SIGCONT)
        out += [prog.ask(""), prog.line()]
        prog.end()
    finally:
        prog.proc.kill()
        prog.proc.wait()
    return out


def test_a_fork_child_closing_a_shared_listener_does_not_wait(daemon, shunt_cli, tools,
                                                              tmp_path):
    """A child that closes the listener its parent still holds changes
    nothing anyone sees, as with the kernel: it does not wait for shuntd
    (which is stopped meanwhile). The parent then accepts as before, and
    once it closes too, a connect is refused."""
    (tmp_path / "plain").mkdir()
    plain = fork_close_scene([], tools.plain_env(), tmp_path / "plain")
    assert plain == ["warm True", "child closed and exited 7", "parent accepts True",
                     "then refused"], plain

    proc, sock = daemon
    stats = tmp_path / "stats.jsonl"
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=sock, SHUNT_STATS=str(stats))
    out = fork_close_scene([str(shunt_cli()), "run", "--"], env, tmp_path, daemon_proc=proc)
    assert out == plain, out
    per_pid, _ = tools.read_stats(stats)
    assert sum(st.get("shm_connect", 0) for st in per_pid) >= 2, per_pid


FORK_BOTH_CLOSE = textwrap.dedent("""\
    import os, socket, sys

    # A third process, forked before the listener exists (outside its family),
    # which connects once told that both closed.
    to_third, from_third = os.pipe(), os.pipe()
    third = os.fork()
    if third == 0:
        port = int(os.read(to_third[0], 16))
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            os.write(from_third[1], b"connected")
        except ConnectionRefusedError:
            os.write(from_third[1], b"refused")
        os._exit(0)
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    port = ls.getsockname()[1]
    c = socket.create_connection(("127.0.0.1", port))   # warm: the session, the channel
    a, _ = ls.accept()
    a.close()
    c.close()
    how = sys.argv[1]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.read(r, 1)
        if how == "close":
            ls.close()          # the parent still listens: not waited for
        elif how == "exit":
            os.dup(ls.fileno())  # a descriptor Python's own exit leaves open
            ls.close()
            sys.exit(7)         # then the C library's exit(), and its atexit handlers
        os._exit(7)             # _exit(): the kernel closes the listener
    # Asked of shuntd after the FORK, so answered once it read it: it counts the
    # child as a holder, and the child's close need not wait for it.
    s2 = socket.socket()
    s2.bind(("127.0.0.1", 0))
    s2.listen(1)
    s2.close()
    print("forked", flush=True)
    sys.stdin.readline()        # shuntd is stopped now
    os.write(w, b"g")
    print("child closed and exited", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]),
          flush=True)
    ls.close()                  # the last holder: refused from now on
    print("parent closed", flush=True)
    os.write(to_third[1], str(port).encode())
    print("a third process:", os.read(from_third[0], 16).decode(),
          os.waitstatus_to_exitcode(os.waitpid(third, 0)[1]), flush=True)
    try:
        socket.create_connection(("127.0.0.1", port)).close()
        print("then connected", flush=True)
    except ConnectionRefusedError:
        print("then refused", flush=True)
    """)


def fork_both_close_scene(pre, env, tmp_path, how, daemon_proc=None):
    """FORK_BOTH_CLOSE under @pre, the child letting go of the listener
    @how, shuntd (if given) stopped from before that until 2 s after the
    child exited: each line printed, and whether the parent's close
    returned while shuntd was stopped."""
    prog_py = tmp_path / "fork_both_close.py"
    prog_py.write_text(FORK_BOTH_CLOSE)
    prog = Prog(pre + [sys.executable, str(prog_py), how], env)
    early = False
    try:
        out = [prog.line()]
        if daemon_proc:
            os.kill(daemon_proc.pid, signal.SIGSTOP)
        out.append(prog.ask(""))
        if daemon_proc:
            early = bool(select.select([prog.proc.stdout], [], [], 2)[0])
            os.kill(daemon_proc.pid, signal.SIGCONT)
        out += [prog.line(), prog.line(), prog.line()]
        prog.end()
    finally:
        prog.proc.kill()
        prog.proc.wait()
    return out, early


@pytest.mark.parametrize("how", ["close", "_exit", "exit"])
def test_a_fork_familys_last_close_waits_for_the_others(daemon, shunt_cli, tools, tmp_path,
                                                         how):
    """Regression: a fork child closed the listener without waiting (its
    parent held it), then the parent closed it, also without waiting, since
    shuntd had not read the child's close yet and still counted two
    holders; a connect after both closes was accepted where the kernel
    refuses it (seen in CI in t_proc_fork_listener). The parent is the
    last holder of their family: its close waits until shuntd has read
    the child's, and a connect after it is refused, whoever makes it (a
    third process outside their family, then the parent). A child that exits
    without closing lets go of it as the kernel does, through _exit() or
    exit()."""
    (tmp_path / "plain").mkdir()
    plain, _ = fork_both_close_scene([], tools.plain_env(), tmp_path / "plain", how)
    assert plain == ["forked", "child closed and exited 7", "parent closed",
                     "a third process: refused 0", "then refused"], plain

    proc, sock = daemon
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=sock)
    out, early = fork_both_close_scene([str(shunt_cli()), "run", "--"], env, tmp_path, how,
                                       daemon_proc=proc)
    assert out == plain, out
    assert not early, "the last holder's close returned while shuntd was stopped"


FORK_ANSWER = textwrap.dedent("""\
    import os, signal, socket, sys

    shuntd, when = int(sys.argv[1]), sys.argv[2]
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    c = socket.create_connection(ls.getsockname())
    a, _ = ls.accept()
    c.sendall(b"q")             # the request the child will answer
    if when == "before":
        print("ready", flush=True)
        sys.stdin.readline()    # shuntd is stopped now
    pid = os.fork()
    if pid == 0:
        if when == "after":
            ls.close()          # the parent still listens
        a.sendall(a.recv(1))
        os._exit(7)             # closes nothing: the parent holds it too
    if shuntd and when == "after":
        os.kill(shuntd, signal.SIGSTOP)   # before the child's claim is answered, mostly
    got = c.recv(1)
    print("client got", got == b"q", "child exit",
          os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
    sys.stdin.readline()        # shuntd runs again
    a.close()
    print("after the close", c.recv(1) == b"", flush=True)
    c.close()
    ls.close()
    """)


def fork_answer_scene(pre, env, tmp_path, when, daemon_proc=None):
    """FORK_ANSWER under @pre, shuntd (if given) stopped by the program right
    after its fork (@when "after"), or by the test before it ("before"):
    every line printed (one at a time: Prog.line reads no further)."""
    prog_py = tmp_path / "fork_answer.py"
    prog_py.write_text(FORK_ANSWER)
    prog = Prog(pre + [sys.executable, str(prog_py), str(daemon_proc.pid if daemon_proc else 0),
                       when], env)
    try:
        if when == "before":
            assert prog.line() == "ready"
            if daemon_proc:
                os.kill(daemon_proc.pid, signal.SIGSTOP)
            prog.proc.stdin.write("\n")
            prog.proc.stdin.flush()
        # Within seconds while shuntd is stopped: the child did not wait for it.
        lines = [prog.line(timeout=10)]
        if daemon_proc:
            os.kill(daemon_proc.pid, signal.SIGCONT)
        lines.append(prog.ask(""))
        prog.end()
    finally:
        prog.proc.kill()
        prog.proc.wait()
    return lines


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_fork_child_answers_without_waiting_for_shuntd(daemon, shunt_cli, tools, tmp_path,
                                                         when):
    """A server's fork child answers the connection it was forked for while
    shuntd is stopped: by the parent right after the fork ("after"), before
    the child's claim of its parent's sockets is answered, as a rule, the
    child closing the listener it inherited too; or before the fork
    ("before"), whose ticket shuntd reads only later. None of that waits for
    shuntd (src/preload/fork.h). Once shuntd runs again, the connection ends
    with the parent's close, as with the kernel."""
    (tmp_path / "plain").mkdir()
    plain = fork_answer_scene([], tools.plain_env(), tmp_path / "plain", when)
    assert plain == ["client got True child exit 7", "after the close True"], plain

    proc, sock = daemon
    stats = tmp_path / "stats.jsonl"
    env = tools.plain_env()
    env.update(SHUNT_SOCKET=sock, SHUNT_STATS=str(stats))
    out = fork_answer_scene([str(shunt_cli()), "run", "--"], env, tmp_path, when,
                            daemon_proc=proc)
    assert out == plain, out
    per_pid, _ = tools.read_stats(stats)
    assert sum(st.get("shm_connect", 0) for st in per_pid) >= 1, per_pid
    assert not any(st.get("kernel_connect") for st in per_pid), per_pid
