#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Sharing benchmark: what it costs that threads and forked processes may
share a socket, kernel TCP loopback vs shunt, in one run. Two measurements:

  percall  ns per call of a non-blocking recv() on an empty socket (EAGAIN),
           an 8-byte send() and an 8-byte recv(), in a process that holds
           both ends of one connection: alone, next to an idle second
           thread, next to an idle forked child that holds the sockets too;
  rate     messages/s of 1, 2, 4 threads sending 8 B (and 64 B) messages on
           one connection to 1 (or 2) receiving threads in another process;
           receivers pinned to one CPU, all senders to the other.

Writes results/<UTC time>/share.json and share.png. Run from anywhere after
`meson setup build && ninja -C build`:
    /usr/bin/python3 bench/share.py [--quick]
"""

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from core import (REPO, drop_shunt_series, free_tcp_port, last_json, log, loud, spawn,
                  stop_daemon, write_doc)
from epoll import DaemonAwareMeter, Runner as PairRunner, check_on_shm, kill_and_collect
from machine import LOAD_WARN_FRAC, check_idle, check_pinning, git_info, machine_info
from report import COLORS, fmt_num

SERIES = ["kernel-tcp", "shunt"]
SERIES_HELP = {
    "kernel-tcp": "share over kernel TCP on 127.0.0.1 (TCP_NODELAY)",
    "shunt": "the same commands under `shunt run`",
}
TESTS = ["percall", "rate"]
SHARES = ["single", "thread", "fork"]
SHARE_HELP = {
    "single": "the process has one thread",
    "thread": "the process has started a second thread, idle in read() on a pipe",
    "fork": "the process has forked; the child holds both sockets, idle in read() on a pipe",
}
OPS = ["recv_eagain", "send8", "recv8"]
OP_HELP = {
    "recv_eagain": "non-blocking recv() on the empty end: EAGAIN (batches of 1000)",
    "send8": "blocking 8-byte send() (batches of 64, the other end drained between)",
    "recv8": "8-byte recv() of a message already there (the same batches)",
}
# (sending threads, receiving threads)
CONFIGS = [(1, 1), (2, 1), (4, 1), (2, 2), (4, 2)]
SIZES = [8, 64]
# A point that fails this many runs in a row is not run again; a series that
# fails SERIES_FAILURES runs in a row is dropped. A shunt whose fork support
# is broken then costs two failed runs, and every other point still runs.
POINT_FAILURES = 2
SERIES_FAILURES = 3
# A disturbed run is measured again after waiting up to this long for quiet.
RETRY_WAIT_S = 20
# A raw-ring probe slower than this was preempted, not placed far.
PROBE_PREEMPTED_NS = 10000
# A probe up to this factor above the fastest probe of the run says "near".
NEAR_FACTOR = 1.6
# Repetitions of a point that differ by more than this factor get a note.
SPREAD_WARN = 1.5
# Slack on top of a run's own length before it counts as hung and is killed.
RUN_SLACK_S = 10


def median(xs):
    return statistics.median(xs) if xs else None


def clip(text, n=300):
    """An error for a one-line note; runs[].error keeps all of it."""
    text = str(text)
    return text if len(text) <= n else text[:n] + " ..."


def cfg_name(cfg):
    return "%dx%d" % cfg


class Runner(PairRunner):
    """epoll.py's runner (private SHUNT_SOCKET, SHUNT_STATS per run, server
    then client with a ready file, process groups killed on a timeout) with
    share's commands."""

    def env_for(self, series):
        if series != "shunt":
            return self.base_env, None, []
        env = dict(self.shunt_env)
        self.run_no += 1
        stats = os.path.join(self.tmpdir, "stats-%d.jsonl" % self.run_no)
        env["SHUNT_STATS"] = stats
        return env, stats, [self.bins["shunt"], "run", "--"]

    def run_one(self, cmd, env, timeout):
        """One process (and whatever it forks), killed by its process
        group if it is not done within timeout."""
        rec = {"cmd": cmd}
        t0 = time.monotonic()
        proc = spawn(cmd, env)
        try:
            so, se = proc.communicate(timeout=timeout)
            errors = ["exit %d: %s" % (proc.returncode, se.strip()[-400:])] \
                if proc.returncode != 0 else []
        except subprocess.TimeoutExpired:
            so, se = kill_and_collect(proc)
            errors = ["timed out after %.0f s (killed)%s" % (
                timeout, ": " + se.strip()[-400:] if se.strip() else "")]
        except BaseException:
            kill_and_collect(proc)
            raise
        rec["wall_s"] = round(time.monotonic() - t0, 3)
        rec["result"] = last_json(so)
        if rec["result"] is None and not errors:
            errors.append("printed no JSON")
        rec["ok"] = not errors
        if errors:
            rec["error"] = "; ".join(errors)
        return rec

    def percall(self, series, share):
        a = self.args
        env, stats, wrap = self.env_for(series)
        cmd = wrap + [self.bins["share"], "percall", "--share", share,
                      "--cpu", str(a.client_cpu), "--duration", str(a.percall_duration),
                      "--warmup", str(a.percall_warmup)]
        rec = self.run_one(cmd, env, 2 * (a.percall_duration + a.percall_warmup) + RUN_SLACK_S)
        if stats:
            # One process is both ends: its line must show the connect and the accept.
            pid = (rec.get("result") or {}).get("pid")
            rec["client_pid"] = rec["server_pid"] = pid
            check_on_shm(rec, stats, 1)
        return rec

    def rate(self, series, cfg, size):
        a = self.args
        env, stats, wrap = self.env_for(series)
        senders, receivers = cfg
        port = str(free_tcp_port())
        server = wrap + [self.bins["share"], "server", "--port", port,
                         "--threads", str(receivers), "--cpu", str(a.server_cpu)]
        if a.verify and receivers == 1:
            server.append("--verify")
        client = wrap + [self.bins["share"], "client", "--port", port,
                         "--threads", str(senders), "--size", str(size),
                         "--duration", str(a.duration), "--warmup", str(a.warmup),
                         "--cpu", str(a.client_cpu)]
        rec = self.run_pair(server, client, env, a.warmup + a.duration + RUN_SLACK_S)
        if stats:
            rec["client_pid"] = (rec.get("result") or {}).get("pid", rec.get("client_pid"))
            rec["server_pid"] = (rec.get("server") or {}).get("pid", rec.get("server_pid"))
            check_on_shm(rec, stats, 1)
        return rec


