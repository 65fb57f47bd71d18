#!/usr/bin/env python3
"""How well the plan predicts its steps on the emulated cluster: one row per
replay run (JSON lines of bench/cluster/run_planner.sh with the online check
on, MGS_REPLAN_TOLERANCE=100: it compares every step, never re-plans), the
plan's predicted span (first gradient to last exchange) against the measured
one, both the means over the plan's compared steps (mgs_stats_t
plan_span_*), and whether the two are within 15 % of each other.

usage: span_table.py [--grid | --spread | --gaps | --declared TRACE] RUNS.jsonl [RUNS.jsonl ...]
       (prints a markdown table)
  --grid: one row per file (spans.sh names them span_TAG_MODEL_RANKS.jsonl),
          one column per plan, the ratio with the plan's buckets in brackets
  --spread: one row per file, the sitting's level apart from its shape: the
          median ratio of its plans of at most 3 buckets (the level: the
          calibration's collectives and rounds), and its plans of 10 buckets
          or more each over that level (the shape: what many buckets add)
  --gaps: one row per file, its layer-wise plan: how far apart its buckets
          ended, measured (ordered by their measured ends) and predicted (in
          plan order), the medians for buckets whose allreduce is at most
          8 KiB (n + P floats: mgs's recursive doubling from 5 ranks on) and
          above it (Open MPI's), and how many ran dense
  --declared TRACE: one row per run with --enqueue-times (mgs-replay) and a
          plan of at most 12 buckets: per bucket, when its last gradient
          reached every rank (`enqueue_everywhere_ms` at the bucket's last
          sparse tensor of TRACE, scaled as the run was: the replay's
          rounding, sparse from int(4096 x scale) elements on, as
          run_planner.sh sets MGS_MIN_SPARSE_ELEMENTS), when it was declared
          ready everywhere (measured and predicted), and the delays from
          the first to the second; beside them, how far any tensor's time
          everywhere strayed from rank 0's
"""
import json
import os
import statistics
import sys

GRID_COLUMNS = ["layer-wise", "fixed 128 MB", "fixed 64 MB", "fixed 32 MB", "fixed 16 MB", "fixed 8 MB",
                "mgs (the default)", "mgs, untried"]
MODEL_NAMES = {"resnet50": "ResNet-50", "bert_base": "BERT-base"}


def plan_name(row):
    label = row["label"]
    if "-fixed" in label:
        return "fixed " + label.rsplit("-fixed", 1)[1].replace("MB", " MB")
    if row["strategy"] == "layerwise":
        return "layer-wise"
    if label.endswith("-untried"):
        return "mgs, untried"
    return "mgs (the default)"


def ratio_of(r):
    pred, meas = r.get("plan_span_predicted_mean_ms", 0), r.get("plan_span_measured_mean_ms", 0)
    if not r.get("plan_span_plan_checks") or pred <= 0:
        return None
    return meas / pred


def keyed_files(paths):
    """(model, ranks, tag, path) per file, sorted; spans.sh names them span_TAG_MODEL_RANKS.jsonl."""
    keyed = []
    for path in paths:
        parts = os.path.basename(path)[len("span_"):-len(".jsonl")].split("_")
        keyed.append(("_".join(parts[1:-1]), int(parts[-1]), parts[0], path))
    return sorted(keyed)


def grid(paths):
    print("| model | ranks | tag | " + " | ".join(c.replace("fixed ", "").replace("mgs (the default)", "default")
                                               .replace("mgs, untried", "DP untried") for c in GRID_COLUMNS) + " |")
    print("|---|---|---|" + "---|" * len(GRID_COLUMNS))
    within = total = 0
    for model, ranks, tag, path in keyed_files(paths):
        cells = {}
        for line in open(path):
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            ratio = ratio_of(r)
            if ratio is None:
                continue
            ok = abs(ratio - 1) <= 0.15
            within += ok
            total += 1
            cells[plan_name(r)] = "%s%.2f%s (%d)" % ("" if ok else "**", ratio, "" if ok else "**", r["plan_buckets"])
        print("| %s | %d | %s | %s |" % (MODEL_NAMES.get(model, model), ranks, tag,
                                        " | ".join(cells.get(c, "-") for c in GRID_COLUMNS)))
    print("\n%d of %d runs within 15 %%" % (within, total))


