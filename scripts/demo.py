#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The main job, side by side: real, unmodified Debian programs talking TCP on
this host, first on the kernel, then under `shunt run`, with the round-trip
time and throughput of both and the shared-memory counters that prove where
the bytes went. Run through scripts/demo, which installs and builds first."""

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("SHUNT_BUILD_DIR", REPO / "build"))
SHUNT = BUILD / "src" / "cli" / "shunt"


def tcp_ports(listening_only):
    """Local ports of this host's TCP sockets (/proc/net/tcp and tcp6), or of
    its listening ones only."""
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if not listening_only or fields[3] == "0A":
                        ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    return ports


class Runner:
    """Starts server/client pairs plain or under shunt, pinned a core apart."""

    def __init__(self, workdir):
        self.workdir = pathlib.Path(workdir)
        self.socket = str(self.workdir / "shuntd.sock")
        self.stats = self.workdir / "stats.jsonl"
        # Below the ephemeral range (32768 up), where a connection of
        # anyone's may hold the port a server here wants.
        self.port = 20000 + os.getpid() % 10000
        ncpu = os.cpu_count() or 1
        self.pin = (["taskset", "-c", "0"], ["taskset", "-c", "1"]) if ncpu >= 2 else ([], [])

    def env(self, shunt):
        env = {k: v for k, v in os.environ.items()
               if k != "LD_PRELOAD" and not k.startswith("SHUNT_")}
        if shunt:
            env["SHUNT_SOCKET"] = self.socket
            env["SHUNT_STATS"] = str(self.stats)
        return env

    def wrap(self, argv, shunt, side):
        pre = [str(SHUNT), "run", "--"] if shunt else []
        return self.pin[side] + pre + argv

    def pair(self, server, client, shunt, timeout=60):
        """Run a server in the background and a client to completion."""
        taken = tcp_ports(False)
        self.port += 1
        while self.port in taken:
            self.port += 1
        port = str(self.port)
        srv = subprocess.Popen(self.wrap([a.replace("{port}", port) for a in server], shunt, 0),
                               env=self.env(shunt), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, cwd=self.workdir)
        try:
            # The client connects once the server listens, not after a guess.
            deadline = time.monotonic() + 10
            while self.port not in tcp_ports(True):
                if srv.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{server[0]} did not listen on port {port}")
                time.sleep(0.01)
            out = subprocess.run(self.wrap([a.replace("{port}", port) for a in client], shunt, 1),
                                 env=self.env(shunt), capture_output=True, text=True,
                                 timeout=timeout, cwd=self.workdir)
            srv.wait(timeout=10)
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
        return out

    def shm_bytes(self):
        total = 0
        if self.stats.exists():
            for line in self.stats.read_text().splitlines():
                total += json.loads(line).get("shm_tx_bytes", 0)
        return total


def netpipe(r, size, shunt):
    """NPtcp ping-pong of one message size: (round trip seconds, MB/s)."""
    out = r.workdir / "np.out"
    out.unlink(missing_ok=True)
    res = r.pair(["NPtcp", "-P", "{port}", "-p", "0", "-l", str(size), "-u", str(size)],
                 ["NPtcp", "-h", "127.0.0.1", "-P", "{port}", "-p", "0", "-l", str(size),
                  "-u", str(size), "-o", str(out)], shunt)
    if not out.exists():
        raise RuntimeError(f"NPtcp size {size} produced nothing: {res.stdout}{res.stderr}")
    _, mbps, one_way = out.read_text().split()[:3]
    return 2 * float(one_way), float(mbps) / 8


def iperf(r, seconds, shunt):
    """iperf3, one TCP stream: Gbit/s at the receiver."""
    res = r.pair(["iperf3", "-s", "-1", "-p", "{port}"],
                 ["iperf3", "-c", "127.0.0.1", "-p", "{port}", "-t", str(seconds), "-J"],
                 shunt, timeout=seconds + 30)
    data = json.loads(res.stdout)
    return data["end"]["sum_received"]["bits_per_second"] / 1e9


def human_time(s):
    return f"{s * 1e6:9.2f} µs"


def human_size(n):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=int, default=3, help="iperf3 duration (default 3)")
    args = ap.parse_args()
    for tool in ("NPtcp", "iperf3", "taskset"):
        if not shutil.which(tool):
            sys.exit(f"demo: {tool} is missing; run scripts/setup")
    if not SHUNT.exists():
        sys.exit(f"demo: {SHUNT} is missing; run scripts/setup")

    with tempfile.TemporaryDirectory(prefix="shunt-demo-") as tmp:
        r = Runner(tmp)
        daemon = subprocess.Popen([str(SHUNT), "daemon", "--socket", r.socket],
                                  stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                if os.path.exists(r.socket):
                    break
                time.sleep(0.02)
            print("shunt demo: the same unmodified programs on the kernel, then under "
                  "`shunt run`\n")
            print("NetPIPE (NPtcp) ping-pong between two processes, one per core")
            print(f"  {'message':>8}  {'kernel RTT':>12} {'shunt RTT':>12} {'speedup':>8}"
                  f"  {'kernel MB/s':>12} {'shunt MB/s':>12}")
            for size in (8, 1024, 65536, 1 << 20):
                k_rtt, k_bw = netpipe(r, size, False)
                s_rtt, s_bw = netpipe(r, size, True)
                print(f"  {human_size(size):>8}  {human_time(k_rtt):>12} {human_time(s_rtt):>12}"
                      f" {k_rtt / s_rtt:7.1f}x  {k_bw:12.0f} {s_bw:12.0f}")
            print(f"\niperf3, one TCP stream for {args.seconds} s")
            k = iperf(r, args.seconds, False)
            s = iperf(r, args.seconds, True)
            print(f"  kernel {k:6.1f} Gbit/s    shunt {s:6.1f} Gbit/s    {s / k:.1f}x")
            print(f"\nUnder shunt, {r.shm_bytes() / 1e9:.1f} GB went through shared memory "
                  "(SHUNT_STATS counters of every process);")
            print("the kernel's TCP stack carried none of those bytes. "
                  "See `shunt status` while a program runs.")
        finally:
            daemon.terminate()
            daemon.wait()


if __name__ == "__main__":
    main()
