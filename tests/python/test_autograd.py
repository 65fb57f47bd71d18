"""Gradients flow through allreduce, grouped_allreduce, allgather and broadcast (Horovod's definitions)."""

import torch

import mgs.torch as hvd


def test_allreduce_gradient(rank, size):
    for op, scale in ((hvd.Average, 1.0), (hvd.Sum, float(size))):
        x = torch.full((3, 2), float(rank + 1), requires_grad=True)
        w = torch.arange(6.).reshape(3, 2)  # the same on every rank
        (hvd.allreduce(x, op=op, name=f"grad.allreduce.{op}") * w).sum().backward()
        # d/dx_r of sum_ranks(w * reduce(x)) under this rank's loss, reduced the same way
        assert torch.allclose(x.grad, w * scale), (op, x.grad)


def test_allreduce_gradient_with_fp16_compression(rank, size):
    x = torch.ones(4, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16).sum().backward()
    assert x.grad.dtype == torch.float32
    assert torch.equal(x.grad, torch.full((4,), float(size)))


def test_grouped_allreduce_gradient(rank, size):
    xs = [torch.full((i + 2,), float(rank), requires_grad=True) for i in range(3)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    sum((o * (i + 1)).sum() for i, o in enumerate(outs)).backward()
    for i, x in enumerate(xs):
        assert torch.equal(x.grad, torch.full((i + 2,), float((i + 1) * size)))


def test_allgather_gradient(rank, size):
    x = torch.full((rank + 1, 2), float(rank), requires_grad=True)
    y = hvd.allgather(x)
    w = torch.arange(float(y.numel())).reshape(y.shape)  # the same on every rank
    (y * w).sum().backward()
    offset = sum(r + 1 for r in range(rank))
    # Horovod's definition: this rank's rows of the output gradients averaged over the ranks
    # (here every rank's is w)
    assert torch.equal(x.grad, w[offset:offset + rank + 1])


def test_allgather_gradient_averages_differing_gradients(rank, size):
    x = torch.ones(2, 3, requires_grad=True)
    y = hvd.allgather(x, name="grad.allgather.differing")
    (y * (rank + 1)).sum().backward()  # rank r's output gradient is r + 1 everywhere
    mean = sum(r + 1 for r in range(size)) / size
    assert torch.equal(x.grad, torch.full((2, 3), mean))


def test_broadcast_gradient(rank, size):
    for root in range(size):
        x = torch.full((2, 3), float(rank), requires_grad=True)
        y = hvd.broadcast(x, root)
        assert torch.equal(y.detach(), torch.full((2, 3), float(root)))
        w = torch.arange(6.).reshape(2, 3)
        (y * w).sum().backward()
        # Horovod's definition: the root gets the output gradients averaged over the ranks
        expected = w if rank == root else torch.zeros(2, 3)
        assert torch.equal(x.grad, expected)


def test_gradient_through_a_chain(rank, size):
    # allgather -> allreduce -> loss: the chain rule across collectives
    x = torch.tensor([float(rank + 1)], requires_grad=True)
    gathered = hvd.allgather(x)                 # [1, 2, ..., size]
    total = hvd.allreduce(gathered.sum(), op=hvd.Average)
    total.backward()
    # d total / d gathered = 1 on every rank; allgather's gradient averages it over the ranks
    assert torch.equal(x.grad, torch.tensor([1.0]))
