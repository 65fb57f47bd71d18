#!/usr/bin/env python3
"""ab.sh's results. Per directory, cell and build: default / best fixed (the geometric mean of the pairs' ratios and
its 90% t-interval, as sweep_table.py computes it) in the replay's steps and in wall time per step (period_s), the
default's buckets at the end, re-plans rejected and re-plan trial steps in the timed steps. Then, pooled over the
directories given, per cell and build and over all cells: the ratio, the default runs with a re-plan trial in their
timed steps and those without any re-plan (JSON `plans` 1), and from rank 0's plan lines (*.plans.log) the range of
the coordinator's measured dilation, of its CPU per bucket times that, and of the predicted gain of the re-plans
kept off trial, and the measured over the predicted span that set off each run's first re-plan.
usage: summarize.py DIR [DIR ...]   (the benchmarks.md table: 'before' over dilation notrial sitting3, 'after'
                                     over notrial sitting3)"""
import collections, glob, json, os, re, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from sweep_table import interval  # noqa: E402


def pairs(rows, key):
    by = {}
    for r in rows:
        m = re.search(r"-rep([0-9]+)(-fixed.*)?$", r["label"])
        by.setdefault("fixed" if m.group(2) else "mgs", {})[int(m.group(1))] = r[key]
    d, o = by["mgs"], by["fixed"]
    return [d[k] / o[k] for k in sorted(d) if k in o]


def pooled(paths):
    """Pairs pooled over run_planner.sh -C files: (default / fixed in median_s, in period_s, the default runs'
    plan_buckets); a file without both kinds of run (a call still running, or one that failed) is skipped."""
    steps, period, buckets = [], [], []
    for path in sorted(paths):
        rows = [json.loads(l) for l in open(path) if l.startswith("{")]
        if {"fixed" in r["label"] for r in rows} != {True, False}:
            continue
        steps += pairs(rows, "median_s")
        period += pairs(rows, "period_s")
        buckets += [r["plan_buckets"] for r in rows if "fixed" not in r["label"]]
    return steps, period, buckets


def fmt(ratios):
    return "%.3f (%.2f-%.2f)" % interval(ratios)


def main():
    pooled = collections.defaultdict(lambda: collections.defaultdict(list))
    for directory in sys.argv[1:]:
        print("==", directory)
        for path in sorted(glob.glob(os.path.join(directory, "*.jsonl"))):
            cell, build = os.path.basename(path)[:-6].rsplit("_", 1)
            rows = [json.loads(l) for l in open(path)]
            mgs = [r for r in rows if "fixed" not in r["label"]]
            p = pooled[build]
            p[cell] += pairs(rows, "median_s")
            p["runs"] += mgs
            log = path[:-6] + ".plans.log"
            if os.path.exists(log):
                first_replan = False
                for line in open(log):
                    if line.startswith("== "):
                        first_replan = True
                    m = re.search(r"re-planning at step [0-9]+: measured ([0-9.]+) ms .* predicted ([0-9.]+) ms", line)
                    if m and first_replan:
                        p["first_replan"].append(float(m.group(1)) / float(m.group(2)))
                        first_replan = False
                    m = re.search(r"coordinator ([0-9.]+) ms a bucket, .*takes ([0-9.]+) s", line)
                    if m:
                        p["dilation"].append(float(m.group(2)))
                        p["bucket_ms"].append(float(m.group(1)) * float(m.group(2)))
                    m = re.search(r"without a trial: .* predicted ([0-9.]+) ms against its ([0-9.]+) ms", line)
                    if m:
                        p["untried_gain"].append(1 - float(m.group(1)) / float(m.group(2)))
            print(f"{cell:26} {build:11} steps {fmt(pairs(rows, 'median_s'))}  period {fmt(pairs(rows, 'period_s'))}"
                  f"  buckets {', '.join(str(r['plan_buckets']) for r in mgs)}  rejected "
                  f"{', '.join(str(r['replans_rejected']) for r in mgs)}  re-plan trial steps timed "
                  f"{', '.join(str(r['plan_trials_in_timed_steps']) for r in mgs)}")
    if len(sys.argv) > 2:
        print("== pooled over", " ".join(sys.argv[1:]))
        span = lambda v, f: f % min(v) + "-" + f % max(v) if v else "-"
        for build, p in sorted(pooled.items()):
            cells = sorted(k for k in p if k not in ("runs", "dilation", "bucket_ms", "untried_gain", "first_replan"))
            for cell in cells:
                print(f"{cell:26} {build:11} {fmt(p[cell])}, {len(p[cell])} pairs")
            allr = sum((p[c] for c in cells), [])
            runs = p["runs"]
            print(f"{'all cells':26} {build:11} {fmt(allr)}, {len(allr)} pairs; default runs {len(runs)}: with a re-plan "
                  f"trial in the timed steps {sum(r['plan_trials_in_timed_steps'] > 0 for r in runs)}, without a re-plan "
                  f"{sum(r['plans'] == 1 for r in runs)}; dilation {span(p['dilation'], '%.1f')}, CPU per bucket x "
                  f"dilation {span(p['bucket_ms'], '%.1f')} ms; re-plans kept off trial {len(p['untried_gain'])}, "
                  f"predicted gain {span([100 * g for g in p['untried_gain']], '%.1f')} %; measured / predicted span at a "
                  f"run's first re-plan {span(p['first_replan'], '%.2f')}")


if __name__ == "__main__":
    main()
