#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Application benchmarks: real servers and their usual load generators
(redis + redis-benchmark, nginx + wrk, sockperf, iperf3, memcached +
memaslap), kernel TCP loopback and `shunt run` side by side in one run,
rounds alternating between the two. Prints a table with the issue's
targets, writes results/<UTC time>/apps.json and one apps-<program>.png per
program.

    /usr/bin/python3 bench/apps.py [--quick] [--only redis,sockperf]
"""

import argparse
import datetime
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from apps_programs import (PANELS, PROGRAM_NAMES, PROGRAMS, REDIS_HIST_BUCKET_US, TARGETS,
                           ParseError, program_missing)
from core import (REPO, free_tcp_port, last_json, log, loud, mode_envs, spawn, stop,
                  unix_listener_pids, write_doc)
from epoll import DaemonAwareMeter, kill_and_collect
from machine import LOAD_WARN_FRAC, check_idle, check_pinning, git_info, machine_info
from report import fmt_num

MODES = ["kernel", "shunt"]
MODE_HELP = {
    "kernel": "server and client as they are, TCP over 127.0.0.1",
    "shunt": "the same commands, server and client each under `shunt run --`",
}
COLORS = {"kernel": "tab:blue", "shunt": "tab:red"}
# How long a server may take to listen, and to exit after its stop signal.
START_TIMEOUT_S = 15
STOP_TIMEOUT_S = 10
# A disturbed session is measured again after waiting up to this long.
RETRY_WAIT_S = 30
# A (program, mode) whose sessions fail this many times in a row is not run
# again: a hang costs two client timeouts, not one per round.
MAX_CONSECUTIVE_FAILURES = 2


class AppsMeter(DaemonAwareMeter):
    """Other load during a session, measured two ways, the larger one wins:

    - /proc/stat's busy time (with irq and softirq: on this kernel a task's
      system time includes the softirq work done in its context, which is
      most of loopback TCP, so leaving softirq out of busy but not out of
      our children's times made kernel-mode sessions hide others' load;
      measured: a 3 s kernel sockperf run, children 2.39 s of system time,
      /proc/stat 0.59 s system + 0.86 s softirq) minus our reaped children's
      and the daemon's CPU time;
    - the CPU time other processes that are alive at the end used since the
      mark (from /proc/PID/stat; blind to processes that came and went, but
      not to tick sampling: a sockperf kernel session still reads ~0.9 s
      short in /proc/stat because its tasks sleep between most ticks)."""

    def sample(self):
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]] + [0] * 8
        busy = (v[0] + v[1] + v[2] + v[5] + v[6]) / self.hz
        t = os.times()
        own = t.user + t.system + t.children_user + t.children_system
        return time.monotonic(), busy, v[7] / self.hz, own

    def others(self):
        """{(pid, start time): (CPU ticks, comm)} of processes that are not
        this driver or the daemon (our servers and clients are reaped by the
        time a session's load is read)."""
        skip = {os.getpid()} | set(self.daemon_pids)
        out = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in skip:
                continue
            try:
                with open("/proc/%s/stat" % entry) as f:
                    data = f.read()
            except OSError:
                continue
            fields = data[data.rfind(")") + 2:].split()
            out[(int(entry), fields[19])] = (int(fields[11]) + int(fields[12]),
                                             data[data.find("(") + 1:data.rfind(")")])
        return out

    def mark(self, with_daemon=False):
        super().mark(with_daemon)
        self.daemon_pids = self.daemon_pids or unix_listener_pids(self.sock_path)
        self.procs_mark = self.others()

    def since_mark(self):
        out = super().since_mark()
        wall = max(time.monotonic() - self.last[0], 1e-3) * self.ncpu
        used = {}
        for key, (ticks, comm) in self.others().items():
            d = ticks - self.procs_mark.get(key, (0, comm))[0]
            if d > 0:
                used[key] = (d, comm)
        frac = sum(d for d, _ in used.values()) / self.hz / wall
        out["foreign_proc_frac"] = round(frac, 3)
        out["foreign_stat_frac"] = out["foreign_cpu_frac"]
        out["foreign_cpu_frac"] = max(out["foreign_cpu_frac"], out["foreign_proc_frac"])
        top = sorted(used.items(), key=lambda kv: -kv[1][0])[:3]
        out["foreign_top"] = ["%s[%d] %.2fs" % (c, k[0], d / self.hz) for k, (d, c) in top]
        return out


def median(xs):
    return statistics.median(xs) if xs else None


def read_stats(path):
    """The SHUNT_STATS lines in path (one JSON object per process that
    exited normally) and their summed counters."""
    lines = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    lines.append(json.loads(line))
    except OSError:
        pass
    total = {}
    for obj in lines:
        for k, v in obj.items():
            if k != "pid" and isinstance(v, (int, float)) and not isinstance(v, bool):
                total[k] = total.get(k, 0) + v
    return lines, total


def stats_problems(path, role, min_connects=0, min_accepts=0):
    """Why the SHUNT_STATS of `role` show that not everything went over
    shared memory (empty list: it did). A process killed by a signal writes
    no line, so a missing line is a failure too: we cannot tell."""
    try:
        lines, total = read_stats(path)
    except ValueError as e:
        return {"lines": None, "total": None}, ["%s: SHUNT_STATS unreadable: %s" % (role, e)]
    out = {"lines": lines, "total": total}
    if not lines:
        return out, ["%s: no SHUNT_STATS line (libshunt not loaded, or the process did not "
                     "exit normally)" % role]
    problems = []
    for key in ("kernel_connect", "kernel_accept", "fallback_nodaemon", "fallback_error"):
        if total.get(key, 0):
            problems.append("%s: %s = %d" % (role, key, total[key]))
    if total.get("shm_connect", 0) < min_connects:
        problems.append("%s: shm_connect %d < %d connections" % (
            role, total.get("shm_connect", 0), min_connects))
    if total.get("shm_accept", 0) < min_accepts:
        problems.append("%s: shm_accept %d < %d connections" % (
            role, total.get("shm_accept", 0), min_accepts))
    if (min_connects or min_accepts) and not (total.get("shm_tx_bytes") and
                                              total.get("shm_rx_bytes")):
        problems.append("%s: no bytes went through the rings" % role)
    return out, problems


def tcp_listening(port):
    """Whether something listens on 127.0.0.1:port or *:port (from
    /proc/net/tcp: a check that does not connect, so the server's accept
    counters see only the benchmark's connections)."""
    want = {"0100007F:%04X" % port, "00000000:%04X" % port}
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            return any(p[1] in want and p[3] == "0A" for p in (l.split() for l in f))
    except OSError:
        return False


class Runner:
    def __init__(self, args, bins, tmpdir):
        self.args = args
        self.bins = bins
        self.tmpdir = tmpdir
        self.base_env, self.shunt_env = mode_envs(tmpdir)
        self.daemon = None
        self.session_no = 0

    # --- the daemon: ours, started once, stopped by its pid -------------

    def start_daemon(self):
        """Run `shunt daemon` on the private socket as our child (not the
        embedded one `shunt run` would start: that one exits 10 s after its
        last client, e.g. during a long kernel round, and the next
        `taskset -c N shunt run` would start it again pinned to N). Returns
        None or why shunt cannot be measured."""
        sock = self.shunt_env["SHUNT_SOCKET"]
        log_path = os.path.join(self.tmpdir, "shuntd.log")
        with open(log_path, "wb") as logf:
            self.daemon = subprocess.Popen(
                [self.bins["shunt"], "daemon", "--socket", sock], stdin=subprocess.DEVNULL,
                stdout=logf, stderr=logf, env=self.base_env, start_new_session=True)
        deadline = time.monotonic() + 5
        while not unix_listener_pids(sock):
            if self.daemon.poll() is not None or time.monotonic() > deadline:
                with open(log_path, errors="replace") as f:
                    why = f.read().strip()[-400:]
                self.stop_daemon()
                return "`shunt daemon --socket %s` did not come up: %s" % (sock, why or "no output")
            time.sleep(0.02)
        p = subprocess.run([self.bins["shunt"], "run", "--", "/bin/true"], capture_output=True,
                           text=True, env=self.shunt_env, timeout=30)
        if p.returncode != 0:
            self.stop_daemon()
            return "`shunt run -- /bin/true` exited %d: %s" % (p.returncode,
                                                               p.stderr.strip()[-400:])
        return None

    def stop_daemon(self):
        if self.daemon is None:
            return
        if self.daemon.poll() is None:
            log("stopping the shunt daemon started for this run (pid %d)" % self.daemon.pid)
            self.daemon.terminate()
            try:
                self.daemon.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        self.daemon = None

    def shunt_status(self):
        """`shunt status --json` of our daemon: its listeners and totals."""
        try:
            p = subprocess.run([self.bins["shunt"], "status", "--json", "--socket",
                                self.shunt_env["SHUNT_SOCKET"]], capture_output=True,
                               text=True, env=self.base_env, timeout=10)
            return json.loads(p.stdout) if p.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, ValueError):
            return None

    # --- one session: a server, its measurements, the checks -------------

    def wait_listening(self, server, port, mode):
        """Until the server listens; under shunt also until the daemon knows
        the listener (a connect that comes between the kernel listen() and
        the registration would be left to the kernel). None or an error."""
        deadline = time.monotonic() + START_TIMEOUT_S
        addr = "127.0.0.1:%d" % port
        while time.monotonic() < deadline:
            if server.poll() is not None:
                return "server exited (%s) before listening" % server.returncode
            if tcp_listening(port):
                if mode == "kernel":
                    return None
                st = self.shunt_status()
                if st and any(l.get("address") == addr for l in st.get("listeners", [])):
                    return None
            time.sleep(0.05)
        return "server not listening on %s after %d s" % (addr, START_TIMEOUT_S)

    def probe(self):
        """A 50 ms raw shared-memory 8 B round trip (build/bench/shmring):
        which placement of the two vCPUs the host chose (README, Regimes)."""
        if not self.bins.get("shmring"):
            return None
        a = self.args
        p = spawn([self.bins["shmring"], "--mode", "rtt", "--size", "8", "--duration", "0.05",
                   "--warmup", "0.02", "--cpu", str(a.client_cpu),
                   "--server-cpu", str(a.server_cpu)], self.base_env)
        try:
            so, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            stop(p)
            return None
        res = last_json(so)
        return res["rtt_ns"]["p50"] if p.returncode == 0 and res else None

    def wrap(self, mode, cpu):
        """taskset -c CPU (None: unpinned), then shunt run in shunt mode."""
        w = ["taskset", "-c", str(cpu)] if cpu is not None else []
        return w + [self.bins["shunt"], "run", "--"] if mode == "shunt" else w

    def run_client(self, prog, m, mode, port, env, d):
        a = self.args
        cmd = self.wrap(mode, a.client_cpu if prog.pinned else None) + m.argv(port, a.quick)
        rec = {"measurement": m.name, "cmd": cmd}
        if mode == "shunt":
            env = dict(env)
            env["SHUNT_STATS"] = os.path.join(d, "client-%s.jsonl" % m.name)
        t0 = time.monotonic()
        usage0 = children_usage()
        proc = spawn(cmd, env)
        timeout = m.timeout(a.quick)
        try:
            out, err = proc.communicate(timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            out, err = kill_and_collect(proc)
            rec.update(ok=False, error="client timed out after %d s (killed)%s" % (
                timeout, ": " + err.strip()[-300:] if err.strip() else ""),
                stdout_tail=out[-2000:], stderr_tail=err[-2000:])
            return rec
        except BaseException:
            stop(proc)
            raise
        rec.update(wall_s=round(time.monotonic() - t0, 3), rc=rc,
                   stdout_tail=out[-3000:], stderr_tail=err[-1500:])
        errors = []
        if rc != 0:
            errors.append("client exit %d: %s" % (rc, (err.strip() or out.strip())[-300:]))
        try:
            rec["metrics"] = m.parse(out, err)
            rec["metrics"].update(usage_per_request(usage0, children_usage(),
                                                    rec["metrics"].get("requests"), "client"))
        except ParseError as e:
            errors.append(str(e))
        if mode == "shunt":
            rec["shunt_stats"], problems = stats_problems(env["SHUNT_STATS"], "client",
                                                          min_connects=m.min_connects)
            errors += problems
        rec["ok"] = not errors
        if errors:
            rec["error"] = "; ".join(errors)
        return rec

    def session(self, prog, mode, rnd):
        """Start prog's server in mode, run every measurement against it,
        stop it, check (under shunt) that both sides used shared memory only.
        Returns the session record; measurements[] hold the numbers."""
        a = self.args
        self.session_no += 1
        d = os.path.join(self.tmpdir, "%02d-%s-%s" % (self.session_no, prog.name, mode))
        os.makedirs(d)
        port = free_tcp_port()
        env = self.base_env if mode == "kernel" else dict(self.shunt_env)
        if mode == "shunt":
            env["SHUNT_STATS"] = os.path.join(d, "server.jsonl")
        server_cmd = self.wrap(mode, a.server_cpu if prog.pinned else None) + prog.setup(d, port)
        rec = {"program": prog.name, "mode": mode, "round": rnd, "port": port,
               "server_cmd": server_cmd, "measurements": []}
        rec["shm_rtt8_p50_ns"] = self.probe()
        self.meter.mark(with_daemon=(mode == "shunt"))
        status_before = self.shunt_status() if mode == "shunt" else None
        t0 = time.monotonic()
        with open(os.path.join(d, "server.out"), "wb") as so, \
                open(os.path.join(d, "server.err"), "wb") as se:
            server = subprocess.Popen(server_cmd, stdin=subprocess.DEVNULL, stdout=so,
                                      stderr=se, env=env, start_new_session=True)
        errors = []
        try:
            err = self.wait_listening(server, port, mode)
            if err:
                errors.append(err)
            for m in prog.measurements if not err else []:
                mrec = self.run_client(prog, m, mode, port, env, d)
                rec["measurements"].append(mrec)
                if server.poll() is not None and prog.stop_signal is not None:
                    errors.append("server exited (%s) during %s" % (server.returncode, m.name))
                    break
        finally:
            usage0 = children_usage()
            rec["server_rc"], stop_err = self.stop_server(server, prog)
        # One measurement: the server's whole life was spent on its requests.
        ms = rec["measurements"]
        if len(ms) == 1 and ms[0].get("metrics"):
            ms[0]["metrics"].update(usage_per_request(usage0, children_usage(),
                                                      ms[0]["metrics"].get("requests"), "server"))
        if stop_err:
            errors.append(stop_err)
        rec["wall_s"] = round(time.monotonic() - t0, 3)
        rec.update(self.meter.since_mark())
        rec["server_log_tail"] = tail_files(d, ("server.out", "server.err"))
        if mode == "shunt":
            status_after = self.shunt_status()
            rec["daemon_kernel_fallbacks"] = fallbacks_delta(status_before, status_after)
            if rec["daemon_kernel_fallbacks"]:
                errors.append("the daemon left %d connects to the kernel during the session"
                              % rec["daemon_kernel_fallbacks"])
            need = sum(m.min_connects for m in prog.measurements)
            rec["shunt_stats"], problems = stats_problems(env["SHUNT_STATS"], "server",
                                                          min_accepts=need)
            errors += problems
        if errors:
            rec["error"] = "; ".join(errors)
            for mrec in rec["measurements"]:
                if mrec.get("ok"):
                    mrec.update(ok=False, error="session: " + rec["error"])
        rec["ok"] = not errors and all(m["ok"] for m in rec["measurements"])
        return rec

    def stop_server(self, server, prog):
        """Ask the server to exit normally (so libshunt's exit report is
        written), then kill what is left of its process group, which we
        created for it. Returns (exit status, error or None)."""
        err = None
        if server.poll() is None and prog.stop_signal is not None:
            try:
                os.kill(server.pid, prog.stop_signal)
            except ProcessLookupError:
                pass
        try:
            server.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            err = "server still running %d s after %s (killed)" % (
                STOP_TIMEOUT_S, "its stop signal" if prog.stop_signal else "its client ended")
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        server.wait()
        return server.returncode, err


def children_usage():
    """CPU seconds and voluntary / involuntary context switches of every
    child reaped so far (and of what they reaped: nginx's master reaps its
    workers), so that a difference covers the children reaped between."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"cpu_s": r.ru_utime + r.ru_stime, "vcsw": r.ru_nvcsw, "ivcsw": r.ru_nivcsw}


def usage_per_request(before, after, requests, who):
    """Metrics: @who's CPU time (us) and context switches per request
    between two children_usage() readings."""
    if not requests:
        return {}
    return {"%s_cpu_us_per_req" % who: round((after["cpu_s"] - before["cpu_s"]) * 1e6 / requests, 2),
            "%s_vcsw_per_req" % who: round((after["vcsw"] - before["vcsw"]) / requests, 3),
            "%s_ivcsw_per_req" % who: round((after["ivcsw"] - before["ivcsw"]) / requests, 3)}


def tail_files(d, names):
    out = {}
    for n in names:
        try:
            with open(os.path.join(d, n), errors="replace") as f:
                text = f.read()
            if text.strip():
                out[n] = text[-1500:]
        except OSError:
            pass
    return out


def build_mtimes(build):
    """When the shunt binaries were built: others may rebuild build/ from a
    working tree newer than the commit in `git`."""
    out = {}
    for rel in ("src/cli/shunt", "src/daemon/shuntd", "src/preload/libshunt.so"):
        try:
            out[rel] = datetime.datetime.fromtimestamp(
                os.stat(os.path.join(build, rel)).st_mtime,
                datetime.timezone.utc).isoformat(timespec="seconds")
        except OSError:
            out[rel] = None
    return out


def fallbacks_delta(before, after):
    try:
        return (after["totals"]["kernel_fallbacks"] - before["totals"]["kernel_fallbacks"])
    except (TypeError, KeyError):
        return None


# --- summary, targets, report ----------------------------------------------

def summarise(sessions):
    """summary[program][measurement][mode][metric] = median and spread over
    the good runs of sessions that were not discarded."""
    vals = {}
    for s in sessions:
        if s.get("discarded"):
            continue
        for m in s["measurements"]:
            if not m.get("ok"):
                continue
            for k, v in m["metrics"].items():
                vals.setdefault((s["program"], m["measurement"], s["mode"], k), []).append(v)
    out = {}
    for (p, m, mode, k), vs in vals.items():
        out.setdefault(p, {}).setdefault(m, {}).setdefault(mode, {})[k] = {
            "median": median(vs), "min": min(vs), "max": max(vs), "values": vs, "n": len(vs)}
    return out


def get(summary, program, measurement, mode, metric, key="median"):
    try:
        return summary[program][measurement][mode][metric][key]
    except KeyError:
        return None


def improvement(kernel, shunt, better):
    """How many times better shunt is (>1: better)."""
    if kernel is None or shunt is None or kernel <= 0 or shunt <= 0:
        return None
    return kernel / shunt if better == "lower" else shunt / kernel


def evaluate_targets(summary, skipped, requested):
    out = []
    for t in TARGETS:
        if t.program not in requested:
            continue
        k = get(summary, t.program, t.measurement, "kernel", t.metric)
        s = get(summary, t.program, t.measurement, "shunt", t.metric)
        value = improvement(k, s, t.better)
        rec = {"name": t.name, "description": t.description, "program": t.program,
               "measurement": t.measurement, "metric": t.metric, "better": t.better,
               "need": t.need, "kernel": k, "shunt": s,
               "value": None if value is None else round(value, 3)}
        if value is None:
            rec["status"] = "SKIP"
            rec["note"] = skipped.get(t.program) or "no good %s run in both modes" % t.program
        else:
            rec["status"] = "PASS" if value >= t.need else "FAIL"
            # The worst pairing of rounds, as a robustness hint.
            ks = summary[t.program][t.measurement]["kernel"][t.metric]
            ss = summary[t.program][t.measurement]["shunt"][t.metric]
            worst = (improvement(ks["min"], ss["max"], "lower") if t.better == "lower"
                     else improvement(ks["max"], ss["min"], "higher"))
            rec["value_worst_rounds"] = round(worst, 3) if worst else None
        if t.program == "redis" and t.metric.endswith("p50_us") and s is not None \
                and s < REDIS_HIST_BUCKET_US and k is not None:
            # Both percentiles are the top of an 8 us bucket: the true
            # kernel p50 is > k - 8, the true shunt p50 < 8.
            rec["value_lower_bound"] = round((k - REDIS_HIST_BUCKET_US + 1) /
                                             REDIS_HIST_BUCKET_US, 3)
            rec["note"] = ("shunt's p50 is in redis-benchmark's lowest histogram bucket "
                           "(< %d us); the ratio is at least %.2f" % (
                               REDIS_HIST_BUCKET_US, rec["value_lower_bound"]))
        out.append(rec)
    return out


def fmt_val(v, unit_div, program, metric):
    if v is None:
        return "-"
    if program == "redis" and metric.endswith("_us") and "wall" not in metric \
            and v < REDIS_HIST_BUCKET_US:
        return "<%d" % REDIS_HIST_BUCKET_US
    return fmt_num(v / unit_div)


def print_report(summary, targets, programs, failures):
    by_metric = {(t["program"], t["measurement"], t["metric"]): t for t in targets}
    print("\n%-10s %-24s %-8s %10s %10s %13s   %s" % (
        "program", "what", "unit", "kernel", "shunt", "shunt better", "target"))
    for prog in programs:
        if prog not in summary:
            print("%-10s %s" % (prog, failures.get(prog, "no results")))
            continue
        for meas, metric, label, div, unit, better in PANELS[prog]:
            k = get(summary, prog, meas, "kernel", metric)
            s = get(summary, prog, meas, "shunt", metric)
            if k is None and s is None:
                continue
            imp = improvement(k, s, better)
            t = by_metric.get((prog, meas, metric))
            tcell = "" if not t else "%s need >= %gx" % (t["status"], t["need"])
            print("%-10s %-24s %-8s %10s %10s %13s   %s" % (
                prog, label, unit, fmt_val(k, div, prog, metric),
                fmt_val(s, div, prog, metric),
                "-" if imp is None else "%.2fx %s" % (imp, "lower" if better == "lower"
                                                       else "higher"), tcell))
    print("\nTargets (medians over rounds; shunt better = kernel/shunt for latency, "
          "shunt/kernel for rates)")
    for t in targets:
        print("  %-4s %-18s %8s  need >= %gx   %s" % (
            t["status"], t["name"], "-" if t["value"] is None else "%.2fx" % t["value"],
            t["need"], t["description"]))
        if t.get("value_worst_rounds") is not None:
            print("       worst pairing of rounds: %.2fx" % t["value_worst_rounds"])
        if t.get("note"):
            print("       note: " + t["note"])
    for prog, why in failures.items():
        print("FAILED/SKIPPED %s: %s" % (prog, why))


def plot_program(path, summary, prog, targets, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [p for p in PANELS[prog] if any(
        get(summary, prog, p[0], mode, p[1]) is not None for mode in MODES)]
    if not panels:
        return False
    ncols = min(4, len(panels))
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.4 * ncols + 0.6, 4.2 * nrows + 0.6),
                             squeeze=False)
    axes = [ax for row in axes for ax in row]
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    by_metric = {(t["program"], t["measurement"], t["metric"]): t for t in targets}
    for ax, (meas, metric, label, div, unit, better) in zip(axes, panels):
        lows = []
        for i, mode in enumerate(MODES):
            med = get(summary, prog, meas, mode, metric)
            if med is None:
                continue
            vals = get(summary, prog, meas, mode, metric, "values")
            lows.append(min(vals) / div)
            ax.bar(i, med / div, color=COLORS[mode], alpha=0.75, label=mode)
            ax.plot([i] * len(vals), [v / div for v in vals], "k.", ms=6)
            ax.annotate(fmt_num(med / div), (i, med / div), ha="center", va="bottom",
                        fontsize=8)
        ax.set_xticks(range(len(MODES)))
        ax.set_xticklabels(MODES)
        ax.set_ylabel(unit + (" (lower is better)" if better == "lower" else
                              " (higher is better)"))
        imp = improvement(get(summary, prog, meas, "kernel", metric),
                          get(summary, prog, meas, "shunt", metric), better)
        head = label + ("\nshunt %.2fx %s" % (imp, "lower" if better == "lower" else "higher")
                        if imp else "")
        t = by_metric.get((prog, meas, metric))
        if t:
            head += "\ntarget >= %gx: %s" % (t["need"], t["status"])
        ax.set_title(head, fontsize=9)
        if better == "lower":
            # Latencies differ by up to 1000x: a log axis keeps both bars
            # visible; its bottom is set below the smaller one.
            ax.set_yscale("log")
            if lows:
                ax.set_ylim(bottom=min(lows) / 3)
        ax.grid(True, axis="y", alpha=0.3)
    fig.suptitle(title + "\nbars: median over rounds, dots: each round", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- main --------------------------------------------------------------------

def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="one round, short client runs (~1 s each): a smoke run")
    p.add_argument("--only", help="comma-separated subset of %s" % ",".join(PROGRAM_NAMES))
    p.add_argument("--modes", default=",".join(MODES), help="kernel,shunt or one of them")
    p.add_argument("--rounds", type=int,
                   help="sessions per program and mode, kernel and shunt alternating, "
                   "first mode swapped every round; medians are reported (default 3, "
                   "1 with --quick)")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--build", default=os.path.join(REPO, "build"), help="meson build dir")
    p.add_argument("--shunt", help="shunt CLI (default BUILD/src/cli/shunt)")
    p.add_argument("--out", help="output dir (default bench/results/<UTC timestamp>)")
    p.add_argument("--wait-idle", type=float, default=0, metavar="SEC",
                   help="wait up to SEC for other processes to leave the CPUs alone first")
    p.add_argument("--retry-disturbed", type=int, default=2, metavar="N",
                   help="run a session again, up to N times, when other processes used "
                   "more than %d%%%% of the CPUs during it (default 2)" % (100 * LOAD_WARN_FRAC))
    p.add_argument("--keep-tmp", action="store_true",
                   help="keep the temporary directory (configs, server logs, SHUNT_STATS)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if a target FAILs or is skipped, or a run failed")
    a = p.parse_args()
    a.rounds = a.rounds if a.rounds is not None else (1 if a.quick else 3)
    if a.rounds < 1 or a.retry_disturbed < 0:
        p.error("--rounds must be >= 1 and --retry-disturbed >= 0")
    if a.only:
        a.only = [x.strip() for x in a.only.split(",") if x.strip()]
        for x in a.only:
            if x not in PROGRAM_NAMES:
                p.error("--only: unknown program %r (known: %s)" % (x, ", ".join(PROGRAM_NAMES)))
    else:
        a.only = list(PROGRAM_NAMES)
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in a.modes:
        if m not in MODES:
            p.error("--modes: unknown mode %r" % m)
    check_pinning(p, a.server_cpu, a.client_cpu)
    return a


def run_all(runner, args, programs, modes, notes, failures, sessions):
    """Every session, appended to sessions as it ends (kept on an interrupt)."""
    t0 = time.monotonic()
    for prog in programs:
        fails = {m: 0 for m in modes}
        for rnd in range(args.rounds):
            order = modes if rnd % 2 == 0 else list(reversed(modes))
            for mode in order:
                if fails[mode] >= MAX_CONSECUTIVE_FAILURES:
                    continue
                for attempt in range(args.retry_disturbed + 1):
                    rec = runner.session(prog, mode, rnd)
                    rec["attempt"] = attempt
                    sessions.append(rec)
                    log("[%6.1fs] %s" % (time.monotonic() - t0, progress_line(rec)))
                    if rec["foreign_cpu_frac"] < LOAD_WARN_FRAC:
                        break
                    if attempt < args.retry_disturbed:
                        rec["discarded"] = "other load during the session; measured again"
                        log("  other processes used %.0f%% of the CPUs: measuring again once "
                            "the machine is quiet" % (100 * rec["foreign_cpu_frac"]))
                        check_idle(RETRY_WAIT_S)
                    else:
                        notes.append("%s %s round %d: other processes used %.0f%% of the "
                                     "CPUs; kept, but do not trust it" % (
                                         prog.name, mode, rnd, 100 * rec["foreign_cpu_frac"]))
                fails[mode] = 0 if rec["ok"] else fails[mode] + 1
                if not rec["ok"]:
                    first = rec.get("error") or next(
                        (m["error"] for m in rec["measurements"] if not m["ok"]), "?")
                    failures.setdefault("%s %s" % (prog.name, mode), first)
                if fails[mode] >= MAX_CONSECUTIVE_FAILURES:
                    msg = ("%s under %s failed %d sessions in a row; not run again (last: %s)"
                           % (prog.name, mode, fails[mode], rec.get("error") or first))
                    loud(msg)
                    notes.append(msg)


def progress_line(rec):
    parts = []
    for m in rec["measurements"]:
        if not m["ok"]:
            parts.append("%s FAILED: %s" % (m["measurement"], m.get("error", "?")[:300]))
            continue
        for meas, metric, label, div, unit, _ in PANELS[rec["program"]]:
            if meas == m["measurement"] and metric in m["metrics"]:
                parts.append("%s %s %s" % (label, fmt_num(m["metrics"][metric] / div), unit))
    line = "%-9s %-6s round %d probe %sns | %s" % (
        rec["program"], rec["mode"], rec["round"],
        "-" if rec["shm_rtt8_p50_ns"] is None else "%.0f" % rec["shm_rtt8_p50_ns"],
        "; ".join(parts))
    if rec.get("error"):
        line += " | SESSION FAILED: " + rec["error"][:400]
    if rec["foreign_cpu_frac"] >= LOAD_WARN_FRAC:
        line += " | DISTURBED: others used %.0f%% CPU (%s)" % (
            100 * rec["foreign_cpu_frac"], ", ".join(rec.get("foreign_top", [])) or "?")
    return line


def interrupted(signum, frame):
    raise KeyboardInterrupt


def main():
    args = parse_args()
    # Stop cleanly (servers, the daemon, partial results written) on SIGTERM
    # too, and on SIGINT even when started in the background, where the
    # shell leaves SIGINT ignored.
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    bins = {"shunt": args.shunt or os.path.join(args.build, "src", "cli", "shunt"),
            "shmring": os.path.join(args.build, "bench", "shmring")}
    if not os.access(bins["shmring"], os.X_OK):
        bins["shmring"] = None
    notes, failures, skipped = [], {}, {}
    programs = []
    for prog in PROGRAMS:
        if prog.name not in args.only:
            continue
        why = program_missing(prog)
        if why:
            loud("SKIPPING %s: %s" % (prog.name, why))
            skipped[prog.name] = "skipped: " + why
            notes.append("%s skipped: %s" % (prog.name, why))
        else:
            programs.append(prog)

    started = datetime.datetime.now(datetime.timezone.utc)
    out_dir = args.out or os.path.join(REPO, "bench", "results",
                                       started.strftime("%Y%m%dT%H%M%SZ"))
    os.makedirs(out_dir, exist_ok=True)
    load_at_start = check_idle(args.wait_idle)
    if load_at_start["foreign_cpu_frac"] >= LOAD_WARN_FRAC:
        msg = ("the machine is busy before the run: others use %.0f%% of the CPUs (%s)" % (
            100 * load_at_start["foreign_cpu_frac"],
            ", ".join("%s[%d] %d%%" % (p["comm"], p["pid"], p["cpu_pct"])
                      for p in load_at_start["busy_processes"]) or "unknown"))
        loud(msg)
        notes.append(msg)
    tmpdir = tempfile.mkdtemp(prefix="shunt-apps-")
    runner = Runner(args, bins, tmpdir)
    modes = list(args.modes)
    shunt_skip = None
    if "shunt" in modes:
        if not os.access(bins["shunt"], os.X_OK):
            shunt_skip = "%s does not exist (build first: ninja -C build)" % bins["shunt"]
        else:
            shunt_skip = runner.start_daemon()
        if shunt_skip:
            loud("SKIPPING shunt mode: " + shunt_skip)
            notes.append("shunt mode skipped: " + shunt_skip)
            modes.remove("shunt")
    runner.meter = AppsMeter(runner.shunt_env["SHUNT_SOCKET"])

    log("apps.py: %s, modes %s, %d round(s)%s, server on cpu %d, client on cpu %d; "
        "tmp %s; results in %s" % (",".join(p.name for p in programs), ",".join(modes),
                                   args.rounds, " (quick)" if args.quick else "",
                                   args.server_cpu, args.client_cpu, tmpdir, out_dir))

    t0 = time.monotonic()
    sessions, complete = [], False
    try:
        run_all(runner, args, programs, modes, notes, failures, sessions)
        complete = True
    except KeyboardInterrupt:
        log("interrupted; writing what was measured")
    finally:
        runner.stop_daemon()
        if args.keep_tmp:
            log("kept %s (server logs, SHUNT_STATS files)" % tmpdir)
        else:
            shutil.rmtree(tmpdir, ignore_errors=True)

    summary = summarise(sessions)
    for prog in programs:
        if "shunt" not in modes:
            skipped.setdefault(prog.name, "shunt mode not measured")
    targets = evaluate_targets(summary, skipped, args.only)
    probes = [s["shm_rtt8_p50_ns"] for s in sessions if s.get("shm_rtt8_p50_ns")]
    if probes and max(probes) > 2 * min(probes):
        notes.append("the raw-ring probe moved between %.0f and %.0f ns: the host moved the "
                     "vCPUs during the run (README, Regimes); per-session probes are in "
                     "sessions[].shm_rtt8_p50_ns" % (min(probes), max(probes)))
    failed = [s for s in sessions if not s["ok"] and not s.get("discarded")]
    if failed:
        notes.append("%d sessions failed; see sessions[].error and measurements[].error"
                     % len(failed))
    doc = {
        "schema": 1,
        "benchmark": "apps",
        "complete": complete,
        "started_utc": started.isoformat(timespec="seconds"),
        "elapsed_s": round(time.monotonic() - t0, 1),
        "machine": machine_info(),
        "git": git_info(REPO),
        "config": {
            "programs": [p.name for p in programs], "requested": args.only, "modes": modes,
            "mode_help": MODE_HELP, "rounds": args.rounds, "quick": args.quick,
            "server_cpu": args.server_cpu, "client_cpu": args.client_cpu,
            "binaries": bins, "binary_mtimes": build_mtimes(args.build),
            "shunt_skipped": shunt_skip,
            "program_notes": {p.name: p.note for p in programs if p.note},
            "shunt_env": {k: v for k, v in os.environ.items() if k.startswith("SHUNT_")},
        },
        "notes": notes,
        "failures": failures,
        "load_at_start": load_at_start,
        "targets": targets,
        "summary": summary,
        "sessions": sessions,
    }
    json_path = write_doc(out_dir, "apps", doc)

    m = doc["machine"]
    print("\nshunt application benchmarks, %s, %s, %d CPUs, kernel %s, %d round(s)" % (
        doc["started_utc"], m["cpu_model"], m["nproc"], m["kernel"], args.rounds))
    print_report(summary, targets, [p.name for p in programs], failures)
    for n in notes:
        print("note: " + n)
    written = [json_path]
    if not args.no_plot:
        try:
            for prog in programs:
                path = os.path.join(out_dir, "apps-%s.png" % prog.name)
                title = "shunt apps: %s — %s, %s, %d CPUs, Linux %s" % (
                    prog.name, doc["started_utc"], m["cpu_model"], m["nproc"], m["kernel"])
                if plot_program(path, summary, prog.name, targets, title):
                    written.append(path)
        except ImportError as e:
            print("no plots: %s (apt install python3-matplotlib)" % e)
    print("\n" + "\n".join("wrote " + w for w in written))
    if not complete:
        return 130
    if args.strict and (failed or
                        any(t["status"] != "PASS" for t in targets
                            if t["program"] in [p.name for p in programs])):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