# --- the session: interleaving, re-measuring, failures ---------------------

class Session:
    """Runs groups of points: the order is rotated every repetition so that
    every point sees the same mix of host placements and other load; a
    disturbed run is measured again; failing points and series are dropped
    loudly, and everything else goes on."""

    def __init__(self, args, runner, series, meter, notes):
        self.args = args
        self.runner = runner
        self.series = list(series)
        self.meter = meter
        self.notes = notes
        self.fail_run = {s: 0 for s in series}
        self.fail_point = {}
        self.dropped = {}         # series -> last error
        self.dropped_points = {}  # (test, series, key) -> last error
        self.runs = []
        self.stop_waiting = False
        self.prev_rate = None     # the last rate run, until the next probe
        self.t0 = time.monotonic()

    def probe_after(self, probe):
        if self.prev_rate is not None:
            self.prev_rate["shm_rtt8_p50_ns_after"] = probe
        self.prev_rate = None

    def one(self, test, s, key, rep):
        a = self.args
        for attempt in range(a.retry_disturbed + 1):
            # Two CPUs talk only in the rate test: record the vCPU placement
            # before the run, which is also the placement after the last one.
            probe = self.runner.probe() if test == "rate" else None
            self.probe_after(probe)
            self.meter.mark(with_daemon=(s == "shunt"))
            if test == "percall":
                rec = self.runner.percall(s, key)
            else:
                rec = self.runner.rate(s, key[0], key[1])
            rec.update(self.meter.since_mark())
            rec.update(test=test, series=s, rep=rep, attempt=attempt, shm_rtt8_p50_ns=probe)
            if test == "percall":
                rec["share"] = key
            else:
                rec.update(senders=key[0][0], receivers=key[0][1], size=key[1])
            self.runs.append(rec)
            if test == "rate":
                self.prev_rate = rec
            if rec["foreign_cpu_frac"] < LOAD_WARN_FRAC or not rec["ok"]:
                break
            if attempt == a.retry_disturbed or self.stop_waiting:
                rec["disturbed"] = True
                break
            rec["discarded"] = "other processes used %.0f%% of the CPUs; measured again" % (
                100 * rec["foreign_cpu_frac"])
            log("  %s %s %s: DISTURBED (others used %.0f%% CPU); measuring again once "
                "quiet" % (test, s, point_name(test, key), 100 * rec["foreign_cpu_frac"]))
            if check_idle(RETRY_WAIT_S)["foreign_cpu_frac"] >= LOAD_WARN_FRAC:
                self.stop_waiting = True
                msg = ("the machine stayed busy for %d s; not waiting for quiet any more "
                       "in this run: runs marked 'disturbed' are not trustworthy" % RETRY_WAIT_S)
                loud(msg)
                self.notes.append(msg)
        return rec

    def account(self, test, s, key, rec):
        pk = (test, s, key)
        if rec["ok"]:
            self.fail_run[s] = 0
            self.fail_point[pk] = 0
            return
        self.fail_run[s] += 1
        self.fail_point[pk] = self.fail_point.get(pk, 0) + 1
        log("  FAILED %s %s %s: %s" % (test, s, point_name(test, key), rec.get("error")))
        if self.fail_run[s] >= SERIES_FAILURES:
            loud("%s series failed %d runs in a row; not running it again in this run "
                 "(last error: %s)" % (s, self.fail_run[s], rec.get("error")))
            self.dropped[s] = rec.get("error")
        elif self.fail_point[pk] >= POINT_FAILURES:
            loud("%s %s %s failed %d runs in a row; not running it again (last error: %s)"
                 % (test, s, point_name(test, key), POINT_FAILURES, rec.get("error")))
            self.dropped_points[pk] = rec.get("error")

    def group(self, test, keys, repeat):
        points = [(k, s) for k in keys for s in self.series]
        for rep in range(repeat):
            k0 = (rep * len(self.series)) % len(points)
            for key, s in points[k0:] + points[:k0]:
                if s in self.dropped or (test, s, key) in self.dropped_points:
                    continue
                rec = self.one(test, s, key, rep)
                self.account(test, s, key, rec)
                log("[%5.1fs] %-7s %-10s %-12s rep %d: %s" % (
                    time.monotonic() - self.t0, test, s, point_name(test, key), rep,
                    progress(test, rec)))
        if self.prev_rate is not None:
            self.probe_after(self.runner.probe())


