"""CUDA tensors: device pointer + current stream + ready event. Skipped without a GPU or a CUDA libmgs."""

import pytest
import torch
from torch import nn

import mgs
import mgs.torch as hvd

pytestmark = pytest.mark.skipif(not torch.cuda.is_available() or not hvd.cuda_built(),
                                reason="needs a visible GPU and libmgs built with CUDA")


@pytest.fixture
def device():
    dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def test_cuda_allreduce_allgather_broadcast(device, rank, size):
    for dtype in (torch.float32, torch.float16, torch.int64):
        x = torch.full((1000, 3), rank + 1, dtype=dtype, device=device) * 2  # produced by a kernel
        out = hvd.allreduce(x, op=hvd.Sum)
        assert out.device == device
        assert torch.equal(out.cpu(), torch.full((1000, 3), 2 * size * (size + 1) // 2, dtype=dtype))
        hvd.allreduce_(x, op=hvd.Average)
        assert torch.allclose(x.double().cpu(), torch.full((1000, 3), float(size + 1), dtype=torch.float64))
    g = hvd.allgather(torch.full((rank + 1, 2), float(rank), device=device))
    assert g.device == device
    assert torch.equal(g.cpu(), torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)]))
    b = hvd.broadcast(torch.full((5,), float(rank), device=device), size - 1)
    assert torch.equal(b.cpu(), torch.full((5,), float(size - 1)))


def test_cuda_on_a_side_stream(device, rank, size):
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        x = torch.ones(1 << 20, device=device) * (rank + 1)
        h = hvd.allreduce_async(x, op=hvd.Sum)
        out = hvd.synchronize(h)
        total = out.sum()  # ordered after mgs's work on this stream
    stream.synchronize()
    assert total.item() == float((1 << 20) * size * (size + 1) // 2)


def test_cuda_small_allreduces_fuse_and_stay_exact(device, rank, size):
    """Small CUDA allreduces enqueued together fuse into one collective per group (one device buffer
    over NCCL, one host buffer over MPI); each output must be its own tensor's reduction."""
    before = mgs.runtime_stats() or {}
    tensors = [torch.arange(n, dtype=torch.float32, device=device) * (rank + 1) + t
               for t, n in enumerate([1, 7, 64, 1000, 3, 4096, 17, 256])]
    halves = [torch.full((n,), float(rank + 1), dtype=torch.float16, device=device) for n in (5, 300)]
    handles = [hvd.allreduce_async(x, op=hvd.Sum, name=f"fuse.{i}") for i, x in enumerate(tensors)]
    handles += [hvd.allreduce_async(x, op=hvd.Average, name=f"fuse.h{i}") for i, x in enumerate(halves)]
    outs = [hvd.synchronize(h) for h in handles]
    tri = size * (size + 1) // 2
    for t, (x, out) in enumerate(zip(tensors, outs)):
        want = torch.arange(x.numel(), dtype=torch.float32) * tri + t * size
        assert out.device == device
        assert torch.equal(out.cpu(), want), f"tensor {t}"
    for x, out in zip(halves, outs[len(tensors):]):
        assert torch.equal(out.cpu(), torch.full_like(x.cpu(), (size + 1) / 2))
    after = mgs.runtime_stats() or {}
    ops = sum((after.get(k) or 0) - (before.get(k) or 0) for k in ("cuda_nccl_ops", "cuda_staged_ops"))
    assert ops == len(handles), f"{ops} CUDA ops counted for {len(handles)} tensors"


def test_cuda_distributed_optimizer(device, rank):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to(device)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(8, 16, generator=g).to(device)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = hvd.allgather(params.unsqueeze(0))
    assert torch.equal(everyone.cpu(), params.cpu().unsqueeze(0).expand_as(everyone))


def test_cuda_allreduce_is_served_by_a_joined_rank(device, rank, size):
    """A rank that joined serves the others' CUDA allreduces with zeros (Horovod's join), staged
    through MPI when the ranks share one GPU. Written without a GPU at hand: it first runs on one."""
    if size < 2:
        pytest.skip("needs a second rank")
    if rank == 0:
        last = hvd.join()
    else:
        x = torch.full((1000,), float(rank), device=device)
        out = hvd.allreduce(x, op=hvd.Sum, name="cuda.joined")
        assert out.device == device
        assert torch.equal(out.cpu(), torch.full((1000,), float(sum(range(1, size)))))
        last = hvd.join()
    assert last in range(1, size)  # rank 0 joined before the allreduce could finish
