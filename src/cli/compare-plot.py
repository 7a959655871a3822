#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The picture of `shunt compare --plot FILE.png`: the client's time in
each run, and each throughput line both runs printed, plain against shunt.
Reads the JSON `shunt compare --json` prints (argv[1]), writes a PNG (argv[2])."""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare-plot.py COMPARE.json OUT.png")
    with open(sys.argv[1], encoding="utf-8") as f:
        data = json.load(f)
    rates = data["throughput"][:12]
    panels = 1 + (1 if rates else 0)
    fig, axes = plt.subplots(1, panels, figsize=(5 + 5 * (panels - 1), 4), squeeze=False)
    colors = ("#888888", "#1f77b4")

    ax = axes[0][0]
    secs = [data["plain"]["seconds"], data["shunt"]["seconds"]]
    ax.bar(["kernel", "shunt"], secs, color=colors)
    ax.set_ylabel("client's wall-clock time (s)")
    ax.set_title("time")
    for x, y in enumerate(secs):
        ax.annotate(f"{y:.3f} s", (x, y), ha="center", va="bottom")

    if rates:
        ax = axes[0][1]
        labels = [r["line"][:32] for r in rates]
        ratio = [r["shunt"] / r["plain"] if r["plain"] else 0 for r in rates]
        ax.barh(range(len(rates)), ratio, color=colors[1])
        ax.axvline(1.0, color=colors[0], linestyle="--")
        ax.set_yticks(range(len(rates)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("shunt / kernel (the client's own numbers)")
        ax.set_title("throughput lines")
    client = " ".join(data["client"])
    fig.suptitle(f"shunt compare: {client[:80]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=100)


if __name__ == "__main__":
    main()