def point_name(test, key):
    if test == "percall":
        return key
    return "%s %dB" % (cfg_name(key[0]), key[1])


def progress(test, rec):
    if not rec["ok"]:
        return "FAILED"
    r = rec["result"]
    if test == "percall":
        line = ", ".join("%s %s ns" % (op, fmt_num(r["ops"][op]["ns_per_call"]["p50"]))
                         for op in OPS)
    else:
        line = "%s msgs/s (senders %s msgs/s), probe %s ns" % (
            fmt_num(r["msgs_per_s"]), fmt_num(r["sender"]["msgs_per_s"]),
            "-" if rec.get("shm_rtt8_p50_ns") is None else "%.0f" % rec["shm_rtt8_p50_ns"])
    if rec.get("disturbed"):
        line += " | DISTURBED: others used %.0f%% CPU" % (100 * rec["foreign_cpu_frac"])
    return line


# --- summary, report -------------------------------------------------------

def near_limit(runs):
    """Raw-ring probes up to this many ns say "near placement": a little
    above the fastest probe of this run (the two placements seen on this
    host differ by about 3x). None without probes."""
    probes = [p for r in runs for p in (r.get("shm_rtt8_p50_ns"), r.get("shm_rtt8_p50_ns_after"))
              if p and p < PROBE_PREEMPTED_NS]
    return round(NEAR_FACTOR * min(probes)) if probes else None


def placement(rec, limit):
    """near or far when the probes before and after the run agree, else None."""
    before, after = rec.get("shm_rtt8_p50_ns"), rec.get("shm_rtt8_p50_ns_after")
    if limit is None or not before or not after:
        return None
    if before <= limit and after <= limit:
        return "near"
    if limit < before < PROBE_PREEMPTED_NS and limit < after < PROBE_PREEMPTED_NS:
        return "far"
    return None


def summarise(runs, limit):
    """Medians over repetitions: percall[series][share][op] of each run's
    median batch (ns per call), rate[series][size][SxR] of msgs/s, overall
    and by vCPU placement (near, far: the raw-ring probes before and after
    the run agree)."""
    out = {"percall": {}, "rate": {}}
    groups = {}
    for r in runs:
        if r.get("ok") and not r.get("discarded"):
            key = ((r["test"], r["series"], r["share"]) if r["test"] == "percall" else
                   (r["test"], r["series"], r["size"], (r["senders"], r["receivers"])))
            groups.setdefault(key, []).append(r["result"])
            if r["test"] == "rate":
                r["placement"] = placement(r, limit)
                if r["placement"]:
                    groups.setdefault(key + (r["placement"],), []).append(r["result"])
    for key, res in groups.items():
        if len(key) == 5:
            continue  # by placement, below
        if key[0] == "percall":
            entry = {}
            for op in OPS:
                p50 = [x["ops"][op]["ns_per_call"]["p50"] for x in res]
                entry[op] = {
                    "p50_ns": median(p50),
                    "mean_ns": median([x["ops"][op]["ns_per_call"]["mean"] for x in res]),
                    "p90_ns": median([x["ops"][op]["ns_per_call"]["p90"] for x in res]),
                    "p50_ns_min": min(p50), "p50_ns_max": max(p50),
                }
            entry["n"] = len(res)
            out["percall"].setdefault(key[1], {})[key[2]] = entry
        else:
            rates = [x["msgs_per_s"] for x in res]
            out["rate"].setdefault(key[1], {}).setdefault(str(key[2]), {})[cfg_name(key[3])] = {
                "msgs_per_s": median(rates),
                "msgs_per_s_min": min(rates), "msgs_per_s_max": max(rates),
                "sender_msgs_per_s": median([x["sender"]["msgs_per_s"] for x in res]),
                "mb_per_s": median([x["mb_per_s"] for x in res]),
                "partial_sends": sum(x.get("partial_sends", 0) for x in res),
                "n": len(res),
                "by_placement": {
                    pl: {"msgs_per_s": median([x["msgs_per_s"] for x in groups[key + (pl,)]]),
                         "n": len(groups[key + (pl,)])}
                    for pl in ("near", "far") if key + (pl,) in groups},
            }
    return out


