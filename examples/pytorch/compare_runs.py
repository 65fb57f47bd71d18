"""One-line comparison of two train_digits.py runs (their --json files):
test accuracy, gradient bytes each rank sent per step, and selected/k.

    python3 examples/pytorch/compare_runs.py dense.json sparse.json
"""
import json
import sys


def summary(path):
    with open(path) as f:
        run = json.load(f)
    last = run["history"][-1]
    c = last["compression"]
    sent = c.get("sent_bytes_per_step")
    return {"accuracy": last["test_accuracy"], "sent": sent if sent is not None else c["dense_bytes_per_step"],
            "dense": c["dense_bytes_per_step"], "compressor": c.get("compressor", "none"),
            "selected_over_k": c.get("selected_over_k"), "epoch_s": last["epoch_s"]}


def main():
    dense, sparse = summary(sys.argv[1]), summary(sys.argv[2])
    sel = f", selected/k {sparse['selected_over_k']:.3f}" if sparse["selected_over_k"] is not None else ""
    print(f"dense vs {sparse['compressor']}: test accuracy {dense['accuracy'] * 100:.2f}% vs "
          f"{sparse['accuracy'] * 100:.2f}% ({(sparse['accuracy'] - dense['accuracy']) * 100:+.2f} points); "
          f"gradient bytes sent per rank per step {dense['sent'] / 1024:.1f} KiB vs {sparse['sent'] / 1024:.1f} KiB "
          f"({dense['sent'] / max(sparse['sent'], 1):.0f}x less){sel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
