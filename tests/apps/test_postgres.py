# SPDX-License-Identifier: MIT
"""PostgreSQL, plain and under `shunt run`, driven by its own pgbench: the
postmaster forks a backend per connection, which inherits the accepted
connection and closes the listening sockets, so every connection crosses
fork on the server side. pgbench loads its tables (`-i`), then runs the
read-only script with kept connections, the same with a new connection per
transaction (`-C`), and the read-write TPC-B-like script; psql then counts
what the writes left. Server and clients are both under shunt in the shunt
round; what they report (transactions processed, none failed, the rows
written) must be what it was plain, and the SHUNT_STATS lines must show
that the connections went through shared memory.

PostgreSQL refuses to run as root, so everything runs as the `postgres`
user (runuser), with a shuntd socket and stats files in a directory of its
own that user can reach; as another user the test is skipped, saying so.
"""

import glob
import os
import pathlib
import pwd
import re
import shutil
import signal
import subprocess
import tempfile

import pytest

from apps_lib import free_port, matrix_row, need, servers  # noqa: F401
from conftest import ShuntSession

CLIENTS = 2
TXNS = 150		# per client, in each pgbench run
TXNS_CONNECT = 50	# per client, with a new connection per transaction
SCALE = 1


def pg_server_bin():
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return found[-1] if found else None


@pytest.fixture
def pg_tools(need):
    if os.geteuid() != 0:
        pytest.skip("SKIPPED LOUDLY: not root: PostgreSQL must run as its own user, which only "
                    "root can switch to")
    tools = need(["pgbench", "psql", "runuser"], ["postgresql", "postgresql-client"])
    server = pg_server_bin()
    if not server:
        pytest.skip("SKIPPED LOUDLY: no /usr/lib/postgresql/*/bin/postgres; install postgresql")
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("SKIPPED LOUDLY: no postgres user; install postgresql")
    bindir = os.path.dirname(server)
    tools.update(postgres=server, initdb=os.path.join(bindir, "initdb"))
    return tools


@pytest.fixture
def pg_dir(pg_tools):
    """A directory the postgres user owns, outside pytest's private ones."""
    d = tempfile.mkdtemp(prefix="shunt-pg-")
    user = pwd.getpwnam("postgres")
    os.chmod(d, 0o755)
    os.chown(d, user.pw_uid, user.pw_gid)
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Round:
    """One run of the whole scene, plain or under shunt."""

    def __init__(self, name, base, tools, pg_tools, cli=None):
        self.name = name
        self.dir = os.path.join(base, name)
        self.tools = tools
        self.pg = pg_tools
        self.cli = cli
        self.session = ShuntSession(self.dir) if cli else None
        os.mkdir(self.dir)
        user = pwd.getpwnam("postgres")
        os.chown(self.dir, user.pw_uid, user.pw_gid)

    def stats(self, role):
        return os.path.join(self.dir, f"{role}.stats.jsonl")

    def env(self, role):
        if not self.session:
            return self.tools.plain_env()
        return self.session.env(self.stats(role))

    def argv(self, argv):
        wrapped = ([self.cli, "run", "--"] if self.session else []) + list(argv)
        return ["runuser", "-u", "postgres", "--"] + wrapped

    def client(self, role, argv):
        res = self.tools.run(self.argv(argv), self.env(role), 120, cwd=self.dir)
        if res.timed_out or res.rc != 0:
            pytest.fail(f"{role} failed ({self.name}):\n" + res.describe(), pytrace=False)
        return res.stdout.decode() + res.stderr.decode()

    def totals(self, role):
        return self.tools.read_stats(self.stats(role))

    def stop_daemons(self):
        if self.session:
            self.session.stop_daemons()


def pgbench_summary(out):
    """What pgbench reports that must not depend on the transport."""
    got = {}
    for key, pattern in (("processed", r"number of transactions actually processed: (\S+)"),
                         ("failed", r"number of failed transactions: (\d+)"),
                         ("clients", r"number of clients: (\d+)"),
                         ("mode", r"transaction type: (.+)")):
        m = re.search(pattern, out)
        got[key] = m.group(1) if m else None
    return got


