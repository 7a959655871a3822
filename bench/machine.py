# SPDX-License-Identifier: MIT
"""Facts about the machine a benchmark ran on, and detection of other load
(processes that are not the benchmark's, time stolen by the host)."""

import os
import platform
import subprocess
import sys
import time

# Other processes using more than this share of the CPUs spoil a group.
LOAD_WARN_FRAC = 0.05


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def read_first(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def machine_info():
    cpu_model = None
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and cpu_model is None:
                    cpu_model = value.strip()
                elif key == "flags" and not flags:
                    flags = value
    except OSError:
        pass
    mem_kib = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_kib = int(line.split()[1])
    except OSError:
        pass
    uname = platform.uname()
    return {
        "hostname": uname.node,
        "kernel": uname.release,
        "kernel_version": uname.version,
        "arch": uname.machine,
        "cpu_model": cpu_model,
        "nproc": os.cpu_count(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "hypervisor": " hypervisor" in " " + flags,
        "clocksource": read_first(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource"),
        "governor": read_first(
            "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
        "mem_total_kib": mem_kib,
        "python": platform.python_version(),
    }


class LoadMeter:
    """CPU time used since mark() by processes other than this driver and its
    reaped children (another session's build, a stress test), and time the
    host stole from the vCPUs. Either one makes the numbers meaningless on a
    machine where the benchmark wants every core for itself."""

    def __init__(self):
        self.hz = os.sysconf("SC_CLK_TCK")
        self.ncpu = os.cpu_count() or 1
        self.last = self.sample()

    def sample(self):
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]] + [0] * 8
        # user nice system idle iowait irq softirq steal: irq and softirq
        # are left out because they are not charged to any process (the
        # loopback TCP path runs there on our behalf).
        busy = (v[0] + v[1] + v[2]) / self.hz
        t = os.times()
        own = t.user + t.system + t.children_user + t.children_system
        return time.monotonic(), busy, v[7] / self.hz, own

    def mark(self):
        self.last = self.sample()

    def since_mark(self):
        now = self.sample()
        wall = max(now[0] - self.last[0], 1e-3) * self.ncpu
        return {
            "foreign_cpu_frac": round(max(0.0, (now[1] - self.last[1])
                                          - (now[3] - self.last[3])) / wall, 3),
            "steal_frac": round((now[2] - self.last[2]) / wall, 3),
        }


def busy_processes(interval=0.5, top=4):
    """The processes (not ours) that used the most CPU over interval."""
    def snap():
        out = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % entry) as f:
                    data = f.read()
            except OSError:
                continue
            comm = data[data.find("(") + 1:data.rfind(")")]
            fields = data[data.rfind(")") + 2:].split()
            out[int(entry)] = (comm, int(fields[11]) + int(fields[12]))
        return out
    a = snap()
    time.sleep(interval)
    b = snap()
    hz = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    rows = []
    for pid, (comm, ticks) in b.items():
        if pid != me and pid in a:
            pct = 100.0 * (ticks - a[pid][1]) / hz / interval
            if pct >= 1:
                rows.append((round(pct), pid, comm))
    return sorted(rows, reverse=True)[:top]


def check_idle(wait_s):
    """Sample the machine before starting; wait up to wait_s for it to go
    quiet. Returns the last load sample (with the busiest processes)."""
    deadline = time.monotonic() + wait_s
    while True:
        meter = LoadMeter()
        procs = busy_processes()
        load = meter.since_mark()
        load["busy_processes"] = [{"cpu_pct": p, "pid": i, "comm": c} for p, i, c in procs]
        if load["foreign_cpu_frac"] < LOAD_WARN_FRAC or time.monotonic() >= deadline:
            return load
        log("machine busy (%.0f%% of the CPUs used by others); waiting up to %.0f s more"
            % (100 * load["foreign_cpu_frac"], deadline - time.monotonic()))
        time.sleep(1)


def git_info(repo):
    try:
        head = subprocess.run(["git", "-C", repo, "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", repo, "status", "--porcelain"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return {
        "commit": head.stdout.strip() if head.returncode == 0 else None,
        "dirty": bool(dirty.stdout.strip()) if dirty.returncode == 0 else None,
    }


def check_pinning(parser, server_cpu, client_cpu, who=("server", "client")):
    """Refuse (parser.error) CPUs this process may not use, or one CPU for both sides."""
    cpus = os.sched_getaffinity(0)
    for c in (server_cpu, client_cpu):
        if c not in cpus:
            parser.error("cpu %d is not available to this process (have %s)" % (c, sorted(cpus)))
    if server_cpu == client_cpu:
        parser.error("%s and %s must be pinned to different CPUs" % who)
