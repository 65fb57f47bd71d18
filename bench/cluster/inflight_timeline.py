#!/usr/bin/env python3
"""Sparse allgathers in flight, from a timeline (MGS_TIMELINE, rank 0's): at how many exchanges in flight each one
started, how long each took (its ALLGATHER box), how far apart their ends came (gaps of 20 ms or more, between
steps, left out), and the start-up the back-to-back ones hid: over the exchanges started at least a start-up S
before the previous one ended, sum(prev_end + T - end) / sum(S), the overlap the timeline model's
inflight_overlap stands for (planner.md §2), with S = T = the calibrated start-up given.
usage: inflight_timeline.py TIMELINE.json[.gz] [T_MS ...]   (bench/NOTES.md: 6 7.5 9)"""
import gzip, json, statistics, sys

path = sys.argv[1]
events = json.load(gzip.open(path, "rt") if path.endswith(".gz") else open(path))
boxes = {}  # a bucket's members share its box: one per (start, duration)
for e in events:
    if e.get("ph") == "X" and e["name"] == "ALLGATHER":
        boxes[(e["ts"], e["dur"])] = (e["ts"] / 1e3, (e["ts"] + e["dur"]) / 1e3)
ags = sorted(boxes.values(), key=lambda b: b[1])
starts = sorted(b[0] for b in ags)
in_flight = {}
for s in starts:
    n = sum(1 for a, b in ags if a <= s < b)
    in_flight[n] = in_flight.get(n, 0) + 1
ends = [b for _, b in ags]
gaps = [y - x for x, y in zip(ends, ends[1:]) if y - x < 20]
print("%d allgathers; in flight at their start (itself included): %s" % (len(ags), dict(sorted(in_flight.items()))))
print("duration median %.2f ms; ends apart median %.2f ms, mean %.2f ms" %
      (statistics.median(b - a for a, b in ags), statistics.median(gaps), statistics.mean(gaps)))
for t in [float(x) for x in sys.argv[2:]]:
    prev, hidden, startups, pairs = None, 0.0, 0.0, 0
    for a, b in ags:
        if prev is not None and prev - a >= t:
            hidden += prev + t - b
            startups += t
            pairs += 1
        prev = b if prev is None else max(prev, b)
    print("T = S = %.1f ms: %d back-to-back pairs, hidden start-up %.2f" % (t, pairs, hidden / startups if pairs else 0))
