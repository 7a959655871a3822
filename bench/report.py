# SPDX-License-Identifier: MIT
"""Summaries, targets, tables and the plot of the core benchmark's results."""

import statistics

# The targets from the issue, computed on the medians of a run.
RTT_VS_TCP_MIN = 50.0   # 8 B round trip at least 50x lower than kernel TCP
RTT_VS_SHM_MAX = 3.0    # ... and within 3x of the raw shared-memory ring
RATE_VS_TCP_MIN = 15.0  # 8 B one-way message rate at least 15x kernel TCP
BW_VS_TCP_MIN = 2.0     # 64 KiB .. 1 MiB bandwidth at least 2x kernel TCP
BW_SIZES = [65536, 262144, 1048576]

COLORS = {
    "kernel-tcp": "tab:blue",
    "unix": "tab:green",
    "shunt": "tab:red",
    "shm-raw": "tab:gray",
    "shm-raw-nt": "tab:purple",
}


def fmt_size(n):
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return "%d MiB" % (n >> 20)
    if n >= 1 << 10 and n % (1 << 10) == 0:
        return "%d KiB" % (n >> 10)
    return "%d B" % n


def fmt_num(x, digits=3):
    """Compact number with `digits` significant digits, k/M suffixes."""
    if x is None:
        return "-"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return "%.*g%s" % (digits, x / div, suffix)
    return "%.*g" % (digits, x)


def summarise(runs):
    """Median over repetitions of each metric, per series/mode/size."""
    groups = {}
    for r in runs:
        if r.get("ok") and not r.get("discarded"):
            groups.setdefault((r["series"], r["mode"], r["size"]), []).append(r["result"])
    out = {}
    for (series, mode, size), results in groups.items():
        if mode == "rtt":
            p50 = [x["rtt_ns"]["p50"] for x in results]
            entry = {
                "p50_ns": statistics.median(p50),
                "mean_ns": statistics.median(x["rtt_ns"]["mean"] for x in results),
                "p99_ns": statistics.median(x["rtt_ns"]["p99"] for x in results),
                "p50_ns_min": min(p50),
                "p50_ns_max": max(p50),
            }
        else:
            mbps = [x["mb_per_s"] for x in results]
            entry = {
                "msgs_per_s": statistics.median(x["msgs_per_s"] for x in results),
                "mb_per_s": statistics.median(mbps),
                "mb_per_s_min": min(mbps),
                "mb_per_s_max": max(mbps),
            }
        entry["n"] = len(results)
        out.setdefault(series, {}).setdefault(mode, {})[str(size)] = entry
    return out


def metric(summary, series, mode, size, key):
    try:
        return summary[series][mode][str(size)][key]
    except KeyError:
        return None


def ratio_target(name, desc, num, den, op, threshold):
    t = {"name": name, "description": desc, "threshold": threshold, "op": op}
    if num is None or den is None or den == 0:
        t.update(value=None, status="SKIP")
        return t
    value = num / den
    ok = value >= threshold if op == ">=" else value <= threshold
    t.update(value=round(value, 3), status="PASS" if ok else "FAIL")
    return t


def targets_for(summary, subject, sizes):
    """The issue's four targets with `subject` in shunt's place."""
    tcp = "kernel-tcp"
    out = [
        ratio_target("rtt8_vs_tcp",
                     "8 B round trip (p50) at least %gx lower than kernel TCP" % RTT_VS_TCP_MIN,
                     metric(summary, tcp, "rtt", 8, "p50_ns"),
                     metric(summary, subject, "rtt", 8, "p50_ns"), ">=", RTT_VS_TCP_MIN),
        ratio_target("rtt8_vs_shm",
                     "8 B round trip (p50) within %gx of the raw shared-memory ring"
                     % RTT_VS_SHM_MAX,
                     metric(summary, subject, "rtt", 8, "p50_ns"),
                     metric(summary, "shm-raw", "rtt", 8, "p50_ns"), "<=", RTT_VS_SHM_MAX),
        ratio_target("rate8_vs_tcp",
                     "8 B one-way message rate at least %gx kernel TCP" % RATE_VS_TCP_MIN,
                     metric(summary, subject, "stream", 8, "msgs_per_s"),
                     metric(summary, tcp, "stream", 8, "msgs_per_s"), ">=", RATE_VS_TCP_MIN),
    ]
    per_size = []
    for s in BW_SIZES:
        if s in sizes:
            per_size.append((s, ratio_target(
                "bw_%d" % s, "", metric(summary, subject, "stream", s, "mb_per_s"),
                metric(summary, tcp, "stream", s, "mb_per_s"), ">=", BW_VS_TCP_MIN)))
    bw = {"name": "bw_vs_tcp",
          "description": "64 KiB - 1 MiB one-way bandwidth at least %gx kernel TCP"
                         % BW_VS_TCP_MIN,
          "threshold": BW_VS_TCP_MIN, "op": ">=",
          "per_size": {str(s): t["value"] for s, t in per_size}}
    values = [t["value"] for _, t in per_size]
    if not per_size or None in values:
        bw.update(value=None, status="SKIP")
    else:
        bw.update(value=min(values),
                  status="PASS" if all(t["status"] == "PASS" for _, t in per_size) else "FAIL")
    if len(per_size) < len(BW_SIZES) and per_size:
        bw["note"] = "only sizes %s were measured" % [s for s, _ in per_size]
    out.append(bw)
    for t in out:
        t["subject"] = subject
    return out


