#!/usr/bin/env python3
"""check.sh's cells: per cell, the default over its best fixed size pooled over the calls (the geometric mean of
the pairs' ratios and its 90 % t-interval, as sweep_table.py computes it) in the replay's steps and in wall time per
step, and the buckets each default run kept.
usage: /usr/bin/python3 summary.py [DIR]   (default: this file's folder)"""
import glob, json, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "host_dilation"))
from summarize import fmt, pairs  # noqa: E402

d = sys.argv[1] if len(sys.argv) > 1 else here
cells = sorted({re.sub(r"_\d+\.jsonl$", "", os.path.basename(p)) for p in glob.glob(os.path.join(d, "*_16_*.jsonl"))})
for cell in cells:
    steps, period, buckets = [], [], []
    for path in sorted(glob.glob(os.path.join(d, cell + "_*.jsonl"))):
        rows = [json.loads(l) for l in open(path) if l.startswith("{")]
        if {"fixed" in r["label"] for r in rows} != {True, False}:
            continue  # a call still running (or one that failed): no pair yet
        steps += pairs(rows, "median_s")
        period += pairs(rows, "period_s")
        buckets += [r["plan_buckets"] for r in rows if "fixed" not in r["label"]]
    if not steps:
        continue
    print(f"{cell}: {len(steps)} pairs: default / best, steps {fmt(steps)}, wall time per step {fmt(period)}; "
          f"default's buckets at the end {', '.join(map(str, buckets))}")
