"""allreduce, allgather and broadcast on every rank, checked against values computed locally."""

import itertools

import pytest
import torch

import mgs.torch as hvd

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8]
DIMS = [1, 2, 3]


def base_tensor(dtype, dim, seed=0):
    """The same small integers on every rank, exact in every dtype after scaling by rank sums."""
    g = torch.Generator().manual_seed(seed + dim)
    low = 0 if dtype == torch.uint8 else -8
    shape = [5, 3, 2][:dim]
    return torch.randint(low, 9, shape, generator=g).to(dtype)


def rank_sum(size):
    return size * (size + 1) // 2  # sum over ranks of (rank + 1)


@pytest.mark.parametrize("dtype,dim,op", itertools.product(DTYPES, DIMS, ["sum", "average"]))
def test_allreduce(dtype, dim, op, rank, size):
    base = base_tensor(dtype, dim)
    x = base * (rank + 1)
    before = x.clone()
    out = hvd.allreduce(x, op=hvd.Sum if op == "sum" else hvd.Average)
    expected = base.double() * rank_sum(size)
    if op == "average":
        expected = expected / size
        if not dtype.is_floating_point:
            expected = torch.trunc(expected)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out.double(), expected), (out, expected)
    assert torch.equal(x, before), "allreduce must not modify its input"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_allreduce_in_place(dtype, rank, size):
    base = base_tensor(dtype, 2)
    x = base * (rank + 1)
    out = hvd.allreduce_(x, op=hvd.Sum, name="in_place")
    assert out is x
    assert torch.equal(x.double(), base.double() * rank_sum(size))


def test_allreduce_in_place_non_contiguous(rank, size):
    x = (torch.arange(12.).reshape(3, 4) * (rank + 1)).t()  # a transposed view
    assert not x.is_contiguous()
    hvd.allreduce_(x, op=hvd.Sum)
    assert torch.equal(x, torch.arange(12.).reshape(3, 4).t() * rank_sum(size))


def test_allreduce_scalar_and_empty(rank, size):
    assert hvd.allreduce(torch.tensor(float(rank + 1)), op=hvd.Sum).item() == rank_sum(size)
    empty = hvd.allreduce(torch.zeros(0, 3))
    assert empty.shape == (0, 3)


def test_allreduce_deprecated_average_argument(rank, size):
    x = torch.ones(3) * (rank + 1)
    with pytest.warns(DeprecationWarning):
        s = hvd.allreduce(x, average=False)
    with pytest.warns(DeprecationWarning):
        a = hvd.allreduce(x, average=True)
    assert torch.equal(s, torch.full((3,), float(rank_sum(size))))
    assert torch.allclose(a, torch.full((3,), rank_sum(size) / size))
    with pytest.raises(ValueError):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_prescale_and_postscale(rank, size):
    x = torch.ones(4, dtype=torch.float64) * (rank + 1)
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert torch.allclose(out, torch.full((4,), 1.5 * rank_sum(size), dtype=torch.float64))
    out = hvd.allreduce(x, op=hvd.Average, prescale_factor=2.0)
    assert torch.allclose(out, torch.full((4,), 2.0 * rank_sum(size) / size, dtype=torch.float64))


def test_fp16_compression(rank, size):
    x = torch.full((6,), 0.25 * (rank + 1))
    out = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.full((6,), 0.25 * rank_sum(size)))


def test_async_poll_synchronize(rank, size):
    tensors = [torch.full((100,), float(rank + i)) for i in range(8)]
    handles = [hvd.allreduce_async(t, name=f"async.{i}", op=hvd.Sum) for i, t in enumerate(tensors)]
    in_place = hvd.allreduce_async_(torch.ones(3) * rank, name="async.in_place", op=hvd.Sum)
    for h in handles + [in_place]:
        while not hvd.poll(h):
            pass
        assert hvd.poll(h)
    for i, h in enumerate(handles):
        assert torch.equal(hvd.synchronize(h), torch.full((100,), float(sum(r + i for r in range(size)))))
    assert torch.equal(hvd.synchronize(in_place), torch.full((3,), float(sum(range(size)))))
    with pytest.raises(ValueError):
        hvd.synchronize(handles[0])  # already synchronized


def test_grouped_allreduce(rank, size):
    tensors = [torch.ones(i + 1) * (rank + 1) for i in range(5)]
    outs = hvd.grouped_allreduce(tensors, op=hvd.Sum, name="group")
    for i, o in enumerate(outs):
        assert torch.equal(o, torch.full((i + 1,), float(rank_sum(size))))
    h = hvd.grouped_allreduce_async_(tensors, op=hvd.Average)
    assert hvd.synchronize(h) == tensors
    for i, t in enumerate(tensors):
        assert torch.allclose(t, torch.full((i + 1,), rank_sum(size) / size))


