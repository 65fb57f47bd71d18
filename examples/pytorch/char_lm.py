"""Data-parallel training of a small character-level transformer language model with mgs.torch.

    mpirun -np 4 /usr/bin/python3 examples/pytorch/char_lm.py
    mpirun -np 4 /usr/bin/python3 examples/pytorch/char_lm.py --compressor topk --density 0.001

A task where gradient compression can hurt: the embedding and every attention and MLP weight are
sparsified (all but the biases and norms have >= 4096 elements), and the loss keeps falling for the
whole run, so what sparsification delays shows up in the final number.

Data (the same on every machine with Debian's python3.11; deterministic):
the standard library's top-level modules, i.e. the files matching <stdlib>/*.py where <stdlib> is
the running interpreter's (sysconfig "stdlib", /usr/lib/python3.11 for /usr/bin/python3), in sorted
order by file name (Python's str order), concatenated as bytes, first --corpus-bytes bytes
(default 1,000,000: with python3.11 the 38 files __future__.py, __hello__.py, _aix_support.py, ...,
codecs.py, the last one cut). The first 90% trains, the last 10% is held out (with python3.11:
the end of cgi.py, then cgitb.py, chunk.py, cmd.py, code.py and most of codecs.py).
The vocabulary is the set of bytes in those bytes (one token per byte; the files are ASCII apart
from a few UTF-8 characters, so bits per byte is bits per character up to those).

Model: token + learned position embeddings, --layers pre-norm transformer blocks (causal
self-attention with --heads heads, MLP 4*d), final norm, output tied to the embedding.
Defaults: 2 layers, d=64, 4 heads, context 64: 110,336 parameters with the 96-byte vocabulary.

Training: each rank draws --batch-size random windows of the training part per step (its own
stream, seeded by --seed and the rank), torch.optim.SGD with momentum 0.9 (--optimizer sgd, the
default; lr 0.3) or Adam (--optimizer adam) and a cosine learning rate from --lr, for --steps
steps (600), each rank's gradients clipped to norm 1/sqrt(ranks) (--clip-norm, DGC's local
clipping). With a compressor, DistributedOptimizer's default momentum correction is on for SGD.
Held-out bits per character: the mean cross entropy (in bits) of
every position of the held-out part's non-overlapping windows, each rank scoring a share; printed
every --eval-every steps and at the end ("final held-out bpc"). The script is written as a Horovod
script would be (import mgs.torch as hvd); --compressor/--density/--warmup-steps only set MGS_*
before hvd.init(), as exporting them would.
"""

import argparse
import glob
import json
import math
import os
import sys
import sysconfig
import time

import torch
from torch import nn
from torch.nn import functional as F


def _masking_label(args):
    return "off" if args.no_masking else "after warm-up" if args.masking_after_warmup else "every step"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=600)
    p.add_argument("--batch-size", type=int, default=8, help="windows per rank and step")
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd",
                   help="sgd: SGD with momentum 0.9 (DGC's techniques apply); adam: Adam, betas (0.9, 0.98)")
    p.add_argument("--lr", type=float, help="peak learning rate, cosine decay (default 0.3 with sgd, 0.003 with adam)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--corpus-bytes", type=int, default=1_000_000)
    p.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"], help="where the *.py files are read")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-windows", type=int, default=128, help="held-out windows scored (all ranks together)")
    p.add_argument("--compressor", help="set MGS_COMPRESSOR (e.g. none, topk, gaussiank)")
    p.add_argument("--density", type=float, help="set MGS_DENSITY")
    p.add_argument("--warmup-steps", type=int, help="set MGS_WARMUP_STEPS (DGC density warm-up)")
    p.add_argument("--momentum-correction", nargs="?", const="on", default="auto", choices=["auto", "on", "off"],
                   help="DistributedOptimizer(momentum_correction=...): 'auto' (the default: on for SGD when a "
                        "compressor is set), True (on, or the bare flag) or False (off)")
    masking = p.add_mutually_exclusive_group()
    masking.add_argument("--no-masking", action="store_true", help="momentum_masking=False (with momentum correction)")
    masking.add_argument("--masking-after-warmup", action="store_true",
                         help="momentum_masking='after_warmup' (with momentum correction): mask from the first step "
                              "after the density warm-up, not in every step")
    p.add_argument("--no-lr-weighting", action="store_true",
                   help="lr_weighting=False (with momentum correction): DGC's rule, each entry applied at the lr "
                        "of the step that sends it")
    p.add_argument("--clip-norm", type=float, default=1.0,
                   help="DistributedOptimizer(local_clip_norm=...): each rank's gradients clipped to this "
                        "norm / sqrt(ranks) (default 1; 0: no clipping)")
    p.add_argument("--json", metavar="PATH", help="rank 0 writes the evaluations here")
    p.add_argument("--max-bpc", type=float, help="exit with status 1 if the final held-out bpc is above this")
    return p.parse_args(argv)