def spreads(summary):
    """Points whose repetitions disagree by more than SPREAD_WARN."""
    out = []
    for s, shares in summary["percall"].items():
        for sh, ops in shares.items():
            for op in OPS:
                lo, hi = ops[op]["p50_ns_min"], ops[op]["p50_ns_max"]
                if lo and hi / lo > SPREAD_WARN:
                    out.append(("percall", s, "%s %s" % (sh, op), lo, hi, "ns"))
    for s, sizes in summary["rate"].items():
        for size, cfgs in sizes.items():
            for cfg, e in cfgs.items():
                lo, hi = e["msgs_per_s_min"], e["msgs_per_s_max"]
                if lo and hi / lo > SPREAD_WARN:
                    out.append(("rate", s, "%s %sB" % (cfg, size), lo, hi, "msgs/s"))
    return out


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def failed_cell(sess, test, s, key):
    if s in sess.dropped:
        return "FAILED"
    if (test, s, key) in sess.dropped_points:
        return "FAILED"
    if any(r["test"] == test and r["series"] == s and not r["ok"] and
           (r.get("share") == key if test == "percall" else
            ((r["senders"], r["receivers"]), r["size"]) == key) for r in sess.runs):
        return "FAILED"
    return "-"


def fmt_ns(x):
    if x is None:
        return None
    return "%.1f" % x if x < 1000 else "%.0f" % x


def print_percall(summary, series, sess, args):
    pc = summary["percall"]
    print("\nPer-call cost, ns per call (median over runs of the median batch), one "
          "process pinned to CPU %d" % args.client_cpu)
    print("  single: one thread; thread: + an idle second thread; fork: + an idle child "
          "holding the socket")
    w = 11
    print("%-13s%-12s" % ("call", "series") + "".join("%*s" % (w, s) for s in SHARES) +
          "%*s%*s" % (w + 6, "thread-single", w + 6, "fork-single"))
    for op in OPS:
        for i, s in enumerate(series):
            row = "%-13s%-12s" % (op if i == 0 else "", s)
            vals = {}
            for sh in SHARES:
                v = get(pc, s, sh, op, "p50_ns")
                vals[sh] = v
                row += "%*s" % (w, fmt_ns(v) or failed_cell(sess, "percall", s, sh))
            for sh in ("thread", "fork"):
                if vals[sh] is None or vals["single"] is None:
                    row += "%*s" % (w + 6, "-")
                else:
                    d = vals[sh] - vals["single"]
                    row += "%*s" % (w + 6, "%+.1f (%+.0f%%)" % (d, 100 * d / vals["single"]))
            print(row)
        k = [get(pc, "kernel-tcp", sh, op, "p50_ns") for sh in SHARES]
        sv = [get(pc, "shunt", sh, op, "p50_ns") for sh in SHARES]
        if "kernel-tcp" in series and "shunt" in series:
            print("%-13s%-12s" % ("", "kernel/shunt") + "".join(
                "%*s" % (w, "-" if a is None or b is None else "%.1fx" % (a / b))
                for a, b in zip(k, sv)))


def print_rate(summary, series, sess, args):
    print("\nMessage rate at the receiver, messages/s; in brackets: vs 1x1 of the same column")
    print("  SxR = S sending threads in one process on one connection, R receiving threads "
          "in another;\n  all receivers pinned to CPU %d, all senders to CPU %d (the "
          "threads on a CPU time-share it)" % (args.server_cpu, args.client_cpu))
    tables = [(("msgs_per_s",), "median of runs"),
              (("msgs_per_s_max",), "fastest run (other load and a far vCPU placement only "
               "ever slow a run down)")]
    for pl, what in (("near", "near"), ("far", "far")):
        if any(get(e, "by_placement", pl) for sizes in summary["rate"].values()
               for cfgs in sizes.values() for e in cfgs.values()):
            tables.append((("by_placement", pl, "msgs_per_s"),
                           "median of runs in the %s vCPU placement (raw-ring probe before and "
                           "after the run %s %s ns; README, Regimes)"
                           % (what, "<=" if pl == "near" else ">", summary["near_limit_ns"])))
    for key, what in tables:
        print_rate_table(summary["rate"], series, sess, args, key, what)