@pytest.mark.parametrize("dtype,dim", itertools.product(DTYPES + [torch.bool, torch.int8, torch.int16], DIMS))
def test_allgather_per_rank_first_dimension(dtype, dim, rank, size):
    def part(r):
        shape = [r + 1, 3, 2][:dim]
        return (torch.arange(int(torch.tensor(shape).prod())).reshape(shape) % 7 + r).to(dtype)
    out = hvd.allgather(part(rank))
    expected = torch.cat([part(r) for r in range(size)])
    assert out.dtype == dtype and out.shape == expected.shape
    assert torch.equal(out, expected)


def test_allgather_async_and_empty_rank(rank, size):
    x = torch.full((rank % 2, 4), float(rank))  # even ranks contribute nothing
    out = hvd.synchronize(hvd.allgather_async(x, name="gather.async"))
    expected = torch.cat([torch.full((r % 2, 4), float(r)) for r in range(size)])
    assert torch.equal(out, expected)
    with pytest.raises(ValueError):
        hvd.allgather(torch.tensor(1.0))  # a scalar has no first dimension


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8, torch.bool, torch.int16])
def test_broadcast_from_every_root(dtype, rank, size):
    for root in range(size):
        x = (torch.arange(12).reshape(3, 4) % 5 + rank).to(dtype)
        expected = (torch.arange(12).reshape(3, 4) % 5 + root).to(dtype)
        out = hvd.broadcast(x, root, name=f"bcast.{root}")
        assert torch.equal(out, expected)
        assert torch.equal(x, (torch.arange(12).reshape(3, 4) % 5 + rank).to(dtype)), "input modified"
        hvd.broadcast_(x, root)
        assert torch.equal(x, expected)


def test_broadcast_async_and_scalar(rank, size):
    x = torch.tensor(float(rank))
    h = hvd.broadcast_async_(x, size - 1)
    assert hvd.synchronize(h) is x and x.item() == size - 1
    assert hvd.synchronize(hvd.broadcast_async(torch.tensor([rank, 7]), 0)).tolist() == [0, 7]


def test_barrier():
    hvd.barrier()
    hvd.barrier()


# --------------------------------------------------------------------- errors --

def test_mismatched_shape_raises_on_every_rank(rank):
    with pytest.raises(RuntimeError, match="shape"):
        hvd.allreduce(torch.ones(rank + 1), name="mismatch.shape")
    # the runtime keeps working afterwards
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [hvd.size()] * 2


def test_mismatched_dtype_raises_on_every_rank(rank):
    dtype = torch.float32 if rank % 2 == 0 else torch.float64
    with pytest.raises(RuntimeError, match="dtype|type"):
        hvd.allreduce(torch.ones(3, dtype=dtype), name="mismatch.dtype")


def test_mismatched_allgather_trailing_dims_raise(rank):
    with pytest.raises(RuntimeError):
        hvd.allgather(torch.ones(2, 3 + rank % 2), name="mismatch.gather")


def test_mismatched_broadcast_root_raises_on_every_rank(rank):
    with pytest.raises(RuntimeError, match="root"):
        hvd.broadcast(torch.ones(3), root_rank=rank, name="mismatch.root")


def test_mismatched_op_raises(rank):
    with pytest.raises(RuntimeError):
        hvd.allreduce(torch.ones(3), name="mismatch.op", op=hvd.Sum if rank % 2 else hvd.Average)


def test_duplicate_name_raises_value_error(rank, size):
    for checker in range(size):
        # The checker's first op cannot complete before the other ranks enqueue it,
        # which they do only after the barrier: the name is surely in flight.
        x, y = torch.ones(4), torch.ones(4)
        if rank == checker:
            h = hvd.allreduce_async(x, name="duplicate", op=hvd.Sum)
            with pytest.raises(ValueError, match="duplicate"):
                hvd.allreduce_async(y, name="duplicate", op=hvd.Sum)
        hvd.barrier()
        if rank != checker:
            h = hvd.allreduce_async(x, name="duplicate", op=hvd.Sum)
        assert torch.equal(hvd.synchronize(h), torch.full((4,), float(size)))
    # the name is free again once the op completed
    assert torch.equal(hvd.allreduce(y, name="duplicate", op=hvd.Sum), torch.full((4,), float(size)))


def test_unsupported_dtype_and_op():
    with pytest.raises(TypeError):
        hvd.allreduce(torch.ones(2, dtype=torch.bool))
    with pytest.raises(ValueError):
        hvd.allreduce(torch.ones(2), op=7)


def test_topology(rank, size):
    assert 0 <= rank < size
    assert 0 <= hvd.local_rank() < hvd.local_size() <= size
    ranks = hvd.allgather(torch.tensor([rank]))
    assert ranks.tolist() == list(range(size))
    assert hvd.is_initialized() and hvd.mpi_built() and not hvd.gloo_built()
    assert isinstance(hvd.cuda_built(), bool) and isinstance(hvd.nccl_built(), int)
    # As Horovod's: NCCL's version code when built with NCCL (NCCL 2.7 or newer is 2700 and up), else 0.
    assert hvd.nccl_built() == 0 or hvd.nccl_built() >= 2700
