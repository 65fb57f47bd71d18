"""The merge plan's prediction against the measured step, in the timeline (MGS_TIMELINE).

Each step the online check compares (MGS_REPLAN_TOLERANCE > 0, a plan in force) gets one PLAN_SPAN
box on rank 0's "mgs.plan" track: this rank's span from the first gradient to the last exchange, with
the figures the check compared as arguments. They must be the ones mgs_get_stats reports: as many
boxes as compared steps, and the last box's figures equal the stats' last ones.
"""

import json
import os
import tempfile

import torch
from torch import nn

import mgs
import mgs.torch as hvd
from test_dgc import runtime


def test_each_compared_step_has_a_plan_span_box():
    # Rank 0 writes the file; every rank is given the same path.
    path = hvd.broadcast_object(tempfile.mktemp(suffix=".json", prefix="mgs_plan_timeline_") if hvd.rank() == 0
                                else None, root_rank=0)
    steps = 14
    with runtime(MGS_COMPRESSOR="topk", MGS_DENSITY="0.01", MGS_CALIBRATION="off", MGS_DENSE_FALLBACK="0",
                 MGS_EXCHANGE="allgather", MGS_PLANNER="mgs", MGS_PROFILE_STEPS="2", MGS_PLAN_TRIAL_STEPS="0",
                 MGS_TIMELINE=path):
        torch.manual_seed(hvd.rank())
        model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 64))
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                       named_parameters=model.named_parameters())
        for _ in range(steps):
            opt.zero_grad()
            model(torch.randn(8, 64)).pow(2).sum().backward()
            opt.step()
        hvd.barrier()
        stats = mgs.runtime_stats()
    if hvd.rank() != 0:
        return
    try:
        with open(path) as f:
            events = json.load(f)
    finally:
        os.remove(path)
    boxes = [e for e in events if e.get("name") == "PLAN_SPAN"]
    assert stats["plan_span_checks"] > 0, "no step was compared: the test does not reach the online check"
    assert len(boxes) == stats["plan_span_checks"], (len(boxes), stats["plan_span_checks"])
    tracks = {e["tid"] for e in boxes}
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and "args" in e}
    assert [names.get(t) for t in tracks] == ["mgs.plan"]
    last = boxes[-1]["args"]
    assert last["predicted_us"] == stats["plan_span_predicted_us"]
    assert last["measured_mean_us"] == stats["plan_span_measured_us"]
    assert all(b["dur"] >= 0 and b["args"]["predicted_us"] > 0 for b in boxes)
    assert [b["args"]["step"] for b in boxes] == sorted(b["args"]["step"] for b in boxes)