def spread(paths):
    print("| model | ranks | tag | few buckets (<= 3): median ratio | many buckets (>= 10): ratio / that median |")
    print("|---|---|---|---|---|")
    for model, ranks, tag, path in keyed_files(paths):
        runs = [json.loads(line) for line in open(path) if line.startswith("{")]
        runs = [(r["plan_buckets"], ratio_of(r)) for r in runs if ratio_of(r) is not None]
        few = [x for b, x in runs if b <= 3]
        if not few:
            continue
        level = statistics.median(few)
        many = sorted((b, x / level) for b, x in runs if b >= 10)
        print("| %s | %d | %s | %.2f (%d plans) | %s |" % (MODEL_NAMES.get(model, model), ranks, tag, level, len(few),
                                                          ", ".join("%.2f (%d)" % (x, b) for b, x in many) or "-"))


SMALL_ALLREDUCE_BYTES = 8 << 10  # comm/mpi/small_allreduce.h, kSmallAllreduceMaxBytes


def gaps(paths):
    print("| model | ranks | tag | dense buckets | measured gap ms, <= 8 KiB / above | predicted gap ms, <= 8 KiB / above |")
    print("|---|---|---|---|---|---|")
    for model, ranks, tag, path in keyed_files(paths):
        for line in open(path):
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if plan_name(r) != "layer-wise" or not r.get("plan_bucket_end_ms"):
                continue
            elements = r["plan_bucket_elements"]
            small = [4 * (n + ranks) <= SMALL_ALLREDUCE_BYTES for n in elements]
            measured, predicted = r["plan_bucket_end_ms"]["measured"], r["plan_bucket_end_ms"]["predicted"]
            order = sorted(range(len(measured)), key=lambda i: measured[i])
            m = {True: [], False: []}
            p = {True: [], False: []}
            for a, b in zip(order, order[1:]):
                m[small[b]].append(measured[b] - measured[a])
            for i in range(1, len(predicted)):
                p[small[i]].append(predicted[i] - predicted[i - 1])
            med = lambda v: "%.1f" % statistics.median(v) if v else "-"
            print("| %s | %d | %s | %s of %d | %s / %s | %s / %s |" % (
                MODEL_NAMES.get(model, model), ranks, tag, r.get("dense_buckets_per_step", "-"), len(elements),
                med(m[True]), med(m[False]), med(p[True]), med(p[False])))


def declared(trace_path, paths):
    layers = json.load(open(trace_path))["layers"]
    print("| model | ranks | plan | buckets | everywhere - rank 0, most ms | last gradient everywhere ms | "
          "declared ms, measured | declared ms, predicted | delay ms, measured | delay ms, predicted |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in paths:
        for line in open(path):
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            everywhere = r.get("enqueue_everywhere_ms")
            buckets = r.get("plan_bucket_elements") or []
            if not everywhere or not buckets or len(buckets) > 12:
                continue
            scale = r["scale_elements"]
            elements = [max(1, round(l["elements"] * scale)) for l in layers]
            min_sparse = int(4096 * scale)
            last, total, bound = [], 0, 0
            for i, n in enumerate(elements):
                if n < min_sparse:
                    continue
                total += n
                if len(last) < len(buckets) and total == bound + buckets[len(last)]:
                    bound = total
                    last.append(i)
            if len(last) != len(buckets) or len(everywhere) != len(elements):
                sys.exit("%s: %s does not cut into the plan's buckets %s (is it the run's trace?)" %
                         (path, trace_path, buckets))
            at = [everywhere[i] for i in last]
            ready = r["plan_bucket_ready_ms"]
            fmt = lambda v: ", ".join("%.1f" % x for x in v)
            lag = max(abs(e - z) for e, z in zip(everywhere, r["enqueue_rank0_ms"]))
            print("| %s | %d | %s | %d | %.1f | %s | %s | %s | %s | %s |" % (
                r["model"], r["ranks"], plan_name(r), len(buckets), lag, fmt(at), fmt(ready["measured"]),
                fmt(ready["predicted"]), fmt(m - a for m, a in zip(ready["measured"], at)),
                fmt(p - a for p, a in zip(ready["predicted"], at))))


def main(paths):
    if paths and paths[0] == "--declared" and len(paths) > 2:
        return declared(paths[1], paths[2:])
    if paths and paths[0] == "--gaps":
        return gaps(paths[1:])
    if paths and paths[0] == "--grid":
        return grid(paths[1:])
    if paths and paths[0] == "--spread":
        return spread(paths[1:])
    rows = []
    for path in paths:
        for line in open(path):
            if line.startswith("{"):
                rows.append(json.loads(line))
    print("| ranks | plan | buckets | predicted span ms | measured span ms | measured / predicted |")
    print("|---|---|---|---|---|---|")
    within = total = 0
    for r in sorted(rows, key=lambda r: (r["ranks"], r["plan_buckets"])):
        ratio = ratio_of(r)
        if ratio is None:
            continue
        pred, meas = r["plan_span_predicted_mean_ms"], r["plan_span_measured_mean_ms"]
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
