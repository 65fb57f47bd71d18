"""What mgs-replay plans, rebuilt for mgs-plan (shared by predict.py and
plan_ceiling.py): the replayed layers of a trace and a call of mgs-plan."""
import json, os, subprocess, tempfile


def layers_for(trace, scale_elements, scale_time, min_sparse=None):
    """The sparse layers as mgs-replay plans them (elements x scale_elements
    rounded, at least 1; tensors below min_sparse, default 4096 x
    scale_elements, go dense and their backward joins the next sparse gap),
    and the dense tensors, each with the time backward produces it."""
    ms = min_sparse if min_sparse is not None else int(4096 * scale_elements)
    out, dense, carry, clock = [], [], 0.0, 0.0
    for l in trace["layers"]:
        e = max(1, round(l["elements"] * scale_elements))
        carry += l["backward_s"] * scale_time
        clock += l["backward_s"] * scale_time
        if e < ms:
            dense.append({"name": l["name"], "elements": e, "ready_s": clock})
            continue
        out.append({"name": l["name"], "elements": e, "backward_s": carry})
        carry = 0.0
    return out, dense


def mgs_plan(build, inst, extra):
    """mgs-plan's JSON answer for instance `inst` with arguments `extra`."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(inst, f)
    try:
        out = subprocess.run([os.path.join(build, "tools", "mgs-plan"), "--input", f.name] + extra,
                             capture_output=True, text=True, check=True)
    finally:
        os.unlink(f.name)
    return json.loads(out.stdout)
