"""Convergence sweep: train_digits.py dense vs each sparsifying compressor, same seed and epochs.

    python3 examples/pytorch/convergence.py --np 4 --out convergence-results

runs one mpirun job per configuration (dense; each selector at each density,
with and without error feedback), then writes <out>/results.md (a table of
final and best test accuracy, the gap to dense, and gradient traffic),
<out>/results.json and <out>/convergence.png (loss and accuracy curves, one
column per selector). --replot RESULTS_JSON redraws the figure only.
Pass --selectors/--densities/--error-feedback to run a subset, and
--launcher to use mgsrun instead of mpirun.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SELECTORS = ["topk", "gaussiank", "ldte", "dgc", "randomk"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=4)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--selectors", nargs="*", default=SELECTORS)
    p.add_argument("--densities", nargs="*", type=float, default=[0.01, 0.001])
    p.add_argument("--error-feedback", nargs="*", type=int, default=[1, 0], choices=[0, 1])
    p.add_argument("--exchange", choices=["allgather", "agreed", "hierarchical", "auto"],
                   help="MGS_EXCHANGE for the sparse runs (labelled with it); unset: the runtime's default")
    p.add_argument("--dgc", nargs="*", default=["plain"], metavar="VARIANT",
                   help="DGC variants of every sparse run: 'plain' (the defaults: momentum correction 'auto', "
                        "on for this SGD, with masking; MGS_WARMUP_STEPS=auto), or '+'-joined parts of "
                        "nomc (momentum correction off), mc (momentum correction, masking off), mask (momentum "
                        "correction with masking), maskafter (momentum correction, masking only after the density "
                        "warm-up), nolrw (momentum correction without learning-rate weighting), "
                        "clipX (local clipping at norm X), warmupN (MGS_WARMUP_STEPS=N; warmup0: none); "
                        "e.g. mask+clip2")
    p.add_argument("--out", type=Path, default=Path("convergence-results"))
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--replot", type=Path, metavar="RESULTS_JSON",
                   help="only redraw <out>/convergence.png from an earlier results.json (no training)")
    p.add_argument("--launcher", default="mpirun --oversubscribe --bind-to none",
                   help="command that takes '-np N' and the program (e.g. 'build/launcher/mgsrun')")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                   help="further arguments for train_digits.py")
    return p.parse_args()


def configurations(args):
    yield {"label": "dense", "MGS_COMPRESSOR": "none"}
    for selector in args.selectors:
        for density in args.densities:
            for ef in args.error_feedback:
                for variant in args.dgc:
                    config = {"label": f"{selector} rho={density:g} ef={ef}", "MGS_COMPRESSOR": selector,
                              "MGS_DENSITY": f"{density:g}", "MGS_ERROR_FEEDBACK": str(ef)}
                    if args.exchange:
                        config["label"] += f" {args.exchange}"
                        config["MGS_EXCHANGE"] = args.exchange
                    if variant != "plain":
                        config["label"] += f" {variant}"
                        config.update(dgc_settings(variant))
                    yield config


def dgc_settings(variant):
    """train_digits.py arguments ("args") and MGS_* of a --dgc variant such as 'mask+clip2+warmup50'."""
    out, args = {}, []
    for part in variant.split("+"):
        if part in ("mc", "mask", "maskafter"):
            args += ["--momentum-correction"] + {"mc": ["--no-masking"], "mask": [],
                                                 "maskafter": ["--masking-after-warmup"]}[part]
        elif part == "nolrw":
            args += ["--no-lr-weighting"]
        elif part == "nomc":
            args += ["--momentum-correction", "off"]
        elif part.startswith("clip"):
            args += ["--clip-norm", part[len("clip"):]]
        elif part.startswith("warmup"):
            out["MGS_WARMUP_STEPS"] = part[len("warmup"):]
        else:
            raise SystemExit(f"--dgc: unknown part {part!r} in {variant!r}")
    out["args"] = args
    return out


def run(args, config, json_path):
    env = dict(os.environ)
    for key in ("MGS_COMPRESSOR", "MGS_DENSITY", "MGS_ERROR_FEEDBACK", "MGS_EXCHANGE", "MGS_WARMUP_STEPS"):
        env.pop(key, None)
    env.update({k: v for k, v in config.items() if k.startswith("MGS_")})
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    launcher = args.launcher.split()
    sep = ["--"] if Path(launcher[0]).name == "mgsrun" else []
    cmd = launcher + ["-np", str(args.np)] + sep + [
        args.python, str(HERE / "train_digits.py"), "--epochs", str(args.epochs), "--seed", str(args.seed),
        "--json", str(json_path)] + config.get("args", []) + args.extra
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{config['label']}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    with open(json_path) as f:
        result = json.load(f)
    result["label"], result["config"], result["wall_s"] = config["label"], config, time.perf_counter() - start
    return result


def summarize(results):
    dense = next(r for r in results if r["label"] == "dense")
    dense_final = dense["history"][-1]["test_accuracy"]
    rows = ["| configuration | final test acc. | Δ vs dense (points) | best | final loss | "
            "sent / dense bytes per step (last epoch) | selected/k |",
            "|---|---|---|---|---|---|---|"]
    for r in results:
        h = r["history"]
        final, best = h[-1]["test_accuracy"], max(e["test_accuracy"] for e in h)
        c = h[-1]["compression"]
        sent, dense_b = c.get("sent_bytes_per_step"), c.get("dense_bytes_per_step")
        traffic = "n/a" if sent is None or not dense_b else f"{sent / dense_b:.4f}"
        sel = c.get("selected_over_k")
        rows.append(f"| {r['label']} | {final * 100:.2f}% | {(final - dense_final) * 100:+.2f} | {best * 100:.2f}% "
                    f"| {h[-1]['loss']:.4f} | {traffic} | {'n/a' if sel is None else f'{sel:.3f}'} |")
    return "\n".join(rows)


def plot(results, path):
    """Small multiples: one column per selector (loss above, accuracy below), dense in grey in each,
    density by colour and error feedback by line style, so every panel has at most five lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dense = next((r for r in results if r["label"] == "dense"), None)
    selectors = sorted({r["config"]["MGS_COMPRESSOR"] for r in results if r["label"] != "dense"},
                       key=lambda s: SELECTORS.index(s) if s in SELECTORS else len(SELECTORS))
    densities = sorted({r["config"]["MGS_DENSITY"] for r in results if r["label"] != "dense"}, key=float,
                       reverse=True)
    colours = dict(zip(densities, ["tab:blue", "tab:orange", "tab:green", "tab:red"]))
    cols = max(len(selectors), 1)
    fig, axes = plt.subplots(2, cols, figsize=(2.9 * cols, 5.6), sharex=True, sharey="row", squeeze=False)

    def curves(ax_loss, ax_acc, r, **style):
        epochs = [e["epoch"] for e in r["history"]]
        ax_loss.plot(epochs, [e["loss"] for e in r["history"]], **style)
        ax_acc.plot(epochs, [e["test_accuracy"] * 100 for e in r["history"]], **style)

    for col, selector in enumerate(selectors):
        ax_loss, ax_acc = axes[0][col], axes[1][col]
        if dense is not None:
            curves(ax_loss, ax_acc, dense, color="0.6", linewidth=2.5, label="dense")
        for r in results:
            c = r["config"]
            if r["label"] == "dense" or c["MGS_COMPRESSOR"] != selector:
                continue
            ef = c.get("MGS_ERROR_FEEDBACK") == "1"
            curves(ax_loss, ax_acc, r, color=colours.get(c["MGS_DENSITY"], "black"), linestyle="-" if ef else ":",
                   label=f"ρ={c['MGS_DENSITY']} " + ("with EF" if ef else "no EF"))
        ax_loss.set_title(selector)
        ax_loss.set_yscale("log")
        ax_acc.set_xlabel("epoch")
        ax_acc.grid(alpha=0.3)
        ax_loss.grid(alpha=0.3)
    axes[0][0].set_ylabel("training loss")
    axes[1][0].set_ylabel("test accuracy (%)")
    handles, labels = axes[1][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)


def main():
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.replot:
        plot(json.loads(args.replot.read_text()), args.out / "convergence.png")
        return 0
    results = []
    for config in configurations(args):
        name = config["label"].replace(" ", "_").replace("=", "")
        result = run(args, config, args.out / f"{name}.json")
        h = result["history"][-1]
        print(f"{config['label']:28s} final accuracy {h['test_accuracy'] * 100:6.2f}%  loss {h['loss']:.4f}  "
              f"({result['wall_s']:.0f} s)", flush=True)
        results.append(result)
    table = summarize(results)
    (args.out / "results.md").write_text(
        f"{args.np} ranks, {args.epochs} epochs, seed {args.seed}\n\n{table}\n")
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    plot(results, args.out / "convergence.png")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
