"""Convergence sweep: train_digits.py dense vs each sparsifying compressor, same seed and epochs.

    python3 examples/pytorch/convergence.py --np 4 --out convergence-results

runs one mpirun job per configuration (dense; each selector at each density,
with and without error feedback), then writes <out>/results.md (a table of
final and best test accuracy, the gap to dense, and gradient traffic),
<out>/results.json and <out>/convergence.png (loss and accuracy curves).
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
    p.add_argument("--out", type=Path, default=Path("convergence-results"))
    p.add_argument("--python", default=sys.executable)
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
                yield {"label": f"{selector} rho={density:g} ef={ef}", "MGS_COMPRESSOR": selector,
                       "MGS_DENSITY": f"{density:g}", "MGS_ERROR_FEEDBACK": str(ef)}


def run(args, config, json_path):
    env = dict(os.environ)
    for key in ("MGS_COMPRESSOR", "MGS_DENSITY", "MGS_ERROR_FEEDBACK"):
        env.pop(key, None)
    env.update({k: v for k, v in config.items() if k.startswith("MGS_")})
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    launcher = args.launcher.split()
    sep = ["--"] if Path(launcher[0]).name == "mgsrun" else []
    cmd = launcher + ["-np", str(args.np)] + sep + [
        args.python, str(HERE / "train_digits.py"), "--epochs", str(args.epochs), "--seed", str(args.seed),
        "--json", str(json_path)] + args.extra
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
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(13, 5))
    for r in results:
        epochs = [e["epoch"] for e in r["history"]]
        style = {"color": "black", "linewidth": 2.5} if r["label"] == "dense" else {
            "linestyle": "-" if r["config"].get("MGS_ERROR_FEEDBACK") == "1" else ":"}
        ax_loss.plot(epochs, [e["loss"] for e in r["history"]], label=r["label"], **style)
        ax_acc.plot(epochs, [e["test_accuracy"] * 100 for e in r["history"]], label=r["label"], **style)
    ax_loss.set_yscale("log")
    ax_loss.set(xlabel="epoch", ylabel="training loss (mean over ranks)", title="loss")
    ax_acc.set(xlabel="epoch", ylabel="test accuracy (%)", title="test accuracy")
    ax_acc.legend(fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    args = parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
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
