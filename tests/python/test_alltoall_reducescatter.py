"""alltoall, reducescatter, grouped_reducescatter and grouped_allgather: results, received splits,
every dtype alltoall moves, gradients as Horovod defines them, and the errors: those a rank finds
alone fail at the call (ValueError), those ranks disagree on fail on every rank (RuntimeError)."""

import pytest
import torch

import mgs.torch as hvd


def rows_sent(rank, size):
    """Rank r sends (r + q) % 3 rows to rank q."""
    return [(rank + q) % 3 for q in range(size)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int8, torch.int16, torch.int64, torch.uint8])
def test_alltoall_with_splits(rank, size, dtype):
    splits = rows_sent(rank, size)
    rows = [[rank, q, i] for q in range(size) for i in range(splits[q])]
    x = torch.tensor(rows, dtype=dtype).reshape(-1, 3)
    out, received = hvd.alltoall(x, torch.tensor(splits, dtype=torch.int32), name=f"a2a.splits.{dtype}")
    assert out.dtype == dtype and received.dtype == torch.int32
    assert received.tolist() == [(s + rank) % 3 for s in range(size)]
    expected = [[s, rank, i] for s in range(size) for i in range((s + rank) % 3)]
    assert out.tolist() == expected


def test_alltoall_one_dimensional_and_equal_parts(rank, size):
    x = torch.arange(2 * size, dtype=torch.int16) + 100 * rank  # 1-D, a dtype the runtime cannot reduce
    out = hvd.alltoall(x, name="a2a.equal")  # no splits: equal parts, and only the tensor is returned
    assert torch.is_tensor(out)
    assert out.tolist() == [100 * s + 2 * rank + i for s in range(size) for i in range(2)]
    lists, received = hvd.alltoall(torch.ones(size, 2), splits=[1] * size, name="a2a.list")
    assert received.tolist() == [1] * size and lists.shape == (size, 2)


def test_alltoall_async_returns_both(rank, size):
    handle = hvd.alltoall_async(torch.full((size,), float(rank)), name="a2a.async")
    out, received = hvd.synchronize(handle)
    assert out.tolist() == [float(s) for s in range(size)] and received.tolist() == [1] * size


def test_alltoall_gradient_travels_back_along_the_splits(rank, size):
    splits = torch.tensor(rows_sent(rank, size), dtype=torch.int32)
    x = torch.arange(float(int(splits.sum()) * 2)).reshape(-1, 2).requires_grad_()
    out, received = hvd.alltoall(x, splits, name="a2a.grad")
    weights = torch.arange(float(out.numel())).reshape(out.shape) + 1000 * rank
    (out * weights).sum().backward()
    # The gradient of each sent row is the weight its receiver gave it.
    mine = hvd.alltoall(weights.detach(), received, name="a2a.grad.check")[0]
    assert torch.equal(x.grad, mine)


def test_alltoall_errors(rank, size):
    with pytest.raises(ValueError, match="not a multiple"):
        hvd.alltoall(torch.ones(size + 1), name="a2a.err.equal")
    with pytest.raises(ValueError, match="more than the first dimension"):
        hvd.alltoall(torch.ones(size - 1 if size > 1 else 0), torch.ones(size, dtype=torch.int32), name="a2a.err.sum")
    with pytest.raises(ValueError, match="integers"):
        hvd.alltoall(torch.ones(size), torch.ones(size), name="a2a.err.type")
    with pytest.raises(ValueError, match="one split per rank"):
        hvd.alltoall(torch.ones(size), torch.ones(size + 1, dtype=torch.int32), name="a2a.err.count")
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.alltoall(torch.tensor(1.0), name="a2a.err.scalar")
    # Ranks disagree: every rank fails, naming the tensor.
    t = torch.ones(size, dtype=torch.int32 if rank % 2 else torch.float32)
    with pytest.raises(RuntimeError, match="alltoall.a2a.err.dtype.*dtype"):
        hvd.alltoall(t, name="a2a.err.dtype")
    t = torch.ones(2 * size, 3 + rank)
    with pytest.raises(RuntimeError, match="dimensions after the first"):
        hvd.alltoall(t, name="a2a.err.shape")


def test_alltoall_bad_splits_on_one_rank_fail_every_rank(rank, size):
    # Only rank 0's splits are wrong: it raises its own error, and the others
    # fail naming the tensor instead of waiting for an alltoall that never comes.
    splits = torch.ones(size + 1 if rank == 0 else size, dtype=torch.int32)
    if rank == 0:
        with pytest.raises(ValueError, match="one split per rank"):
            hvd.alltoall(torch.ones(size), splits, name="a2a.err.one_rank")
    elif size > 1:
        with pytest.raises(RuntimeError, match="a2a.err.one_rank"):
            hvd.alltoall(torch.ones(size), splits, name="a2a.err.one_rank")
    # The name is free again and the ranks still agree.
    out, received = hvd.alltoall(torch.full((size,), float(rank)), torch.ones(size, dtype=torch.int32),
                                 name="a2a.err.one_rank")
    assert torch.equal(out, torch.arange(size, dtype=torch.float32))
    assert received.tolist() == [1] * size


