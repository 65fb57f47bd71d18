"""A torch.compile'd model under DistributedOptimizer (PyTorch >= 2; skipped on Debian's 1.13).

The compiled graph produces the gradients; the optimizer's hooks still see each
one and reduce it, so the compiled model trains exactly like the eager one."""

import copy

import pytest
import torch
from torch import nn

import mgs.torch as hvd

compile_available = hasattr(torch, "compile") and int(torch.__version__.split(".")[0]) >= 2
pytestmark = pytest.mark.skipif(not compile_available, reason="torch.compile needs PyTorch 2")


def batch(rank, step):
    g = torch.Generator().manual_seed(31 * rank + step)
    return torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)


def train(model, rank, steps=3):
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    for s in range(steps):
        x, y = batch(rank, s)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def test_compiled_model_trains_like_the_eager_one(rank, size):
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    compiled_base = copy.deepcopy(eager)
    train(eager, rank)
    compiled = torch.compile(compiled_base)
    train(compiled, rank)
    for p, q in zip(eager.parameters(), compiled_base.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    # and the ranks agree (the gradients were averaged, although the data differ)
    everyone = hvd.allgather_object([p.detach() for p in compiled_base.parameters()], name="compile.params")
    for other in everyone[1:]:
        for a, b in zip(everyone[0], other):
            torch.testing.assert_close(a, b)
