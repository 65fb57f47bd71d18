#!/usr/bin/env python3
"""The run-off A/B (ab.sh): per build, the default over 64 MB pooled over the calls (the geometric mean of the
pairs' ratios and its 90 % t-interval, as sweep_table.py computes it) in the replay's steps and in wall time per
step, the buckets each default run kept, and from rank 0's lines (rank0_plan_lines.txt) the runs that ran a
run-off. usage: summary.py [DIR]   (default: this file's folder; the figures of docs/planner.md 7b)"""
import glob, json, os, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "host_dilation"))
from summarize import fmt, pairs  # noqa: E402

d = sys.argv[1] if len(sys.argv) > 1 else here
for build in ("after", "before"):
    steps, period, buckets = [], [], []
    for path in sorted(glob.glob(os.path.join(d, build + "_*.jsonl"))):
        rows = [json.loads(l) for l in open(path) if l.startswith("{")]
        steps += pairs(rows, "median_s")
        period += pairs(rows, "period_s")
        buckets += [r["plan_buckets"] for r in rows if "fixed" not in r["label"]]
    print(f"{build:7} {len(steps)} pairs: default / 64 MB, steps {fmt(steps)}, wall time per step {fmt(period)}; "
          f"buckets at the end {', '.join(map(str, buckets))}")
lines = os.path.join(d, "rank0_plan_lines.txt")
if os.path.exists(lines):
    run, ran = None, set()
    for line in open(lines):
        if line.startswith("== "):
            run = line[3:].strip()
        elif "in a run-off of" in line:
            ran.add(run)
    print(f"runs with a run-off: {len(ran)}" + (f" ({', '.join(sorted(ran))})" if ran else ""))
