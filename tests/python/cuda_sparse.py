"""Sparsified CUDA gradients end to end under mpirun (tests/python/CMakeLists.txt: python.cuda_sparse.*).

Run with MGS_COMPRESSOR=topk (or another selector) set. A model on the GPU and its twin on the CPU,
started from the same weights, train on the same batches through two DistributedOptimizers; the GPU
twin's gradients take the CUDA local stage (selection on the device; with MPI only the compact blocks
cross to the host, with MGS_BACKEND=nccl the device buckets), the CPU twin's the host stage. Checked:
every rank holds the same GPU parameters; the GPU twin's parameters stay within 2% (relative to how far
they moved) of the CPU twin's; the loss falls; the GPU optimizer's traffic is sparse
(compression_ratio >= 10). Exits 77 (ctest skip) on a machine without a GPU or a CUDA libmgs.
"""
import copy
import os
import sys

import torch
from torch import nn

import mgs.torch as hvd

if not torch.cuda.is_available():
    print("no GPU: skipped")
    sys.exit(77)
hvd.init()
if not hvd.cuda_built():
    print("libmgs without CUDA: skipped")
    sys.exit(77)
rank, size = hvd.rank(), hvd.size()
assert os.environ.get("MGS_COMPRESSOR", "none") != "none", "run with a sparsifying MGS_COMPRESSOR"
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)

torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(256, 64), nn.Tanh(), nn.Linear(64, 10))
cpu_model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
gpu_model = copy.deepcopy(cpu_model).to(dev)
start = torch.cat([p.detach().flatten() for p in cpu_model.parameters()])


def optimizer(model, prefix):
    named = [(f"{prefix}.{n}", p) for n, p in model.named_parameters()]
    return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=named)


opt_gpu = optimizer(gpu_model, "gpu")
opt_cpu = optimizer(cpu_model, "cpu")
g = torch.Generator().manual_seed(100 + rank)
losses = []
for step in range(30):
    x = torch.randn(64, 256, generator=g)
    y = teacher(x).detach()
    for model, opt, xx, yy in ((gpu_model, opt_gpu, x.to(dev), y.to(dev)), (cpu_model, opt_cpu, x, y)):
        opt.zero_grad()
        loss = (model(xx) - yy).pow(2).mean()
        loss.backward()
        opt.step()
        if model is gpu_model:
            losses.append(loss.item())
stats = hvd.compression_stats()
import mgs  # noqa: E402
paths = mgs.runtime_stats() or {}

gpu_params = torch.cat([p.detach().flatten() for p in gpu_model.parameters()])
cpu_params = torch.cat([p.detach().flatten() for p in cpu_model.parameters()])
everyone = hvd.allgather(gpu_params.unsqueeze(0)).cpu()
moved = (cpu_params - start).norm().item()
apart = (gpu_params.cpu() - cpu_params).norm().item()
first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
print(f"rank {rank}/{size}: loss {first:.4f} -> {last:.4f}; gpu-cpu {apart:.3e} of moved {moved:.3e}; "
      f"ratio {stats.get('compression_ratio')}; selected/k {stats.get('selected_over_k')}; "
      f"sparse buckets/step {stats.get('sparse_buckets_per_step')}", flush=True)
errors = []
if not torch.equal(everyone, gpu_params.cpu().unsqueeze(0).expand_as(everyone)):
    errors.append("ranks hold different GPU parameters")
if not apart <= 0.02 * moved:
    errors.append(f"GPU twin {apart:.3e} from the CPU twin, more than 2% of {moved:.3e}")
if not last < 0.9 * first:
    errors.append(f"loss did not fall: {first:.4f} -> {last:.4f}")
# A path nobody checks did not run: the GPU twin's buckets stay on the GPU (device buckets with
# MGS_BACKEND=nccl; GPU selection with compact blocks over MPI otherwise), the CPU twin's on the host,
# and no bucket of CUDA tensors is staged through host memory.
print(f"rank {rank}: paths host {paths.get('path_host_buckets')} staged {paths.get('path_staged_buckets')} "
      f"resident {paths.get('path_resident_buckets')} device {paths.get('path_device_buckets')}; "
      f"host syncs {paths.get('device_host_syncs')}", flush=True)
gpu_paths = ("path_device_buckets",) if os.environ.get("MGS_BACKEND") == "nccl" else (
    "path_resident_buckets", "path_device_buckets")
if paths.get("path_staged_buckets") != 0:
    errors.append(f"{paths.get('path_staged_buckets')} buckets of CUDA tensors staged through host memory")
if not sum(paths.get(k) or 0 for k in gpu_paths) > 0:
    errors.append(f"no bucket on {' or '.join(gpu_paths)}")
if not (paths.get("path_host_buckets") or 0) > 0:
    errors.append("the CPU twin's buckets were not counted on the host path")
ratio = stats.get("compression_ratio") or 0
if not ratio >= 10:
    errors.append(f"traffic not sparse: compression_ratio {ratio}")
hvd.shutdown()
if errors:
    sys.exit(f"rank {rank}: " + "; ".join(errors))
print(f"rank {rank}: ok")
