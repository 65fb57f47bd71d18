#!/usr/bin/env python3
"""check.sh's cells: per cell, the default over its best fixed size pooled over the calls (the geometric mean of
the pairs' ratios and its 90 % t-interval, as sweep_table.py computes it) in the replay's steps and in wall time per
step, and the buckets each default run kept.
usage: /usr/bin/python3 summary.py [DIR]   (default: this file's folder)"""
import glob, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "host_dilation"))
from summarize import interval, pooled  # noqa: E402

d = sys.argv[1] if len(sys.argv) > 1 else here
cells = sorted({re.sub(r"_\d+\.jsonl$", "", os.path.basename(p)) for p in glob.glob(os.path.join(d, "*_16_*.jsonl"))})
for cell in cells:
    # cell_<call>.jsonl only: "x_16_*" would also take the files of "x_16_barrier".
    mine = [p for p in glob.glob(os.path.join(d, cell + "_*.jsonl")) if re.fullmatch(r"_\d+\.jsonl", p[len(os.path.join(d, cell)):])]
    steps, period, buckets = pooled(mine)
    if not steps:
        continue
    # Three decimals: an interval's end this close to 1.03 decides whether the cell is resolved.
    print(f"{cell}: {len(steps)} pairs: default / best, steps %.3f (%.3f-%.3f), wall time per step %.3f (%.3f-%.3f); "
          % (interval(steps) + interval(period)) + f"default's buckets at the end {', '.join(map(str, buckets))}")
