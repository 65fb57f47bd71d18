"""The rest of Horovod's PyTorch API: cross ranks, Min/Max/Product, join, SyncBatchNorm, sparse
gradients, optimizer options, broadcast helpers and HOROVOD_* variables."""

import copy
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch import nn

import mgs.torch as hvd
from mgs import _runtime


def test_cross_topology_of_this_job(rank, size):
    everyone = hvd.allgather_object((hvd.local_rank(), hvd.local_size()), name="cross.check")
    same = [r for r in range(size) if everyone[r][0] == hvd.local_rank()]
    assert hvd.cross_size() == len(same)
    assert hvd.cross_rank() == same.index(rank)
    assert hvd.is_homogeneous() == (len({ls for _, ls in everyone}) == 1)


def test_cross_topology_two_nodes():
    # 4 ranks on 2 nodes: ranks 0,1 on node A, 2,3 on node B
    layout = [(0, 2), (1, 2), (0, 2), (1, 2)]
    assert [_runtime.cross_topology(layout, r) for r in range(4)] == \
        [(0, 2, True), (0, 2, True), (1, 2, True), (1, 2, True)]
    uneven = [(0, 3), (1, 3), (2, 3), (0, 1)]
    assert _runtime.cross_topology(uneven, 3) == (1, 2, False)
    assert _runtime.cross_topology(uneven, 2) == (0, 1, False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_min_max_product(rank, size, dtype):
    t = torch.tensor([rank + 1, size - rank, 2], dtype=dtype)
    assert hvd.allreduce(t, op=hvd.Min, name=f"mmp.min.{dtype}").tolist() == [1, 1, 2]
    assert hvd.allreduce(t, op=hvd.Max, name=f"mmp.max.{dtype}").tolist() == [size, size, 2]
    prod = 1
    for r in range(size):
        prod *= r + 1
    out = hvd.allreduce(t, op=hvd.Product, name=f"mmp.prod.{dtype}")
    assert out.dtype == dtype and out.tolist() == [prod, prod, 2 ** size]
    inplace = t.clone()
    assert hvd.allreduce_(inplace, op=hvd.Max, name=f"mmp.inplace.{dtype}") is inplace
    assert inplace.tolist() == [size, size, 2]


def test_min_scaled_and_scalar(rank, size):
    out = hvd.allreduce(torch.tensor(float(rank)), op=hvd.Min, prescale_factor=-1.0, postscale_factor=2.0,
                        name="mmp.scaled")
    assert out.shape == () and out.item() == -2.0 * (size - 1)


def test_adasum_and_unknown_ops_are_rejected():
    with pytest.raises(ValueError, match="Adasum"):
        hvd.allreduce(torch.ones(2), op=hvd.Adasum)
    with pytest.raises(ValueError, match="unknown reduction op"):
        hvd.allreduce(torch.ones(2), op=42)
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="Adasum"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Adasum)
    with pytest.raises(ValueError, match="Average or mgs.torch.Sum"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Min)


def batch(rank, step):
    g = torch.Generator().manual_seed(100 * rank + step)
    return torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g)


def test_join_uneven_steps(rank, size):
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    reference = copy.deepcopy(model)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    steps = rank + 1  # rank r has r + 1 batches: ranks run out of data one after the other
    for s in range(steps):
        x, y = batch(rank, s)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    last = hvd.join()
    assert last == size - 1
    # As in Horovod, a joined rank stops updating its model: the last rank to join has the trained one.
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    # The reference: at step s the ranks still training contribute, joined ranks send zeros, / size.
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for s in range(size):
        grads = [torch.zeros_like(p) for p in reference.parameters()]
        for r in range(size):
            if s < r + 1:
                m = copy.deepcopy(reference)
                x, y = batch(r, s)
                nn.functional.mse_loss(m(x), y).backward()
                grads = [g + p.grad for g, p in zip(grads, m.parameters())]
        for p, g in zip(reference.parameters(), grads):
            p.grad = g / size
        ref_opt.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q)


def test_join_without_optimizer_is_a_barrier_returning_the_last_rank(rank, size):
    hvd.barrier()
    time.sleep(0.4 * rank)  # the ranks join in rank order
    assert hvd.join() == size - 1
    # Joining together: some rank is the last, the same one on every rank.
    last = hvd.join()
    assert 0 <= last < size
    assert hvd.allgather_object(last, name="join.same") == [last] * size


