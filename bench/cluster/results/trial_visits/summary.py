#!/usr/bin/env python3
"""More visits per plan candidate (ab.sh): per arm (v2: 2 visits per candidate, the default MGS_PLAN_TRIAL_STEPS=3;
v4: 4 visits, =5), the default over 64 MB pooled over the calls (the geometric mean of the pairs' ratios and its
90 % t-interval, as sweep_table.py computes it) in the replay's steps and in wall time per step, the buckets each
default run kept, and from rank 0's lines (rank0_plan_lines.txt) the plan the trials kept, the runs with a run-off
and the re-plans. usage: /usr/bin/python3 summary.py [DIR]   (default: this file's folder)"""
import glob, json, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "host_dilation"))
from summarize import fmt, pooled  # noqa: E402

d = sys.argv[1] if len(sys.argv) > 1 else here
for arm in ("v2", "v4"):
    paths = glob.glob(os.path.join(d, arm + "_*.jsonl"))
    steps, period, buckets = pooled(paths)
    trial_at_start = sum(1 for p in paths for l in open(p) if l.startswith("{")
                         and json.loads(l).get("plan_trial_running_at_start"))
    if steps:
        print(f"{arm}: {len(steps)} pairs: default / 64 MB, steps {fmt(steps)}, wall time per step {fmt(period)}; "
              f"default's buckets at the end {', '.join(map(str, buckets))}; runs timed from inside a trial: "
              f"{trial_at_start}")
lines = os.path.join(d, "rank0_plan_lines.txt")
if os.path.exists(lines):
    runs, run = {}, None
    for line in open(lines):
        if line.startswith("== "):
            run = line[3:].strip()
            runs[run] = {"kept": [], "runoff": 0, "replans": 0}
        elif run is not None:
            m = re.search(r"keeping (.+?) \((\d+) buckets\)", line)
            if m and ("merge plan trials" in line or "run-off" in line):
                runs[run]["kept"].append(f"{m.group(1)} ({m.group(2)})")
            if "in a run-off of" in line:
                runs[run]["runoff"] += 1
            if "re-planning at" in line:
                runs[run]["replans"] += 1
    for arm in ("v2", "v4"):
        mine = {k: v for k, v in runs.items() if k.startswith(arm + "_") and "fixed" not in k}
        if mine:
            print(f"{arm} default runs: {len(mine)}; run-offs {sum(v['runoff'] for v in mine.values())}; re-plans "
                  f"{sum(v['replans'] for v in mine.values())}; the trials kept: "
                  + "; ".join(", ".join(v["kept"]) or "-" for v in mine.values()))
