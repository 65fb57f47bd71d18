#!/usr/bin/env python3
"""The planner sweep's table (bench/cluster/run_sweep.sh): one row per cell.

For each OUT/<model>_<rate>_<density>_<hosts>.jsonl: the median step (median over repeats of each run's
median step) of the default plan (sparse: mgs; dense: the plain dense runs, with their fusion threshold
trials; from a build without them, 64 MiB scaled with the model as every fixed size is, so the plain dense
runs and the fixed-64MB runs together), of layer-wise and of each fixed size; the
best fixed size in hindsight (layer-wise counted as one); and the ratios the goals are set on:
default / best (goal <= 1.03 in every cell), and Horovod's 64 MiB, DDP's 25 MiB and layer-wise over the
default (goal: each >= 1.10 in some cell).

Where OUT/confirm/<cell>.jsonl exists (run_sweep.sh -C: the default and the cell's best fixed size rerun in
pairs, order swapped every pair), the "checked" column is the geometric mean of the pairs' ratios (default
over that size, each pair one repeat), a figure free of the bias of picking the best of seven noisy settings,
with its 90% t-interval; the goal count uses it there, and the last line sorts the checked cells into shown to
miss 3% (interval above 1.03), shown within (interval at most 1.03) and unresolved (interval spans 1.03).
A cell whose default was timed while its trials still ran (sparse: plan_trials_in_timed_steps > 0 or
plan_trial_running_at_start > 0 (a run-off goes on without new candidates), older
lines without it: a warm-up under the 26 steps of the sweep's profile and trials; dense: fusion_trials > 0,
in the sweep or in the cell's check) has no sweep ratio: its
default figure is the check's, and the other settings' ratios are theirs to the best fixed size in the sweep
times the best's to the default in the check.

usage: sweep_table.py OUT_DIR
       sweep_table.py --to-confirm CELL.jsonl   (prints the setting to check, or nothing when within 3%)
"""
import glob
import json
import math
import os
import re
import statistics
import sys

import scipy.stats


def name(r):
    """A run_planner.sh run's name, from its JSON line: mgs, dense, layerwise, fixed-<F>MB, mgs+replan, ..."""
    if r["strategy"] == "dense" and "layerwise" in r["label"]:
        return "layerwise"
    m = re.search(r"fixed([0-9.]+)MB", r["label"])
    if r["strategy"] in ("fusion", "dense") and m:
        return "fixed-" + m.group(1) + "MB"
    return r["strategy"] + ("+replan" if "replan" in r["label"] else "") + ("-untried" if "untried" in r["label"] else "")


def runs(path):
    """The JSON lines of one run_planner.sh output file."""
    return [json.loads(line) for line in open(path) if line.startswith("{")]


def steps_by_name(rows):
    """Each setting's median steps (one per run), by name()."""
    by = {}
    for r in rows:
        by.setdefault(name(r), []).append(r["median_s"])
    return by


def tried_thresholds(r):
    """Whether a dense cell's default run tried fusion thresholds (MGS_FUSION_TRIALS, planner.md 7c)."""
    return name(r) == "dense" and r.get("fusion_trials", 0) > 0


def cell_medians(rows):
    by = steps_by_name(rows)
    med = {n: statistics.median(v) for n, v in by.items()}
    # A dense cell of a build without fusion trials runs the default twice per repeat: as the plain dense
    # run and as fixed-64MB (the same fusion threshold). Its figure is the median over both, twice the
    # runs of any other setting, and it is the 64 MiB column's figure too.
    if "dense" in by and "fixed-64MB" in by and not any(tried_thresholds(r) for r in rows):
        med["default"] = med["fixed-64MB"] = statistics.median(by["dense"] + by["fixed-64MB"])
    elif "dense" in by:
        med["default"] = med["dense"]
    return med


def in_trials(r):
    """Whether a default run was timed while its trials still ran: the mgs planner's plan trials, or a
    dense job's fusion threshold trials (from step 5, 4 steps a threshold at the defaults: the sweep's
    6 steps after 5 are inside them)."""
    if tried_thresholds(r):
        return r["warmup"] < 5 + 4 * r["fusion_trials"]
    if r["strategy"] != "mgs":
        return False
    if "plan_trials_in_timed_steps" in r:
        return r["plan_trials_in_timed_steps"] > 0 or r.get("plan_trial_running_at_start", 0) > 0
    return r["warmup"] < 26  # the sweep's 3 profile steps + 20 trial steps + 3


def confirm_path(path):
    return os.path.join(os.path.dirname(path), "confirm", os.path.basename(path))


def verdict(path, density):
    """(default ms, best setting, its ms, default/best, medians, default timed in trials) of one sweep cell.
    A dense cell whose check tried fusion thresholds counts as timed in trials too: the sweep's default
    (64 MiB, untried, from a build before the trials) is not the default its check timed."""
    rows = runs(path)
    med = cell_medians(rows)
    default = "default" if density == "dense" else "mgs"
    if default not in med:
        return None
    fixed = {n: v for n, v in med.items() if n.startswith("fixed-") or n == "layerwise"}
    best = min(fixed, key=fixed.get)
    trials = any(in_trials(r) for r in rows)
    if density == "dense" and os.path.exists(confirm_path(path)):
        trials = trials or any(tried_thresholds(r) for r in runs(confirm_path(path)))
    return med[default], best, fixed[best], med[default] / fixed[best], med, trials


def to_confirm(path):
    """The setting a cell's check reruns against the default: its best, when the default is > 3% slower
    or was timed in its trials (a dense cell's fixed-64MB is the default itself, and never checked, only
    where the default did not try thresholds)."""
    density = os.path.basename(path)[:-len(".jsonl")].rsplit("_", 3)[2]
    v = verdict(path, density)
    if v and (v[3] > 1.03 or v[5]) and not (density == "dense" and v[1] == "fixed-64MB" and not v[5]):
        print(v[1])


