#!/usr/bin/env python3
"""Negotiation rounds seen from rank 0's timeline (MGS_TIMELINE): per step, each round that declared tensors
ready (its end, from the step's first enqueue on rank 0), how many it declared and the latest rank-0 enqueue among
them. A round that declared a tensor began after that tensor's enqueue on every rank, so end minus that enqueue
bounds the round's length from above, and the gap from the previous round's end to the latest enqueue it covered
shows how soon the next round began; the ends of one step's declaring rounds, how far apart they came. Steps are split where enqueues pause for 15 ms or more; steps of one tensor
(the replay's own gathers) are left out.
usage: negotiation_rounds.py TIMELINE.json[.gz] [LAST_STEPS]"""
import collections
import gzip
import json
import statistics
import sys

path = sys.argv[1]
last = int(sys.argv[2]) if len(sys.argv) > 2 else 10
events = json.load(gzip.open(path, "rt") if path.endswith(".gz") else open(path))
neg = sorted((e for e in events if e.get("name") == "NEGOTIATE" and e.get("ph") == "X"), key=lambda e: e["ts"])
steps, cur = [], []
for e in neg:
    if cur and e["ts"] - cur[-1]["ts"] > 15000:
        steps.append(cur)
        cur = []
    cur.append(e)
if cur:
    steps.append(cur)
steps = [s for s in steps if len(s) > 1][-last:]
bounds, apart = [], []
for s in steps:
    t0 = s[0]["ts"]
    rounds = collections.defaultdict(list)
    for e in s:
        rounds[round((e["ts"] + e["dur"] - t0) / 1e3, 1)].append((e["ts"] - t0) / 1e3)
    row = []
    for end in sorted(rounds):
        latest = max(rounds[end])
        row.append("%.1f ms: %d tensors, latest enqueue %.1f" % (end, len(rounds[end]), latest))
        bounds.append(end - latest)
    ends = sorted(rounds)
    apart += [b - a for a, b in zip(ends, ends[1:])]
    print("step of %d tensors, last enqueue %.1f ms | %s" % (len(s), (s[-1]["ts"] - t0) / 1e3, " | ".join(row)))
if bounds:
    print("round end minus the latest enqueue it covered: median %.1f ms, range %.1f-%.1f ms (%d rounds)" %
          (statistics.median(bounds), min(bounds), max(bounds), len(bounds)))
if apart:
    print("ends of consecutive declaring rounds apart: median %.1f ms, range %.1f-%.1f ms (%d pairs)" %
          (statistics.median(apart), min(apart), max(apart), len(apart)))