def scene(r, servers, port):
    """The scene of one round: what the programs reported, as a dict."""
    data = os.path.join(r.dir, "data")
    r.client("initdb", [r.pg["initdb"], "-D", data, "-A", "trust", "--no-sync", "-E", "UTF8",
                        "--locale", "C"])
    srv = servers(f"postgres-{r.name}", r.argv([
        r.pg["postgres"], "-D", data, "-c", "listen_addresses=127.0.0.1", "-c", f"port={port}",
        "-c", f"unix_socket_directories={r.dir}", "-c", "fsync=off",
        "-c", "max_connections=20", "-c", "shared_buffers=16MB"]), r.env("postgres"),
        pathlib.Path(r.dir))
    srv.wait_port(port)
    conn = ["-h", "127.0.0.1", "-p", str(port)]
    seen = {}
    r.client("pgbench", [r.pg["pgbench"], *conn, "-i", "-s", str(SCALE), "-q", "postgres"])
    seen["select"] = pgbench_summary(r.client("pgbench", [
        r.pg["pgbench"], *conn, "-c", str(CLIENTS), "-j", str(CLIENTS), "-t", str(TXNS), "-S",
        "-n", "postgres"]))
    seen["select, a connection each"] = pgbench_summary(r.client("pgbench", [
        r.pg["pgbench"], *conn, "-c", str(CLIENTS), "-j", str(CLIENTS), "-t", str(TXNS_CONNECT),
        "-S", "-C", "-n", "postgres"]))
    seen["tpcb"] = pgbench_summary(r.client("pgbench", [
        r.pg["pgbench"], *conn, "-c", str(CLIENTS), "-j", str(CLIENTS), "-t", str(TXNS), "-n",
        "postgres"]))
    seen["rows"] = r.client("psql", [
        "psql", *conn, "-X", "-A", "-t", "-c",
        "select (select count(*) from pgbench_history), (select count(*) from pgbench_accounts),"
        " (select sum(abalance) = (select sum(delta) from pgbench_history)"
        " from pgbench_accounts)", "postgres"]).strip()
    # SIGINT to the postmaster (runuser passes nothing on): a fast shutdown,
    # exit status 0 once the backends are gone.
    with open(os.path.join(data, "postmaster.pid")) as f:
        os.kill(int(f.readline()), signal.SIGINT)
    try:
        rc = srv.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        rc = None
    srv.stop()
    assert rc == 0, f"postgres exit status {rc} after SIGINT\n" + srv.logs()
    r.stop_daemons()
    return seen


def scene_ok(seen):
    """What a correct round looks like, whatever the transport."""
    for run, txns in (("select", TXNS), ("select, a connection each", TXNS_CONNECT),
                      ("tpcb", TXNS)):
        got = seen[run]
        assert got["processed"] == f"{CLIENTS * txns}/{CLIENTS * txns}", (run, got)
        assert got["failed"] == "0", (run, got)
    # Every TPC-B transaction logged one row, and the balances add up to them.
    assert seen["rows"] == f"{CLIENTS * TXNS}|{SCALE * 100000}|t", seen["rows"]


@pytest.mark.plain
def test_postgres_pgbench_plain(tools, servers, pg_tools, pg_dir):
    """The scene itself: tables loaded, every transaction of each run
    processed and none failed, the writes all there."""
    scene_ok(scene(Round("plain", pg_dir, tools, pg_tools), servers, free_port()))


@pytest.mark.shunt
def test_postgres_pgbench(tools, servers, pg_tools, pg_dir, shunt_cli, request):
    """PostgreSQL and pgbench both under shunt: the same reports as plain;
    pgbench's connections went through shared memory, the backends that
    inherited them across fork carried them there, and the server side
    accepted them there."""
    version = tools.run([pg_tools["postgres"], "--version"], tools.plain_env(), 10).stdout
    with matrix_row(request, "PostgreSQL (postmaster, a backend forked per connection)",
                    version.decode().strip() or "?",
                    "pgbench (-S kept, -S -C a connection each, TPC-B), psql"):
        plain = scene(Round("plain", pg_dir, tools, pg_tools), servers, free_port())
        scene_ok(plain)
        r = Round("shunt", pg_dir, tools, pg_tools, shunt_cli())
        shunted = scene(r, servers, free_port())
        assert shunted == plain, f"under shunt: {shunted}, plain: {plain}"
        lines, total = r.totals("pgbench")
        assert lines, "no SHUNT_STATS line from pgbench"
        connects = CLIENTS * (2 + TXNS_CONNECT)
        assert total.get("shm_connect", 0) >= connects and not total.get("kernel_connect"), total
        lines, total = r.totals("postgres")
        assert lines, "no SHUNT_STATS line from postgres"
        assert total.get("shm_accept", 0) >= connects, total
        assert total.get("shm_rx_bytes", 0) > 0 and total.get("shm_tx_bytes", 0) > 0, total
