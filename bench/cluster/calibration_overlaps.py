#!/usr/bin/env python3
"""An overlap that every calibration saved under bench/cluster/results read, per number of ranks: how many, the
range, the median, and the readings at the clamps 0 and 1 (planner.md §2 quotes these figures).
--field allgather_overlap (the default): four small allgathers started together against one;
--field inflight_overlap: a stream through the pipeline's window against one (calibrations that measure it
apart from allgather_overlap: restrict --glob to their files, e.g. 'plan_spans/span_st_*');
--field dense_overlap: small allreduces back to back against the table's price of one (calibrations without it: 0).
--terms: instead, one line per calibration: its file, ranks, the allgather's and the 4 KiB allreduce's start-up and a
round (ms), and the overlaps (benchmarks.md quotes these for the spans sittings).
usage: bench/cluster/calibration_overlaps.py [--field F | --terms] [--glob PATTERN] [RESULTS_DIR]"""
import argparse, glob, json, os, re, statistics

ap = argparse.ArgumentParser()
ap.add_argument("--field", default="allgather_overlap", choices=["allgather_overlap", "inflight_overlap", "dense_overlap"])
ap.add_argument("--glob", default="**/*", help="files under RESULTS_DIR, without the .out/.log suffix")
ap.add_argument("--terms", action="store_true", help="one line per calibration, its terms")
ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
args = ap.parse_args()
paths = sorted(glob.glob(os.path.join(args.root, args.glob + ".out"), recursive=True) +
               glob.glob(os.path.join(args.root, args.glob + ".log"), recursive=True))
if args.terms:
    for path in paths:
        for line in open(path, errors="ignore"):
            if line.startswith("# calibration: "):
                m = json.loads(line[len("# calibration: "):])
                a = m["allreduce"]["segments"][0]
                print("%s: %d ranks, allgather start-up %.1f ms, allreduce at 4 KiB %.1f ms, round %.1f ms, "
                      "inflight_overlap %.2f, allgather_overlap %.2f, dense_overlap %.2f"
                      % (os.path.relpath(path, args.root), m["workers"], m["allgather"]["segments"][0][1] * 1e3,
                         (a[1] + a[2] * 4096) * 1e3, m["negotiation_s"] * 1e3, m.get("inflight_overlap", 0),
                         m["allgather_overlap"], m.get("dense_overlap", 0)))
                break
    raise SystemExit(0)
seen = {}  # (file, workers, reading): one per calibration line, however often a file repeats it
for path in paths:
    for line in open(path, errors="ignore"):
        w, o = re.search(r'"workers":(\d+)', line), re.search(r'"%s":([0-9.eE+-]+)' % args.field, line)
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
