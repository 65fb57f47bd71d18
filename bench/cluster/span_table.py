#!/usr/bin/env python3
"""How well the plan predicts its steps on the emulated cluster: one row per
replay run (JSON lines of bench/cluster/run_planner.sh with the online check
on, MGS_REPLAN_TOLERANCE=100: it compares every step, never re-plans), the
plan's predicted span (first gradient to last exchange) against the measured
one, both the means over the plan's compared steps (mgs_stats_t
plan_span_*), and whether the two are within 15 % of each other.

usage: span_table.py RUNS.jsonl [RUNS.jsonl ...]   (prints a markdown table)
"""
import json
import sys


def plan_name(row):
    label = row["label"]
    if "-fixed" in label:
        return "fixed " + label.rsplit("-fixed", 1)[1].replace("MB", " MB")
    if row["strategy"] == "layerwise":
        return "layer-wise"
    if label.endswith("-untried"):
        return "mgs, untried"
    return "mgs (the default)"


def main(paths):
    rows = []
    for path in paths:
        for line in open(path):
            if line.startswith("{"):
                rows.append(json.loads(line))
    print("| ranks | plan | buckets | predicted span ms | measured span ms | measured / predicted |")
    print("|---|---|---|---|---|---|")
    within = total = 0
    for r in sorted(rows, key=lambda r: (r["ranks"], r["plan_buckets"])):
        pred, meas = r.get("plan_span_predicted_mean_ms", 0), r.get("plan_span_measured_mean_ms", 0)
        if not r.get("plan_span_plan_checks") or pred <= 0:
            continue
        ratio = meas / pred
        ok = abs(ratio - 1) <= 0.15
        within += ok
        total += 1
        print("| %d | %s | %d | %.1f | %.1f | %s%.2f%s |" % (r["ranks"], plan_name(r), r["plan_buckets"], pred, meas,
                                                          "" if ok else "**", ratio, "" if ok else "**"))
    print("\n%d of %d runs within 15 %%" % (within, total))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
