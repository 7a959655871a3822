#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""memory: what a connection costs to keep at rest, kernel vs shunt, in one run.

For each size (default 1 KiB and 256 KiB) and mode (kernel, then shunt:
both ends under `shunt run --` with a private SHUNT_SOCKET), `conn sink`
serves and `conn hold` opens --count connections (default 2,000) that each
carry the size once each way and then stay open, idle. Before the client
connects and after --settle seconds at rest, we take:

  - the Pss (/proc/PID/smaps_rollup) of the client, the server and, under
    shunt, every shuntd listening at our private socket;
  - the kernel's socket memory of the run's connections: for every TCP
    socket on the server's port (`ss -tmn`), rmem_alloc + wmem_queued +
    fwd_alloc (what sockstat's "mem" counts, without other processes'
    sockets); sockstat's own count is kept too, for reference;

and report the growth per connection. Informative only (not in the
total): page tables (VmPTE), the kernel's slab (/proc/meminfo, the whole
machine's: other load shows there too) and, under shunt, the resident pages
of the circuits' mappings; the total is sampled over time so the plot shows
memory leaving.

A shunt run counts only if it really used shared memory: the client's
SHUNT_STATS must say every connect went over a circuit, and both programs
must map one "shunt-circuit" memfd per connection, or a "shunt-channel"
memfd whose slots hold them (docs/connect.md).

Writes memory.json and memory.png under --out (bench/results/<UTC time>/).
Nothing here is a test; the issue 12 target (at most 12 KiB per connection
more than the kernel) is printed as PASS/FAIL for the reader.

    /usr/bin/python3 bench/memory.py [--count 2000] [--sizes 1k,256k] [--settle 8]
"""

import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile
import time

from core import (REPO, free_tcp_port, log, loud, mode_envs, parse_size, read_stats, stop,
                  stop_daemon, unix_listener_pids, write_doc)
from machine import git_info, machine_info

TARGET_KIB = 12.0
SAMPLE_S = 0.5
START_TIMEOUT_S = 30
CIRCUIT_NAME = "shunt-circuit"
CHANNEL_NAME = "shunt-channel"


def fmt_size(n):
    return "%d KiB" % (n >> 10) if n >= 1024 and n % 1024 == 0 else "%d B" % n


def rollup(pid):
    """Pss of @pid in KiB (smaps_rollup), or None if it is gone."""
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def status_kib(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def circuits(pid):
    """(mappings of circuits, mappings of channels, their resident KiB) in
    @pid's smaps."""
    n, chans, rss, inside = 0, 0, 0, False
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
                    inside = CIRCUIT_NAME in line or CHANNEL_NAME in line
                    n += CIRCUIT_NAME in line
                    chans += CHANNEL_NAME in line
                elif inside and line.startswith("Rss:"):
                    rss += int(line.split()[1])
    except OSError:
        return None, None, None
    return n, chans, rss


SKMEM_RE = re.compile(r"skmem:\(([^)]*)\)")


def socket_kib(port):
    """The kernel's buffer memory of every TCP socket on @port, in KiB, and
    how many sockets that was."""
    p = subprocess.run(["ss", "-tmnH", "state", "all",
                        "( sport = :%d or dport = :%d )" % (port, port)],
                       capture_output=True, text=True, timeout=60)
    total, socks = 0, 0
    for m in SKMEM_RE.finditer(p.stdout):
        fields = {}
        for item in m.group(1).split(","):
            k = item.rstrip("0123456789")
            fields[k] = int(item[len(k):] or 0)
        total += fields.get("r", 0) + fields.get("w", 0) + fields.get("f", 0)
        socks += 1
    return total / 1024.0, socks


