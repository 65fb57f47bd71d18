"""One real data-parallel training job per run, timed per step: forward and
backward on every rank, then the gradient exchange of the chosen system.

    bench/train/run_train.sh ...    (runs this under scripts/emulated_cluster.sh)

--system:
  compute      no communication at all (the floor: each rank trains alone)
  ddp          torch.nn.parallel.DistributedDataParallel, gloo (dense ring allreduce)
  powersgd     DDP with the PowerSGD communication hook (rank 4, 2 warm-up steps)
  horovod      Horovod's DistributedOptimizer (dense), PYTHONPATH must hold a build
  horovod-fp16 the same with hvd.Compression.fp16
  mgs          mgs.torch's DistributedOptimizer, configured only by MGS_* (what a user sets)
  mgs-fp16     the same with Compression.fp16

Every system trains the same model from the same seed on the same synthetic
batch per rank (the data loader is not what is measured). --device cuda puts
the model and batches on the rank's GPU (local rank modulo the visible
devices) and ends every timed step with torch.cuda.synchronize()
(bench/train/gpu_train.sh). Rank 0 prints one
JSON line: the per-step times and their median over the measured steps, and
for mgs the gradient traffic it reports.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
from torch import nn


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--system", required=True,
                   choices=["compute", "ddp", "powersgd", "horovod", "horovod-fp16", "mgs", "mgs-fp16"])
    p.add_argument("--model", default="resnet50", choices=["resnet50", "transformer"])
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--measure-from", type=int, default=7, help="first measured step (1-based)")
    p.add_argument("--batch", type=int, default=2, help="per rank")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--label", default="", help="copied into the JSON line")
    p.add_argument("--momentum-correction", default="auto", choices=["auto", "off"],
                   help="mgs only: DistributedOptimizer's momentum_correction ('auto', its default, or False)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--image-size", type=int, default=32, help="resnet50 input side")
    p.add_argument("--ddp-backend", default="gloo", choices=["gloo", "nccl"],
                   help="nccl needs one GPU per rank")
    return p.parse_args()


class TinyTransformer(nn.Module):
    """A GPT-style encoder from torch.nn layers: 6 layers, d=512, 8 heads, vocab 8000 (~27 M parameters)."""

    def __init__(self, vocab=8000, d=512, layers=6, seq=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(seq, d))
        layer = nn.TransformerEncoderLayer(d, 8, 4 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens):
        return self.head(self.encoder(self.embed(tokens) + self.pos))


def device_of(args):
    if args.device == "cpu":
        return torch.device("cpu")
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))
    d = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(d)
    return d


def build(args):
    """The model and loss_of(model, step). Each rank draws its own pool of
    random batches (seeded by rank) and cycles through it: with one fixed
    batch the loss collapses towards zero within a few steps, backward then
    runs on denormal floats (a 12 s step on this CPU), and what is timed is
    that artifact, not the exchange."""
    torch.manual_seed(0)  # the same initial model on every rank
    if args.model == "resnet50":
        import torchvision
        model = torchvision.models.resnet50(num_classes=10)
    else:
        model = TinyTransformer()
    dev = device_of(args)
    model = model.to(dev)
    g = torch.Generator().manual_seed(1000 + world()[0])
    loss_fn = nn.CrossEntropyLoss()
    pool = []
    side = args.image_size
    for _ in range(8):
        if args.model == "resnet50":
            batch = (torch.randn(args.batch, 3, side, side, generator=g),
                     torch.randint(0, 10, (args.batch,), generator=g))
        else:
            batch = (torch.randint(0, 8000, (args.batch, 64), generator=g),
                     torch.randint(0, 8000, (args.batch, 64), generator=g))
        pool.append(tuple(t.to(dev) for t in batch))
    if args.model == "resnet50":
        return model, lambda m, step: loss_fn(m(pool[step % 8][0]), pool[step % 8][1])
    return model, lambda m, step: loss_fn(m(pool[step % 8][0]).reshape(-1, 8000), pool[step % 8][1].reshape(-1))


def world():
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    return rank, size


def setup(args, model):
    """Wraps model/optimizer for the system; returns (model, optimizer, rank, size, stats(), finish())."""
    # What is timed is the step, not learning; the rate is small enough that the
    # loss stays near its start (ResNet-50 at batch 2 diverges within 3 steps at
    # 1e-2 or 1e-3, and a diverged model computes on huge and denormal floats,
    # which slows backward by up to 10x and times the wrong thing).
    sgd = lambda params: torch.optim.SGD(params, lr=1e-5, momentum=0.9)  # noqa: E731
    none = lambda: None  # noqa: E731
    if args.system == "compute":
        rank, size = world()
        return model, sgd(model.parameters()), rank, size, none, none
    if args.system in ("ddp", "powersgd"):
        import torch.distributed as dist
        rank, size = world()
        dist.init_process_group(args.ddp_backend, init_method=f"tcp://{os.environ['MASTER_ADDR']}:29517",
                                rank=rank, world_size=size)
        ddp = nn.parallel.DistributedDataParallel(model)  # on CUDA: the model's device
        if args.system == "powersgd":
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
            state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=4, start_powerSGD_iter=2)
            ddp.register_comm_hook(state, psgd.powerSGD_hook)
        return ddp, sgd(ddp.parameters()), rank, size, none, dist.destroy_process_group
    if args.system.startswith("horovod"):
        import horovod.torch as hvd
        compression = hvd.Compression.fp16 if args.system.endswith("fp16") else hvd.Compression.none
    else:
        import mgs.torch as hvd
        compression = hvd.Compression.fp16 if args.system.endswith("fp16") else hvd.Compression.none
    hvd.init()
    opt = hvd.DistributedOptimizer(sgd(model.parameters()), named_parameters=model.named_parameters(),
                                   compression=compression,
                                   **({} if args.momentum_correction == "auto" or args.system != "mgs"
                                      else {"momentum_correction": False}))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    stats = (lambda: hvd.compression_stats()) if hasattr(hvd, "compression_stats") else none
    if hasattr(hvd, "reset_compression_stats"):
        hvd.reset_compression_stats()
    return model, opt, hvd.rank(), hvd.size(), stats, none


def thread_cpu():
    """{tid: (name, CPU seconds)} of this process's threads, from /proc: shows
    what the coordinator ("mgs-coord", with the MPI threads it starts) and
    its helpers ("mgs-pool") cost next to the training thread.

    The time is the scheduler's exact run time (schedstat, nanoseconds); the
    utime/stime of `stat` are sampled at the clock tick."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    seconds = int(f.read().split()[0]) / 1e9
            except (OSError, ValueError, IndexError):  # no schedstat in this kernel: the ticks
                fields = stat[stat.rindex(")") + 2:].split()
                seconds = (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue  # the thread ended meanwhile
        out[tid] = (name, seconds)
    return out


def cpu_by_name(before, after, steps):
    """CPU seconds per step and thread name between two thread_cpu() readings."""
    out = {}
    for tid, (name, t) in after.items():
        out[name] = out.get(name, 0.0) + (t - before.get(tid, (name, 0.0))[1]) / steps
    return {k: round(v, 4) for k, v in out.items() if v > 0}


def bucket_paths(args):
    """Which path mgs's buckets took on this rank (mgs_get_stats), or None for other systems."""
    if args.system != "mgs":
        return None
    import mgs
    rs = mgs.runtime_stats() or {}
    keys = ("path_host_buckets", "path_staged_buckets", "path_resident_buckets", "path_device_buckets",
            "cuda_nccl_ops", "cuda_staged_ops", "device_host_syncs", "sparse_buckets", "sparse_dense_buckets",
            "plan_span_checks", "plan_span_predicted_us", "plan_span_measured_us",
            "plan_span_plan_checks", "plan_span_predicted_sum_us", "plan_span_measured_sum_us",
            "allreduce_ring_ops", "allreduce_library_ops", "allreduce_ring_min_bytes",
            "sparse_agreed_buckets", "sparse_hierarchical_buckets", "plans", "plan_trials", "plan_replans_rejected",
            "plan_span_predicted_total_us", "plan_span_measured_total_us", "fusion_threshold_bytes",
            "fusion_trials", "fusion_max_tensor_bytes", "plan_round_us", "plan_rounds_timed",
            "plan_trial_running")
    out = {k: rs.get(k) for k in keys}
    out["plan_buckets"] = mgs.plan_buckets()  # per bucket: predicted against measured end (mgs_get_plan_buckets)
    return out


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    model, loss_of = build(args)
    model, opt, rank, size, stats, finish = setup(args, model)
    times = []
    cpu = []  # process CPU seconds per step, all threads
    losses = []
    nonfinite = 0  # steps whose loss was not finite (fp16 overflow): timed all the same
    # The threads' window ends where the last step begins: once a rank has
    # finished its last step, a faster rank's shutdown may end this rank's
    # coordinator thread, and a thread that is gone can no longer be read
    # (it then vanished from the sums: 0.005 s per step instead of 0.05).
    first = min(args.measure_from, args.steps) - 1
    threads_after = None
    for step in range(args.steps):
        if step == first:
            threads_before = thread_cpu()
        if step == args.steps - 1 and step > first:
            threads_after = thread_cpu()
        t0 = time.perf_counter()
        c0 = time.process_time()
        opt.zero_grad()
        loss = loss_of(model, step)
        losses.append(loss.item())
        loss.backward()
        opt.step()
        if args.device == "cuda":
            torch.cuda.synchronize()  # the step's kernels and any exchange they wait for
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        nonfinite += not math.isfinite(losses[-1])
    thread_steps = args.steps - 1 - first
    if threads_after is None:  # a one-step window: read after it
        threads_after, thread_steps = thread_cpu(), len(times) - first
    measured = times[first:]
    per_thread = cpu_by_name(threads_before, threads_after, thread_steps)
    s = stats()
    paths = bucket_paths(args)
    finish()
    if rank == 0:
        n_params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"label": args.label, "system": args.system, "model": args.model, "ranks": size,
                          "device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
                          "image_size": args.image_size if args.model == "resnet50" else None,
                          "params": n_params, "batch": args.batch, "median_step_s": statistics.median(measured),
                          "step_s": [round(t, 4) for t in times], "nonfinite_loss_steps": nonfinite,
                          "loss": [round(v, 4) for v in losses],
                          "cpu_s_per_step": statistics.median(cpu[first:]),
                          "thread_cpu_s_per_step": per_thread,
                          "mgs_stats": s, "mgs_paths": paths}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
