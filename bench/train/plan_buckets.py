#!/usr/bin/env python3
"""Per-bucket predicted against measured end of mgs's merge plan, from run_train.sh output.

Each mgs line of a run_train.sh .jsonl carries mgs_paths.plan_buckets (mgs.plan_buckets() on
rank 0 at the end of the run: the plan that ran last, its buckets in backward order). For each
run this prints the plan's span (predicted / measured over that plan's compared steps) and, per
bucket, when its last gradient was predicted against measured to be ready, and the predicted end
of its exchange against its mean measured end (outputs written), all from the step's first
gradient; then one summary line per run: how many buckets are within 15%
and the median and worst |predicted / measured - 1|.

usage: bench/train/plan_buckets.py RESULTS.jsonl [...] [--buckets]   (--buckets: every bucket)
"""

import json
import statistics
import sys


def runs(paths):
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                r = json.loads(line)
                p = r.get("mgs_paths") or {}
                if p.get("plan_buckets"):
                    yield r


def main(argv):
    every = "--buckets" in argv
    paths = [a for a in argv if not a.startswith("--")]
    if not paths:
        print(__doc__)
        return 2
    print("| model | link | ranks | buckets | span predicted / measured | buckets within 15% "
          "| median abs error | worst bucket |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for r in runs(paths):
        p = r["mgs_paths"]
        bs = p["plan_buckets"]
        span = (p["plan_span_predicted_sum_us"] / p["plan_span_measured_sum_us"]
                if p.get("plan_span_measured_sum_us") else float("nan"))
        errs = []
        for i, b in enumerate(bs):
            if b["checks"] == 0 or b["predicted_end_us"] < 0:
                continue
            measured = b["measured_end_sum_us"] / b["checks"]
            errs.append((abs(b["predicted_end_us"] / measured - 1), i, b["predicted_end_us"], measured))
        if not errs:
            continue
        link = r.get("label", "").split("@")[-1]
        worst = max(errs)
        within = sum(e[0] <= 0.15 for e in errs)
        print(f"| {r['model']} | {link} | {r['ranks']} | {len(bs)} | {span:.2f} | {within}/{len(errs)} "
              f"| {100 * statistics.median(e[0] for e in errs):.0f}% "
              f"| {worst[1]}: {worst[2] / 1e3:.1f} / {worst[3] / 1e3:.1f} ms |")
        if every:
            for e in sorted(errs, key=lambda e: e[1]):
                b = bs[e[1]]
                ready = ""
                if b.get("predicted_ready_us", -1) >= 0:
                    ready = (f"ready {b['predicted_ready_us'] / 1e3:.1f} / "
                             f"{b['measured_ready_sum_us'] / b['checks'] / 1e3:.1f} ms, ")
                print(f"|  | bucket {e[1]} | | {b['tensors']} tensors, {b['elements']} elements "
                      f"| {ready}end {e[2] / 1e3:.1f} / {e[3] / 1e3:.1f} ms "
                      f"| {100 * (e[2] / e[3] - 1):+.0f}% | {b['checks']} steps |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
