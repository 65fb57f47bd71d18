#!/usr/bin/env python3
"""How a run's steps drift: the median of its last N timed steps over the median of its first N.

usage: bench/cluster/step_drift.py RUNS.jsonl [-n N] [--trials]

One line per run of run_planner.sh's JSON lines (label, the fusion threshold it ended on, the ratio),
then each group's ratios: the fixed-size runs, and the default's runs by the threshold they kept
(planner.md 7c, "What the trials cannot see").

--trials: for the default's runs that tried every candidate, each candidate's mean timed step during the
trials over T's, from the replay's own step times. It assumes the defaults and --warmup 5: the trials
run the first timed steps, visits of 2 steps in the order of --candidates and back (T, T/4, T/16, 2T, 2T,
T/16, T/4, T: 16 steps). Runs of a build that tried other candidates name them with --candidates (the
five-candidate trial build of bench/NOTES.md: "T 25T/64 T/4 T/16 2T").
"""
import argparse
import json
import statistics


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl")
    ap.add_argument("-n", type=int, default=10, help="steps at each end (default 10)")
    ap.add_argument("--trials", action="store_true", help="the candidates' steps during the trials")
    ap.add_argument("--candidates", default="T T/4 T/16 2T", help="the candidates in trial order")
    a = ap.parse_args()
    if a.trials:
        return trials(a.jsonl, a.candidates.split())
    groups = {}
    for line in open(a.jsonl):
        r = json.loads(line)
        s = r["step_s"]
        if len(s) < 2 * a.n:
            continue
        ratio = statistics.median(s[-a.n:]) / statistics.median(s[:a.n])
        if "fixed" in r["label"]:
            group = "fixed " + r["label"].rsplit("-fixed", 1)[1]
        elif r.get("fusion_threshold_kept_bytes") == r.get("fusion_threshold_bytes"):
            group = "default, kept T"
        else:
            group = "default, kept %d bytes" % r.get("fusion_threshold_kept_bytes", 0)
        groups.setdefault(group, []).append(ratio)
        print("%-55s last/first %d steps: %.3f" % (r["label"], a.n, ratio))
    for g, v in sorted(groups.items()):
        print("%-30s %2d runs: %s (median %.3f)" % (g, len(v), ", ".join("%.3f" % x for x in sorted(v)),
                                                   statistics.median(v)))


def trials(path, names):
    order = list(range(len(names))) + list(reversed(range(len(names))))
    rel = [[] for _ in names]
    for line in open(path):
        r = json.loads(line)
        if "fixed" in r["label"] or r.get("fusion_trials", 0) != len(names):
            continue
        s = r["step_s"]
        per = [[] for _ in names]
        for v, c in enumerate(order):
            per[c] += s[2 * v:2 * v + 2]
        ratios = [statistics.mean(p) / statistics.mean(per[0]) for p in per]
        for i, x in enumerate(ratios):
            rel[i].append(x)
        print("%-40s kept %d: %s" % (r["label"], r.get("fusion_threshold_kept_bytes", 0),
                                      ", ".join("%s %.3f" % (n, x) for n, x in zip(names, ratios))))
    if rel[0]:
        print("mean over %d runs: %s" % (len(rel[0]), ", ".join("%s %.3f" % (n, statistics.mean(v))
                                                                 for n, v in zip(names, rel))))


if __name__ == "__main__":
    main()
