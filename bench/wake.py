#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Wake-up latency: a round trip to a server that was asleep. The client
idles --gap-us between round trips (longer than shunt's spin-then-yield
phase), so every request finds the server blocked in recv(): asleep on a
futex under shunt, in the kernel's socket wait queue without. The round
trip then measures the server's wake-up plus the transfer, kernel TCP vs
shunt, in one run. Writes wake.json next to core.py's results."""

import argparse
import datetime
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent


def run(pp, shunt, env, port, gap_us, count, use_shunt):
    wrap = [str(shunt), "run", "--"] if use_shunt else []
    with tempfile.TemporaryDirectory() as tmp:
        ready = pathlib.Path(tmp) / "ready"
        srv = subprocess.Popen(["taskset", "-c", "0"] + wrap + [str(pp), "server", "--port", str(port),
                                "--ready-file", str(ready)], env=env, stdout=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10
            while not ready.exists():
                if time.monotonic() > deadline:
                    sys.exit("wake: server did not come up")
                time.sleep(0.01)
            out = subprocess.run(["taskset", "-c", "1"] + wrap +
                                 [str(pp), "client", "--port", str(port), "--mode", "rtt",
                                  "--size", "8", "--count", str(count), "--warmup", "0.05",
                                  "--gap-us", str(gap_us)],
                                 env=env, capture_output=True, text=True, timeout=120)
            srv.wait(timeout=10)
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait()
    return json.loads(out.stdout)["rtt_ns"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=str(HERE.parent / "build"))
    ap.add_argument("--gap-us", type=int, default=2000)
    ap.add_argument("--count", type=int, default=500)
    args = ap.parse_args()
    build = pathlib.Path(args.build)
    pp, shunt = build / "bench" / "pp", build / "src" / "cli" / "shunt"
    with tempfile.TemporaryDirectory(prefix="shunt-wake-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
        env["SHUNT_SOCKET"] = os.path.join(tmp, "d.sock")
        daemon = subprocess.Popen([str(shunt), "daemon", "--socket", env["SHUNT_SOCKET"]])
        try:
            time.sleep(0.2)
            port = 21000 + os.getpid() % 10000
            res = {"gap_us": args.gap_us, "size": 8,
                   "kernel": run(pp, shunt, env, port, args.gap_us, args.count, False),
                   "shunt": run(pp, shunt, env, port + 1, args.gap_us, args.count, True)}
        finally:
            daemon.terminate()
            daemon.wait()
    print(f"round trip to a sleeping server (8 B, {args.gap_us} us idle before each), ns")
    print(f"{'':8} {'p50':>9} {'p90':>9} {'p99':>9} {'mean':>9}")
    for k in ("kernel", "shunt"):
        r = res[k]
        print(f"{k:8} {r['p50']:9.0f} {r['p90']:9.0f} {r['p99']:9.0f} {r['mean']:9.0f}")
    out = HERE / "results" / datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=True)
    (out / "wake.json").write_text(json.dumps(res, indent=1))
    print(f"wrote {out / 'wake.json'}")


if __name__ == "__main__":
    main()
