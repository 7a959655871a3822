# SPDX-License-Identifier: MIT
"""A container given shunt by its runtime, with the daemon on the host
(docs/containers.md): the host's control socket and libshunt.so are
bind-mounted into the container, and LD_PRELOAD and SHUNT_SOCKET set in
its environment; nothing of shunt is installed in it. The container here
is what `docker run` makes, made with unshare(1) (Docker's engine does not
run on these machines): its own mount, PID and network namespaces, and its
own /run with the two bind mounts; the host paths they came from are
hidden. A server and a client inside it talk plain and then with the
preload: the same lines, and shared memory the second time."""

import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import ShuntSession, plain_env, read_stats

pytestmark = pytest.mark.shunt

PORT = 7311

# Runs as PID 1 of the container's PID namespace. $1: "plain" or "shunt".
CONTAINER = r"""
set -eu
ip link set lo up
# The container's /run: only what the runtime bind-mounts into it.
mount -t tmpfs -o mode=0755 container-run /run
mkdir -p /run/shunt /usr/local/lib/shunt-host
touch /run/shunt/shuntd.sock
mount --bind "$HOST_SOCKET" /run/shunt/shuntd.sock
mount -t tmpfs -o mode=0755 container-lib /usr/local/lib/shunt-host
touch /usr/local/lib/shunt-host/libshunt.so
mount --bind -o ro "$HOST_LIB" /usr/local/lib/shunt-host/libshunt.so
# ...and where they came from is out of sight, as on a real host.
mount -t tmpfs none "$(dirname "$HOST_SOCKET")"
echo "pid $$"
if [ "$1" = shunt ]; then
	export LD_PRELOAD=/usr/local/lib/shunt-host/libshunt.so SHUNT_SOCKET=/run/shunt/shuntd.sock
fi
SHUNT_STATS=$OUT/server.stats "$PROBE" server 127.0.0.1 $PORT C > "$OUT/server.out" &
i=0
until grep -q listening "$OUT/server.out" || [ $i -ge 200 ]; do sleep 0.05; i=$((i + 1)); done
SHUNT_STATS=$OUT/client.stats "$PROBE" client 127.0.0.1 $PORT > "$OUT/client.out"
wait
"""


@pytest.fixture(scope="module")
def host_daemon(build_dir, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("making a container (mount, PID and network namespaces) needs root")
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) is missing")
    shunt = build_dir / "src" / "cli" / "shunt"
    if not os.access(shunt, os.X_OK):
        pytest.fail(f"shunt CLI not built: {shunt} is missing", pytrace=False)
    sess = ShuntSession(tmp_path_factory.mktemp("host"))
    log = open(sess.daemon_log, "ab")
    daemon = subprocess.Popen([str(shunt), "daemon", "--socket", sess.socket, "--log", "info"],
                              env=plain_env(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                              start_new_session=True)
    log.close()
    deadline = time.monotonic() + 10
    while not os.path.exists(sess.socket):
        assert daemon.poll() is None and time.monotonic() < deadline, \
            sess.daemon_log.read_text(errors="replace")
        time.sleep(0.02)
    yield sess
    daemon.terminate()
    daemon.wait(timeout=10)


def run_container(mode, sess, build_dir, out):
    env = plain_env()
    env.update(HOST_SOCKET=sess.socket, HOST_LIB=str(build_dir / "src" / "preload" / "libshunt.so"),
               PROBE=str(build_dir / "tests" / "control" / "nsprobe"), OUT=str(out),
               PORT=str(PORT))
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "--pid", "--net",
                          "--fork", "--mount-proc", "sh", "-c", CONTAINER, "container", mode],
                         env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, f"{mode}: {res.stdout}{res.stderr}"
    assert res.stdout.splitlines()[0] == "pid 1", res.stdout	# its own PID namespace
    client = (out / "client.out").read_text().splitlines()
    server = (out / "server.out").read_text().splitlines()
    eph = re.sub(r"(connected local \S+) \d+", r"\1 EPH", "\n".join(client))
    srv = re.sub(r"(peer \S+) \d+$", r"\1 EPH", "\n".join(server), flags=re.M)
    return eph + "\n" + srv, read_stats(out / "client.stats")[1], \
        read_stats(out / "server.stats")[1]


def test_container_uses_the_hosts_daemon_through_bind_mounts(host_daemon, build_dir, tmp_path):
    (tmp_path / "plain").mkdir()
    (tmp_path / "shunt").mkdir()
    plain, _, _ = run_container("plain", host_daemon, build_dir, tmp_path / "plain")
    shunt, cstats, sstats = run_container("shunt", host_daemon, build_dir, tmp_path / "shunt")
    assert "reply C:hello" in plain and shunt == plain, f"plain:\n{plain}\nshunt:\n{shunt}"
    log = host_daemon.daemon_log.read_text(errors="replace")
    assert cstats.get("shm_connect") == 1 and sstats.get("shm_accept") == 1, \
        f"client {cstats}, server {sstats}\n{log[-3000:]}"
    assert cstats.get("fallback_nodaemon", 0) == 0