def test_sync_batch_norm_matches_batch_norm_on_the_global_batch(rank, size):
    torch.manual_seed(3)
    xs = [torch.randn(2 + r, 3, 4) * (r + 1) + r for r in range(size)]  # uneven local batches
    ws = [torch.randn(2 + r, 3, 4) for r in range(size)]
    sync = hvd.SyncBatchNorm(3, momentum=0.3)
    plain = nn.BatchNorm1d(3, momentum=0.3)
    with torch.no_grad():
        sync.weight.uniform_(0.5, 1.5)
        sync.bias.uniform_(-1, 1)
        plain.weight.copy_(sync.weight)
        plain.bias.copy_(sync.bias)
    x = xs[rank].clone().requires_grad_()
    (sync(x) * ws[rank]).sum().backward()
    full = torch.cat(xs).requires_grad_()
    (plain(full) * torch.cat(ws)).sum().backward()
    lo = sum(2 + r for r in range(rank))
    torch.testing.assert_close(x.grad, full.grad[lo:lo + 2 + rank], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(sync.running_mean, plain.running_mean)
    torch.testing.assert_close(sync.running_var, plain.running_var, rtol=1e-4, atol=1e-5)
    # parameter gradients summed over ranks equal the global batch's
    gw = hvd.allreduce(sync.weight.grad, op=hvd.Sum, name="syncbn.gw")
    torch.testing.assert_close(gw, plain.weight.grad, rtol=1e-4, atol=1e-4)
    sync.eval()
    plain.eval()
    torch.testing.assert_close(sync(xs[rank]), plain(xs[rank]))


def test_sync_batch_norm_forward_matches(rank, size):
    torch.manual_seed(4)
    xs = [torch.randn(3, 2, 5, 5) + r for r in range(size)]
    sync, plain = hvd.SyncBatchNorm(2), nn.BatchNorm2d(2)
    out = sync(xs[rank])
    ref = plain(torch.cat(xs))[3 * rank:3 * rank + 3]
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_embedding_gradients(rank, size, sparse_as_dense):
    torch.manual_seed(1)
    emb = nn.Embedding(10, 4, sparse=True)
    reference = emb.weight.detach().clone()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=0.5),
                                   named_parameters=emb.named_parameters(), sparse_as_dense=sparse_as_dense)
    idx = [torch.tensor([r, r + 1, r + 1, 9]) for r in range(size)]
    opt.zero_grad()
    emb(idx[rank]).sum().backward()
    assert emb.weight.grad.is_sparse != sparse_as_dense  # sparse_as_dense converts in the hook
    opt.step()
    grad = torch.zeros(10, 4)
    for r in range(size):
        for i in idx[r].tolist():
            grad[i] += 1.0
    torch.testing.assert_close(emb.weight.detach(), reference - 0.5 * grad / size)


def test_sparse_allreduce_with_an_empty_rank(rank, size):
    n = 0 if rank == 0 else 2
    t = torch.sparse_coo_tensor(torch.full((1, n), rank, dtype=torch.int64), torch.ones(n, 3), (size, 3))
    out = hvd.synchronize(hvd.sparse_allreduce_async(t, name="sparse.empty", op=hvd.Sum))
    expected = torch.zeros(size, 3)
    expected[1:] = 2.0
    torch.testing.assert_close(out.to_dense(), expected)


def test_groups_are_validated_and_accepted():
    for i in range(3):
        model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))  # a fresh model: hooks stay on parameters
        params = list(model.parameters())
        kwargs = [{"num_groups": 2}, {"groups": 1}, {"groups": [params[:2], params[2:]]}][i]
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), **kwargs)
        opt.zero_grad()
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
    params = list(nn.Linear(2, 2).parameters())
    with pytest.raises(ValueError, match="not both"):
        hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), num_groups=2, groups=[params])
    with pytest.raises(ValueError, match="not a parameter"):
        hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), groups=[[torch.zeros(1)]])


def test_broadcast_parameters_plain_list_and_optimizer_state_with_model(rank):
    tensors = [torch.full((2,), float(rank)), torch.full((3,), float(rank) + 1)]
    hvd.broadcast_parameters(tensors, root_rank=0)
    assert tensors[0].tolist() == [0.0, 0.0] and tensors[1].tolist() == [1.0, 1.0, 1.0]
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.9)
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1)


def test_horovod_environment_mapping():
    env = {"HOROVOD_FUSION_THRESHOLD": "1024", "HOROVOD_LOG_LEVEL": "WARNING", "HOROVOD_AUTOTUNE": "1",
           "HOROVOD_CYCLE_TIME": "5", "MGS_CYCLE_TIME_MS": "2", "HOROVOD_HOSTNAME": "x"}
    extra, ignored = _runtime.horovod_environment(env)
    assert extra == {"MGS_FUSION_THRESHOLD_BYTES": "1024", "MGS_LOG_LEVEL": "warn"}  # MGS_* set wins
    assert ignored == ["HOROVOD_AUTOTUNE"]
    extra, ignored = _runtime.horovod_environment({"HOROVOD_TIMELINE": "DYNAMIC", "HOROVOD_DYNAMIC_PROCESS_SETS": "1"})
    assert extra == {} and ignored == ["HOROVOD_TIMELINE"]  # DYNAMIC is start_timeline()'s switch, not a file


SCRIPT = textwrap.dedent("""
    import os, warnings, pytest
    import mgs.torch as hvd
    os.environ["HOROVOD_LOG_LEVEL"] = "bogus"
    with pytest.raises(RuntimeError, match="MGS_LOG_LEVEL='bogus'.*MGS_LOG_LEVEL from HOROVOD_LOG_LEVEL"):
        hvd.init()
    os.environ["HOROVOD_LOG_LEVEL"] = "error"
    os.environ["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1"
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        hvd.init()
    assert "MGS_LOG_LEVEL" not in os.environ
    assert [str(x.message) for x in w if "HOROVOD_HIERARCHICAL_ALLREDUCE" in str(x.message)], w
    assert hvd.cross_rank() == 0 and hvd.cross_size() == 1 and hvd.is_homogeneous()
    hvd.shutdown()
    with pytest.raises(ValueError, match="init"):
        hvd.cross_rank()
    print("horovod env ok")
""")


@pytest.mark.skipif(hvd.rank() != 0, reason="runs once per job, in a separate process")
def test_horovod_variables_reach_the_runtime():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PMI_"))}
    env["OMPI_ALLOW_RUN_AS_ROOT"] = env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(Path(hvd.__file__).parents[2])] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "horovod env ok" in proc.stdout, proc.stdout + proc.stderr
