#!/usr/bin/env python3
"""Per cell and build of an ab.sh run: default / best fixed (geometric mean of the 4 pairs' ratios and its 90%
t-interval, as sweep_table.py computes it) in the replay's steps and in wall time per step (period_s), the
default's buckets at the end, re-plans rejected and re-plan trials in the timed steps.
usage: summarize.py DIR"""
import glob, json, os, re, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from sweep_table import interval  # noqa: E402


def ratios(rows, key):
    by = {}
    for r in rows:
        m = re.search(r"-rep([0-9]+)(-fixed.*)?$", r["label"])
        by.setdefault("fixed" if m.group(2) else "mgs", {})[int(m.group(1))] = r[key]
    d, o = by["mgs"], by["fixed"]
    return [d[k] / o[k] for k in sorted(d) if k in o]


for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
    rows = [json.loads(l) for l in open(path)]
    mgs = [r for r in rows if "fixed" not in r["label"]]
    out = []
    for key in ("median_s", "period_s"):
        gm, lo, hi = interval(ratios(rows, key))
        out.append(f"{gm:.3f} ({lo:.2f}-{hi:.2f})")
    print(f"{os.path.basename(path)[:-6]:42} steps {out[0]}  period {out[1]}  buckets "
          f"{', '.join(str(r['plan_buckets']) for r in mgs)}  rejected "
          f"{', '.join(str(r['replans_rejected']) for r in mgs)}  re-plan trial steps timed "
          f"{', '.join(str(r['plan_trials_in_timed_steps']) for r in mgs)}")
