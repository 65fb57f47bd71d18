"""Process sets: adding and removing them on every rank, every collective and DistributedOptimizer
restricted to one, Average over the set's size, static sets from init(), and the errors (a rank
outside the set, removing a set with operations not run yet, duplicate or removed sets)."""

import pytest
import torch
from torch import nn

import mgs.torch as hvd
from mgs import _process_sets


@pytest.fixture
def halves(rank, size):
    """The even and the odd ranks as two sets (the odd set is empty at size 1), removed afterwards."""
    even = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
    odd = hvd.add_process_set([r for r in range(size) if r % 2 == 1]) if size > 1 else None
    yield (even if rank % 2 == 0 else odd), even, odd
    if odd is not None:
        assert hvd.remove_process_set(odd)
    assert hvd.remove_process_set(even)


def test_sets_have_agreed_ids_and_know_their_ranks(rank, size, halves):
    mine, even, odd = halves
    ids = hvd.allgather_object((even.process_set_id, odd and odd.process_set_id), name="ps.ids")
    assert all(i == ids[0] for i in ids) and 0 not in ids[0]
    assert mine.included() and mine.rank() == rank // 2 and mine.size() == len(mine.ranks)
    other = odd if mine is even else even
    if other is not None:
        assert not other.included() and other.rank() == -1
    assert hvd.global_process_set.process_set_id == 0 and hvd.global_process_set.size() == size
    assert hvd.global_process_set.rank() == rank


def test_collectives_in_a_set(rank, size, halves):
    mine, _, _ = halves
    members = mine.ranks
    x = torch.full((3,), float(rank + 1))
    summed = hvd.allreduce(x, op=hvd.Sum, name="ps.coll", process_set=mine)  # the same name in both sets
    assert summed.tolist() == [float(sum(r + 1 for r in members))] * 3
    averaged = hvd.allreduce(x, name="ps.avg", process_set=mine)  # divides by the set's size
    assert averaged.tolist() == [sum(r + 1 for r in members) / len(members)] * 3
    gathered = hvd.allgather(torch.tensor([rank]), name="ps.gather", process_set=mine)
    assert gathered.tolist() == members
    grouped = hvd.grouped_allgather([torch.tensor([rank]), torch.tensor([[rank, rank]])], process_set=mine)
    assert grouped[0].tolist() == members
    root = members[-1]  # a world rank
    assert hvd.broadcast(torch.tensor([rank]), root, name="ps.bcast", process_set=mine).tolist() == [root]
    assert hvd.broadcast_object({"from": rank}, root_rank=root, process_set=mine) == {"from": root}
    assert hvd.allgather_object(rank, process_set=mine) == members
    n = len(members)
    out, received = hvd.alltoall(torch.arange(n) + 10 * rank, [1] * n, process_set=mine)
    assert out.tolist() == [10 * r + mine.rank() for r in members] and received.tolist() == [1] * n
    part = hvd.reducescatter(torch.ones(2 * n) * (rank + 1), op=hvd.Sum, process_set=mine)
    assert part.tolist() == [float(sum(r + 1 for r in members))] * 2
    hvd.barrier(process_set=mine)
    for ps in [mine, None]:  # unnamed ops of a set do not shift the global set's names
        kwargs = {} if ps is None else {"process_set": ps}
        hvd.allreduce(torch.ones(1), **kwargs)
    sparse = torch.sparse_coo_tensor(torch.tensor([[rank % 4]]), torch.ones(1, 2), (4, 2))
    reduced = hvd.sparse_allreduce_async(sparse, name="ps.sparse", op=hvd.Average, process_set=mine)()
    expected = torch.zeros(4, 2)
    for r in members:
        expected[r % 4] += 1.0 / n
    torch.testing.assert_close(reduced.to_dense(), expected)


def test_gradients_in_a_set(rank, size, halves):
    mine, _, _ = halves
    n = len(mine.ranks)
    x = torch.ones(2, requires_grad=True)
    hvd.allreduce(x, op=hvd.Sum, name="ps.grad.ar", process_set=mine).sum().backward()
    assert x.grad.tolist() == [float(n)] * 2
    y = torch.ones(1, 2, requires_grad=True)
    (hvd.allgather(y, name="ps.grad.ag", process_set=mine) * (rank + 1)).sum().backward()
    assert y.grad.tolist() == [[sum(r + 1 for r in mine.ranks) / n] * 2]
    z = torch.ones(3, requires_grad=True)
    (hvd.broadcast(z, mine.ranks[0], name="ps.grad.bc", process_set=mine) * 2).sum().backward()
    assert z.grad.tolist() == ([2.0] * 3 if rank == mine.ranks[0] else [0.0] * 3)


