"""MGS_BACKEND=nccl under mpirun (tests/python/CMakeLists.txt: python.backend_nccl.np1/np2).

Where NCCL cannot run (no GPU, or libmgs built without CUDA or NCCL), mgs.torch.init() must fail on
every rank with the cause and the ranks named. With a GPU per rank, dense allreduce and broadcast of
CUDA tensors run through NCCL and must give the exact sums. The GPU branch ran on an H100 at np 1
(2026-11-26); NCCL refuses two ranks on one GPU, so np 2 on a one-GPU host
checks the (agreed) set-up failure instead.
"""
import os
import sys

import torch

import mgs
import mgs.torch as hvd

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
assert os.environ.get("MGS_BACKEND") == "nccl", "run with MGS_BACKEND=nccl"
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
can_run = gpus >= size and hvd.cuda_built()

try:
    hvd.init()
except Exception as e:  # noqa: BLE001 - the runtime's error is what is checked
    msg = str(e)
    print(f"rank {rank}: init failed as {type(e).__name__}: {msg}")
    if can_run and "without NCCL" not in msg:
        sys.exit(f"rank {rank}: MGS_BACKEND=nccl failed although every rank has a GPU: {msg}")
    if gpus == 0 or not hvd.cuda_built() or "without NCCL" in msg:
        # The agreement at init: every rank names every rank that cannot run NCCL, itself marked.
        assert "MGS_BACKEND=nccl cannot run" in msg, msg
        assert f"rank {rank} (this rank)" in msg, msg
        for r in range(size):
            assert f"rank {r}" in msg, msg
        cause = ("built without CUDA" if not hvd.cuda_built() else
                 "no CUDA device is visible" if gpus == 0 else "built without NCCL")
        assert cause in msg, (cause, msg)
    else:
        assert "NCCL" in msg, msg  # e.g. two ranks on one GPU: NCCL's set-up failed on every rank
    print(f"rank {rank}: OK (init refused, as expected here)")
    sys.exit(0)

if not can_run:
    sys.exit(f"rank {rank}: init succeeded with MGS_BACKEND=nccl but only {gpus} GPU(s) for {size} ranks")
dev = torch.device("cuda", hvd.local_rank() % gpus)
torch.cuda.set_device(dev)
for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int64):
    x = torch.full((1000, 3), rank + 1, dtype=dtype, device=dev) * 2  # produced by a kernel
    out = hvd.allreduce(x, op=hvd.Sum)
    assert out.device == dev
    assert torch.equal(out.cpu(), torch.full((1000, 3), size * (size + 1), dtype=dtype)), dtype
# Small allreduces enqueued together fuse into one NCCL call per group (a device fusion buffer):
# each output is still its own tensor's sum, and every one is counted on the NCCL path.
before = mgs.runtime_stats() or {}
xs = [torch.arange(n, dtype=torch.float32, device=dev) + t * (rank + 1) for t, n in enumerate((1, 9, 100, 4096, 33))]
outs = [hvd.synchronize(h) for h in [hvd.allreduce_async(x, op=hvd.Sum, name=f"fused.{t}") for t, x in enumerate(xs)]]
for t, (x, out) in enumerate(zip(xs, outs)):
    want = torch.arange(x.numel(), dtype=torch.float32) * size + t * size * (size + 1) // 2
    assert torch.equal(out.cpu(), want), t
after = mgs.runtime_stats() or {}
assert after["cuda_nccl_ops"] - before["cuda_nccl_ops"] == len(xs), (before, after)
assert after["cuda_staged_ops"] == before["cuda_staged_ops"], (before, after)
b = hvd.broadcast(torch.full((5,), float(rank), device=dev), size - 1)
assert torch.equal(b.cpu(), torch.full((5,), float(size - 1)))
hvd.shutdown()
print(f"rank {rank}: OK (NCCL allreduce, fused small allreduces and broadcast)")
