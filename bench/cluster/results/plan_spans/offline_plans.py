#!/usr/bin/env python3
"""Does the change move the plans the DP chooses? For each sitting's
calibration here (span_*_MODEL_RANKS.out), both densities and coordinator
dilations of 1, 3, 8 and 18 (the range 4-16 emulated hosts measure), the
`mgs` plan of the model's trace (scaled as the sittings ran it: a quarter of
its times, ResNet-50 at 1 % of its elements and BERT-base at 0.25 %, tensors
below 4096 x that scale left out and their backward time given to the next)
with two mgs-plan binaries: BEFORE with the calibration's inflight_overlap
removed, AFTER with it set to the calibration's allgather_overlap. Prints a
line per case and how many keep their bucket count.

usage: offline_plans.py BEFORE_MGS_PLAN AFTER_MGS_PLAN
  (e.g. build-head/tools/mgs-plan build/tools/mgs-plan, from the repo root)
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCALE = {"resnet50": 0.01, "bert_base": 0.0025}


def instance(model, density, path):
    trace = json.load(open(os.path.join(HERE, "../../../../tools/traces/%s.json" % model)))
    scale, layers, carry = SCALE[model], [], 0.0
    for l in trace["layers"]:
        elements, backward = int(l["elements"] * scale + 0.5), l["backward_s"] * 0.25 + carry
        if elements >= int(4096 * scale):
            layers.append({"name": l["name"], "elements": elements, "backward_s": backward})
            carry = 0.0
        else:
            carry = backward
    json.dump({"density": density, "selection": "separate", "layers": layers}, open(path, "w"))


def plan(binary, inst, cost):
    out = subprocess.run([binary, "-i", inst, "-c", cost, "-p", "mgs", "--selection", "separate"],
                         capture_output=True, text=True, check=True).stdout
    d = json.loads(out)
    d = d[0] if isinstance(d, list) else d
    return len(d["groups"]), d["predicted_s"] * 1e3


def main(before, after):
    same = total = 0
    with tempfile.TemporaryDirectory() as tmp:
        inst, cost = os.path.join(tmp, "inst.json"), os.path.join(tmp, "cost.json")
        for out in sorted(glob.glob(os.path.join(HERE, "span_*.out"))):
            name = os.path.basename(out)[len("span_"):-len(".out")]
            model = next(m for m in SCALE if ("_%s_" % m) in "_%s_" % name)
            cal = json.loads(open(out).read().split("# calibration: ")[1].split("\n")[0])
            for density in (0.01, 0.001):
                instance(model, density, inst)
                for dilation in (1.0, 3.0, 8.0, 18.0):
                    c = dict(cal, host_dilation=dilation)
                    c.pop("inflight_overlap", None)
                    json.dump(c, open(cost, "w"))
                    b = plan(before, inst, cost)
                    c["inflight_overlap"] = cal.get("allgather_overlap", 0.0)
                    json.dump(c, open(cost, "w"))
                    a = plan(after, inst, cost)
                    same += a[0] == b[0]
                    total += 1
                    print("%-22s rho %-5g dilation %4g: before %d buckets %.1f ms, after %d buckets %.1f ms"
                          % (name, density, dilation, b[0], b[1], a[0], a[1]))
    print("%d of %d keep their bucket count" % (same, total))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
