"""Loss scaling through DistributedOptimizer (MGS_NONFINITE=propagate, the default).

torch.cuda.amp.GradScaler needs CUDA in torch 1.13, so the test does what it
does by hand: scaled loss, synchronize(), found_inf from the reduced
gradients, skip the step when found. Rank 1 (the last rank) puts +Inf into one
gradient on the bad step; every rank must see non-finite gradients after
synchronize() (so every rank skips), parameters stay identical across ranks,
and the run ends bitwise where a run without the bad step ends (nothing of the
bad step, on any rank, reached a parameter or a residual).

The suite runs this with the default settings (every gradient dense) and, as
the ctests python.nonfinite_sparse.np2 and python.nonfinite_sparse_agreed.np2-3,
with MGS_COMPRESSOR=topk, where the first layer's weight is sparsified with
error feedback (through the allgather, and through the agreed exchange).
"""

import ctypes
import os

import torch

import mgs.torch as hvd
from mgs import _lib

SCALE = 1024.0  # a GradScaler's scale; kept constant so the two runs compare bitwise
BAD_STEP = 2


def _residual(name, n):
    """This rank's error-feedback residual of a gradient, or None if it has none."""
    out = torch.empty(n, dtype=torch.float32)
    status = _lib.lib().cdll.mgs_residual_copy(ctypes.c_char_p(name.encode()), ctypes.c_void_p(out.data_ptr()),
                                               ctypes.c_size_t(n))
    return out if status == 0 else None


def _train(prefix, steps, bad_rank, skip_step=None):
    """Returns (final parameters, per-step found_inf, residuals around the bad step)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 4))
    named = [(prefix + n, p) for n, p in model.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), named_parameters=named)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    weight = model[0].weight
    grad_name = "allreduce." + prefix + "0.weight"
    found, around = [], {}
    for step in range(steps):
        if step == skip_step:
            continue
        g = torch.Generator().manual_seed(1000 * step + hvd.rank())
        x = torch.randn(16, 64, generator=g)
        y = torch.randint(0, 4, (16,), generator=g)
        hook = None
        if step == BAD_STEP and hvd.rank() == bad_rank:
            # An overflow in this rank's backward: one +Inf in the first layer's gradient.
            def poison(grad):
                grad = grad.clone()
                grad[3, 5] = float("inf")
                return grad
            hook = weight.register_hook(poison)
        if step == BAD_STEP:
            around["before"] = _residual(grad_name, weight.numel())
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y) * SCALE
        loss.backward()
        opt.synchronize()
        if hook is not None:
            hook.remove()
        if step == BAD_STEP:
            around["after"] = _residual(grad_name, weight.numel())
        found_inf = any(not torch.isfinite(p.grad).all() for p in model.parameters())
        found.append(found_inf)
        if found_inf:
            continue  # GradScaler.step skips (and update() would lower the scale)
        for p in model.parameters():
            p.grad.div_(SCALE)
        with opt.skip_synchronize():
            opt.step()
    return [p.detach().clone() for p in model.parameters()], found, around


def test_an_overflow_on_one_rank_skips_the_step_on_every_rank(rank, size):
    bad_rank = size - 1
    params, found, around = _train("amp_bad.", 5, bad_rank)
    assert found == [False, False, True, False, False], f"rank {rank}: found_inf per step {found}"
    # The same verdict everywhere, from the reduced gradients alone.
    verdicts = hvd.allgather(torch.tensor([[float(f) for f in found]]), name="amp.found")
    assert (verdicts == verdicts[0]).all()
    for i, p in enumerate(params):
        everyone = hvd.allgather(p.reshape(1, -1), name=f"amp.param{i}")
        assert torch.equal(everyone, everyone[0].expand_as(everyone)), f"parameter {i} differs across ranks"
    # Error feedback (sparse run only): the bad step left this rank's residual bitwise as it was.
    if os.environ.get("MGS_COMPRESSOR", "none") != "none":
        assert around["before"] is not None and around["after"] is not None, "no residual: not sparsified?"
        assert torch.equal(around["before"].view(torch.int32), around["after"].view(torch.int32)), \
            f"rank {rank}: the residual changed on the skipped step"
    # Nothing of the bad step survived: the run without it ends in the same place.
    ref, ref_found, _ = _train("amp_ref.", 5, bad_rank, skip_step=BAD_STEP)
    assert ref_found == [False] * 4
    for i, (a, b) in enumerate(zip(params, ref)):
        assert torch.equal(a, b), f"rank {rank}: parameter {i} differs from the run without the bad step"
