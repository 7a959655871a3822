#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Core benchmark driver: ping-pong round trip and one-way throughput for
8 B .. 1 MiB messages over kernel TCP loopback, Unix sockets, shunt and a raw
shared-memory ring, all in one run; writes JSON + PNG and checks the targets.

Run from anywhere after `meson setup build && ninja -C build`:
    /usr/bin/python3 bench/core.py [--quick] [--sizes 8,4k,1M]
"""

import argparse
import datetime
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from machine import LOAD_WARN_FRAC, LoadMeter, check_idle, check_pinning, git_info, machine_info
from report import (fmt_num, fmt_size, plot, print_table, print_targets,
                    summarise, targets_for)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SIZES = [8, 64, 512, 4096, 16384, 65536, 262144, 1048576]
QUICK_SIZES = [8, 4096, 65536, 1048576]
MODES = ["rtt", "stream"]
# Order is the order of the table columns and plot legend.
SERIES = ["kernel-tcp", "unix", "shunt", "shm-raw", "shm-raw-nt"]
SERIES_HELP = {
    "kernel-tcp": "pp over kernel TCP on 127.0.0.1 (TCP_NODELAY)",
    "unix": "pp over a kernel Unix stream socket",
    "shunt": "pp over TCP on 127.0.0.1, both ends under `shunt run`",
    "shm-raw": "shmring: raw SPSC ring in shared memory, memcpy, spinning",
    "shm-raw-nt": "shmring with non-temporal stores for copies >= 4 KiB",
}
# A disturbed group is measured again up to --retry-disturbed times, after
# waiting up to this long for the machine to go quiet.
RETRY_WAIT_S = 30
# How long the driver waits for a pp server to listen.
READY_TIMEOUT_S = 10
# A series that fails this many runs in a row is dropped for the rest of the
# run, so that a broken build costs seconds, not the timeout of every point.
MAX_CONSECUTIVE_FAILURES = 2
# shm-raw-nt differs from shm-raw only for copies of at least this size.
NT_MIN_SIZE = 4096
# shmring parameters: bytes per direction, most bytes per publish.
SHM_RING_BYTES = 1 << 20
SHM_CHUNK = 64 << 10


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def loud(msg):
    bar = "!" * 78
    log("%s\n!! %s\n%s" % (bar, msg, bar))


def mode_envs(tmpdir):
    """The environments of the two modes: the kernel one is ours without
    LD_PRELOAD (said out loud if it was set: the kernel must be measured
    plain); the shunt one adds a private SHUNT_SOCKET in @tmpdir."""
    base = dict(os.environ)
    if "LD_PRELOAD" in base:
        loud("LD_PRELOAD is set in the environment (%s); removing it so the kernel "
             "runs measure the kernel" % base["LD_PRELOAD"])
        del base["LD_PRELOAD"]
    shunt = dict(base, SHUNT_SOCKET=os.path.join(tmpdir, "shuntd.sock"))
    return base, shunt


def write_doc(out_dir, name, doc):
    """Write a benchmark's result document as OUT_DIR/NAME.json; its path."""
    path = os.path.join(out_dir, name + ".json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return path


def drop_shunt_series(runner, bins, series, notes):
    """Take "shunt" out of @series (noting why in @notes) when the CLI is not
    built or check_shunt finds it cannot run; the reason, or None."""
    if "shunt" not in series:
        return None
    if not os.access(bins["shunt"], os.X_OK):
        why = "%s does not exist (build src/cli first)" % bins["shunt"]
    else:
        why = check_shunt(runner)
    if why:
        loud("SKIPPING the shunt series: " + why + "\n!! its targets will read SKIP")
        notes.append("shunt series skipped: " + why)
        series.remove("shunt")
    return why


def parse_size(text):
    t = text.strip()
    for suffix in ("iB", "B"):
        if len(t) > len(suffix) + 1 and t.endswith(suffix) and t[-len(suffix) - 1] in "kKmMgG":
            t = t[:-len(suffix)]
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:].lower(), 1)
    if mult != 1:
        t = t[:-1]
    value = int(t) * mult
    if value <= 0 or value > 64 << 20:
        raise ValueError("size %r outside [1, 64 MiB]" % text)
    return value

