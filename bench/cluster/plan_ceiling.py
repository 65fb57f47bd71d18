#!/usr/bin/env python3
"""How much any merge plan can gain over the best fixed bucket size, by the
planner's own cost model: for each trace, element scale, time scale and
density, the MGS dynamic program's plan (optimal among all contiguous cuts
under the model) against every fixed bucket size of --fixed (MB of the
full-size model, as run_planner.sh sweeps them), with the calibration a
run_planner.sh log recorded. A ratio below 1.05 says that in that setting no
plan, however chosen, can be 5 % faster than the best fixed size unless the
model is wrong in its favour; the settings above it are where the planner can
show what it is for.

Both of the planner's sparse models are printed: 'timeline' (what the runtime
plans with) and 'coordinator' (rounds on a grid, small dense tensors on the
coordinator, docs/planner.md section 8).

usage: bench/cluster/plan_ceiling.py -b BUILD --log results/X.log
           [--traces resnet50,bert_base,vgg16] [--scale-elements 0.01,0.05]
           [--scale-time 0.25,1] [--density 0.001,0.01,0.05] [--fixed "1 2 4 ... 512"]
           [--exchanges allgather,agreed,dense] [--check]
"""
import argparse, json, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay_instance  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("-b", "--build", default="build")
ap.add_argument("--log", required=True, help="a run_planner.sh log with its '# calibration: {...}' line")
ap.add_argument("--traces", default="resnet50,bert_base,vgg16")
ap.add_argument("--scale-elements", default="0.01,0.05")
ap.add_argument("--scale-time", default="0.25,1")
ap.add_argument("--density", default="0.001,0.01,0.05")
ap.add_argument("--fixed", default="1 2 4 8 16 32 64 128 256 512")
ap.add_argument("--exchanges", default="allgather,agreed,dense")
ap.add_argument("--cycle-ms", type=float, default=1.0)
ap.add_argument("--check", action="store_true",
                help="exit 1 if a fixed size beats the DP under the timeline model (where the DP is exact)")
a = ap.parse_args()

cal = None
for line in open(a.log):
    if line.startswith("# calibration: "):
        cal = json.loads(line.split(": ", 1)[1])
if cal is None:
    sys.exit("plan_ceiling: no '# calibration: ' line in " + a.log)
cal.pop("format", None)
cal.pop("version", None)
floats = lambda s: [float(x) for x in s.split(",")]

beaten, rows = [], 0
print("| trace | scale elements | scale time | density | model | mgs ms (groups) | best fixed: MB, ms (groups) |"
      " best fixed / mgs |")
print("|---|---|---|---|---|---|---|---|")
for tname in a.traces.split(","):
    trace = json.load(open(os.path.join("tools", "traces", tname + ".json")))
    for se in floats(a.scale_elements):
        for st in floats(a.scale_time):
            layers, dense = replay_instance.layers_for(trace, se, st)
            for rho in floats(a.density):
                timeline = dict(cal, layers=layers, density=rho, selection="separate", exchanges=a.exchanges)
                coord = dict(timeline, coordinator_loop=True, cycle_s=a.cycle_ms / 1000.0, max_in_flight=4,
                             dense_tensors=dense)
                fwd = trace["forward_s"] * st
                for model, inst in (("timeline", timeline), ("coordinator", coord)):
                    m = replay_instance.mgs_plan(a.build, inst, ["--planner", "mgs"])
                    best = None
                    for mb in a.fixed.split():
                        f = dict(inst, fusion_threshold_bytes=int(float(mb) * se * (1 << 20)))
                        p = replay_instance.mgs_plan(a.build, f, ["--planner", "fusion"])
                        if best is None or p["predicted_s"] < best[1]:
                            best = (mb, p["predicted_s"], len(p["groups"]))
                    mt, bt = fwd + m["predicted_s"], fwd + best[1]
                    rows += 1
                    if model == "timeline" and bt < mt * (1 - 1e-9):
                        beaten.append(f"{tname} se={se:g} st={st:g} rho={rho:g}: fixed {best[0]} MB")
                    print(f"| {tname} | {se:g} | {st:g} | {rho:g} | {model} | {mt*1e3:.1f} ({len(m['groups'])}) | "
                          f"{best[0]}, {bt*1e3:.1f} ({best[2]}) | {bt/mt:.3f} |", flush=True)
if a.check and rows == 0:
    sys.exit("plan_ceiling: nothing compared")
if a.check and beaten:
    sys.exit("plan_ceiling: a fixed size beat the DP under the timeline model: " + "; ".join(beaten))