def print_rate_table(rt, series, sess, args, key, what):
    w = 16
    print("%s:" % what)
    head = "%-7s" % "SxR"
    for size in args.sizes:
        head += "".join("%*s" % (w, "%s %dB" % (s, size)) for s in series)
        if len(series) == 2:
            head += "%*s" % (10, "shunt/k")
    print(head)
    for cfg in args.configs:
        row = "%-7s" % cfg_name(cfg)
        for size in args.sizes:
            for s in series:
                v = get(rt, s, str(size), cfg_name(cfg), *key)
                base = get(rt, s, str(size), "1x1", *key)
                if v is None:
                    cell = failed_cell(sess, "rate", s, (cfg, size))
                elif base:
                    cell = "%s (%.2f)" % (fmt_num(v), v / base)
                else:
                    cell = fmt_num(v)
                row += "%*s" % (w, cell)
            if len(series) == 2:
                k = get(rt, "kernel-tcp", str(size), cfg_name(cfg), *key)
                v = get(rt, "shunt", str(size), cfg_name(cfg), *key)
                row += "%*s" % (10, "-" if not k or v is None else "%.0fx" % (v / k))
        print(row)


def plot(path, summary, series, args, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_pc, ax_rate) = plt.subplots(1, 2, figsize=(14, 5.8))
    pc = summary["percall"]
    n = len(series) * len(SHARES)
    width = 0.8 / max(n, 1)
    hatches = {"single": "", "thread": "//", "fork": ".."}
    shades = {"single": 1.0, "thread": 0.7, "fork": 0.45}
    i = 0
    for s in series:
        for sh in SHARES:
            xs, ys = [], []
            for j, op in enumerate(OPS):
                v = get(pc, s, sh, op, "p50_ns")
                if v is not None:
                    xs.append(j + (i - (n - 1) / 2) * width)
                    ys.append(v)
            if xs:
                ax_pc.bar(xs, ys, width, color=COLORS[s], alpha=shades[sh], hatch=hatches[sh],
                          edgecolor="black", linewidth=0.4, label="%s, %s" % (s, sh))
                for x, y in zip(xs, ys):
                    ax_pc.text(x, y * 1.05, fmt_ns(y), ha="center", va="bottom",
                               fontsize=6, rotation=90)
            i += 1
    ax_pc.set_xticks(range(len(OPS)))
    ax_pc.set_xticklabels(["recv() EAGAIN", "send() 8 B", "recv() 8 B"])
    ax_pc.set_yscale("log")
    ax_pc.set_ylabel("ns per call (median)")
    ax_pc.set_title("Per-call cost, alone / + idle thread / + idle forked child (lower is better)")
    ax_pc.grid(True, axis="y", which="both", alpha=0.3)

    rt = summary["rate"]
    xs = list(range(len(args.configs)))
    styles = {8: "o-", 64: "s--"}
    for s in series:
        for size in args.sizes:
            pts = [(x, get(rt, s, str(size), cfg_name(c))) for x, c in zip(xs, args.configs)]
            pts = [(x, e) for x, e in pts if e is not None]
            if pts:
                px = [p[0] for p in pts]
                ax_rate.plot(px, [p[1]["msgs_per_s"] for p in pts], styles.get(size, "^:"),
                             color=COLORS[s], label="%s, %d B (band: slowest..fastest run)"
                             % (s, size))
                ax_rate.fill_between(px, [p[1]["msgs_per_s_min"] for p in pts],
                                     [p[1]["msgs_per_s_max"] for p in pts],
                                     color=COLORS[s], alpha=0.08)
                # Medians per vCPU placement: hollow up (near) and down (far).
                for pl, mk in (("near", "^"), ("far", "v")):
                    pp = [(x, get(e, "by_placement", pl, "msgs_per_s")) for x, e in pts]
                    pp = [(x, v) for x, v in pp if v]
                    if pp:
                        ax_rate.scatter([p[0] for p in pp], [p[1] for p in pp], marker=mk,
                                        facecolors="none", edgecolors=COLORS[s], s=30)
    ax_rate.set_xticks(xs)
    ax_rate.set_xticklabels(["%d send / %d recv" % c for c in args.configs], rotation=20, ha="right")
    ax_rate.set_yscale("log")
    ax_rate.set_ylabel("messages/s at the receiver (median of runs;\n"
                       "hollow \u25b3/\u25bd: median in the near/far vCPU placement)")
    ax_rate.set_title("One connection, S sending threads (CPU %d), R receiving threads (CPU %d)"
                      % (args.client_cpu, args.server_cpu), fontsize=10)
    ax_rate.grid(True, which="both", alpha=0.3)
    for ax in (ax_pc, ax_rate):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7 if ax is ax_pc else 8)
        else:
            ax.text(0.5, 0.5, "not measured", transform=ax.transAxes, ha="center")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- main ------------------------------------------------------------------

