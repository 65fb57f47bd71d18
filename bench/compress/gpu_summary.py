#!/usr/bin/env python3
"""Summary of scripts/gpu_check.sh's benchmark output against the goals of issue 13.

Reads JSON lines (mgs-bench-compress-gpu and torch_topk.py, same device, same
run) from the files given and prints one table plus the goal checks:
  * select + compact with error feedback in <= 3 read-equivalents of HBM
    traffic (a D2D copy of x moves 2: read-equivalent time = copy_ms / 2);
  * >= 8x faster than torch.topk at the same n and k;
  * gaussiank/ldte counts within [k, 1.03k];
  * exact topk within 1.2x of the faster threshold selector.
Exit status 0 even when a goal is missed: the goals are measurements to
report, not a test (the tests are ctest's).
"""
import json
import sys


def load(paths):
    rows = []
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    line = line.strip()
                    if line.startswith("{"):
                        try:
                            rows.append(json.loads(line))
                        except json.JSONDecodeError:
                            pass
        except OSError as e:
            print(f"gpu_summary: cannot read {p}: {e}")
    return rows


def main():
    rows = load(sys.argv[1:])
    torch = {(r["n"], r["k"]): r["median_ms"] for r in rows if r.get("selector") == "torch.topk"}
    gpu_rows = [r for r in rows if r.get("selector") != "torch.topk" and "copy_ms" in r]
    # The goals are judged on the default launch shapes; the per-pass shapes
    # (those that ran on an H100 first) are timed in the same run for the A/B.
    per_pass = {(r["selector"], bool(r.get("inplace")), r["k"]): r for r in gpu_rows
                if r.get("launches") == "per-pass"}
    ours = [r for r in gpu_rows if r.get("launches") != "per-pass"]
    if not ours:
        print("gpu_summary: no GPU benchmark rows (did the benchmark run?)")
        return 0
    print(f"device: {ours[0]['device']}")
    hdr = f"{'selector':10} {'mode':8} {'n':>9} {'k':>7} {'count/k':>8} {'ms':>8} {'copy_ms':>8} {'read_eq':>7} {'torch_ms':>9} {'x_torch':>7}"
    print(hdr)
    goals = []
    by_key = {}
    for r in ours:
        read_eq = r["median_ms"] / (r["copy_ms"] / 2) if r["copy_ms"] > 0 else float("nan")
        t = torch.get((r["n"], r["k"]))
        speed = t / r["median_ms"] if t and r["median_ms"] > 0 else float("nan")
        mode = "inplace" if r.get("inplace") else "residual"
        ratio = r["count"] / r["k"] if r["k"] else float("nan")
        tstr = f"{t:9.3f}" if t else f"{'-':>9}"
        print(f"{r['selector']:10} {mode:8} {r['n']:9d} {r['k']:7d} {ratio:8.4f} {r['median_ms']:8.3f} "
              f"{r['copy_ms']:8.3f} {read_eq:7.2f} {tstr} {speed:7.2f}")
        by_key[(r["selector"], mode, r["k"])] = r
        if mode == "residual":
            goals.append((f"{r['selector']} k={r['k']}: <= 3 read-equivalents", read_eq <= 3, f"{read_eq:.2f}"))
            if t:
                goals.append((f"{r['selector']} k={r['k']}: >= 8x torch.topk", speed >= 8, f"{speed:.2f}x"))
        if r["selector"] in ("gaussiank", "ldte"):
            ok = r["k"] <= r["count"] <= 1.03 * r["k"]
            goals.append((f"{r['selector']} {mode} k={r['k']}: count in [k, 1.03k]", ok, f"{ratio:.4f}"))
    for (sel, mode, k), r in sorted(by_key.items()):
        if sel != "topk":
            continue
        th = [by_key[(s, mode, k)]["median_ms"] for s in ("gaussiank", "ldte") if (s, mode, k) in by_key]
        if th:
            f = r["median_ms"] / min(th)
            goals.append((f"topk {mode} k={k}: within 1.2x of the threshold selectors", f <= 1.2, f"{f:.2f}x"))
    ab = [(r, per_pass.get((r["selector"], bool(r.get("inplace")), r["k"]))) for r in ours]
    ab = [(r, b) for r, b in ab if b]
    if ab:
        print("\nlaunch shapes, same run (per-pass = a launch per histogram pass, a compaction block per tile):")
        print(f"{'selector':10} {'mode':8} {'k':>7} {'per-pass ms':>11} {'one-launch ms':>13} {'ratio':>6}")
        for r, b in ab:
            mode = "inplace" if r.get("inplace") else "residual"
            ratio = b["median_ms"] / r["median_ms"] if r["median_ms"] > 0 else float("nan")
            print(f"{r['selector']:10} {mode:8} {r['k']:7d} {b['median_ms']:11.3f} {r['median_ms']:13.3f} {ratio:6.2f}")
    print("\ngoals (issue 13):")
    for name, ok, val in goals:
        print(f"  {'MET ' if ok else 'MISS'} {name}: {val}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
