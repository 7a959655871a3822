#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""connect: what a connection costs to make and to end, kernel vs shunt in
one run (bench/conn.c does the work; medians of --repeat runs, the kernel's
and shunt's alternating).

Shapes:
  loop     one client: socket, connect, write 1 byte, read the echo, close,
           --count times, against one server that accepts, echoes 1 byte
           and closes; connect, first echo and close timed apart.
  burst    one client opens --burst connections at once (each echoes once),
           then closes them all.
  prefork  4 client processes against 4 forked workers accepting on one
           listener, each client --count connections: connections/s.
  workers  one client looping as above against the 4 workers, 3 of whom
           are asleep in accept() at any time (a prefork server at low
           load): time per connection, where a wait that woke every worker
           for each connection would show.
  spawn    a process per connection (a health check, a CGI client): one
           parent starts --spawn children one after another, each connects
           once (and echoes 1 byte) and exits: time per process, start-up
           of the library, its HELLO and its channel included, and the
           CPU time per process: of the whole machine (/proc/stat), and
           apart, of the children (their rusage), of the server's
           processes and of shuntd (/proc/PID/task/TID/schedstat).
  forked   one client looping as in `loop` (--spawn connections) against a
           server that forks a child per connection, which closes the
           listener, answers and exits (PostgreSQL's postmaster, inetd):
           time per connection, the fork of a process under shunt and its
           child's session included.
  exec     the floor under spawn: the same parent and children, but each
           child makes no connection and exits (a shell script's commands):
           what loading the library costs a process that never uses a
           socket; time and CPU per process as for spawn.
  memory   memory per connection at rest: bench/memory.py (2,000
           connections after 1 KiB and after 256 KiB each way), its
           memory.json and memory.png in the same directory.

Writes connect.json and connect.png under --out (bench/results/<UTC>/).
Benchmarks are not tests: targets (issue 12) print as PASS/FAIL only.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from core import (REPO, free_tcp_port, last_json, log, mode_envs, read_stats, spawn, stop,
                  stop_daemon, unix_listener_pids, wait_ready, write_doc)
from machine import git_info, machine_info

SHAPES = ["loop", "burst", "prefork", "workers", "forked", "spawn", "exec", "memory"]
PREFORK = 4


class Bench:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.conn = os.path.join(args.build, "bench", "conn")
        self.shunt = os.path.join(args.build, "src", "cli", "shunt")
        self.kernel_env, self.shunt_env = mode_envs(tmp)
        self.seq = 0

    def session(self, mode, workers, clients, connects=True, forked=False):
        """A server with @workers, then @clients (argv lists) at once; their
        JSON reports, and under shunt whether every connection used shared
        memory (SHUNT_STATS of both sides; None when @connects is false:
        the clients make no connection)."""
        self.seq += 1
        env, pre = dict(self.kernel_env), []
        stats = os.path.join(self.tmp, "stats.%d" % self.seq)
        if mode == "shunt":
            env = dict(self.shunt_env, SHUNT_STATS=stats)
            pre = [self.shunt, "run", "--"]
        port = free_tcp_port()
        ready = os.path.join(self.tmp, "ready.%d" % self.seq)
        srv = spawn(pre + [self.conn, "server", "--port", str(port), "--workers", str(workers),
                           "--fork", "1" if forked else "0", "--ready-file", ready], env)
        procs = []
        try:
            wait_ready(ready, srv, "conn server")
            # The server's processes (its workers too) and shuntd's, for their CPU time.
            servers = descendants(srv.pid)
            daemons = (unix_listener_pids(self.shunt_env["SHUNT_SOCKET"])
                       if mode == "shunt" else set())
            server0, daemon0 = run_ns(servers), run_ns(daemons)
            busy0 = busy_s()
            t0 = time.monotonic()
            procs = [spawn(pre + [self.conn] + c + ["--port", str(port)], env) for c in clients]
            recs = []
            for p in procs:
                out, err = p.communicate(timeout=900)
                rec = last_json(out)
                if p.returncode or not rec:
                    raise RuntimeError("conn client failed: %s" % err.strip()[-400:])
                recs.append(rec)
            wall = time.monotonic() - t0
            self.last_busy_s = busy_s() - busy0
            self.last_server_s = (run_ns(servers) - server0) / 1e9
            self.last_daemon_s = (run_ns(daemons) - daemon0) / 1e9
        finally:
            for p in procs:
                stop(p)
            stop(srv)
        on_shm = None
        if mode == "shunt" and connects:
            st = read_stats(stats) or []
            made = sum(int(c[c.index("--count") + 1]) for c in clients)
            shm = sum(s.get("shm_connect", 0) for s in st)
            on_shm = shm >= made and not any(s.get("kernel_connect") for s in st)
            if not on_shm:
                # Why some went to the kernel: the library's reasons, summed.
                why = {}
                for s in st:
                    for k, v in s.items():
                        if (k.startswith("fallback_") or k in ("kernel_unlistened",
                                                                "late_waits")) and v:
                            why[k] = why.get(k, 0) + v
                print("shunt run not all on shared memory: %d of %d; %s" % (shm, made, why),
                      file=sys.stderr)
        return recs, wall, on_shm


def median(xs):
    return statistics.median(xs) if xs else None


def descendants(pid):
    """@pid and the processes under it, as /proc lists their children."""
    pids, i = [pid], 0
    while i < len(pids):
        try:
            with open("/proc/%d/task/%d/children" % (pids[i], pids[i])) as f:
                pids += [int(x) for x in f.read().split()]
        except OSError:
            pass
        i += 1
    return pids


def run_ns(pids):
    """Nanoseconds the threads of @pids have run so far (/proc/PID/task/TID/schedstat)."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir("/proc/%d/task" % pid)
        except OSError:
            continue
        for tid in tids:
            try:
                with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return total


def busy_s():
    """Seconds all CPUs together spent busy (not idle or waiting for I/O),
    from /proc/stat: what a run costs the machine, shuntd and servers
    included."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def alternated(args, shape_fn, b, modes):
    """--repeat runs of each mode's one run (shape_fn(b, args, mode) gives
    it and the keys of its figures), the modes alternating run by run so that
    a host that slows down or speeds up meanwhile weighs on both alike: per
    mode, the medians of the keys, whether every shunt run used shared
    memory, and the runs."""
    plans = {m: shape_fn(b, args, m) for m in modes}
    runs = {m: [] for m in modes}
    for _ in range(args.repeat):
        for m in modes:
            runs[m].append(plans[m][0]())
    out = {}
    for m in modes:
        keys = plans[m][1]
        out[m] = {k: median([r[k] for r in runs[m]]) for k in keys}
        shm = [r["on_shm"] for r in runs[m]]
        out[m]["on_shm"] = all(shm) if m == "shunt" and None not in shm else None
        out[m]["runs"] = runs[m]
    return out


def do_loop(b, args, mode):
    def once():
        recs, _, on_shm = b.session(mode, 1, [["loop", "--count", str(args.count)]])
        r = recs[0]
        return {"per_conn_us": r["per_conn_us"], "connect_us": r["connect"]["mean_us"],
                "echo_us": r["echo"]["mean_us"], "close_us": r["close"]["mean_us"],
                "on_shm": on_shm}
    return once, ("per_conn_us", "connect_us", "echo_us", "close_us")


def do_burst(b, args, mode):
    def once():
        recs, _, on_shm = b.session(mode, 1, [["burst", "--count", str(args.burst)]])
        r = recs[0]
        return {"open_s": r["open_s"], "close_s": r["close_s"], "seconds": r["seconds"],
                "on_shm": on_shm}
    return once, ("open_s", "close_s", "seconds")


def do_prefork(b, args, mode):
    def once():
        clients = [["loop", "--count", str(args.count)] for _ in range(PREFORK)]
        _, wall, on_shm = b.session(mode, PREFORK, clients)
        return {"conns_per_s": PREFORK * args.count / wall, "wall_s": wall, "on_shm": on_shm}
    return once, ("conns_per_s",)


def do_workers(b, args, mode):
    def once():
        recs, _, on_shm = b.session(mode, PREFORK, [["loop", "--count", str(args.count)]])
        return {"per_conn_us": recs[0]["per_conn_us"], "on_shm": on_shm}
    return once, ("per_conn_us",)


def do_forked(b, args, mode):
    def once():
        recs, _, on_shm = b.session(mode, 1, [["loop", "--count", str(args.spawn)]],
                                    forked=True)
        r = recs[0]
        return {"per_conn_us": r["per_conn_us"], "connect_us": r["connect"]["mean_us"],
                "echo_us": r["echo"]["mean_us"], "close_us": r["close"]["mean_us"],
                "cpu_per_conn_us": b.last_busy_s * 1e6 / args.spawn,
                "server_cpu_us": b.last_server_s * 1e6 / args.spawn,
                "shuntd_cpu_us": b.last_daemon_s * 1e6 / args.spawn, "on_shm": on_shm}
    return once, ("per_conn_us", "connect_us", "echo_us", "close_us", "cpu_per_conn_us",
                  "server_cpu_us", "shuntd_cpu_us")


def spawned(b, args, mode, connect):
    """--spawn processes one after another, each connecting once (or, without
    @connect, not at all): time and CPU per process."""
    def once():
        argv = ["spawn", "--count", str(args.spawn)] + ([] if connect else ["--connect", "0"])
        recs, _, on_shm = b.session(mode, 1, [argv], connects=connect)
        return {"per_process_us": recs[0]["per_process_us"],
                "cpu_per_process_us": b.last_busy_s * 1e6 / args.spawn,
                "child_cpu_us": recs[0]["child_cpu_us"],
                "server_cpu_us": b.last_server_s * 1e6 / args.spawn,
                "shuntd_cpu_us": b.last_daemon_s * 1e6 / args.spawn, "on_shm": on_shm}
    return once, ("per_process_us", "cpu_per_process_us", "child_cpu_us", "server_cpu_us",
                  "shuntd_cpu_us")


def do_spawn(b, args, mode):
    return spawned(b, args, mode, True)


def do_exec(b, args, mode):
    return spawned(b, args, mode, False)


def do_memory(args, out):
    """bench/memory.py, run as its own program; its verdicts and per-connection figures."""
    res = subprocess.run([sys.executable, os.path.join(REPO, "bench", "memory.py"),
                          "--build", args.build, "--out", out], text=True)
    try:
        with open(os.path.join(out, "memory.json")) as f:
            mem = json.load(f)
    except (OSError, ValueError):
        return {"error": "bench/memory.py wrote no memory.json (exit %d)" % res.returncode}
    return {"targets": mem["targets"],
            "per_conn_kib": {"%s %d" % (r["mode"], r["size"]): r["per_conn_kib"]
                             for r in mem["runs"]}}


def targets(doc):
    out = []

    def add(ok, text):
        out.append(("PASS" if ok else "FAIL") + "  " + text)

    if "loop" in doc:
        k, s = doc["loop"]["kernel"], doc["loop"]["shunt"]
        add(k["per_conn_us"] >= 3 * s["per_conn_us"],
            "loop: %.1f us per connection, kernel %.1f us: %.2fx faster (need >= 3x)" % (
                s["per_conn_us"], k["per_conn_us"], k["per_conn_us"] / s["per_conn_us"]))
    if "burst" in doc:
        k, s = doc["burst"]["kernel"], doc["burst"]["shunt"]
        add(s["seconds"] < k["seconds"], "burst of %d: %.3f s, kernel %.3f s" % (
            doc["args"]["burst"], s["seconds"], k["seconds"]))
    if "prefork" in doc:
        k, s = doc["prefork"]["kernel"], doc["prefork"]["shunt"]
        add(s["conns_per_s"] >= 2 * k["conns_per_s"],
            "prefork 4x4: %.0f conn/s, kernel %.0f: %.2fx (need >= 2x)" % (
                s["conns_per_s"], k["conns_per_s"], s["conns_per_s"] / k["conns_per_s"]))
    if "workers" in doc:
        k, s = doc["workers"]["kernel"], doc["workers"]["shunt"]
        add(s["per_conn_us"] <= k["per_conn_us"],
            "workers: one client against %d: %.1f us per connection, kernel %.1f us "
            "(need <= kernel)" % (PREFORK, s["per_conn_us"], k["per_conn_us"]))
    if "forked" in doc:
        k, s = doc["forked"]["kernel"], doc["forked"]["shunt"]
        add(s["per_conn_us"] <= k["per_conn_us"],
            "forked: a child forked per connection: %.0f us per connection, kernel %.0f us "
            "(need <= kernel); CPU of the whole machine %.0f us, kernel %.0f (the forking parent "
            "%.0f against %.0f, shuntd %.0f)" % (
                s["per_conn_us"], k["per_conn_us"], s["cpu_per_conn_us"], k["cpu_per_conn_us"],
                s["server_cpu_us"], k["server_cpu_us"], s["shuntd_cpu_us"]))
    for shape, what in (("spawn", "connects once"), ("exec", "makes no connection")):
        if shape in doc:
            k, s = doc[shape]["kernel"], doc[shape]["shunt"]
            add(s["per_process_us"] <= k["per_process_us"],
                "%s: %.0f us per process that %s, kernel %.0f us (need <= kernel); CPU of the "
                "whole machine %.0f us per process, kernel %.0f us (the child %.0f against "
                "%.0f, the server %.0f against %.0f, shuntd %.0f)" % (
                    shape, s["per_process_us"], what, k["per_process_us"],
                    s["cpu_per_process_us"], k["cpu_per_process_us"], s["child_cpu_us"],
                    k["child_cpu_us"], s["server_cpu_us"], k["server_cpu_us"],
                    s["shuntd_cpu_us"]))
    if "memory" in doc:
        for t in doc["memory"].get("targets", []):
            add(t["pass"], "memory at rest after %d B each way: %.2f KiB per connection more "
                "than the kernel (need <= 12)" % (t["size"], t["over_kernel_kib"]))
        if "error" in doc["memory"]:
            out.append("FAIL  memory: " + doc["memory"]["error"])
    for shape in SHAPES:
        if shape in doc and shape != "memory" and doc[shape]["shunt"].get("on_shm") is False:
            out.append("FAIL  %s: shunt runs did not all use shared memory" % shape)
    return out


def plot(doc, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib: no plot")
        return
    panels = [("loop", [("connect_us", "connect"), ("echo_us", "first echo"),
                        ("close_us", "close"), ("per_conn_us", "whole loop")], "us"),
              ("burst", [("open_s", "open"), ("close_s", "close")], "s"),
              ("prefork", [("conns_per_s", "connections/s")], "/s"),
              ("workers", [("per_conn_us", "per connection")], "us"),
              ("forked", [("per_conn_us", "per connection")], "us"),
              ("spawn", [("per_process_us", "per process")], "us"),
              ("exec", [("per_process_us", "per process")], "us")]
    panels = [p for p in panels if p[0] in doc]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), squeeze=False)
    for ax, (shape, metrics, unit) in zip(axes[0], panels):
        for i, mode in enumerate(("kernel", "shunt")):
            ax.bar([j + 0.4 * i for j in range(len(metrics))],
                   [doc[shape][mode][m] for m, _ in metrics], 0.4, label=mode,
                   color=("tab:blue", "tab:red")[i])
        ax.set_xticks([j + 0.2 for j in range(len(metrics))])
        ax.set_xticklabels([lab for _, lab in metrics], fontsize=8)
        ax.set_ylabel(unit)
        ax.set_title(shape)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--count", type=int, default=3000, help="connections per loop client")
    p.add_argument("--burst", type=int, default=10000, help="connections opened at once")
    p.add_argument("--spawn", type=int, default=500,
                   help="processes that connect once each (spawn), or not at all (exec); "
                        "connections to the forking server (forked)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--out")
    args = p.parse_args()
    args.shapes = args.shapes.split(",")
    out = args.out or os.path.join(REPO, "bench", "results",
                                   datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ"))
    os.makedirs(out, exist_ok=True)
    doc = {"machine": machine_info(), "git": git_info(REPO), "args": vars(args)}
    fns = {"loop": do_loop, "burst": do_burst, "prefork": do_prefork, "workers": do_workers,
           "forked": do_forked, "spawn": do_spawn, "exec": do_exec}
    with tempfile.TemporaryDirectory(prefix="shunt-connect-") as tmp:
        b = Bench(args, tmp)
        try:
            for shape in args.shapes:
                if shape == "memory":
                    doc["memory"] = do_memory(args, out)
                    continue
                doc[shape] = alternated(args, fns[shape], b, ("kernel", "shunt"))
                for mode in ("kernel", "shunt"):
                    log("%-8s %-7s %s" % (shape, mode, {k: (round(v, 3) if isinstance(v, float)
                                                           else v)
                                                       for k, v in doc[shape][mode].items()
                                                       if k != "runs"}))
        finally:
            stop_daemon(b.shunt_env["SHUNT_SOCKET"])
    doc["targets"] = targets(doc)
    for line in doc["targets"]:
        print(line)
    path = write_doc(out, "connect", doc)
    plot(doc, os.path.join(out, "connect.png"))
    log("wrote %s and connect.png" % path)


if __name__ == "__main__":
    sys.exit(main())
