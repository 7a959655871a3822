#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Readiness: an eventfd per connection end (in each process's own epoll)
against one notice hub per process (today's design), and the kernel's TCP
loopback, at 1, 100 and many connections: a round trip on a connection
picked at random, both sides asleep in epoll_wait (bench/readiness.c says
how each works). Modes alternate within each repetition; medians of
--repeat. Writes readiness.json and readiness.png (docs/waiting.md,
"Readiness", has the decision)."""

import argparse
import datetime
import json
import pathlib
import resource
import statistics
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
MODES = ("eventfd", "hub", "tcp")


def most_connections():
    """The eventfd mode holds two descriptors per connection in each process."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard == resource.RLIM_INFINITY:
        return 10000
    return min(10000, (hard - 64) // 2 // 1000 * 1000)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--rounds", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(HERE.parent / "build" / "bench-results"))
    args = ap.parse_args()
    prog = pathlib.Path(args.build) / "bench" / "readiness"
    if not prog.exists():
        sys.exit(f"readiness: {prog} is not built (ninja -C {args.build})")
    many = most_connections()
    sizes = [1, 100, many]
    runs = {m: {n: [] for n in sizes} for m in MODES}
    fds = {m: {} for m in MODES}
    for rep in range(args.repeat):
        for n in sizes:
            for m in MODES:
                out = subprocess.run([str(prog), m, str(n), str(args.rounds)], check=True,
                                     capture_output=True, text=True, timeout=600).stdout
                rec = json.loads(out)
                runs[m][n].append(rec["rtt_ns"] / 1000)
                fds[m][n] = rec["fds"]
        print(f"repetition {rep + 1}/{args.repeat} done", file=sys.stderr)
    result = {
        "when": datetime.datetime.now().isoformat(timespec="seconds"),
        "rounds": args.rounds,
        "repeat": args.repeat,
        "many": many,
        "rtt_us": {m: {n: statistics.median(runs[m][n]) for n in sizes} for m in MODES},
        "server_fds": fds,
        "runs_us": runs,
    }
    out_dir = pathlib.Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "readiness.json").write_text(json.dumps(result, indent=1))
    print(f"{'connections':>12} " + " ".join(f"{m + ' us':>12}" for m in MODES) +
          "   server fds (eventfd / hub / tcp)")
    for n in sizes:
        print(f"{n:>12} " + " ".join(f"{result['rtt_us'][m][n]:>12.2f}" for m in MODES) +
              "   " + " / ".join(str(fds[m][n]) for m in MODES))
    if many < 10000:
        print(f"(at most {many} connections: two eventfds each must fit under the hard "
              f"descriptor limit of {resource.getrlimit(resource.RLIMIT_NOFILE)[1]})")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for m in MODES:
        ax.plot(sizes, [result["rtt_us"][m][n] for n in sizes], marker="o", label=m)
    ax.set_xscale("log")
    ax.set_xlabel("connections (one active at a time)")
    ax.set_ylabel("round trip, both asleep (us)")
    ax.set_title("readiness: eventfd per end vs notice hub vs kernel TCP")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "readiness.png", dpi=100)
    print(f"wrote {out_dir / 'readiness.json'} and readiness.png")


if __name__ == "__main__":
    main()
