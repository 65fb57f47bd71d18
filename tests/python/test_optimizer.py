"""DistributedOptimizer, broadcast_parameters and broadcast_optimizer_state."""

import copy
import warnings

import pytest
import torch
from torch import nn

import mgs.torch as hvd


def make_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def rank_batch(rank, step=0, n=6):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g)


def loss_of(model, x, y):
    return nn.functional.cross_entropy(model(x), y)


def local_grads(model, batches):
    """Gradients of a plain copy of `model` summed over `batches` (no communication)."""
    m = copy.deepcopy(model)
    for x, y in batches:
        loss_of(m, x, y).backward()
    return [p.grad.clone() for p in m.parameters()]


def average_over_ranks(grads):
    everyone = hvd.allgather_object(grads, name="reference.grads")
    return [sum(g[i] for g in everyone) / len(everyone) for i in range(len(grads))]


def assert_same_on_all_ranks(obj, what):
    everyone = hvd.allgather_object(obj, name=f"check.{what}")
    for r, other in enumerate(everyone):
        assert_equal_nested(other, everyone[0], f"{what}: rank {r} differs from rank 0")


def assert_equal_nested(a, b, msg):
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b), msg
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), msg
        for k in a:
            assert_equal_nested(a[k], b[k], msg)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), msg
        for x, y in zip(a, b):
            assert_equal_nested(x, y, msg)
    else:
        assert a == b, msg


@pytest.mark.parametrize("named", [True, False])
def test_step_applies_the_average_of_per_rank_gradients(rank, named):
    model = make_model()
    batch = rank_batch(rank)
    expected = average_over_ranks(local_grads(model, [batch]))
    before = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters() if named else None)
    opt.zero_grad()
    loss_of(model, *batch).backward()
    opt.step()
    for p, b, g in zip(model.parameters(), before, expected):
        assert torch.allclose(p.grad, g, atol=1e-6)
        assert torch.allclose(p.detach(), b - g, atol=1e-6)
    assert_same_on_all_ranks([p.detach() for p in model.parameters()], "params.after.step")


def test_sum_op_and_fp16_compression(rank, size):
    model = make_model()
    batch = rank_batch(rank)
    expected = [g * size for g in average_over_ranks(local_grads(model, [batch]))]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(), op=hvd.Sum,
                                   compression=hvd.Compression.fp16)
    loss_of(model, *batch).backward()
    opt.synchronize()
    for p, g in zip(model.parameters(), expected):
        assert p.grad.dtype == torch.float32
        assert torch.allclose(p.grad, g, atol=1e-2, rtol=1e-2)
    with opt.skip_synchronize():
        opt.step()


def test_several_steps_keep_ranks_identical(rank):
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(5):
        opt.zero_grad()
        loss_of(model, *rank_batch(rank, step)).backward()
        opt.step()
    assert_same_on_all_ranks(model.state_dict(), "params.after.adam")


def test_backward_passes_per_step_2(rank):
    model = make_model()
    batches = [rank_batch(rank, 0), rank_batch(rank, 1)]
    expected = average_over_ranks(local_grads(model, batches))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=2)
    before = [p.detach().clone() for p in model.parameters()]
    opt.zero_grad()
    loss_of(model, *batches[0]).backward()
    with pytest.raises(AssertionError):  # between accumulated passes the gradients are in use
        opt.zero_grad()
    loss_of(model, *batches[1]).backward()
    opt.step()
    for p, b, g in zip(model.parameters(), before, expected):
        assert torch.allclose(p.detach(), b - g, atol=1e-6)
    # next step: the counters were reset
    opt.zero_grad()
    for x, y in batches:
        loss_of(model, x, y).backward()
    opt.step()
    assert_same_on_all_ranks([p.detach() for p in model.parameters()], "params.after.bpps2")


def test_more_backward_passes_than_declared_is_an_error(rank):
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    loss_of(model, *rank_batch(rank)).backward()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        loss_of(model, *rank_batch(rank, 1)).backward()
    opt.synchronize()  # every rank completes the first pass's reductions


def test_zero_grad_between_backward_and_step_is_an_error(rank):
    model = make_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    loss_of(model, *rank_batch(rank)).backward()
    with pytest.raises(AssertionError, match="zero_grad"):
        opt.zero_grad()
    opt.step()
    opt.zero_grad()  # fine after step


def test_synchronize_then_clip_then_step_without_resynchronizing(rank):
    model = make_model()
    batch = rank_batch(rank)
    expected = average_over_ranks(local_grads(model, [batch]))
    norm = torch.norm(torch.stack([g.norm() for g in expected]))
    scale = min(1.0, 0.1 / (float(norm) + 1e-6))
    before = [p.detach().clone() for p in model.parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters())
    loss_of(model, *batch).backward()
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "synchronize() without skip_synchronize()" warning
        with opt.skip_synchronize():
            opt.step()
    for p, b, g in zip(model.parameters(), before, expected):
        assert torch.allclose(p.detach(), b - g * scale, atol=1e-5)
    # stepping again after synchronize() without the context warns
    opt.zero_grad()
    loss_of(model, *batch).backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.body = nn.Linear(5, 8)
        self.heads = nn.ModuleList([nn.Linear(8, 3), nn.Linear(8, 3)])
        self.unused = nn.Linear(2, 2)  # no rank uses it

    def forward(self, x, head):
        return self.heads[head](torch.relu(self.body(x)))