def test_optimizer_in_a_set(rank, size, halves):
    mine, even, _ = halves
    torch.manual_seed(rank)
    model = nn.Linear(3, 2)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=[(f"ps.opt.{n}", p) for n, p in model.named_parameters()],
                                   process_set=even)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0, prefix="ps.opt.params")
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    w = model.weight.detach().reshape(1, -1)
    everyone = hvd.allgather(w, name="ps.opt.check")
    evens = [everyone[r] for r in range(size) if r % 2 == 0]
    assert all(torch.equal(evens[0], e) for e in evens)  # the even ranks averaged their gradients
    if size > 1:  # the odd ranks stepped alone, on their own data
        assert not torch.equal(everyone[0], everyone[1])


def test_rank_outside_the_set_fails_on_every_rank_that_submits(rank, size):
    if size < 3:
        pytest.skip("needs a set of two ranks and a rank outside it")
    pair = hvd.add_process_set([0, 2])
    msg = None
    handle = None
    if rank == 1:  # first, so that rank 0 holds its report before the set's ranks submit
        handle = hvd.allreduce_async(torch.ones(2), name="ps.outside", process_set=pair)
    hvd.barrier()
    try:
        if rank == 1:
            hvd.synchronize(handle)
        elif rank in (0, 2):
            hvd.allreduce(torch.ones(2), name="ps.outside", process_set=pair)
    except ValueError as e:
        msg = str(e)
    if rank in (0, 1, 2):
        assert msg is not None and "rank 1" in msg and "ps.outside" in msg and "not in" in msg, msg
    hvd.barrier()
    assert hvd.remove_process_set(pair)


def test_removing_a_set_with_an_op_not_run_fails_on_every_rank(rank, size):
    if size < 3:
        pytest.skip("needs a set of two ranks that is not every rank")
    pair = hvd.add_process_set([0, 1])
    x = torch.ones(2)
    handle = hvd.allreduce_async_(x, name="ps.pending", op=hvd.Sum, process_set=pair) if rank == 0 else None
    with pytest.raises(ValueError, match=r"cannot be removed: rank 0 has .*synchronize"):
        hvd.remove_process_set(pair)
    assert pair.included() == (rank <= 1)  # still registered everywhere
    if rank == 1:
        handle = hvd.allreduce_async_(x, name="ps.pending", op=hvd.Sum, process_set=pair)
    if rank <= 1:
        assert hvd.synchronize(handle).tolist() == [2.0, 2.0]
    assert hvd.remove_process_set(pair)
    assert pair.process_set_id is None


def test_set_errors(rank, size):
    ps = hvd.add_process_set([0])
    with pytest.raises(ValueError, match="has these ranks already"):
        hvd.add_process_set([0])
    with pytest.raises(ValueError, match="is not in"):
        hvd.broadcast(torch.ones(1), size - 1 if size > 1 else 5, process_set=ps)
    assert hvd.remove_process_set(ps)
    assert not hvd.remove_process_set(ps)  # removed already
    assert not hvd.remove_process_set(hvd.global_process_set)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=ps)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match="not in \\[0"):
        hvd.add_process_set([size])
    with pytest.raises(ValueError, match="list of ranks"):
        hvd.ProcessSet(object())


def test_static_sets_from_init(rank, size):
    hvd.barrier()  # every rank is done with the tests before: shutdown() stops them all
    hvd.shutdown()
    static = hvd.ProcessSet([0])
    hvd.init(process_sets=[static, [r for r in range(size) if r != 0]] if size > 1 else [static])
    try:
        assert static.process_set_id is not None
        assert _process_sets.set_size(static.process_set_id) == 1
        if rank == 0:
            assert hvd.allreduce(torch.ones(1), op=hvd.Sum, process_set=static).item() == 1.0
    finally:
        hvd.barrier()
        hvd.shutdown()
        hvd.init()
    assert static.process_set_id is None  # a new runtime starts with the global set alone
