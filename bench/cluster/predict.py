#!/usr/bin/env python3
"""Re-predicts recorded emulated-cluster runs with today's cost model.

Reads a run_planner.sh / run_scaling.sh log (its "# calibration: {...}" line
is the cost model the runs measured) and JSON lines, rebuilds the replayed
instance as mgs-replay does (trace times x --scale-time, elements x
--scale-elements rounded, at least 1; tensors below MGS_MIN_SPARSE_ELEMENTS
go dense and their backward joins the next sparse gap), and runs mgs-plan
with the strategy's planner. Prints measured median, the prediction recorded
at run time, and today's, each as pred/meas.

usage: bench/cluster/predict.py -b BUILD --log results/X.log --jsonl results/X.jsonl
           [--min-sparse 40] [--trace tools/traces/resnet50.json]
           [--ranks-per-node R] [--exchanges allgather,agreed,...] [--no-dense] [--old-auto]
           [--timeline-model] [--cycle-ms 1] [--in-flight 4] [--overlap X] [--phase barrier|mean]

By default the prediction uses the coordinator model (docs/planner.md §8):
rounds back to back on a grid, the small dense tensors allreduced on the
coordinator, up to --in-flight allgathers at once, completions seen after a
round. --timeline-model predicts as before it (no coordinator terms).
"""
import argparse, json, os, re, statistics, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replay_instance  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("-b", "--build", default="build")
ap.add_argument("--log", required=True)
ap.add_argument("--jsonl", required=True)
ap.add_argument("--trace", default="tools/traces/resnet50.json")
ap.add_argument("--min-sparse", type=int, default=None, help="default 4096 x scale_elements")
ap.add_argument("--exchanges", default=None, help="default: the run's exchange and dense (MGS_DENSE_FALLBACK=1)")
ap.add_argument("--ranks-per-node", type=int, default=None)
ap.add_argument("--no-dense", action="store_true", help="the runs had MGS_DENSE_FALLBACK=0 (run_hier.sh)")
ap.add_argument("--old-auto", action="store_true",
                help="runs labelled 'auto' chose between the allgather and the agreed exchange (older builds)")
ap.add_argument("--timeline-model", action="store_true", help="the model before the coordinator terms")
ap.add_argument("--cycle-ms", type=float, default=1.0, help="MGS_CYCLE_TIME_MS of the runs (runtime default 1)")
ap.add_argument("--in-flight", type=int, default=4, help="allgathers in flight (BlockExchange::kMaxInFlight)")
ap.add_argument("--dense-blocking", action="store_true",
                help="the small dense tensors' allreduces run to their end before the round's sparse buckets "
                     "(the runtime's order for CUDA tensors; host tensors over MPI go in flight, the default)")
ap.add_argument("--overlap", type=float, default=None,
                help="allgather_overlap, in [0, 1] (default: the calibration's, else the model's 1)")
ap.add_argument("--dump", default=None, help="also write each strategy's instance to DUMP-<n>.json (for mgs-plan)")
ap.add_argument("--phase", choices=["barrier", "mean"], default="barrier",
                help="barrier: mgs-replay starts each step when its barrier's round ends, so a round starts "
                     "forward_s before backward; mean: the mean over the round grid's phases")
a = ap.parse_args()
dumped = [0]

# run_planner.sh logs "# calibration: {...}", run_scaling.sh one
# "# calibration P=N: {...}" per P.
cals = {}
for line in open(a.log):
    if line.startswith("# calibration"):
        head, body = line.split(": ", 1)
        cals[int(head.split("P=")[1]) if "P=" in head else None] = json.loads(body)
if not cals:
    sys.exit("predict: no '# calibration' line in " + a.log + " (runs before it logged them)")
trace = json.load(open(a.trace))
rows = [json.loads(l) for l in open(a.jsonl) if l.strip()]

def layers_for(r):
    return replay_instance.layers_for(trace, r["scale_elements"], r["scale_time"], a.min_sparse)