def print_table(summary, series, sizes):
    cols = [s for s in series if s in summary]
    if not cols:
        print("no results")
        return
    w = 13
    print("\nRound trip, p50 (mean) in microseconds, median of repetitions")
    print("%-9s" % "size" + "".join("%*s" % (w + 6, c) for c in cols))
    for size in sizes:
        row = "%-9s" % fmt_size(size)
        for c in cols:
            p50 = metric(summary, c, "rtt", size, "p50_ns")
            mean = metric(summary, c, "rtt", size, "mean_ns")
            cell = "-" if p50 is None else "%s (%s)" % (fmt_num(p50 / 1e3), fmt_num(mean / 1e3))
            row += "%*s" % (w + 6, cell)
        print(row)
    print("\nOne-way stream at the receiver: messages/s | MB/s (10^6 B/s)")
    print("%-9s" % "size" + "".join("%*s" % (w + 6, c) for c in cols))
    for size in sizes:
        row = "%-9s" % fmt_size(size)
        for c in cols:
            rate = metric(summary, c, "stream", size, "msgs_per_s")
            mbps = metric(summary, c, "stream", size, "mb_per_s")
            cell = "-" if rate is None else "%s | %s" % (fmt_num(rate), fmt_num(mbps))
            row += "%*s" % (w + 6, cell)
        print(row)


def print_targets(targets, references):
    print("\nTargets (shunt, medians of this run)")
    for t in targets:
        value = "-" if t["value"] is None else "%.2fx" % t["value"]
        line = "  %-4s %-13s %8s  need %s %gx   %s" % (
            t["status"], t["name"], value, t["op"], t["threshold"], t["description"])
        print(line)
        if t.get("per_size"):
            print("       per size: " + ", ".join(
                "%s %s" % (fmt_size(int(s)), "-" if v is None else "%.2fx" % v)
                for s, v in t["per_size"].items()))
        if t.get("note"):
            print("       note: " + t["note"])
    for subject, ts in references.items():
        print("Same ratios for %s (what the hardware allows in this run):" % subject)
        print("  " + ", ".join("%s %s" % (t["name"], "-" if t["value"] is None
                                          else "%.2fx" % t["value"]) for t in ts))


def plot(path, summary, series, sizes, title, targets):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rtt, ax_bw) = plt.subplots(1, 2, figsize=(14, 5.8))
    for s in series:
        xs, p50, p99 = [], [], []
        for size in sizes:
            v = metric(summary, s, "rtt", size, "p50_ns")
            if v is not None:
                xs.append(size)
                p50.append(v / 1e3)
                p99.append(metric(summary, s, "rtt", size, "p99_ns") / 1e3)
        if xs:
            ax_rtt.plot(xs, p50, "o-", color=COLORS[s], label=s)
            ax_rtt.fill_between(xs, p50, p99, color=COLORS[s], alpha=0.12)
        xs, bw = [], []
        for size in sizes:
            v = metric(summary, s, "stream", size, "mb_per_s")
            if v is not None:
                xs.append(size)
                bw.append(v)
        if xs:
            ax_bw.plot(xs, bw, "o-", color=COLORS[s], label=s)
    ticks = [s for s in sizes]
    for ax in (ax_rtt, ax_bw):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ticks)
        ax.set_xticklabels([fmt_size(s).replace(" ", "") for s in ticks], rotation=45)
        ax.set_xlabel("message size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ax_rtt.set_ylabel("round trip (µs), line p50, band to p99")
    ax_rtt.set_title("Ping-pong round trip (lower is better)")
    ax_bw.set_ylabel("throughput at the receiver (MB/s)")
    ax_bw.set_title("One-way stream, one send() per message (higher is better)")
    status = "   ".join("%s %s" % (t["name"], t["status"]) for t in targets)
    if "shunt" not in series:
        status += "   (shunt not measured in this run)"
    fig.suptitle(title + "\ntargets: " + status, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
