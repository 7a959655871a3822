#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""busy: shunt against the kernel where spinning could lose, in one run.

Shapes (each kernel and shunt, same run, medians of --repeat runs):
  pairs      N ping-pong pairs (pp, 8 B, --count round trips each), unpinned,
             all at once: the whole run's time and every pair's round trip.
  echo       bench/echo_wait.py (100 connections, one message per round) with
             epoll, poll, select and blocking recv, both ends on one core, on
             two cores and unpinned; shunt also with SHUNT_SPIN_US=0 and 200
             (the round time must not grow with the spin budget).
  neighbour  one pp pair, unpinned, beside two CPU-bound busy loops.
  pinned     one pp pair pinned to two idle cores (bench/core.py's shape).

Writes busy.json and busy.png under --out (bench/results/<UTC time>/).
Nothing here is a test: no assertion fails a run; the targets of issue 11
are printed as PASS/FAIL for the reader.
"""

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

from core import (REPO, free_tcp_port, last_json, log, loud, mode_envs, read_stats, spawn,
                  stop, stop_daemon, wait_ready, write_doc)
from machine import git_info, machine_info

PAIRS = [1, 2, 4, 8, 32]
APIS = ["epoll", "poll", "select", "block"]
PLACEMENTS = {"one-core": (0, 0), "two-cores": (0, 1), "unpinned": (-1, -1)}


def shm_used(stats_path):
    """Whether every connect and accept of a shunt run went over shared memory."""
    stats = read_stats(stats_path)
    if stats is None:
        return False
    conn = sum(s.get("shm_connect", 0) for s in stats)
    acc = sum(s.get("shm_accept", 0) for s in stats)
    kern = sum(s.get("kernel_connect", 0) + s.get("fallback_policy", 0) +
               s.get("fallback_error", 0) for s in stats)
    return conn > 0 and acc > 0 and kern == 0


class Bench:
    def __init__(self, args, tmp):
        self.args = args
        self.tmp = tmp
        self.pp = os.path.join(args.build, "bench", "pp")
        self.shunt = os.path.join(args.build, "src", "cli", "shunt")
        self.kernel_env, self.shunt_env = mode_envs(tmp)
        self.seq = 0

    def env(self, mode, spin=None):
        if mode == "kernel":
            return dict(self.kernel_env), []
        self.seq += 1
        env = dict(self.shunt_env, SHUNT_STATS=os.path.join(self.tmp, "stats.%d" % self.seq))
        if spin is not None:
            env["SHUNT_SPIN_US"] = str(spin)
        return env, [self.shunt, "run", "--"]

    def run_pairs(self, mode, n, count, spin=None, neighbours=0):
        env, pre = self.env(mode, spin)
        servers, clients, hogs = [], [], []
        try:
            for _ in range(neighbours):
                hogs.append(spawn([sys.executable, "-c", "while True: pass"], self.kernel_env))
            ports = []
            for i in range(n):
                port = free_tcp_port()
                ready = os.path.join(self.tmp, "ready.%d.%d" % (self.seq, i))
                p = spawn(pre + [self.pp, "server", "--port", str(port), "--ready-file", ready],
                          env)
                servers.append(p)
                wait_ready(ready, p, "pp server")
                os.unlink(ready)
                ports.append(port)
            t0 = time.monotonic()
            for port in ports:
                clients.append(spawn(pre + [self.pp, "client", "--port", str(port), "--mode",
                                            "rtt", "--size", "8", "--count", str(count),
                                            "--warmup", "0"], env))
            rtts = []
            for c in clients:
                out, err = c.communicate(timeout=600)
                rec = last_json(out)
                if c.returncode or not rec:
                    raise RuntimeError("pp client failed: %s" % err.strip()[-400:])
                rtts.append(rec["rtt_ns"]["mean"] / 1000)
            wall = time.monotonic() - t0
        finally:
            for p in clients + servers + hogs:
                stop(p)
        on_shm = shm_used(env["SHUNT_STATS"]) if mode != "kernel" else None
        return {"wall_s": wall, "rtt_us": rtts, "on_shm": on_shm}

    def run_echo(self, mode, api, placement, spin=None):
        env, pre = self.env(mode, spin)
        scpu, ccpu = PLACEMENTS[placement]
        prog = [sys.executable, os.path.join(REPO, "bench", "echo_wait.py")]
        ready = os.path.join(self.tmp, "echo.ready.%d" % self.seq)
        port = free_tcp_port()
        common = ["--api", api, "--port", str(port), "--conns", "100"]
        srv = spawn(pre + prog + ["server", "--cpu", str(scpu), "--ready-file", ready] +
                    common, env)
        try:
            wait_ready(ready, srv, "echo server")
            os.unlink(ready)
            cli = spawn(pre + prog + ["client", "--cpu", str(ccpu), "--rounds",
                                      str(self.args.rounds)] + common, env)
            out, err = cli.communicate(timeout=600)
            rec = last_json(out)
            if cli.returncode or not rec:
                raise RuntimeError("echo client failed: %s" % err.strip()[-400:])
            srv.wait(timeout=10)
        finally:
            stop(srv)
        rec["on_shm"] = shm_used(env["SHUNT_STATS"]) if mode != "kernel" else None
        return rec


def median_of(runs, key):
    return statistics.median(r[key] for r in runs)


def repeat(n, fn, *a, **kw):
    runs = []
    for _ in range(n):
        runs.append(fn(*a, **kw))
    return runs


def shunt_modes(args):
    """(label, mode, SHUNT_SPIN_US) of every series measured."""
    modes = [("kernel", "kernel", None), ("shunt", "shunt", None)]
    for s in args.spins:
        modes.append(("shunt spin=%d" % s, "shunt", s))
    return modes


def do_pairs(b, args, doc):
    res = doc["pairs"] = {}
    for n in args.pairs:
        for label, mode, spin in shunt_modes(args):
            runs = repeat(args.repeat, b.run_pairs, mode, n, args.count, spin)
            r = {"runs": runs, "wall_s": median_of(runs, "wall_s"),
                 "worst_rtt_us": statistics.median(max(x["rtt_us"]) for x in runs),
                 "best_rtt_us": statistics.median(min(x["rtt_us"]) for x in runs),
                 "on_shm": all(x["on_shm"] for x in runs) if mode != "kernel" else None}
            res.setdefault(str(n), {})[label] = r
            log("pairs N=%-2d %-14s whole %.3f s, pair rtt %.1f..%.1f us%s" % (
                n, label, r["wall_s"], r["best_rtt_us"], r["worst_rtt_us"],
                "" if r["on_shm"] in (None, True) else "  NOT ON SHM"))


def do_echo(b, args, doc):
    res = doc["echo"] = {}
    for api in args.apis:
        for placement in args.placements:
            for label, mode, spin in shunt_modes(args):
                runs = repeat(args.repeat, b.run_echo, mode, api, placement, spin)
                r = {"runs": runs, "mean_us": median_of(runs, "mean_us"),
                     "p99_us": median_of(runs, "p99_us"),
                     "on_shm": all(x["on_shm"] for x in runs) if mode != "kernel" else None}
                res.setdefault(api, {}).setdefault(placement, {})[label] = r
                log("echo %-6s %-9s %-14s round %.1f us (p99 %.1f)%s" % (
                    api, placement, label, r["mean_us"], r["p99_us"],
                    "" if r["on_shm"] in (None, True) else "  NOT ON SHM"))


def do_single(b, args, doc, name, neighbours, pinned):
    res = doc[name] = {}
    for label, mode, spin in shunt_modes(args)[:2] if pinned else shunt_modes(args):
        if pinned:
            runs = []
            for _ in range(args.repeat):
                runs.append(pinned_pair(b, mode))
        else:
            runs = repeat(args.repeat, b.run_pairs, mode, 1, args.count, spin,
                          neighbours=neighbours)
        r = {"runs": runs, "rtt_us": statistics.median(x["rtt_us"][0] for x in runs)}
        res[label] = r
        log("%-9s %-14s rtt %.2f us" % (name, label, r["rtt_us"]))


def pinned_pair(b, mode):
    env, pre = b.env(mode)
    port = free_tcp_port()
    ready = os.path.join(b.tmp, "pin.ready.%d" % b.seq)
    srv = spawn(pre + [b.pp, "server", "--port", str(port), "--cpu", "0", "--ready-file",
                       ready], env)
    try:
        wait_ready(ready, srv, "pp server")
        os.unlink(ready)
        cli = spawn(pre + [b.pp, "client", "--port", str(port), "--cpu", "1", "--mode", "rtt",
                           "--size", "8", "--duration", "0.5", "--warmup", "0.1"], env)
        out, err = cli.communicate(timeout=60)
        rec = last_json(out)
        if cli.returncode or not rec:
            raise RuntimeError("pp client failed: %s" % err.strip()[-400:])
    finally:
        stop(srv)
    return {"rtt_us": [rec["rtt_ns"]["p50"] / 1000],
            "on_shm": shm_used(env["SHUNT_STATS"]) if mode != "kernel" else None}


def targets(doc):
    """Issue 11's targets, as PASS/FAIL lines for the reader."""
    out = []

    def add(ok, text):
        out.append(("PASS" if ok else "FAIL") + "  " + text)

    for n, r in sorted(doc.get("pairs", {}).items(), key=lambda x: int(x[0])):
        k, s = r["kernel"], r["shunt"]
        add(s["wall_s"] <= k["wall_s"], "pairs N=%s: whole run %.3f s <= kernel %.3f s" % (
            n, s["wall_s"], k["wall_s"]))
        add(s["worst_rtt_us"] <= k["worst_rtt_us"],
            "pairs N=%s: worst pair %.1f us <= kernel's worst %.1f us" % (
                n, s["worst_rtt_us"], k["worst_rtt_us"]))
        if n == "8":
            add(s["wall_s"] <= 0.6 * k["wall_s"], "pairs N=8: whole run %.2fx the kernel's <= 0.6x"
                % (s["wall_s"] / k["wall_s"]))
    for api, byp in doc.get("echo", {}).items():
        for placement, r in byp.items():
            k = r["kernel"]["mean_us"]
            for label, v in r.items():
                if label != "kernel":
                    add(v["mean_us"] <= k, "echo %s %s %s: %.1f us <= kernel %.1f us" % (
                        api, placement, label, v["mean_us"], k))
    if "neighbour" in doc:
        k, s = doc["neighbour"]["kernel"]["rtt_us"], doc["neighbour"]["shunt"]["rtt_us"]
        add(s <= k, "beside two busy loops: pair rtt %.1f us <= kernel %.1f us" % (s, k))
    return out


def plot(doc, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    pairs = doc.get("pairs", {})
    if pairs:
        ns = sorted(pairs, key=int)
        labels = list(pairs[ns[0]])
        w = 0.8 / len(labels)
        for i, lab in enumerate(labels):
            axes[0].bar([j + i * w for j in range(len(ns))],
                        [pairs[n][lab]["wall_s"] for n in ns], w, label=lab)
        axes[0].set_xticks([j + 0.4 - w / 2 for j in range(len(ns))])
        axes[0].set_xticklabels(["N=%s" % n for n in ns])
        axes[0].set_ylabel("whole run, s (lower is better)")
        axes[0].set_title("N ping-pong pairs, unpinned, 2 cores")
        axes[0].legend(fontsize=8)
    echo = doc.get("echo", {})
    if echo:
        cols = [(api, pl) for api in echo for pl in echo[api]]
        labels = list(echo[cols[0][0]][cols[0][1]])
        w = 0.8 / len(labels)
        for i, lab in enumerate(labels):
            axes[1].bar([j + i * w for j in range(len(cols))],
                        [echo[a][p][lab]["mean_us"] for a, p in cols], w, label=lab)
        axes[1].set_xticks([j + 0.4 - w / 2 for j in range(len(cols))])
        axes[1].set_xticklabels(["%s\n%s" % c for c in cols], fontsize=7)
        axes[1].set_ylabel("round, us (lower is better)")
        axes[1].set_yscale("log")
        axes[1].set_title("Python echo, 100 connections")
        axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", default="pairs,echo,neighbour,pinned")
    p.add_argument("--pairs", default=",".join(map(str, PAIRS)))
    p.add_argument("--count", type=int, default=20000, help="round trips per pair")
    p.add_argument("--rounds", type=int, default=5000, help="echo rounds")
    p.add_argument("--apis", default=",".join(APIS))
    p.add_argument("--placements", default=",".join(PLACEMENTS))
    p.add_argument("--spins", default="0,200", help="SHUNT_SPIN_US values measured besides the default")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--build", default=os.path.join(REPO, "build"))
    p.add_argument("--out")
    a = p.parse_args()
    a.shapes = a.shapes.split(",")
    a.pairs = [int(x) for x in a.pairs.split(",")]
    a.apis = a.apis.split(",")
    a.placements = a.placements.split(",")
    a.spins = [int(x) for x in a.spins.split(",") if x]
    return a


def main():
    args = parse_args()
    out = args.out or os.path.join(REPO, "bench", "results",
                                   datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ"))
    os.makedirs(out, exist_ok=True)
    doc = {"machine": machine_info(), "git": git_info(REPO), "args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="shunt-busy-") as tmp:
        b = Bench(args, tmp)
        try:
            if "pairs" in args.shapes:
                do_pairs(b, args, doc)
            if "echo" in args.shapes:
                do_echo(b, args, doc)
            if "neighbour" in args.shapes:
                do_single(b, args, doc, "neighbour", 2, False)
            if "pinned" in args.shapes:
                do_single(b, args, doc, "pinned", 0, True)
        finally:
            stop_daemon(b.shunt_env["SHUNT_SOCKET"])
    doc["targets"] = targets(doc)
    for line in doc["targets"]:
        print(line)
    path = write_doc(out, "busy", doc)
    plot(doc, os.path.join(out, "busy.png"))
    log("wrote %s and busy.png" % path)


if __name__ == "__main__":
    main()