def run_exchanges(r):
    """The exchanges the run's MGS_EXCHANGE let a bucket take, plus dense
    unless --no-dense. 'auto' takes the allgather; runs recorded before it
    stopped taking the agreed exchange (the results/ files labelled 'auto')
    chose between the two, as --old-auto re-predicts them."""
    ex = r.get("exchange", "allgather")
    if ex == "auto":
        ex = "allgather,agreed" if a.old_auto else "allgather"
    return ex + ("" if a.no_dense else ",dense")

def predict(r):
    c = dict(cals.get(r["ranks"], cals.get(None)) or {})
    if not c:
        raise SystemExit("predict: no calibration for P=%d" % r["ranks"])
    c.pop("format", None); c.pop("version", None)
    c["workers"] = r["ranks"]
    if a.ranks_per_node: c["ranks_per_node"] = a.ranks_per_node
    if "negotiation_s" not in c and "segments" in c["allreduce"]:
        # Older calibrations: the round as calibration measures it today, the
        # allreduce model at a negotiation message's 512 bytes.
        seg = [x for x in c["allreduce"]["segments"] if x[0] <= 512][-1]
        c["negotiation_s"] = max(0.0, seg[1] + seg[2] * 512)
    layers, dense = layers_for(r)
    if not a.timeline_model:
        c.update(coordinator_loop=True, cycle_s=a.cycle_ms / 1000.0, max_in_flight=a.in_flight,
                 dense_in_flight=not a.dense_blocking)
        if a.overlap is not None: c["allgather_overlap"] = a.overlap
        period = max(c["negotiation_s"], c["cycle_s"])
        if a.phase == "barrier" and period > 0:
            c["round_phase_s"] = (-r["forward_s"]) % period
    inst = dict(c, layers=layers, density=r["density"], selection="separate",
                exchanges=a.exchanges or run_exchanges(r),
                fusion_threshold_bytes=r.get("fusion_threshold_bytes", 64 << 20))
    if not a.timeline_model:
        inst["dense_tensors"] = dense
    planner = r["planner"] if r["strategy"] != "single" else "single"
    if a.dump:
        with open("%s-%d.json" % (a.dump, dumped[0]), "w") as f:
            json.dump(inst, f)
        dumped[0] += 1
    def plan(inst, extra):
        return replay_instance.mgs_plan(a.build, inst, extra)
    if not a.timeline_model:
        # The runtime plans on the timeline model (its calibration has no
        # coordinator terms): its groups, evaluated on the coordinator model.
        old = {k: v for k, v in inst.items() if k not in ("coordinator_loop", "dense_tensors", "round_phase_s")}
        groups = plan(old, ["--planner", planner])["groups"]
        p = plan(inst, ["--lengths", ",".join(str(len(g)) for g in groups)])
        chosen = plan(inst, ["--planner", planner])
        return r["forward_s"] + p["predicted_s"], len(p["groups"]), r["forward_s"] + chosen["predicted_s"], len(chosen["groups"])
    p = plan(inst, ["--planner", planner])
    return r["forward_s"] + p["predicted_s"], len(p["groups"]), None, None

groups = {}
for r in rows:
    key = re.sub(r"-rep\d+", "", r["label"]) + "|" + r["strategy"] + "|" + str(r.get("fusion_threshold_bytes")) + "|" + str(r["ranks"]) + "|" + r.get("exchange", "")
    groups.setdefault(key, []).append(r)
print("| P | exchange | strategy | fusion bytes | measured ms | buckets | recorded pred/meas | today's pred ms | groups | pred/meas |"
      " planned under the coordinator model: groups, ms |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for key, rs in groups.items():
    r = rs[0]
    meas = statistics.median(x["median_s"] for x in rs)
    rec = statistics.median(x["predicted_calibrated_s"] for x in rs)
    pred, ng, alt, alt_ng = predict(r)
    name = r["strategy"] if r["strategy"] != "fusion" else "fixed"
    print(f"| {r['ranks']} | {r.get('exchange','')} | {name} | {r.get('fusion_threshold_bytes')} | {meas*1e3:.1f} | "
          f"{r['plan_buckets']} | {rec/meas:.2f} | {pred*1e3:.1f} | {ng} | {pred/meas:.2f} | "
          + (f"{alt_ng}, {alt*1e3:.1f} |" if alt is not None else "- |"))