def sockstat_kib():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                parts = line.split()
                return int(parts[parts.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") / 1024.0
    return None


def fd_count(pid):
    try:
        return len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        return None


def meminfo_kib(field):
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def wait_file(path, procs, what, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError("%s: a process exited (%s): %s" % (
                    what, p.args, p.stderr.read()[-600:] if p.stderr else ""))
        if time.monotonic() > deadline:
            raise RuntimeError("%s: not ready after %d s" % (what, timeout))
        time.sleep(0.01)


def wait_gate(pid, timeout=START_TIMEOUT_S):
    """Wait until @pid blocks in read(0, ...): past its start, at the gate."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open("/proc/%d/syscall" % pid) as f:
                if f.read().startswith("0 0x0 "):
                    return
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError("the client never reached its gate")


class Run:
    """One (mode, size) measurement."""

    def __init__(self, args, tmp, mode, size, seq):
        self.args, self.mode, self.size = args, mode, size
        self.conn = os.path.join(args.build, "bench", "conn")
        self.shunt = os.path.join(args.build, "src", "cli", "shunt")
        kernel_env, shunt_env = mode_envs(tmp)
        self.sock = shunt_env["SHUNT_SOCKET"]
        self.tmp = tmp
        self.seq = seq
        if mode == "kernel":
            self.env, self.pre = kernel_env, []
        else:
            self.stats = os.path.join(tmp, "stats.%d" % seq)
            self.env = dict(shunt_env, SHUNT_STATS=self.stats)
            self.pre = [self.shunt, "run", "--"]

    def daemons(self):
        return sorted(unix_listener_pids(self.sock)) if self.mode == "shunt" else []

    def sample(self, pids):
        pss = {k: rollup(p) for k, p in pids.items() if not k.startswith("shuntd")}
        pss["shuntd"] = sum(rollup(p) or 0 for p in self.daemons())
        pte = {k: status_kib(p, "VmPTE") for k, p in pids.items()}
        pte["shuntd"] = sum(status_kib(p, "VmPTE") or 0 for p in self.daemons())
        fds = {k: fd_count(p) for k, p in pids.items()}
        fds["shuntd"] = sum(fd_count(p) or 0 for p in self.daemons())
        sk, nsock = socket_kib(self.port)
        return {"t": time.monotonic(), "pss_kib": pss, "pte_kib": pte, "sock_kib": sk,
                "sockets": nsock, "sockstat_kib": sockstat_kib(),
                "slab_kib": meminfo_kib("Slab"), "fds": fds}

    def growth(self, before, after):
        pss = {k: after["pss_kib"][k] - before["pss_kib"][k] for k in after["pss_kib"]}
        pte = {k: (after["pte_kib"][k] or 0) - (before["pte_kib"][k] or 0)
               for k in after["pte_kib"]}
        n = self.args.count
        total = sum(pss.values()) + after["sock_kib"] - before["sock_kib"]
        return {"pss_kib": pss, "sock_kib": after["sock_kib"] - before["sock_kib"],
                "sockstat_kib": after["sockstat_kib"] - before["sockstat_kib"],
                "pte_kib": pte, "total_kib": total,
                "slab_kib": after["slab_kib"] - before["slab_kib"],
                "slab_per_conn_kib": (after["slab_kib"] - before["slab_kib"]) / n,
                "per_conn_kib": total / n,
                "pss_per_conn_kib": {k: v / n for k, v in pss.items()},
                "sock_per_conn_kib": (after["sock_kib"] - before["sock_kib"]) / n,
                "pte_per_conn_kib": sum(pte.values()) / n}

    def go(self):
        a = self.args
        self.port = free_tcp_port()
        ready_s = os.path.join(self.tmp, "sink.%d" % self.seq)
        ready_c = os.path.join(self.tmp, "hold.%d" % self.seq)
        server = client = None
        try:
            server = subprocess.Popen(self.pre + [self.conn, "sink", "--port", str(self.port),
                                                  "--ready-file", ready_s],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, env=self.env, start_new_session=True)
            wait_file(ready_s, [server], "server", START_TIMEOUT_S)
            client = subprocess.Popen(self.pre + [self.conn, "hold", "--port", str(self.port),
                                                  "--count", str(a.count), "--bytes",
                                                  str(self.size), "--ready-file", ready_c,
                                                  "--gate", "1"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=self.env,
                                      start_new_session=True)
            wait_gate(client.pid)
            pids = {"client": client.pid, "server": server.pid}
            time.sleep(0.2)
            before = self.sample(pids)
            client.stdin.write("g")
            client.stdin.flush()
            t0 = time.monotonic()
            wait_file(ready_c, [server, client], "client", a.timeout)
            t_ready = time.monotonic()
            series = []
            while True:
                s = self.sample(pids)
                s["since_ready_s"] = round(s["t"] - t_ready, 3)
                series.append(s)
                if s["t"] - t_ready >= a.settle:
                    break
                time.sleep(SAMPLE_S)
            after = series[-1]
            rec = {"mode": self.mode, "size": self.size, "count": a.count,
                   "connect_and_carry_s": round(t_ready - t0, 3),
                   "before": before, "after": after,
                   "series": [{"since_ready_s": s["since_ready_s"],
                               "per_conn_kib": self.growth(before, s)["per_conn_kib"]}
                              for s in series]}
            rec.update(self.growth(before, after))
            if self.mode == "shunt":
                rec["circuits"] = {k: dict(zip(("mapped", "channels", "rss_kib"), circuits(p)))
                                   for k, p in pids.items()}
            # Closing its stdin (communicate does) lets the client close them all and exit.
            out, err = client.communicate(timeout=120)
            rec["client_rc"] = client.returncode
            if client.returncode != 0:
                raise RuntimeError("client exited %d: %s" % (client.returncode, err[-600:]))
            if self.mode == "shunt":
                rec["on_shm"] = self.check_shm(rec)
            return rec
        finally:
            for p in (client, server):
                if p is not None:
                    stop(p)
            if self.mode == "shunt":
                stop_daemon(self.sock)

    def check_shm(self, rec):
        """Every connection a circuit: the client's SHUNT_STATS, and one
        circuit mapped per connection in both programs."""
        stats = read_stats(self.stats) or []
        shm = sum(s.get("shm_connect", 0) for s in stats)
        kern = sum(s.get("kernel_connect", 0) + s.get("fallback_policy", 0) +
                   s.get("fallback_error", 0) for s in stats)
        rec["shunt_stats"] = stats
        mapped = [rec["circuits"][k]["mapped"] for k in ("client", "server")]
        chans = [rec["circuits"][k]["channels"] for k in ("client", "server")]
        # A circuit mapped per connection, or channels whose slots hold them.
        ok = shm == self.args.count and kern == 0 and \
            all(m == self.args.count or (c or 0) > 0 for m, c in zip(mapped, chans))
        if not ok:
            loud("shunt run did not use shared memory for every connection: shm_connect %d, "
                 "kernel %d, circuits mapped %s, channels %s (want %d circuits or a channel)"
                 % (shm, kern, mapped, chans, self.args.count))
        return ok


def plot(path, runs, sizes, count):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_bar, ax_t) = plt.subplots(1, 2, figsize=(13, 5))
    modes = ["kernel", "shunt"]
    colors = {"kernel": "#1f77b4", "shunt": "#d62728"}
    width = 0.38
    for i, mode in enumerate(modes):
        vals = []
        for size in sizes:
            r = [x for x in runs if x["mode"] == mode and x["size"] == size]
            vals.append(r[0]["per_conn_kib"] if r else 0)
        xs = [j + (i - 0.5) * width for j in range(len(sizes))]
        bars = ax_bar.bar(xs, vals, width, label=mode, color=colors[mode])
        for b, v in zip(bars, vals):
            ax_bar.annotate("%.1f" % v, (b.get_x() + b.get_width() / 2, v),
                            ha="center", va="bottom", fontsize=9)
    for j, size in enumerate(sizes):
        k = [x for x in runs if x["mode"] == "kernel" and x["size"] == size]
        if k:
            lim = k[0]["per_conn_kib"] + TARGET_KIB
            ax_bar.plot([j - 0.45, j + 0.45], [lim, lim], "k--", lw=1)
    ax_bar.set_xticks(range(len(sizes)))
    ax_bar.set_xticklabels(["%s each way once" % fmt_size(s) for s in sizes])
    ax_bar.set_ylabel("KiB per connection at rest")
    ax_bar.set_title("%d connections at rest (dashed: kernel + %g KiB)" % (count, TARGET_KIB))
    ax_bar.legend()
    markers = "osD^v"
    for r in runs:
        xs = [p["since_ready_s"] for p in r["series"]]
        ys = [p["per_conn_kib"] for p in r["series"]]
        ax_t.plot(xs, ys, "-" if r["mode"] == "shunt" else ":", color=colors[r["mode"]],
                  marker=markers[sizes.index(r["size"]) % len(markers)], ms=4,
                  label="%s, %s" % (r["mode"], fmt_size(r["size"])))
    ax_t.set_yscale("symlog", linthresh=1)
    ax_t.set_xlabel("seconds since the last connection carried its data")
    ax_t.set_ylabel("KiB per connection")
    ax_t.set_title("memory after the data left")
    ax_t.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--sizes", default="1k,256k")
    ap.add_argument("--modes", default="kernel,shunt")
    ap.add_argument("--settle", type=float, default=8.0,
                    help="seconds at rest before the measurement (default 8: shunt gives "
                         "a ring's last page back 5.5 to 6 s after its last send)")
    ap.add_argument("--timeout", type=float, default=300,
                    help="most seconds the client may take to connect and carry its data")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.build = os.path.abspath(args.build)
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")
    out_dir = args.out or os.path.join(REPO, "bench", "results",
                                       datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ"))
    os.makedirs(out_dir, exist_ok=True)
    runs, seq = [], 0
    with tempfile.TemporaryDirectory(prefix="shunt-memory-") as tmp:
        for i, size in enumerate(sizes):
            # Alternate which mode goes first, so neither always meets a warmer machine.
            order = modes if i % 2 == 0 else list(reversed(modes))
            for mode in order:
                seq += 1
                log("%s, %d connections, %s each way once ..." % (mode, args.count,
                                                                  fmt_size(size)))
                rec = Run(args, tmp, mode, size, seq).go()
                runs.append(rec)
                log("  %.1f KiB per connection (Pss %s, sockets %.2f, page tables %.2f)" % (
                    rec["per_conn_kib"],
                    ", ".join("%s %.2f" % kv for kv in sorted(rec["pss_per_conn_kib"].items())),
                    rec["sock_per_conn_kib"], rec["pte_per_conn_kib"]))
    print("\nKiB per connection at rest: Pss of each process, the sockets' buffers;"
          " PTE and slab are informative, not in the total")
    print("%-8s %-8s %12s %10s %10s %10s %10s %8s %8s" % (
        "size", "mode", "KiB/conn", "client", "server", "shuntd", "sockets", "PTE", "slab"))
    verdicts = []
    for size in sizes:
        for mode in modes:
            for r in [x for x in runs if x["mode"] == mode and x["size"] == size]:
                p = r["pss_per_conn_kib"]
                print("%-8s %-8s %12.2f %10.2f %10.2f %10.2f %10.2f %8.2f %8.2f%s" % (
                    fmt_size(size), mode, r["per_conn_kib"], p["client"], p["server"],
                    p.get("shuntd", 0), r["sock_per_conn_kib"], r["pte_per_conn_kib"],
                    r["slab_per_conn_kib"],
                    "" if r.get("on_shm", True) else "  NOT ON SHM"))
        k = [x for x in runs if x["mode"] == "kernel" and x["size"] == size]
        s = [x for x in runs if x["mode"] == "shunt" and x["size"] == size]
        if k and s:
            over = s[0]["per_conn_kib"] - k[0]["per_conn_kib"]
            ok = over <= TARGET_KIB and s[0].get("on_shm")
            verdicts.append({"size": size, "over_kernel_kib": over, "pass": bool(ok)})
            print("target %s: shunt %.2f KiB per connection over the kernel (at most %g): %s"
                  % (fmt_size(size), over, TARGET_KIB, "PASS" if ok else "FAIL"))
    doc = {"machine": machine_info(), "git": git_info(REPO), "args": vars(args),
           "runs": runs, "targets": verdicts}
    path = write_doc(out_dir, "memory", doc)
    try:
        plot(os.path.join(out_dir, "memory.png"), runs, sizes, args.count)
    except ImportError as e:
        loud("no plot: %s" % e)
    log("wrote %s" % path)
    return 0 if all(r.get("on_shm", True) for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