def test_ranks_using_different_heads_do_not_hang(rank, size):
    model = TwoHeads()
    head = rank % 2
    batch = rank_batch(rank)
    # reference: each rank's gradient, zeros for parameters it did not use
    ref = copy.deepcopy(model)
    nn.functional.cross_entropy(ref(batch[0], head), batch[1]).backward()
    mine = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in ref.parameters()]
    expected = average_over_ranks(mine)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters())
    before = [p.detach().clone() for p in model.parameters()]
    opt.zero_grad()
    nn.functional.cross_entropy(model(batch[0], head), batch[1]).backward()
    opt.step()
    for p, b, g in zip(model.parameters(), before, expected):
        assert torch.allclose(p.grad, g, atol=1e-6)
        assert torch.allclose(p.detach(), b - g, atol=1e-6)
    assert_same_on_all_ranks(model.state_dict(), "params.heads")
    # a second step reuses the names
    opt.zero_grad()
    nn.functional.cross_entropy(model(batch[0], head), batch[1]).backward()
    opt.step()
    assert_same_on_all_ranks(model.state_dict(), "params.heads.2")


def test_named_parameters_are_validated():
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="duplicate"):
        hvd.DistributedOptimizer(opt, named_parameters=[("w", p) for p in model.parameters()])
    with pytest.raises(ValueError, match="name every parameter"):
        hvd.DistributedOptimizer(opt, named_parameters=list(model.named_parameters())[:1])
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(opt, backward_passes_per_step=0)


def test_wrapped_optimizer_keeps_class_and_state(rank):
    model = make_model()
    base = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_of(model, *rank_batch(rank)).backward()
    base.step()
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    assert isinstance(opt, torch.optim.Adam)
    assert len(opt.state) == len(base.state)
    for p in model.parameters():
        assert torch.equal(opt.state[p]["exp_avg"], base.state[p]["exp_avg"])


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
@pytest.mark.parametrize("non_root_state", ["trained", "fresh"])
def test_broadcast_parameters_and_optimizer_state(rank, opt_name, non_root_state):
    model = make_model(seed=rank)  # different initial parameters per rank
    if opt_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.9, weight_decay=1e-4)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.001 * (rank + 1), betas=(0.8, 0.9 + 0.01 * rank))
    if rank == 0 or non_root_state == "trained":
        for step in range(rank + 1):  # different number of steps: different state per rank
            opt.zero_grad()
            loss_of(model, *rank_batch(rank, step)).backward()
            opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert_same_on_all_ranks(model.state_dict(), "bcast.params")
    assert_same_on_all_ranks(opt.state_dict(), "bcast.optstate")
    # and training continues identically
    dist = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    dist.zero_grad()
    loss_of(model, *rank_batch(rank, 9)).backward()
    dist.step()
    assert_same_on_all_ranks(model.state_dict(), "bcast.params.after")
    # (state_dict()'s "mgs" entry is this rank's own: its rank and residuals)
    assert_same_on_all_ranks({k: v for k, v in dist.state_dict().items() if k != "mgs"}, "bcast.optstate.after")


def test_broadcast_optimizer_state_clears_state_the_root_does_not_have(rank):
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    if rank != 0:
        loss_of(model, *rank_batch(rank)).backward()
        opt.step()
    hvd.broadcast_parameters(list(model.named_parameters()), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert len(opt.state) == 0


def test_broadcast_parameters_rejects_duplicate_names_and_non_tensors():
    a, b = torch.ones(2), torch.zeros(2)
    with pytest.raises(ValueError, match="duplicate"):
        hvd.broadcast_parameters([("w", a), ("w", b)], root_rank=0)
    with pytest.raises(ValueError, match="not a tensor"):
        hvd.broadcast_parameters({"lr": 0.1}, root_rank=0)
    hvd.broadcast_parameters([("w", a), ("v", b)], root_rank=0)  # still works


def test_broadcast_parameters_from_another_root(rank, size):
    model = make_model(seed=rank)
    root = size - 1
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    assert_equal_nested(model.state_dict(), make_model(seed=root).state_dict(), "params from last rank")


def test_compression_stats_count_dense_bytes(rank):
    model = make_model()
    n_params = sum(p.numel() for p in model.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    hvd.reset_compression_stats()
    for step in range(3):
        opt.zero_grad()
        loss_of(model, *rank_batch(rank, step)).backward()
        opt.step()
    stats = hvd.compression_stats()
    assert stats["compressor"] == "none" and stats["steps"] == 3
    assert stats["elements_per_step"] == n_params
    assert stats["dense_bytes_per_step"] == 4 * n_params == stats["sent_bytes_per_step"]
    assert stats["selected_over_k"] == 1.0 and stats["compression_ratio"] == 1.0