def free_tcp_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def last_json(text):
    """The last line of text that is a JSON object (the program's report;
    anything a preload library logs on stdout before it is ignored)."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def spawn(cmd, env):
    """Start cmd in a process group of its own, so that a run that hangs can
    be killed whole (a shmring child, a process `shunt run` forked) without
    touching anything we did not start."""
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)


def wait_ready(path, proc, what):
    """Wait for a server to write its --ready-file @path; raise, with the end
    of its stderr, if @proc exits first or READY_TIMEOUT_S passes."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            _, err = proc.communicate()
            raise RuntimeError("%s did not start: %s" % (what, err.strip()[-400:]))
        time.sleep(0.005)


def read_stats(path):
    """The SHUNT_STATS lines in @path, one dict per process; None if the file
    cannot be read or a line is not JSON."""
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError):
        return None


def stop(proc):
    """Kill the process group we created for proc (by its id) and reap proc."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        pass


class Runner:
    def __init__(self, args, bins, tmpdir):
        self.args = args
        self.bins = bins
        self.tmpdir = tmpdir
        self.base_env, self.shunt_env = mode_envs(tmpdir)
        self.timeout = args.warmup + args.duration + 20

    def common(self, mode, size, duration=None, warmup=None):
        return ["--mode", mode, "--size", str(size),
                "--duration", str(self.args.duration if duration is None else duration),
                "--warmup", str(self.args.warmup if warmup is None else warmup)]

    def wait_all(self, procs):
        """Wait for every (name, proc) in turn, the first one up to the run
        timeout; on a timeout or an interrupt, kill them all. Returns
        {name: (returncode, stdout, stderr)} or an error string."""
        out = {}
        try:
            for i, (name, proc) in enumerate(procs):
                so, se = proc.communicate(timeout=self.timeout if i == 0 else 10)
                out[name] = (proc.returncode, so, se)
        except subprocess.TimeoutExpired:
            for _, proc in procs:
                stop(proc)
            return "timed out after %.0f s" % (self.timeout if not out else 10)
        except BaseException:
            for _, proc in procs:
                stop(proc)
            raise
        return out

    @staticmethod
    def finish(rec, out, t0):
        if isinstance(out, str):
            rec.update(ok=False, error=out)
            return rec
        rec["wall_s"] = round(time.monotonic() - t0, 3)
        rec["result"] = last_json(out["client"][1])
        if "server" in out:
            rec["server"] = last_json(out["server"][1])
        errors = ["%s exit %d: %s" % (name, rc, err.strip()[-400:])
                  for name, (rc, _, err) in sorted(out.items()) if rc != 0]
        if rec["result"] is None and not errors:
            errors.append("client printed no JSON")
        rec["ok"] = not errors
        if errors:
            rec["error"] = "; ".join(errors)
        return rec

    def run_pair(self, server_cmd, client_cmd, env):
        """Start the server, wait until its listen() has returned (it creates
        a ready file then), start the client and wait for both. Waiting
        matters under shunt: a connect that beats the listener's
        registration with the daemon is left to the kernel."""
        ready = os.path.join(self.tmpdir, "ready")
        if os.path.exists(ready):
            os.unlink(ready)
        t0 = time.monotonic()
        server = spawn(server_cmd + ["--ready-file", ready], env)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while not os.path.exists(ready) and server.poll() is None:
                if time.monotonic() > deadline:
                    stop(server)
                    return {"cmd": client_cmd, "server_cmd": server_cmd, "ok": False,
                            "error": "server not listening after %d s" % READY_TIMEOUT_S}
                time.sleep(0.001)
            client = spawn(client_cmd, env)
        except BaseException:
            stop(server)
            raise
        out = self.wait_all([("client", client), ("server", server)])
        return self.finish({"cmd": client_cmd, "server_cmd": server_cmd}, out, t0)

    def run_single(self, cmd, env):
        t0 = time.monotonic()
        out = self.wait_all([("client", spawn(cmd, env))])
        return self.finish({"cmd": cmd}, out, t0)

    def pp_cmds(self, transport, mode, size):
        a = self.args
        if transport == "unix":
            path = os.path.join(self.tmpdir, "pp.sock")
            addr = ["--transport", "unix", "--path", path]
        else:
            addr = ["--transport", "tcp", "--host", "127.0.0.1",
                    "--port", str(free_tcp_port())]
        server = [self.bins["pp"], "server"] + addr + ["--cpu", str(a.server_cpu)]
        client = ([self.bins["pp"], "client"] + addr + self.common(mode, size)
                  + ["--cpu", str(a.client_cpu)])
        return server, client

    def shm_cmd(self, mode, size, copy="memcpy", duration=None, warmup=None):
        a = self.args
        return ([self.bins["shmring"]] + self.common(mode, size, duration, warmup)
                + ["--cpu", str(a.client_cpu), "--server-cpu", str(a.server_cpu),
                   "--ring-bytes", str(SHM_RING_BYTES), "--chunk", str(SHM_CHUNK),
                   "--copy", copy])

    def run(self, series, mode, size):
        if series == "kernel-tcp":
            server, client = self.pp_cmds("tcp", mode, size)
            return self.run_pair(server, client, self.base_env)
        if series == "unix":
            server, client = self.pp_cmds("unix", mode, size)
            return self.run_pair(server, client, self.base_env)
        if series == "shunt":
            server, client = self.pp_cmds("tcp", mode, size)
            wrap = [self.bins["shunt"], "run", "--"]
            env = dict(self.shunt_env)
            env["SHUNT_STATS"] = os.path.join(self.tmpdir, "stats.jsonl")
            if os.path.exists(env["SHUNT_STATS"]):
                os.unlink(env["SHUNT_STATS"])
            rec = self.run_pair(wrap + server, wrap + client, env)
            return check_on_shm(rec, env["SHUNT_STATS"])
        if series == "shm-raw":
            return self.run_single(self.shm_cmd(mode, size), self.base_env)
        if series == "shm-raw-nt":
            return self.run_single(self.shm_cmd(mode, size, "nt"), self.base_env)
        raise ValueError(series)

    def probe(self):
        """A 50 ms raw-ring 8 B round trip: tells which placement of the two
        vCPUs on the host this group ran in (see README, 'Regimes')."""
        rec = self.run_single(self.shm_cmd("rtt", 8, duration=0.05, warmup=0.02),
                              self.base_env)
        if rec["ok"]:
            return rec["result"]["rtt_ns"]["p50"]
        return None


# --- shunt daemon lifecycle ------------------------------------------------

def check_on_shm(rec, stats_path):
    """A shunt run counts only if its connection really was a circuit: both
    processes report their transport counters (SHUNT_STATS) at exit, and the
    client must have made a shared-memory connect and the server a
    shared-memory accept. Anything else was a measurement of the kernel."""
    stats = read_stats(stats_path)
    rec["shunt_stats"] = stats
    if not rec.get("ok"):
        return rec
    if stats is None:
        rec["on_shm"] = None  # a shunt without SHUNT_STATS: cannot tell
        return rec
    rec["on_shm"] = (any(s.get("shm_connect", 0) > 0 for s in stats) and
                     any(s.get("shm_accept", 0) > 0 for s in stats))
    if not rec["on_shm"]:
        rec["ok"] = False
        rec["error"] = ("the connection did not go over shared memory (SHUNT_STATS: %s)"
                        % json.dumps(stats))
    return rec


def unix_listener_pids(path):
    """Pids of our own processes that hold the Unix socket bound to path.
    Used to stop the daemon that `shunt run` started for this run (it lives
    at our private SHUNT_SOCKET, so nothing else can match)."""
    inodes = set()
    try:
        with open("/proc/net/unix") as f:
            next(f)
            for line in f:
                parts = line.split()
                if len(parts) >= 8 and parts[7] == path:
                    inodes.add(parts[6])
    except OSError:
        return set()
    if not inodes:
        return set()
    targets = {"socket:[%s]" % i for i in inodes}
    pids = set()
    uid = os.getuid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat("/proc/" + entry).st_uid != uid:
                continue
            fd_dir = "/proc/%s/fd" % entry
            for fd in os.listdir(fd_dir):
                if os.readlink(os.path.join(fd_dir, fd)) in targets:
                    pids.add(int(entry))
                    break
        except OSError:
            continue
    return pids


def stop_daemon(sock_path):
    pids = unix_listener_pids(sock_path)
    for pid in pids:
        log("stopping the shunt daemon started for this run (pid %d)" % pid)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + 3
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
                log("shunt daemon pid %d ignored SIGTERM; sent SIGKILL" % pid)
            except ProcessLookupError:
                pass


def check_shunt(runner):
    """Start the daemon once (so the first measured run does not race to),
    and make sure `shunt run` works at all."""
    shunt = runner.bins["shunt"]
    try:
        p = subprocess.run([shunt, "run", "--", "/bin/true"], capture_output=True,
                           text=True, env=runner.shunt_env, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return "`%s run -- /bin/true` failed: %s" % (shunt, e)
    if p.returncode != 0:
        return "`%s run -- /bin/true` exited %d: %s" % (
            shunt, p.returncode, p.stderr.strip()[-400:])
    if not unix_listener_pids(runner.shunt_env["SHUNT_SOCKET"]):
        return "`%s run -- /bin/true` left no daemon listening at %s: %s" % (
            shunt, runner.shunt_env["SHUNT_SOCKET"], p.stderr.strip()[-400:] or "no message")
    return None

# --- main ----------------------------------------------------------------

def run_group(runner, meter, state, notes, series, size, mode, repeat):
    """One (size, mode) point for every series: a probe, then `repeat`
    rounds with the series order rotated each round. Returns the group
    record (probe, load) and its runs."""
    todo = [s for s in series if not (s == "shm-raw-nt" and size < NT_MIN_SIZE)]
    meter.mark()
    group = {"size": size, "mode": mode, "shm_rtt8_p50_ns": runner.probe()}
    runs = []
    for rep in range(repeat):
        k = rep % len(todo)
        for s in todo[k:] + todo[:k]:
            if s in state["dropped"]:
                continue
            rec = runner.run(s, mode, size)
            rec.update(series=s, mode=mode, size=size, rep=rep)
            runs.append(rec)
            fails = state["failures"]
            fails[s] = 0 if rec["ok"] else fails[s] + 1
            if not rec["ok"]:
                log("  FAILED %s %s %s rep %d: %s"
                    % (s, mode, fmt_size(size), rep, rec.get("error")))
            if fails[s] >= MAX_CONSECUTIVE_FAILURES:
                msg = ("series %s failed %d times in a row; not running it again in "
                       "this run (last error: %s)" % (s, fails[s], rec.get("error")))
                loud(msg)
                notes.append(msg)
                state["dropped"].add(s)
    group.update(meter.since_mark())
    group["series"] = todo
    return group, runs


def progress_line(group, runs):
    mode, size = group["mode"], group["size"]
    parts = []
    for s in group["series"]:
        vals = [r["result"] for r in runs if r["series"] == s and r["ok"]]
        if not vals:
            parts.append("%s -" % s)
        elif mode == "rtt":
            parts.append("%s %sus" % (s, fmt_num(statistics.median(
                v["rtt_ns"]["p50"] for v in vals) / 1e3)))
        else:
            parts.append("%s %sMB/s" % (s, fmt_num(statistics.median(
                v["mb_per_s"] for v in vals))))
    probe = group["shm_rtt8_p50_ns"]
    line = "%-6s %-7s probe %sns | %s" % (
        mode, fmt_size(size), "-" if probe is None else "%.0f" % probe, ", ".join(parts))
    if group["foreign_cpu_frac"] >= LOAD_WARN_FRAC:
        line += " | DISTURBED: others used %.0f%% CPU" % (100 * group["foreign_cpu_frac"])
    return line


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="sizes %s, one repetition of 0.2 s: a ~20 s smoke run"
                   % ",".join(fmt_size(s).replace(" ", "") for s in QUICK_SIZES))
    p.add_argument("--sizes", help="comma-separated message sizes, e.g. 8,4k,64KiB,1M")
    p.add_argument("--series", default=",".join(SERIES),
                   help="comma-separated subset of %s" % ",".join(SERIES))
    p.add_argument("--modes", default=",".join(MODES), help="rtt,stream or one of them")
    p.add_argument("--duration", type=float, help="measured seconds per run (default 0.2)")
    p.add_argument("--warmup", type=float, help="warm-up seconds per run (default 0.1)")
    p.add_argument("--repeat", type=int,
                   help="runs per point, interleaved across series; the median is "
                   "reported (default 5)")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--build", default=os.path.join(REPO, "build"), help="meson build dir")
    p.add_argument("--shunt", help="shunt CLI (default BUILD/src/cli/shunt)")
    p.add_argument("--out", help="output dir (default bench/results/<UTC timestamp>)")
    p.add_argument("--wait-idle", type=float, default=0, metavar="SEC",
                   help="wait up to SEC for other processes to leave the CPUs alone "
                   "before starting (default: do not wait, only warn)")
    p.add_argument("--retry-disturbed", type=int, default=2, metavar="N",
                   help="measure a (size, mode) group again, up to N times, when other "
                   "processes used the CPUs during it (default 2)")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if a target FAILs or is skipped, or a run failed")
    a = p.parse_args()
    a.duration = a.duration if a.duration is not None else 0.2
    a.warmup = a.warmup if a.warmup is not None else (0.05 if a.quick else 0.1)
    a.repeat = a.repeat if a.repeat is not None else (1 if a.quick else 5)
    if a.sizes:
        try:
            a.sizes = sorted({parse_size(s) for s in a.sizes.split(",") if s.strip()})
        except ValueError as e:
            p.error("--sizes: %s" % e)
    else:
        a.sizes = QUICK_SIZES if a.quick else SIZES
    a.series = [s.strip() for s in a.series.split(",") if s.strip()]
    for s in a.series:
        if s not in SERIES:
            p.error("--series: unknown series %r (known: %s)" % (s, ", ".join(SERIES)))
    a.series = [s for s in SERIES if s in a.series]
    a.modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in a.modes:
        if m not in MODES:
            p.error("--modes: unknown mode %r" % m)
    if a.repeat < 1 or a.duration <= 0 or a.warmup < 0 or a.retry_disturbed < 0:
        p.error("--repeat must be >= 1, --duration > 0, --warmup and --retry-disturbed >= 0")
    check_pinning(p, a.server_cpu, a.client_cpu)
    return a


def main():
    args = parse_args()
    bins = {
        "pp": os.path.join(args.build, "bench", "pp"),
        "shmring": os.path.join(args.build, "bench", "shmring"),
        "shunt": args.shunt or os.path.join(args.build, "src", "cli", "shunt"),
    }
    for name in ("pp", "shmring"):
        if not os.access(bins[name], os.X_OK):
            log("core.py: %s not found or not executable; build first: "
                "meson setup build && ninja -C build" % bins[name])
            return 2

    series = list(args.series)
    notes = []
    started = datetime.datetime.now(datetime.timezone.utc)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    out_dir = args.out or os.path.join(REPO, "bench", "results", stamp)
    os.makedirs(out_dir, exist_ok=True)
    tmpdir = tempfile.mkdtemp(prefix="shunt-bench-")
    runner = Runner(args, bins, tmpdir)

    shunt_skip = drop_shunt_series(runner, bins, series, notes)

    log("core.py: sizes %s, series %s, modes %s, %d x %.2f s (+%.2f s warm-up) per point, "
        "server on cpu %d, client on cpu %d; results in %s"
        % (",".join(fmt_size(s).replace(" ", "") for s in args.sizes), ",".join(series),
           ",".join(args.modes), args.repeat, args.duration, args.warmup,
           args.server_cpu, args.client_cpu, out_dir))

    load_at_start = check_idle(args.wait_idle)
    if load_at_start["foreign_cpu_frac"] >= LOAD_WARN_FRAC:
        msg = ("the machine is busy before the run: other processes use %.0f%% of the "
               "CPUs (%s); every number below is disturbed, rerun on a quiet machine "
               "(or use --wait-idle)" % (
                   100 * load_at_start["foreign_cpu_frac"],
                   ", ".join("%s[%d] %d%%" % (p["comm"], p["pid"], p["cpu_pct"])
                             for p in load_at_start["busy_processes"]) or "unknown"))
        loud(msg)
        notes.append(msg)
    meter = LoadMeter()
    state = {"failures": {s: 0 for s in series}, "dropped": set()}
    disturbed, runs, probes = [], [], []
    t0 = time.monotonic()
    complete = False
    try:
        for size in args.sizes:
            for mode in args.modes:
                for attempt in range(args.retry_disturbed + 1):
                    group, group_runs = run_group(runner, meter, state, notes,
                                                  series, size, mode, args.repeat)
                    group["attempt"] = attempt
                    probes.append(group)
                    runs.extend(group_runs)
                    log("[%5.1fs] %s" % (time.monotonic() - t0, progress_line(group, group_runs)))
                    if group["foreign_cpu_frac"] < LOAD_WARN_FRAC:
                        break
                    if attempt < args.retry_disturbed:
                        for r in group_runs:
                            r["discarded"] = "other load during the group; measured again"
                        log("  measuring this group again once the machine is quiet")
                        check_idle(RETRY_WAIT_S)
                    else:
                        disturbed.append("%s %s" % (mode, fmt_size(size)))
        complete = True
    except KeyboardInterrupt:
        log("interrupted; writing what was measured")
    finally:
        if "shunt" in series:
            stop_daemon(runner.shunt_env["SHUNT_SOCKET"])
        shutil.rmtree(tmpdir, ignore_errors=True)

    summary = summarise(runs)
    targets = targets_for(summary, "shunt", args.sizes)
    references = {s: targets_for(summary, s, args.sizes)
                  for s in ("shm-raw", "shm-raw-nt", "unix") if s in summary}
    probe_vals = [p["shm_rtt8_p50_ns"] for p in probes
                  if p["shm_rtt8_p50_ns"] and p["foreign_cpu_frac"] < LOAD_WARN_FRAC]
    if probe_vals and max(probe_vals) > 2 * min(probe_vals):
        notes.append("the raw-ring probe moved between %.0f and %.0f ns during the run: "
                     "the host moved the vCPUs (see README, Regimes); compare series "
                     "within a size, not across sizes" % (min(probe_vals), max(probe_vals)))
    if disturbed:
        notes.append("other processes used more than %.0f%% of the CPUs during %d of %d "
                     "groups (%s): those numbers are not trustworthy; see probes[]"
                     ".foreign_cpu_frac" % (100 * LOAD_WARN_FRAC, len(disturbed),
                                            len(args.sizes) * len(args.modes),
                                            ", ".join(disturbed)))
    retried = sum(1 for p in probes if p["attempt"] > 0)
    if retried:
        notes.append("%d groups were measured again because other processes used the "
                     "CPUs; the disturbed runs are kept in runs[] with 'discarded'" % retried)
    failed = [r for r in runs if not r["ok"] and not r.get("discarded")]
    if failed:
        notes.append("%d runs failed; see runs[].error" % len(failed))

    finished = datetime.datetime.now(datetime.timezone.utc)
    doc = {
        "schema": 1,
        "benchmark": "core",
        "complete": complete,
        "started_utc": started.isoformat(timespec="seconds"),
        "finished_utc": finished.isoformat(timespec="seconds"),
        "elapsed_s": round(time.monotonic() - t0, 1),
        "machine": machine_info(),
        "git": git_info(REPO),
        "config": {
            "sizes": args.sizes, "series": series, "requested_series": args.series,
            "modes": args.modes, "repeat": args.repeat, "duration_s": args.duration,
            "warmup_s": args.warmup, "server_cpu": args.server_cpu,
            "client_cpu": args.client_cpu, "shm_ring_bytes": SHM_RING_BYTES,
            "shm_chunk": SHM_CHUNK, "binaries": bins, "shunt_skipped": shunt_skip,
            "shunt_env": {k: v for k, v in os.environ.items() if k.startswith("SHUNT_")},
            "series_help": SERIES_HELP,
        },
        "notes": notes,
        "load_at_start": load_at_start,
        "targets": targets,
        "reference_ratios": references,
        "summary": summary,
        "probes": probes,
        "runs": runs,
    }
    json_path = write_doc(out_dir, "core", doc)

    m = doc["machine"]
    print("\nshunt core benchmark, %s, %s, %d CPUs, kernel %s" % (
        doc["started_utc"], m["cpu_model"], m["nproc"], m["kernel"]))
    print_table(summary, SERIES, args.sizes)
    print_targets(targets, references)
    for n in notes:
        print("note: " + n)
    if not args.no_plot and summary:
        png_path = os.path.join(out_dir, "core.png")
        title = "shunt core benchmark %s — %s, %d CPUs, Linux %s" % (
            doc["started_utc"], m["cpu_model"], m["nproc"], m["kernel"])
        try:
            plot(png_path, summary, [s for s in SERIES if s in summary], args.sizes,
                 title, targets)
            print("\nwrote %s\nwrote %s" % (json_path, png_path))
        except ImportError as e:
            print("\nwrote %s (no plot: %s; apt install python3-matplotlib)" % (json_path, e))
    else:
        print("\nwrote %s" % json_path)

    if args.strict and (failed or not complete or disturbed or
                        any(t["status"] != "PASS" for t in targets)):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