def pair_ratios(rows):
    """The check's per-pair ratios default / other (a check file's runs, paired by their repeat number), and
    the other setting's name; ([], None) if the file is not one check of the default against one setting."""
    by = {}
    for r in rows:
        m = re.search(r"-rep([0-9]+)", r["label"])
        if m:
            by.setdefault(name(r), {})[int(m.group(1))] = r["median_s"]
    default = "dense" if "dense" in by else "mgs"
    other = [n for n in by if n != default]
    if default not in by or len(other) != 1:
        return [], None
    d, o = by[default], by[other[0]]
    return [d[k] / o[k] for k in sorted(d) if k in o], other[0]


def interval(ratios, level=0.90):
    """(geometric mean, low, high): the two-sided `level` t-interval of the mean log ratio, exponentiated;
    (mean, mean, mean) with fewer than two ratios."""
    logs = [math.log(x) for x in ratios]
    m = statistics.mean(logs)
    if len(logs) < 2:
        return math.exp(m), math.exp(m), math.exp(m)
    half = scipy.stats.t.ppf(0.5 + level / 2, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def checked(out, path):
    """The cell's check, from OUT/confirm/<cell>.jsonl, or None: (default / best: the geometric mean of
    the pairs' ratios, pairs, default's median s, best's median s, the ratio's 90% interval low, high)."""
    check = confirm_path(path)
    if not os.path.exists(check):
        return None
    rows = runs(check)
    ratios, other = pair_ratios(rows)
    if not ratios:
        return None
    by = steps_by_name(rows)
    d, b = statistics.median(by["dense" if "dense" in by else "mgs"]), statistics.median(by[other])
    gm, lo, hi = interval(ratios)
    return gm, len(ratios), d, b, lo, hi


def main(out):
    order = {"resnet50": 0, "bert_base": 1, "vgg16": 2, "10gbit": 0, "1gbit": 1, "dense": 0, "0.01": 1, "0.001": 2}
    cells = []
    for path in glob.glob(os.path.join(out, "*.jsonl")):
        parts = os.path.basename(path)[:-len(".jsonl")].rsplit("_", 3)
        if len(parts) != 4:
            continue
        cells.append((parts, path))
    cells.sort(key=lambda c: (order.get(c[0][0], 9), order.get(c[0][1], 9), order.get(c[0][2], 9), int(c[0][3])))
    print("| model | link | density | ranks | default ms | best fixed | best ms | default/best | checked "
          "| 64 MiB/default | 25 MiB/default | layer-wise/default |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst, lose = 0.0, {"fixed-64MB": 0.0, "fixed-25MB": 0.0, "layerwise": 0.0}
    met = met_checked = total = judged = 0
    above, within, unresolved = [], [], []  # checked cells by their interval against 1.03
    for (model, rate, density, hosts), path in cells:
        v = verdict(path, density)
        if v is None:
            continue
        d, best, best_s, ratio, med, trials = v
        c = checked(out, path)
        total += 1
        if trials:
            # The sweep's default figure is the trials'; the check's is the plan kept.
            if c is None:
                print("| %s | %s | %s | %s | - | %s | %.1f | timed in trials | - | - | - | - |" % (
                    model, rate.replace("gbit", " Gbit/s"), density, hosts, best, best_s * 1e3))
                continue
            scale = best_s / c[3] * c[2]  # the default's time on the sweep's clock
            d, shown = scale, "-"
        else:
            worst = max(worst, ratio)
            judged += 1
            met += ratio <= 1.03
            shown = "%.3f" % ratio
        met_checked += (c[0] if c else ratio) <= 1.03
        if c:
            cell = "%s %s %s %s" % (model, rate, density, hosts)
            (above if c[4] > 1.03 else within if c[5] <= 1.03 else unresolved).append(cell)

        def over(n):
            if n not in med:
                return "-"
            lose[n] = max(lose[n], med[n] / d)
            return "%.2f" % (med[n] / d)
        print("| %s | %s | %s | %s | %.1f | %s | %.1f | %s | %s | %s | %s | %s |" % (
            model, rate.replace("gbit", " Gbit/s"), density, hosts, (c[2] if trials else d) * 1e3, best,
            (c[3] if trials else best_s) * 1e3, shown, "%.3f (%d pairs; %.2f-%.2f)" % (c[:2] + c[4:]) if c else "-",
            over("fixed-64MB"), over("fixed-25MB"), over("layerwise")))
    own = ("by the sweep's own ratio %d of the %d cells whose default it timed on the plan kept (worst %.3f)" % (
        met, judged, worst) if judged else "every cell's default was timed in its trials and has only its check")
    print("\nwithin 3%% of the best fixed size (goal: every cell): %d of %d cells, by the checked ratio where a cell "
          "has one; %s; most lost by 64 MiB %.2f, 25 MiB %.2f, layer-wise %.2f (goal >= 1.10 each)" % (
              met_checked, total, own, lose["fixed-64MB"], lose["fixed-25MB"], lose["layerwise"]))
    print("checked cells by the 90%% interval of default/best: above 1.03 (shown to miss) %d%s; at most 1.03 "
          "(shown within) %d; spanning 1.03 (more pairs needed) %d%s" % (
              len(above), (": " + ", ".join(above)) if above else "", len(within), len(unresolved),
              (": " + ", ".join(unresolved)) if unresolved else ""))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--to-confirm":
        to_confirm(sys.argv[2])
    elif len(sys.argv) == 2:
        main(sys.argv[1])
    else:
        sys.exit(__doc__)
