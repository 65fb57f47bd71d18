#!/usr/bin/env python3
"""Plot mgs-sim results: scaling efficiency against workers, one panel per JSON file.

Usage: python3 plot_sim.py OUT.png RESULT.json [RESULT.json ...]
Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {  # dense strategies solid, sparse dashed; exact planners thick
    "wfbp": ("tab:blue", "-", 1.2), "syncea": ("tab:gray", "-", 1.2),
    "fusion": ("tab:green", "-", 1.2), "mgwfbp": ("tab:red", "-", 2.4),
    "mgwfbp-greedy": ("tab:orange", ":", 1.2), "lags": ("tab:cyan", "--", 1.2),
    "topk": ("tab:brown", "--", 1.2), "mgs": ("tab:purple", "--", 2.4),
    "mgs-greedy": ("tab:pink", ":", 1.2),
}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, files = sys.argv[1], sys.argv[2:]
    fig, axes = plt.subplots(1, len(files), figsize=(5.2 * len(files), 4.4), squeeze=False)
    for ax, path in zip(axes[0], files):
        with open(path) as f:
            r = json.load(f)
        workers = sorted({p["workers"] for p in r["points"]})
        for s in r["strategies"]:
            pts = sorted((p["workers"], p["efficiency"]) for p in r["points"] if p["strategy"] == s["name"])
            color, ls, lw = STYLE.get(s["name"], (None, "-", 1.0))
            ax.plot([p for p, _ in pts], [v for _, v in pts], ls, color=color, lw=lw, label=s["name"])
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("workers P")
        ax.set_ylabel("scaling efficiency (speedup / P)")
        net = r["network"]
        ax.set_title("%s, %s, density %g, t_s %s" % (r["model"], net["name"], r["density"],
                                                    r["sparsify"]["kind"]), fontsize=9)
        ax.grid(True, which="both", lw=0.3)
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
