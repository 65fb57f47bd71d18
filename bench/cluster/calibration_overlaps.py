#!/usr/bin/env python3
"""The allgather overlap (allgather_overlap: four small allgathers started together against one) that every
calibration saved under bench/cluster/results read, per number of ranks: how many, the range, the median, and the
readings at the clamps 0 and 1 (planner.md §2 quotes the 16-rank figures).
usage: bench/cluster/calibration_overlaps.py [RESULTS_DIR]"""
import glob, os, re, statistics, sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
seen = {}  # (file, workers, reading): one per calibration line, however often a file repeats it
for path in glob.glob(os.path.join(root, "**", "*.out"), recursive=True) + \
        glob.glob(os.path.join(root, "**", "*.log"), recursive=True):
    for line in open(path, errors="ignore"):
        w, o = re.search(r'"workers":(\d+)', line), re.search(r'"allgather_overlap":([0-9.eE+-]+)', line)
        if w and o:
            seen[(path, int(w.group(1)), o.group(1))] = float(o.group(1))
by = {}
for (_, workers, _), v in seen.items():
    by.setdefault(workers, []).append(v)
for workers in sorted(by):
    v = sorted(by[workers])
    inner = [x for x in v if 0 < x < 1]
    print("%3d ranks: %3d calibrations, %.2f-%.2f inside (0, 1), median %.2f; at 0: %d, at 1: %d"
          % (workers, len(v), min(inner) if inner else float("nan"), max(inner) if inner else float("nan"),
             statistics.median(v), v.count(0.0), v.count(1.0)))
