#!/usr/bin/env python3
"""Per-kernel times of mgs-bench-compress-gpu under Nsight Compute (gpu_session.sh's profile step).

Reads `ncu --csv --metrics gpu__time_duration.sum` output. Every select call starts with initKernel;
a call with passLoopKernel used the one-launch shape, else the per-pass shape. The benchmark makes,
per density and per shape, a warm-up call and then the timed ones: the last call of each run of
same-shape calls is printed, kernel by kernel, in microseconds.
  python3 scripts/lib/ncu_summary.py ncu.csv
Exit status 1 when no select call was found.
"""
import csv
import re
import sys


def calls(path):
    hdr, out, cur = None, [], []
    with open(path, newline="") as f:
        for r in csv.reader(f):
            if r and r[0] == "ID":
                hdr = r
                continue
            if not hdr or len(r) != len(hdr):
                continue
            d = dict(zip(hdr, r))
            m = re.search(r"(\w+Kernel)", d.get("Kernel Name", ""))
            name = m.group(1) if m else d.get("Kernel Name", "?")[:40]
            try:
                us = float(d["Metric Value"].replace(",", "")) / 1000.0
            except (KeyError, ValueError):
                continue
            if name == "initKernel" and cur:
                out.append(cur)
                cur = []
            if name == "initKernel" or cur:
                cur.append((name, d.get("Grid Size", ""), us))
    if cur:
        out.append(cur)
    return out


def main():
    cs = calls(sys.argv[1])
    if not cs:
        print("ncu_summary: no select call (initKernel) in the profile")
        return 1
    shape = ["one-launch" if any(n == "passLoopKernel" for n, _, _ in c) else "per-pass" for c in cs]
    group = 0
    for i, c in enumerate(cs):
        last_of_run = i + 1 == len(cs) or shape[i + 1] != shape[i]
        if not last_of_run:
            continue
        group += 1
        print(f"select call {group} ({shape[i]}): {sum(us for _, _, us in c):.1f} us")
        for name, grid, us in c:
            print(f"  {name:18s} {grid:>16s} {us:8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
