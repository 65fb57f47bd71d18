"""Table of bench/train results: median step per system (median over repeats),
and ratios against torch DDP and the compute-only floor of the same sitting."""
import collections
import json
import statistics
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
groups = collections.OrderedDict()
for r in rows:
    groups.setdefault((r["model"], r["rate"]), collections.OrderedDict()).setdefault(r["name"], []).append(r)
for (model, rate), systems in groups.items():
    med = {name: statistics.median(x["median_step_s"] for x in rs if not x.get("failed"))
           if any(not x.get("failed") for x in rs) else None for name, rs in systems.items()}
    ddp, floor = med.get("ddp"), med.get("compute")
    ranks = sorted({x.get("ranks") for rs in systems.values() for x in rs if x.get("ranks")})
    hosts = "/".join(str(n) for n in ranks) or "?"
    setting = next((x["setting"] for rs in systems.values() for x in rs if x.get("setting")), None)
    print(f"\n{model}, {setting or f'{hosts} emulated hosts at {rate}'}\n")
    print("| system | s/step | DDP time / this | this / compute floor | wire bytes/step (mgs) |")
    print("|---|---|---|---|---|")
    for name, m in med.items():
        if m is None:
            print(f"| {name} | failed | | | |")
            continue
        st = systems[name][-1].get("mgs_stats") or {}
        sent = st.get("sent_bytes_per_step")
        dense = st.get("dense_bytes_per_step")
        traffic = f"{sent / 2**20:.2f} MiB of {dense / 2**20:.1f} MiB" if sent is not None and dense else ""
        print(f"| {name} | {m:.3f} | {ddp / m:.2f}x | {m / floor:.2f} | {traffic} |" if ddp and floor
              else f"| {name} | {m:.3f} | | | {traffic} |")