def load_corpus(stdlib, n_bytes):
    files = sorted(glob.glob(os.path.join(stdlib, "*.py")), key=os.path.basename)
    if not files:
        raise SystemExit(f"char_lm: no *.py files in {stdlib} (pass --stdlib)")
    chunks, total = [], 0
    for path in files:
        with open(path, "rb") as f:
            chunks.append(f.read())
        total += len(chunks[-1])
        if total >= n_bytes:
            break
    data = b"".join(chunks)[:n_bytes]
    files = files[:len(chunks)]
    vocab = sorted(set(data))
    lookup = torch.zeros(256, dtype=torch.int64)
    lookup[torch.tensor(vocab)] = torch.arange(len(vocab))
    tokens = lookup[torch.frombuffer(bytearray(data), dtype=torch.uint8).long()]
    split = len(tokens) * 9 // 10
    return tokens[:split], tokens[split:], len(vocab), files


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    def __init__(self, vocab, d, layers, heads, context):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(context, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.register_buffer("mask", torch.triu(torch.ones(context, context, dtype=torch.bool), 1), persistent=False)

    def forward(self, idx):
        x = self.tok(idx) + self.pos[:idx.shape[1]]
        for block in self.blocks:
            x = block(x, self.mask)
        return self.ln(x) @ self.tok.weight.t()


def batch(tokens, context, n, generator):
    starts = torch.randint(0, len(tokens) - context - 1, (n,), generator=generator)
    windows = torch.stack([tokens[s:s + context + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


def held_out_bpc(hvd, model, tokens, context, max_windows):
    """Bits per character over the held-out part's first max_windows non-overlapping windows."""
    n = min((len(tokens) - 1) // context, max_windows)
    mine = torch.arange(hvd.rank(), n, hvd.size())
    model.eval()
    with torch.no_grad():
        total = torch.zeros(2, dtype=torch.float64)
        for chunk in mine.split(64):
            x = torch.stack([tokens[i * context:(i + 1) * context] for i in chunk.tolist()])
            y = torch.stack([tokens[i * context + 1:(i + 1) * context + 1] for i in chunk.tolist()])
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum")
            total += torch.tensor([loss.item(), y.numel()], dtype=torch.float64)
    model.train()
    total = hvd.allreduce(total, op=hvd.Sum, name="eval.bpc")
    return (total[0] / total[1]).item() / math.log(2)


def main(argv=None):
    args = parse_args(argv)
    if args.lr is None:
        args.lr = 0.3 if args.optimizer == "sgd" else 0.003
    for var, value in (("MGS_COMPRESSOR", args.compressor), ("MGS_DENSITY", args.density),
                       ("MGS_WARMUP_STEPS", args.warmup_steps)):
        if value is not None:
            os.environ[var] = str(value)
    import mgs.torch as hvd  # after MGS_* are set: init() reads them

    torch.set_num_threads(1)  # ranks share the host's cores
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    train, test, vocab, files = load_corpus(args.stdlib, args.corpus_bytes)
    torch.manual_seed(args.seed)
    model = CharTransformer(vocab, args.d_model, args.layers, args.heads, args.context)
    if args.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    else:  # momentum_correction=True refuses Adam with an error naming it
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98))
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        momentum_correction={"auto": "auto", "on": True, "off": False}[args.momentum_correction],
        momentum_masking=False if args.no_masking else "after_warmup" if args.masking_after_warmup else None,
        local_clip_norm=args.clip_norm or None,
        lr_weighting=False if args.no_lr_weighting else None)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, args.steps) / args.steps)))
    generator = torch.Generator().manual_seed(args.seed * 1000 + rank)
    if rank == 0:
        print(f"char_lm: {size} ranks, {len(files)} files of {args.stdlib} ({os.path.basename(files[0])} .. "
              f"{os.path.basename(files[-1])}), {len(train)} train / {len(test)} held-out "
              f"bytes, vocab {vocab}, {sum(p.numel() for p in model.parameters())} parameters, "
              f"compressor {os.environ.get('MGS_COMPRESSOR', 'none')} density {os.environ.get('MGS_DENSITY', '-')}, "
              f"momentum correction {optimizer.momentum_correction} masking {_masking_label(args)}, "
              f"clip {args.clip_norm}, {args.optimizer} lr {args.lr:g}", flush=True)
    history, start, running = [], time.perf_counter(), 0.0
    for step in range(1, args.steps + 1):
        x, y = batch(train, args.context, args.batch_size, generator)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        optimizer.step()
        scheduler.step()
        running += loss.item()
        if step % args.eval_every == 0 or step == args.steps:
            bpc = held_out_bpc(hvd, model, test, args.context, args.eval_windows)
            train_bpc = hvd.allreduce(torch.tensor(running / args.eval_every), name="train.loss").item() / math.log(2)
            running = 0.0
            history.append({"step": step, "held_out_bpc": bpc, "train_bpc": train_bpc,
                            "elapsed_s": time.perf_counter() - start})
            if rank == 0:
                print(f"step {step:5d}  train bpc {train_bpc:.3f}  held-out bpc {bpc:.4f}  "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
    final = history[-1]["held_out_bpc"]
    if rank == 0:
        print(f"final held-out bpc {final:.4f}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": size, "args": vars(args), "settings": {k: v for k, v in os.environ.items()
                                                                           if k.startswith("MGS_")},
                           "compression": hvd.compression_stats(), "history": history}, f, indent=1)
    hvd.shutdown()
    if args.max_bpc is not None and final > args.max_bpc:
        if rank == 0:
            print(f"final held-out bpc {final:.4f} is above --max-bpc {args.max_bpc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
