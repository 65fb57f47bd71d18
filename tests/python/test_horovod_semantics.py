"""Horovod's semantics where a script can observe them: the build and backend queries, integer
Product, sparse reductions (sparse_allreduce_async's callable handle, sparse gradients with and
without sparse_as_dense), optimizer-state broadcast with gradient-less parameters, and join,
which serves every rank's allreduces, fails their other collectives and returns the last rank."""

import time

import pytest
import torch
from torch import nn

import mgs.torch as hvd


def test_backend_queries_answer_like_an_mpi_build():
    assert hvd.mpi_built() and hvd.mpi_enabled()
    assert not hvd.gloo_built() and not hvd.gloo_enabled()
    assert not hvd.ccl_built() and not hvd.ddl_built() and not hvd.rocm_built()
    assert hvd.mpi_threads_supported() is False  # mgs owns MPI (MPI_THREAD_SERIALIZED)
    assert issubclass(hvd.HorovodInternalError, RuntimeError)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float64])
def test_product_keeps_the_dtype(rank, size, dtype):
    t = torch.tensor([rank + 2, -1, 3], dtype=dtype)
    out = hvd.allreduce(t, op=hvd.Product, name=f"sem.prod.{dtype}")
    expected = torch.stack([torch.tensor([r + 2, -1, 3], dtype=dtype) for r in range(size)]).prod(0).to(dtype)
    assert out.dtype == dtype and torch.equal(out, expected)


def random_sparse(seed, rows, cols=4):
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(rows, cols, generator=g)
    t[t < 0.7] = 0
    return t.to_sparse()


def test_sparse_allreduce_async_handle_is_callable(rank, size):
    tensors = [random_sparse(10 * rank + i, 7 + i) for i in range(3)]
    dense = [hvd.allreduce(t.to_dense(), name=f"sem.sparse.dense.{i}") for i, t in enumerate(tensors)]
    handles = [hvd.sparse_allreduce_async(t, name=f"sem.sparse.{i}", op=hvd.Average) for i, t in enumerate(tensors)]
    results = [handles[0](), hvd.synchronize(handles[1]), handles[2]()]  # Horovod's form and mgs's
    for reduced, got in zip(dense, results):
        assert got.is_sparse
        torch.testing.assert_close(got.to_dense(), reduced)


@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_sparse_embedding_gradients_stay_sparse_for_sparse_adam(rank, size, sparse_as_dense):
    torch.manual_seed(5)
    emb = nn.Embedding(10, 3, sparse=True)
    reference = emb.weight.detach().clone()
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(list(emb.parameters()), lr=0.1),
                                   named_parameters=[(f"sem.emb.{sparse_as_dense}", emb.weight)],
                                   sparse_as_dense=sparse_as_dense)
    idx = torch.tensor([[rank % 10, (rank + 3) % 10]])
    emb(idx).sum().backward()
    opt.step()  # SparseAdam refuses dense gradients
    assert emb.weight.grad.is_sparse
    # Every rank applied the same averaged gradient.
    rows = torch.tensor(sorted({r % 10 for r in range(size)} | {(r + 3) % 10 for r in range(size)}))
    changed = (emb.weight.detach() != reference).any(1).nonzero().flatten()
    assert torch.equal(changed, rows)
    everyone = hvd.allgather(emb.weight.detach().unsqueeze(0), name=f"sem.emb.check.{sparse_as_dense}")
    assert all(torch.equal(everyone[0], w) for w in everyone)


def test_broadcast_optimizer_state_gives_gradient_less_params_zero_gradients(rank):
    frozen = nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
    weight = nn.Parameter(torch.rand(4) + rank)
    opt = hvd.DistributedOptimizer(torch.optim.SGD([frozen, weight], lr=0.01, momentum=0.9),
                                   named_parameters=[("sem.frozen", frozen), ("sem.weight", weight)])
    hvd.broadcast_parameters({"frozen": frozen, "weight": weight}, root_rank=0, prefix="sem.state")
    hvd.broadcast_optimizer_state(opt, root_rank=0, prefix="sem.opt")
    assert frozen.grad is None  # as in Horovod: only parameters that require a gradient get one
    assert torch.equal(weight.grad, torch.zeros(4))
    assert torch.equal(hvd.broadcast(weight.grad, root_rank=0, name="sem.grad"), weight.grad)


def test_join_serves_allreduce_and_fails_other_collectives(rank, size):
    for first in range(size):
        hvd.barrier()
        if rank == first:
            last = hvd.join()
        else:
            a = torch.full((5,), float(rank + 1))
            b = torch.full((2, 3), 7, dtype=torch.int32)
            ha = hvd.allreduce_async(a, name="sem.join.a", op=hvd.Sum)
            hb = hvd.allreduce_async(b, name="sem.join.b", op=hvd.Average)
            summed, averaged = hvd.synchronize(ha), hvd.synchronize(hb)
            assert summed.tolist() == [float(sum(r + 1 for r in range(size) if r != first))] * 5
            # The joined rank's zeros count in the average, as in Horovod (integers truncate).
            assert averaged.flatten().tolist() == [7 * (size - 1) // size] * 6
            with pytest.raises(RuntimeError, match=f"rank {first} joined"):
                hvd.allgather(torch.ones(2), name="sem.join.gather")
            with pytest.raises(RuntimeError, match="broadcast"):
                hvd.broadcast(torch.ones(2), root_rank=rank, name="sem.join.bcast")
            # Join one after the other: the last to join is the highest rank still training.
            time.sleep(0.3 * rank)
            last = hvd.join()
        expected = size - 1 if first != size - 1 else size - 2
        assert last == expected
        assert hvd.allgather_object(last, name="sem.join.same") == [expected] * size