def parse_list(p, text, opt, conv):
    try:
        return [conv(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        p.error("%s: cannot parse %r" % (opt, text))


def parse_cfg(text):
    s, _, r = text.partition("x")
    cfg = (int(s), int(r))
    if not (1 <= cfg[0] <= 64 and 1 <= cfg[1] <= 64):
        raise ValueError(text)
    return cfg


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="one repetition of shorter runs: a ~10 s smoke run")
    p.add_argument("--tests", default=",".join(TESTS), help="percall,rate or one of them")
    p.add_argument("--series", default=",".join(SERIES),
                   help="comma-separated subset of %s" % ",".join(SERIES))
    p.add_argument("--shares", default=",".join(SHARES),
                   help="percall: subset of %s" % ",".join(SHARES))
    p.add_argument("--configs", default=",".join(cfg_name(c) for c in CONFIGS),
                   help="rate: SxR pairs, S sending and R receiving threads (default %s)"
                   % ",".join(cfg_name(c) for c in CONFIGS))
    p.add_argument("--sizes", default=",".join(map(str, SIZES)),
                   help="rate: message sizes in bytes, >= 8 (default 8,64)")
    p.add_argument("--duration", type=float,
                   help="rate: measured seconds per run (default 0.3, 0.15 with --quick)")
    p.add_argument("--warmup", type=float,
                   help="rate: warm-up seconds per run (default 0.1, 0.05 with --quick)")
    p.add_argument("--percall-duration", type=float,
                   help="percall: measured seconds per call type (default 0.2, 0.1 with --quick)")
    p.add_argument("--percall-warmup", type=float,
                   help="percall: warm-up seconds per call type (default 0.05)")
    p.add_argument("--repeat", type=int, help="runs per point (default 5, 1 with --quick)")
    p.add_argument("--verify", action="store_true",
                   help="rate: with one receiver, check every message's sender and sequence "
                   "(torn or reordered sends fail the run)")
    p.add_argument("--server-cpu", type=int, default=0, help="receivers' CPU (default 0)")
    p.add_argument("--client-cpu", type=int, default=1,
                   help="senders' CPU and the percall process's (default 1)")
    p.add_argument("--build", default=os.path.join(REPO, "build"), help="meson build dir")
    p.add_argument("--shunt", help="shunt CLI (default BUILD/src/cli/shunt)")
    p.add_argument("--out", help="output dir (default bench/results/<UTC timestamp>)")
    p.add_argument("--wait-idle", type=float, default=0, metavar="SEC",
                   help="wait up to SEC for other processes to leave the CPUs alone "
                   "before starting (default: do not wait, only warn)")
    p.add_argument("--retry-disturbed", type=int, default=2, metavar="N",
                   help="measure a run again, up to N times, when other processes used "
                   "the CPUs during it (default 2)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if a run failed or stayed disturbed, or a series was skipped")
    a = p.parse_args()
    a.duration = a.duration if a.duration is not None else (0.15 if a.quick else 0.3)
    a.warmup = a.warmup if a.warmup is not None else (0.05 if a.quick else 0.1)
    a.percall_duration = a.percall_duration if a.percall_duration is not None else (
        0.1 if a.quick else 0.2)
    a.percall_warmup = a.percall_warmup if a.percall_warmup is not None else 0.05
    a.repeat = a.repeat if a.repeat is not None else (1 if a.quick else 5)
    a.tests = parse_list(p, a.tests, "--tests", str)
    a.series = parse_list(p, a.series, "--series", str)
    a.shares = parse_list(p, a.shares, "--shares", str)
    a.configs = parse_list(p, a.configs, "--configs", parse_cfg)
    a.sizes = sorted(set(parse_list(p, a.sizes, "--sizes", int)))
    for opt, vals, known in (("--tests", a.tests, TESTS), ("--series", a.series, SERIES),
                             ("--shares", a.shares, SHARES)):
        for v in vals:
            if v not in known:
                p.error("%s: unknown %r (known: %s)" % (opt, v, ", ".join(known)))
    a.series = [s for s in SERIES if s in a.series]
    a.shares = [s for s in SHARES if s in a.shares]
    if not a.sizes or a.sizes[0] < 8 or a.sizes[-1] > 1 << 20:
        p.error("--sizes must be in [8, 1048576]")
    if (a.repeat < 1 or a.duration <= 0 or a.warmup < 0 or a.percall_duration <= 0 or
            a.percall_warmup < 0 or a.retry_disturbed < 0):
        p.error("--repeat must be >= 1, durations > 0, warm-ups and --retry-disturbed >= 0")
    check_pinning(p, a.server_cpu, a.client_cpu, ('receivers', 'senders'))
    return a


def main():
    args = parse_args()
    bins = {
        "share": os.path.join(args.build, "bench", "share"),
        "shmring": os.path.join(args.build, "bench", "shmring"),
        "shunt": args.shunt or os.path.join(args.build, "src", "cli", "shunt"),
    }
    if not os.access(bins["share"], os.X_OK):
        log("share.py: %s not found or not executable; build first: "
            "meson setup build && ninja -C build" % bins["share"])
        return 2
    if not os.access(bins["shmring"], os.X_OK):
        bins["shmring"] = None  # only the placement probe needs it

    notes = []
    series = list(args.series)
    started = datetime.datetime.now(datetime.timezone.utc)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    out_dir = args.out or os.path.join(REPO, "bench", "results", stamp)
    os.makedirs(out_dir, exist_ok=True)
    tmpdir = tempfile.mkdtemp(prefix="shunt-share-")
    runner = Runner(args, bins, tmpdir)

    shunt_skip = drop_shunt_series(runner, bins, series, notes)

    pinning = ("percall: one process pinned to CPU %d (its idle thread or child too); rate: "
               "every receiving thread pinned to CPU %d, every sending thread to CPU %d: "
               "with 2 or 4 senders (or 2 receivers) the threads time-share their CPU"
               % (args.client_cpu, args.server_cpu, args.client_cpu))
    log("share.py: tests %s, series %s, shares %s, configs %s, sizes %s, %d repetitions; "
        "percall %.2f s (+%.2f s warm-up) per call type, rate %.2f s (+%.2f s warm-up); "
        "results in %s\n%s" % (
            ",".join(args.tests), ",".join(series), ",".join(args.shares),
            ",".join(cfg_name(c) for c in args.configs), ",".join(map(str, args.sizes)),
            args.repeat, args.percall_duration, args.percall_warmup, args.duration,
            args.warmup, out_dir, pinning))

    load_at_start = check_idle(args.wait_idle)
    if load_at_start["foreign_cpu_frac"] >= LOAD_WARN_FRAC:
        msg = ("the machine is busy before the run: other processes use %.0f%% of the "
               "CPUs (%s); runs will be measured again or flagged, rerun on a quiet machine "
               "(or use --wait-idle)" % (
                   100 * load_at_start["foreign_cpu_frac"],
                   ", ".join("%s[%d] %d%%" % (p["comm"], p["pid"], p["cpu_pct"])
                             for p in load_at_start["busy_processes"]) or "unknown"))
        loud(msg)
        notes.append(msg)

    meter = DaemonAwareMeter(runner.shunt_env["SHUNT_SOCKET"])
    sess = Session(args, runner, series, meter, notes)
    complete = False
    try:
        if "percall" in args.tests and args.shares:
            sess.group("percall", args.shares, args.repeat)
        if "rate" in args.tests:
            for size in args.sizes:
                sess.group("rate", [(c, size) for c in args.configs], args.repeat)
        complete = True
    except KeyboardInterrupt:
        log("interrupted; writing what was measured")
    finally:
        if "shunt" in series:
            stop_daemon(runner.shunt_env["SHUNT_SOCKET"])
        shutil.rmtree(tmpdir, ignore_errors=True)

    runs = sess.runs
    limit = near_limit(runs)
    summary = summarise(runs, limit)
    summary["near_limit_ns"] = limit
    failures = []
    for s, err in sess.dropped.items():
        failures.append("%s series failed %d runs in a row and was dropped: %s"
                        % (s, SERIES_FAILURES, clip(err)))
    for (test, s, key), err in sess.dropped_points.items():
        failures.append("%s %s %s FAILED (%d runs in a row, not run again): %s"
                        % (test, s, point_name(test, key), POINT_FAILURES, clip(err)))
    failed = [r for r in runs if not r["ok"] and not r.get("discarded")]
    if failed:
        by = {}
        for r in failed:
            k = "%s %s %s" % (r["test"], r["series"], point_name(
                r["test"], r["share"] if r["test"] == "percall"
                else ((r["senders"], r["receivers"]), r["size"])))
            by[k] = by.get(k, 0) + 1
        notes.append("%d runs failed (%s); see runs[].error" % (
            len(failed), ", ".join("%s: %d" % kv for kv in sorted(by.items()))))
    notes[:0] = failures
    disturbed = [r for r in runs if r.get("disturbed")]
    if disturbed:
        notes.append("%d runs stayed disturbed by other load (runs[].disturbed, "
                     "foreign_cpu_frac): do not trust them" % len(disturbed))
    retried = sum(1 for r in runs if r.get("discarded"))
    if retried:
        notes.append("%d runs were measured again because other processes used the CPUs; "
                     "the disturbed ones are kept in runs[] with 'discarded'" % retried)
    probes = [r["shm_rtt8_p50_ns"] for r in runs
              if r.get("shm_rtt8_p50_ns") and r["shm_rtt8_p50_ns"] < PROBE_PREEMPTED_NS]
    if probes and max(probes) > 2 * min(probes):
        notes.append("the raw-ring probe moved between %.0f and %.0f ns during the rate "
                     "test: the host moved the vCPUs (see README, Regimes)"
                     % (min(probes), max(probes)))
    for test, s, key, lo, hi, unit in spreads(summary):
        notes.append("%s %s %s: the runs range from %s to %s %s (x%.1f): other load, a "
                     "change of vCPU placement, or a bimodal program; see runs[]"
                     % (test, s, key, fmt_num(lo), fmt_num(hi), unit, hi / lo))
    waited = sum(r["result"].get("recv8_waited", 0) for r in runs
                 if r["ok"] and r["test"] == "percall")
    if waited:
        notes.append("%d percall recv8 batches found a message not there yet and were left "
                     "out (runs[].result.recv8_waited)" % waited)
    partial = sum(r["result"].get("partial_sends", 0) for r in runs
                  if r["ok"] and r["test"] == "rate")
    if partial:
        notes.append("%d send() calls in the rate test sent only part of a message "
                     "(runs[].result.partial_sends): those messages may interleave" % partial)

    finished = datetime.datetime.now(datetime.timezone.utc)
    doc = {
        "schema": 1,
        "benchmark": "share",
        "complete": complete,
        "started_utc": started.isoformat(timespec="seconds"),
        "finished_utc": finished.isoformat(timespec="seconds"),
        "elapsed_s": round(time.monotonic() - sess.t0, 1),
        "machine": machine_info(),
        "git": git_info(REPO),
        "config": {
            "tests": args.tests, "series": series, "requested_series": args.series,
            "shares": args.shares, "configs": [list(c) for c in args.configs],
            "sizes": args.sizes, "repeat": args.repeat,
            "duration_s": args.duration, "warmup_s": args.warmup,
            "percall_duration_s": args.percall_duration,
            "percall_warmup_s": args.percall_warmup, "verify": args.verify,
            "server_cpu": args.server_cpu, "client_cpu": args.client_cpu,
            "pinning": pinning, "binaries": bins, "shunt_skipped": shunt_skip,
            "shunt_env": {k: v for k, v in os.environ.items() if k.startswith("SHUNT_")},
            "series_help": SERIES_HELP, "share_help": SHARE_HELP, "op_help": OP_HELP,
        },
        "notes": notes,
        "failures": failures,
        "load_at_start": load_at_start,
        "summary": summary,
        "runs": runs,
    }
    json_path = write_doc(out_dir, "share", doc)

    m = doc["machine"]
    print("\nshunt sharing benchmark, %s, %s, %d CPUs, kernel %s" % (
        doc["started_utc"], m["cpu_model"], m["nproc"], m["kernel"]))
    cols = [s for s in SERIES if s in args.series]
    if "percall" in args.tests:
        print_percall(summary, cols, sess, args)
    if "rate" in args.tests:
        print_rate(summary, cols, sess, args)
    print()
    for n in notes:
        print("note: " + n)
    if failures:
        loud("\n!! ".join(failures))
    if not args.no_plot and (summary["percall"] or summary["rate"]):
        png_path = os.path.join(out_dir, "share.png")
        title = "shunt sharing benchmark %s — %s, %d CPUs, Linux %s" % (
            doc["started_utc"], m["cpu_model"], m["nproc"], m["kernel"])
        if failures:
            title += "\nFAILED: " + "; ".join(f.split(":")[0] for f in failures)
        try:
            plot(png_path, summary, [s for s in SERIES if s in series], args, title)
            print("\nwrote %s\nwrote %s" % (json_path, png_path))
        except ImportError as e:
            print("\nwrote %s (no plot: %s; apt install python3-matplotlib)" % (json_path, e))
    else:
        print("\nwrote %s" % json_path)

    if args.strict and (failed or not complete or disturbed or shunt_skip):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
