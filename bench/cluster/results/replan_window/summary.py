#!/usr/bin/env python3
"""The re-plan window A/B (run_off/ab.sh BEFORE OUTDIR, run from a checkout of 7a637af, which rescaled a re-plan's
backward to the mean span of the refit's window, with BEFORE a worktree of 9d256ec, which rescales it to the step
that set the re-plan off; 7a637af was reverted): the run-off summary's figures (default
over 64 MB per build), then from rank 0's lines (OUTDIR/rank0_plan_lines.txt), per build and arm (the default's
and 64 MB's runs both re-plan), the re-plans per run, how many later re-plans missed the other way from the one
before (the rescale overshot), the misses that set the re-plans off, and the plan each run ended with: its
predicted over its measured mean span.
usage: /usr/bin/python3 summary.py [DIR]   (default: this file's folder)"""
import glob, json, os, re, subprocess, sys

here = os.path.dirname(os.path.abspath(__file__))
d = sys.argv[1] if len(sys.argv) > 1 else here
subprocess.run([sys.executable, os.path.join(here, "..", "run_off", "summary.py"), d], check=True)
runs = {}
run = None
for line in open(os.path.join(d, "rank0_plan_lines.txt")):
    if line.startswith("== "):
        run = line[3:].strip()
        runs[run] = []
        continue
    m = re.search(r"re-planning at step (\d+): .*\(([+-]\d+)%\)", line)
    if m and run is not None:
        runs[run].append(int(m.group(2)))
for build in ("after", "before"):
    for kind in ("default", "64 MB"):
        mine = {k: v for k, v in runs.items() if k.startswith(build + "_") and ("fixed" in k) == (kind == "64 MB")}
        if not mine:
            continue
        counts = [len(v) for v in mine.values()]
        later = [(a, b) for v in mine.values() for a, b in zip(v, v[1:])]
        flips = sum((a > 0) != (b > 0) for a, b in later)
        misses = [m for v in mine.values() for m in v]
        print(f"{build:7} {kind:7} {len(mine)} runs: re-plans {sum(counts)} ({', '.join(map(str, counts))}); "
              f"later re-plans that missed the other way {flips} of {len(later)}; "
              f"misses (%) {', '.join(f'{m:+d}' for m in misses) or '-'}")
for build in ("after", "before"):
    ratios = []
    for path in sorted(glob.glob(os.path.join(d, build + "_*.jsonl"))):
        for r in (json.loads(l) for l in open(path) if l.startswith("{")):
            if r.get("plan_span_measured_mean_ms"):
                ratios.append((("64 MB" if "fixed" in r["label"] else "default"),
                               r["plan_span_predicted_mean_ms"] / r["plan_span_measured_mean_ms"]))
    for kind in ("default", "64 MB"):
        v = [x for k, x in ratios if k == kind]
        if v:
            print(f"{build:7} {kind:7} the last plan's predicted / measured span: {', '.join(f'{x:.2f}' for x in v)}; "
                  f"within 15 %: {sum(abs(x - 1) <= 0.15 for x in v)} of {len(v)}")
