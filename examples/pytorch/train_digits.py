"""Data-parallel training of a small CNN on scikit-learn's digits with mgs.torch.

    mgsrun -np 4 -- python3 examples/pytorch/train_digits.py
    mgsrun -np 4 --compressor gaussiank --density 0.01 -- python3 examples/pytorch/train_digits.py
    mpirun -np 4 python3 examples/pytorch/train_digits.py      # plain Open MPI works too

Each rank trains on its own shard of the training set; gradients are averaged
by mgs (sparsified when MGS_COMPRESSOR is set). Rank 0 prints, per epoch, the
training loss (mean over ranks), the test accuracy, the time per epoch and the
gradient traffic. The script is written exactly as a Horovod script would be,
with `import mgs.torch as hvd`.
"""

import argparse
import json
import sys
import time

import torch
from sklearn.datasets import load_digits
from torch import nn

import mgs.torch as hvd


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=16, help="per rank")
    p.add_argument("--lr", type=float, default=0.02, help="per rank; scaled by the number of ranks")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--fp16", action="store_true", help="send gradients as float16 (Compression.fp16)")
    p.add_argument("--momentum-correction", nargs="?", const="on", default="auto", choices=["auto", "on", "off"],
                   help="DGC momentum correction: DistributedOptimizer(momentum_correction=...) 'auto' (the default: "
                        "on when a compressor is set), True (on, or the bare flag) or False (off)")
    masking = p.add_mutually_exclusive_group()
    masking.add_argument("--no-masking", action="store_true", help="momentum_masking=False (with momentum correction)")
    masking.add_argument("--masking-after-warmup", action="store_true",
                         help="momentum_masking='after_warmup' (with momentum correction): mask from the first step "
                              "after the density warm-up, not in every step")
    p.add_argument("--no-lr-weighting", action="store_true",
                   help="lr_weighting=False (with momentum correction): DGC's rule, each entry applied at the lr "
                        "of the step that sends it")
    p.add_argument("--clip-norm", type=float, help="DGC local gradient clipping (local_clip_norm)")
    p.add_argument("--json", metavar="PATH", help="rank 0 writes the per-epoch metrics here")
    p.add_argument("--min-accuracy", type=float, default=None,
                   help="exit with status 1 if the final test accuracy is below this (for CI)")
    return p.parse_args()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


def load_data(seed):
    """The digits (8x8 images, 10 classes) split 80/20 into train and test, the same on every rank."""
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = len(y) // 5
    test, train = order[:n_test], order[n_test:]
    return (x[train], y[train]), (x[test], y[test])


def shard(data, rank, size):
    """This rank's shard; every shard has the same length so every rank takes the same number of steps."""
    x, y = data
    n = len(y) // size
    idx = torch.arange(rank, n * size, size)
    return x[idx], y[idx]


def evaluate(model, test, rank, size):
    """Test accuracy over the whole test set, each rank scoring its shard."""
    x, y = test
    idx = torch.arange(rank, len(y), size)
    model.eval()
    with torch.no_grad():
        correct = (model(x[idx]).argmax(1) == y[idx]).sum()
    model.train()
    counts = hvd.allreduce(torch.stack([correct, torch.tensor(len(idx))]), op=hvd.Sum, name="eval.counts")
    return counts[0].item() / counts[1].item()


def main():
    args = parse_args()
    torch.set_num_threads(1)  # ranks share the host's cores
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(args.seed)

    train, test = load_data(args.seed)
    x_train, y_train = shard(train, rank, size)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * size, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16 else hvd.Compression.none,
        momentum_correction={"auto": "auto", "on": True, "off": False}[args.momentum_correction],
        momentum_masking=False if args.no_masking else "after_warmup" if args.masking_after_warmup else None,
        local_clip_norm=args.clip_norm,
        lr_weighting=False if args.no_lr_weighting else None)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    loss_fn = nn.CrossEntropyLoss()

    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(f"train_digits: {size} ranks, {len(y_train)} training samples per rank, {len(test[1])} test "
              f"samples, {n_params} parameters, batch {args.batch_size}/rank, lr {args.lr * size:g}", flush=True)
    history = []
    for epoch in range(1, args.epochs + 1):
        hvd.reset_compression_stats()
        start = time.perf_counter()
        order = torch.randperm(len(y_train), generator=torch.Generator().manual_seed(args.seed * 1000 + epoch))
        total, batches = 0.0, 0
        for i in range(0, len(order), args.batch_size):
            idx = order[i:i + args.batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            loss.backward()
            optimizer.step()
            total += loss.item()
            batches += 1
        elapsed = time.perf_counter() - start
        scheduler.step()
        stats = hvd.compression_stats()  # this epoch's gradient traffic
        mean_loss = hvd.allreduce(torch.tensor(total / batches), name="epoch.loss").item()
        accuracy = evaluate(model, test, rank, size)
        history.append({"epoch": epoch, "loss": mean_loss, "test_accuracy": accuracy, "epoch_s": elapsed,
                        "compression": stats})
        if rank == 0:
            sent = stats["sent_bytes_per_step"]
            traffic = (f"sent {sent / 1024:.1f} KiB/step of {stats['dense_bytes_per_step'] / 1024:.1f} KiB dense"
                       if sent is not None else f"dense {stats['dense_bytes_per_step'] / 1024:.1f} KiB/step, "
                       "sent: not reported by this libmgs")
            if stats["selected_over_k"] is not None:
                traffic += f", selected/k {stats['selected_over_k']:.2f}"
            if stats["dense_buckets_per_step"] is not None:
                traffic += (f", buckets/step: {stats['sparse_buckets_per_step']:.1f} sparse, "
                            f"{stats['dense_buckets_per_step']:.1f} dense")
            print(f"epoch {epoch:2d}  loss {mean_loss:.4f}  test accuracy {accuracy * 100:6.2f}%  "
                  f"time {elapsed:.2f} s  [{stats['compressor']}: {traffic}]", flush=True)

    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            import mgs  # mgs.torch is the Horovod-style API; the runtime's counters are mgs's
            rs = mgs.runtime_stats() or {}  # which exchange the sparse buckets took (MGS_EXCHANGE)
            exchanges = {k: rs.get(k) for k in ("sparse_buckets", "sparse_agreed_buckets",
                                                "sparse_hierarchical_buckets", "sparse_dense_buckets")}
            json.dump({"ranks": size, "args": vars(args), "history": history, "exchanges": exchanges}, f, indent=1)
    final = history[-1]["test_accuracy"] if history else 0.0
    if args.min_accuracy is not None and final < args.min_accuracy:
        if rank == 0:
            print(f"final test accuracy {final:.4f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