def rows_of(d0, size):
    return [d0 // size + (1 if q < d0 % size else 0) for q in range(size)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int32, torch.int64])
def test_reducescatter_sum_and_average_with_uneven_rows(rank, size, dtype):
    d0 = 2 * size + 1
    full = [torch.arange(d0 * 3).reshape(d0, 3).to(dtype) * (r + 1) for r in range(size)]
    rows = rows_of(d0, size)
    lo = sum(rows[:rank])
    total = sum(full[1:], full[0].double())
    summed = hvd.reducescatter(full[rank], op=hvd.Sum, name=f"rs.sum.{dtype}")
    assert summed.dtype == dtype and summed.shape == (rows[rank], 3)
    assert torch.equal(summed.double(), total[lo:lo + rows[rank]])
    averaged = hvd.reducescatter(full[rank], name=f"rs.avg.{dtype}")  # Average is the default, as in Horovod
    want = total[lo:lo + rows[rank]] / size
    if not dtype.is_floating_point:
        want = want.trunc()
    torch.testing.assert_close(averaged.double(), want, rtol=1e-3, atol=1e-3)


def test_reducescatter_scales_and_async(rank, size):
    x = torch.arange(float(4 * size)) + rank
    handles = [hvd.reducescatter_async(x, name=f"rs.async.{i}", op=hvd.Sum, prescale_factor=2.0,
                                       postscale_factor=0.25) for i in range(3)]
    total = sum(torch.arange(float(4 * size)) + r for r in range(size))
    for h in handles:
        torch.testing.assert_close(hvd.synchronize(h), total[4 * rank:4 * rank + 4] * 0.5)


@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter_gradient_is_allgathered(rank, size, op):
    x = torch.ones(2 * size, 3, requires_grad=True)
    out = hvd.reducescatter(x, op=getattr(hvd, op), name=f"rs.grad.{op}")
    (out * (rank + 1)).sum().backward()
    # Horovod's definition: the parts' gradients allgathered, times the set's size for Sum.
    expected = torch.cat([torch.full((2, 3), float(r + 1)) for r in range(size)]) * (size if op == "Sum" else 1)
    assert torch.equal(x.grad, expected)


def test_reducescatter_errors(rank, size):
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.reducescatter(torch.tensor(float(rank)), name="rs.err.scalar")
    with pytest.raises(RuntimeError, match="Adasum"):
        hvd.reducescatter(torch.ones(size), op=hvd.Adasum)
    with pytest.raises(TypeError):
        hvd.reducescatter(torch.ones(size, dtype=torch.int16), name="rs.err.dtype")
    with pytest.raises(RuntimeError, match="rs.err.shape.*shape"):
        hvd.reducescatter(torch.ones(2 * size + rank, 3), name="rs.err.shape")
    with pytest.raises(RuntimeError, match="rs.err.type.*dtype"):
        hvd.reducescatter(torch.ones(size, dtype=torch.int32 if rank % 2 else torch.float32), name="rs.err.type")
    for checker in range(size):
        # The checker's op cannot complete before the other ranks enqueue it, which
        # they do only after the barrier; otherwise it may finish before the second
        # enqueue and the name is free again.
        if rank == checker:
            handle = hvd.reducescatter_async(torch.ones(size), name="rs.err.dup", op=hvd.Sum)
            with pytest.raises(ValueError, match="already in flight"):
                hvd.reducescatter_async(torch.ones(size), name="rs.err.dup")
        hvd.barrier()
        if rank != checker:
            handle = hvd.reducescatter_async(torch.ones(size), name="rs.err.dup", op=hvd.Sum)
        assert torch.equal(hvd.synchronize(handle), torch.full((1,), float(size)))


def test_grouped_reducescatter_and_gradients(rank, size):
    xs = [(torch.arange(float(2 * size * (i + 1))) * (rank + 1)).requires_grad_() for i in range(3)]
    outs = hvd.grouped_reducescatter(xs, op=hvd.Sum, name="grs")
    scale = sum(r + 1 for r in range(size))
    for i, o in enumerate(outs):
        n = 2 * (i + 1)
        assert torch.equal(o, torch.arange(float(n * rank), float(n * rank + n)) * scale)
    sum(o.sum() for o in outs).backward()
    for i, x in enumerate(xs):
        assert torch.equal(x.grad, torch.full((2 * size * (i + 1),), float(size)))
    averaged = hvd.synchronize(hvd.grouped_reducescatter_async([torch.ones(size, 2) * rank], name="grs.async"))
    assert torch.equal(averaged[0], torch.full((1, 2), (size - 1) / 2))


def test_grouped_allgather_and_gradients(rank, size):
    xs = [torch.full((rank + 1, 2), float(rank + i), requires_grad=True) for i in range(3)]
    outs = hvd.grouped_allgather(xs, name="gag")
    for i, o in enumerate(outs):
        assert o.tolist() == [[float(r + i)] * 2 for r in range(size) for _ in range(r + 1)]
    sum((o * (rank + 1)).sum() for o in outs).backward()
    mean = sum(r + 1 for r in range(size)) / size  # averaged over the ranks, as in Horovod
    for x in xs:
        assert torch.equal(x.grad, torch.full((rank + 1, 2), mean))
    out = hvd.synchronize(hvd.grouped_allgather_async([torch.tensor([rank])], name="gag.async"))
    assert out[0].tolist() == list(range(size))
