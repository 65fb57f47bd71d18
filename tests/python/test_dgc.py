"""DGC's techniques in DistributedOptimizer: momentum correction, momentum factor masking, local clipping.

The model is one sparsified weight W (4096 elements, MGS_MIN_SPARSE_ELEMENTS) and one dense bias b,
with loss sum(W*G) + sum(b*h), so each rank's gradient is exactly the G, h the test chose. Every value
is a small dyadic rational (k/64 with distinct k) and momentum, learning rate and 1/ranks are powers
of two, so every sum is exact in float32 whatever its order: the runtime's result must equal the
hand-computed DGC update bit for bit, on 2 or 4 ranks. Each rank computes every rank's gradients from
seeds, so the reference needs no collective.

The sparse tests restart mgs with topk (allgather exchange, one bucket) and restore the suite's
runtime afterwards, as test_checkpoint.py does.
"""

import contextlib
import math
import os

import pytest
import torch
from torch import nn

import mgs
import mgs.torch as hvd
from mgs import _runtime

N = 4096  # W's elements: the smallest sparsified tensor
LR, M = 0.25, 0.5


@contextlib.contextmanager
def runtime(**env):
    """mgs restarted with `env` (MGS_* variables) for the test; the suite's runtime back afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    hvd.shutdown()
    os.environ.update(env)
    try:
        hvd.init()
        yield
        hvd.barrier()
    finally:
        hvd.shutdown()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        hvd.init()


def topk_runtime(density, **env):
    return runtime(MGS_COMPRESSOR="topk", MGS_DENSITY=str(density), MGS_CALIBRATION="off", MGS_DENSE_FALLBACK="0",
                   MGS_PLANNER="single", MGS_EXCHANGE="allgather", **env)


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.w = nn.Parameter(dyadic(g, N).view(64, 64))
        self.b = nn.Parameter(dyadic(g, 8))

    def loss(self, gw, gb):
        return (self.w * gw).sum() + (self.b * gb).sum()


def dyadic(g, n):
    """n values +-k/64 with distinct k in 1..n (distinct magnitudes, exact in float32)."""
    k = (torch.randperm(n, generator=g) + 1).float() / 64
    return torch.where(torch.rand(n, generator=g) < 0.5, -k, k)


def grads(rank, step, rep=0):
    g = torch.Generator().manual_seed(1000 * step + 10 * rank + rep)
    return dyadic(g, N).view(64, 64), dyadic(g, 8)


def make(opt_kwargs=None, **dist_kwargs):
    model = Linear()
    opt = torch.optim.SGD(model.parameters(), **{"lr": LR, **(opt_kwargs or {"momentum": M})})
    return model, hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), **dist_kwargs)


def residual(name, process_set=None):
    """This rank's residual of parameter `name` (kept under the set-qualified name in a process set)."""
    out = torch.empty(N, dtype=torch.float32)
    runtime_name = f"allreduce.{name}"
    if process_set is not None and process_set.process_set_id != 0:
        runtime_name += f" [process set {process_set.process_set_id}]"
    return out if _runtime.residual_copy(runtime_name, out.data_ptr(), N) else None


def dgc_reference(steps, size, k, masking=True, ranks=None, lrs=None, weighted=True, first_masked=0):
    """DGC by hand (algorithms.md 8.3, non-Nesterov): per rank u = m*u + g, v = v + u, send v's top k
    by magnitude, clear v and (masking, from step `first_masked` on) u there; W -= lr * mean of what was
    sent. `k`: one k for every step, or a list of each step's k (a density warm-up). The bias is dense:
    u = m*u + g, all of u sent. `ranks`: the ranks that average (default: all). `lrs`: each step's
    learning rate (default LR throughout); with `weighted` (learning-rate weighting) v accumulates
    (lr_s / lrs[0]) * u and W -= lrs[0] * mean, else W -= lr_s * mean. Returns W, b, each rank's u and
    v after every step."""
    lrs = [LR] * steps if lrs is None else lrs
    ranks = list(range(size)) if ranks is None else list(ranks)
    model = Linear()
    w, b = model.w.detach().clone().view(-1), model.b.detach().clone()
    u = [torch.zeros(N) for _ in range(size)]
    v = [torch.zeros(N) for _ in range(size)]
    ub = [torch.zeros(8) for _ in range(size)]
    out = []
    for s in range(steps):
        k_s = k[s] if isinstance(k, list) else k
        total, total_b = torch.zeros(N), torch.zeros(8)
        f = lrs[s] / lrs[0] if weighted else 1.0
        lr = lrs[0] if weighted else lrs[s]
        for r in ranks:
            gw, gb = grads(r, s)
            u[r] = M * u[r] + gw.view(-1)
            v[r] = v[r] + f * u[r]
            mags = v[r].abs().sort(descending=True).values
            assert k_s == N or mags[k_s - 1] > mags[k_s], "a tie at the k-th entry: choose other values"
            idx = v[r].abs().topk(k_s).indices
            total[idx] += v[r][idx]
            v[r][idx] = 0
            if masking and s >= first_masked and k_s < N:
                u[r][idx] = 0
            ub[r] = M * ub[r] + gb
            total_b += f * ub[r]
        w = w - lr * (total / len(ranks))
        b = b - lr * (total_b / len(ranks))
        out.append((w.clone(), b.clone(), [x.clone() for x in u], [x.clone() for x in v]))
    return out


def run_steps(model, opt, steps, bpps=1, after_step=None):
    for s in range(steps):
        opt.zero_grad()
        for rep in range(bpps):
            gw, gb = grads(hvd.rank(), s, rep) if bpps > 1 else grads(hvd.rank(), s)
            model.loss(gw, gb).backward()
        opt.step()
        if after_step is not None:
            after_step(s)


@pytest.mark.parametrize("masking", [True, False])
def test_momentum_correction_matches_dgc_by_hand_at_low_density(masking):
    steps, density = 4, 0.01
    k = int(N * density)
    ref = dgc_reference(steps, hvd.size(), k, masking)
    with topk_runtime(density):
        model, opt = make(momentum_correction=True, momentum_masking=masking)
        run_steps(model, opt, steps, after_step=lambda s: assert_step(s, ref, model, opt, "DGC by hand"))


def assert_step(s, ref, model, opt, rule):
    """W, b, this rank's velocity and residual after step s are bit for bit ref[s] (`rule` names it)."""
    w, b, u, v = ref[s]
    r = hvd.rank()
    assert torch.equal(model.w.detach().view(-1), w), f"step {s}: W differs from {rule}"
    assert torch.equal(model.b.detach(), b), f"step {s}: the dense bias differs"
    assert torch.equal(opt._mc.velocity[model.w].view(-1), u[r]), f"step {s}: velocity differs from {rule}"
    assert torch.equal(residual("w"), v[r]), f"step {s}: the residual differs from {rule}"


def warmup_ks(density, warmup, steps):
    """Each step's k under the runtime's density warm-up (bucket_schedule.cc: step s < W selects at
    max(c^(s+1), density), c = density^(1/(W+1)); selector.cc: k = floor(density * n), at least 1)."""
    c = density ** (1.0 / (warmup + 1))
    return [max(1, math.floor((max(c ** (s + 1), density) if s < warmup else density) * N)) for s in range(steps)]


@pytest.mark.parametrize("masking", [None, "after_warmup"], ids=["default-every-step", "after-warmup"])
def test_masking_every_step_or_after_the_density_warmup(masking):
    """MGS_WARMUP_STEPS=2 at density 0.01: steps 0 and 1 select 882 and 190 entries of 4096, then 40.
    By default (momentum_masking=None: True, DGC's rule) every step masks; with "after_warmup" the sent
    entries keep their velocity in those two steps and are masked from step 2 on. Each is the by-hand
    reference bit for bit (W, velocity, residual), the two differ, and the optimizer counts its steps."""
    steps, density, warmup = 4, 0.01, 2
    ks = warmup_ks(density, warmup, steps)
    assert ks == [882, 190, 40, 40]
    first = warmup if masking == "after_warmup" else 0
    ref = dgc_reference(steps, hvd.size(), ks, first_masked=first)
    other = dgc_reference(steps, hvd.size(), ks, first_masked=warmup - first)
    assert not torch.equal(ref[-1][0], other[-1][0]), "the warm-up does not tell the two rules apart"
    with topk_runtime(density, MGS_WARMUP_STEPS=str(warmup)):
        assert mgs.runtime_stats()["sparse_warmup_steps"] == warmup
        model, opt = make(momentum_correction=True, **({} if masking is None else {"momentum_masking": masking}))
        assert opt._mc.masking == (True if masking is None else masking)
        run_steps(model, opt, steps,
                  after_step=lambda s: assert_step(s, ref, model, opt, f"masking from step {first} by hand"))
        assert opt._mc.steps == steps and opt._mc.masks_this_step(), "the step count does not reach the masking"


@pytest.mark.parametrize("weighted", [True, False])
def test_lr_weighting_under_a_decaying_schedule_matches_by_hand(weighted):
    """lr halved every step (LambdaLR; powers of two keep every sum exact): with learning-rate weighting
    (the default) the residual accumulates (lr / initial lr) * u and the averages are applied at the
    initial lr, bit for bit the by-hand reference; without it, DGC's rule (each step's lr on what it
    sends). The two differ, and the scheduler's lr is the group's again after every step."""
    steps, density = 4, 0.01
    lrs = [LR * 0.5 ** s for s in range(steps)]
    ref = dgc_reference(steps, hvd.size(), int(N * density), lrs=lrs, weighted=weighted)
    other = dgc_reference(steps, hvd.size(), int(N * density), lrs=lrs, weighted=not weighted)
    assert not torch.equal(ref[-1][0], other[-1][0]), "the schedule does not tell the two rules apart"
    with topk_runtime(density):
        model, opt = make(momentum_correction=True, **({} if weighted else {"lr_weighting": False}))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** s)

        def check(s):
            w, b, u, v = ref[s]
            assert torch.equal(model.w.detach().view(-1), w), f"step {s}: W differs from the by-hand rule"
            assert torch.equal(model.b.detach(), b), f"step {s}: the dense bias differs"
            assert torch.equal(residual("w"), v[hvd.rank()]), f"step {s}: the residual differs"
            assert opt.param_groups[0]["lr"] == lrs[s], "step() left the group's lr changed"
            sched.step()
        run_steps(model, opt, steps, after_step=check)
        assert opt.param_groups[0].get("mgs_lr_reference") == (LR if weighted else None)
        with pytest.raises(ValueError, match="lr_weighting=True needs momentum_correction=True"):
            make(momentum_correction=False, momentum_masking=False, lr_weighting=True)


def test_momentum_correction_is_on_by_default_when_sparsifying():
    """momentum_correction='auto' (the default): with a compressor, an SGD with momentum runs DGC, bit for
    bit the by-hand reference with masking; what it cannot run, or a dense job, leaves it off."""
    steps, density = 3, 0.01
    ref = dgc_reference(steps, hvd.size(), int(N * density), masking=True)
    with topk_runtime(density):
        model, opt = make()
        assert opt.momentum_correction is True
        run_steps(model, opt, steps)
        assert torch.equal(model.w.detach().view(-1), ref[-1][0]), "the default is not DGC with masking"
        plain_model, plain = make(momentum_correction=False)
        assert plain.momentum_correction is False
        run_steps(plain_model, plain, steps)
        assert not torch.equal(plain_model.w.detach(), model.w.detach()), "correction off changed nothing"
        for opt_kwargs in ({"momentum": 0}, {"momentum": M, "dampening": 0.5}):  # dampening: refused if asked
            assert make(opt_kwargs)[1].momentum_correction is False
        assert make(sparse=False)[1].momentum_correction is False
        w = Linear()
        adam = hvd.DistributedOptimizer(torch.optim.Adam(w.parameters(), lr=0.1), named_parameters=w.named_parameters())
        assert adam.momentum_correction is False
    assert make()[1].momentum_correction is False  # the suite's runtime: no compressor
    with pytest.raises(ValueError, match="True, False or 'auto'"):
        make(momentum_correction="yes")


def test_momentum_correction_in_process_sets():
    """Each process set sparsifies with its own pipeline: the even and the odd ranks train apart, each
    set's result is DGC by hand over its own ranks, bit for bit, and the residual is kept under the
    set-qualified name. Both sets' buckets count as process-set buckets."""
    steps, density = 3, 0.01
    size, rank = hvd.size(), hvd.rank()
    with topk_runtime(density):
        even = hvd.add_process_set([r for r in range(size) if r % 2 == 0])
        odd = hvd.add_process_set([r for r in range(size) if r % 2 == 1]) if size > 1 else None
        mine = even if rank % 2 == 0 else odd
        before = mgs.runtime_stats()
        ref = dgc_reference(steps, size, int(N * density), ranks=mine.ranks)
        model, opt = make(momentum_correction=True, process_set=mine)

        def check(s):
            w, b, u, v = ref[s]
            assert torch.equal(model.w.detach().view(-1), w), f"step {s}: W differs from DGC by hand in the set"
            assert torch.equal(model.b.detach(), b), f"step {s}: the dense bias differs"
            assert torch.equal(residual("w", mine), v[rank]), f"step {s}: the set's residual is not DGC's v"
        run_steps(model, opt, steps, after_step=check)
        assert residual("w") is None, "a set's gradient left a residual under the global name"
        after = mgs.runtime_stats()
        assert after["set_sparse_buckets"] - before["set_sparse_buckets"] == steps
        assert after["sparse_buckets"] == before["sparse_buckets"], "a set's bucket counted as the global set's"
        hvd.barrier()
        if odd is not None:
            assert hvd.remove_process_set(odd)
        assert hvd.remove_process_set(even)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense-runtime", "topk-density-1"])
@pytest.mark.parametrize("sgd", [
    {"momentum": M},
    {"momentum": M, "nesterov": True},
    {"momentum": M, "weight_decay": 0.5},
    {"momentum": M, "weight_decay": 0.5, "nesterov": True},
], ids=["momentum", "nesterov", "weight-decay", "nesterov-weight-decay"])
def test_momentum_correction_at_density_one_is_sgd_with_momentum(sparse, sgd):
    """Every entry delivered: the update is torch.optim.SGD's on the averaged gradients, bit for bit."""
    steps, size = 3, hvd.size()
    ref = Linear()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR, **sgd)
    for s in range(steps):
        ref_opt.zero_grad()
        gs = [grads(r, s) for r in range(size)]
        ref.w.grad = sum(g[0] for g in gs) / size
        ref.b.grad = sum(g[1] for g in gs) / size
        ref_opt.step()
    with (topk_runtime(1.0) if sparse else contextlib.nullcontext()):
        model, opt = make(sgd, momentum_correction=True)
        run_steps(model, opt, steps)
        if sparse:
            assert residual("w") is not None and residual("w").count_nonzero() == 0
    assert torch.equal(model.w.detach(), ref.w.detach())
    assert torch.equal(model.b.detach(), ref.b.detach())


def test_masking_clears_exactly_the_sent_entries():
    """Sent = the residual became 0 where what was accumulated (velocity + residual before) was not."""
    with topk_runtime(0.01):
        model, opt = make(momentum_correction=True)
        before = torch.zeros(N)
        u = torch.zeros(N)
        for s in range(3):
            gw, gb = grads(hvd.rank(), s)
            u_next = M * u + gw.view(-1)
            acc = u_next + before
            opt.zero_grad()
            model.loss(gw, gb).backward()
            opt.step()
            after = residual("w")
            sent = (after == 0) & (acc != 0)
            assert int(sent.sum()) == int(N * 0.01)  # topk: exactly k entries of this rank
            got = opt._mc.velocity[model.w].view(-1)
            assert torch.equal(got[sent], torch.zeros(int(sent.sum())))
            assert torch.equal(got[~sent], u_next[~sent]), "an entry that was not sent lost its velocity"
            # Conservation: what came in (velocity + residual before) = what was sent + what is kept.
            assert torch.equal(acc[~sent], after[~sent])
            u, before = got.clone(), after


def test_conservation_with_two_backward_passes():
    """backward_passes_per_step=2: the velocity takes the accumulated gradient; every rank's
    (velocity handed + residual before - residual after), summed over ranks, is ranks * the average."""
    size = hvd.size()
    with topk_runtime(0.01):
        model, opt = make(momentum_correction=True, backward_passes_per_step=2)
        u, before = torch.zeros(N), torch.zeros(N)
        for s in range(3):
            opt.zero_grad()
            g_sum = torch.zeros(N)
            for rep in range(2):
                gw, gb = grads(hvd.rank(), s, rep)
                g_sum += gw.view(-1)
                model.loss(gw, gb).backward()
            u_next = M * u + g_sum
            opt.synchronize()
            average = model.w.grad.detach().view(-1).clone()
            after = residual("w")
            sent_here = u_next + before - after
            assert torch.equal(sent_here[after != 0], torch.zeros(int((after != 0).sum())))
            total = sum(hvd.allgather(sent_here.view(1, -1), name=f"dgc.sent.{s}"))
            assert torch.equal(total / size, average)
            with opt.skip_synchronize():
                opt.step()
            u, before = opt._mc.velocity[model.w].view(-1).clone(), after


@pytest.mark.parametrize("bpps", [1, 2])
def test_local_clipping_scales_the_norm_to_max_norm_over_sqrt_ranks(bpps):
    """Each rank's gradients (all of them, summed over the backward passes) are scaled to total norm
    max_norm / sqrt(ranks) when above it (torch's clip_grad_norm_ rule), before the exchange."""
    size, max_norm = hvd.size(), 3.0
    limit = max_norm / math.sqrt(size)
    scaled, expected_w, expected_b = [], torch.zeros(N), torch.zeros(8)
    for r in range(size):
        gw = sum(grads(r, 0, rep)[0] for rep in range(bpps)) if bpps > 1 else grads(r, 0)[0]
        gb = sum(grads(r, 0, rep)[1] for rep in range(bpps)) if bpps > 1 else grads(r, 0)[1]
        if r == 0:  # rank 0's gradient is under the limit: not scaled
            gw, gb = gw / (gw.norm() * 4), gb * 0
        norm = torch.cat([gw.view(-1), gb]).norm()
        coef = min(1.0, float(limit / (norm + 1e-6)))
        scaled.append(coef)
        expected_w += gw.view(-1) * coef
        expected_b += gb * coef
    model, opt = make({"lr": 1.0}, local_clip_norm=max_norm, backward_passes_per_step=bpps)
    w0, b0 = model.w.detach().clone().view(-1), model.b.detach().clone()
    opt.zero_grad()
    for rep in range(bpps):
        gw, gb = grads(hvd.rank(), 0, rep) if bpps > 1 else grads(hvd.rank(), 0)
        if hvd.rank() == 0:
            full = sum(grads(0, 0, q)[0] for q in range(bpps)) if bpps > 1 else grads(0, 0)[0]
            gw, gb = gw / (full.norm() * 4), gb * 0
        model.loss(gw, gb).backward()
    opt.synchronize()
    assert scaled[0] == 1.0 and all(c < 1.0 for c in scaled[1:])
    torch.testing.assert_close(model.w.grad.view(-1), expected_w / size, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(model.b.grad, expected_b / size, rtol=1e-6, atol=1e-7)
    with opt.skip_synchronize():
        opt.step()
    torch.testing.assert_close(model.w.detach().view(-1), w0 - expected_w / size, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(model.b.detach(), b0 - expected_b / size, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("optimizer", [
    lambda ps: torch.optim.Adam(ps, lr=0.1),
    lambda ps: torch.optim.RMSprop(ps, lr=0.1, momentum=0.9),
])
def test_momentum_correction_refuses_other_optimizers(optimizer):
    model = Linear()
    opt = optimizer(model.parameters())
    with pytest.raises(ValueError, match=type(opt).__name__):
        hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), momentum_correction=True)


def test_momentum_correction_refuses_what_it_cannot_compute():
    model = Linear()
    with pytest.raises(ValueError, match="dampening"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, dampening=0.1),
                                 momentum_correction=True)
    for masking in (True, "after_warmup"):
        with pytest.raises(ValueError, match=f"momentum_masking={masking!r} needs momentum_correction"):
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                     momentum_correction=False, momentum_masking=masking)
    with pytest.raises(ValueError, match="momentum_masking must be None, True, False or 'after_warmup', got 'warmup'"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), momentum_correction=True,
                                 momentum_masking="warmup")
    with pytest.raises(ValueError, match="local_clip_norm"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), local_clip_norm=0)


def test_velocity_is_saved_and_restored_per_rank():
    """The velocity and the step count (where masking stands against the warm-up) go into the "mgs"
    entry and come back; a count that is not one is refused naming the rank; a checkpoint saved without
    a count (before it was saved) resumes as past the warm-up: masking every step, as it did."""
    from mgs.torch import _dgc
    model, opt = make(momentum_correction=True)
    run_steps(model, opt, 2)
    state = opt.state_dict()
    u = state["mgs"]["velocities"]["w"]
    assert torch.equal(u, opt._mc.velocity[model.w])
    assert state["mgs"]["momentum_correction_steps"] == 2
    model2, opt2 = make(momentum_correction=True)
    opt2.load_state_dict(state)
    assert torch.equal(opt2._mc.velocity[model2.w], u)
    assert opt2._mc.steps == 2
    for bad in (-1, 2.5, "2"):
        state["mgs"]["momentum_correction_steps"] = bad
        with pytest.raises(ValueError, match=f"rank {hvd.rank()}.*'momentum_correction_steps' is {bad!r}"):
            make(momentum_correction=True)[1].load_state_dict(state)
    del state["mgs"]["momentum_correction_steps"]
    opt3 = make(momentum_correction=True)[1]
    opt3.load_state_dict(state)
    assert opt3._mc.steps == _dgc.STEPS_UNKNOWN


def test_finite_check_sees_every_kind_of_entry():
    """finish() keeps the old velocity on a non-finite result: its one-pass check must agree with
    torch.isfinite(...).all(), including a float32 sum that overflows with every entry finite."""
    from mgs.torch import _dgc
    big = torch.full((8,), 3e38)  # finite entries whose float32 sum is inf
    assert _dgc._finite(big)
    for bad in (float("inf"), float("-inf"), float("nan")):
        t = torch.zeros(10000)
        t[7777] = bad
        assert not _dgc._finite(t)
    assert _dgc._finite(torch.zeros(0))
    assert _dgc._finite(torch.arange(100, dtype=torch.float16))


def test_zero_finding_matches_torch():
    """The sent entries are found as the residual's zeros: the sampled all-zero check and the index
    search agree with torch on tensors above and below the sampling size, zeros between the samples."""
    from mgs.torch import _dgc
    g = torch.Generator().manual_seed(5)
    for n in (1, 4096, 4097, 1 << 20):
        t = torch.randn(n, generator=g)
        idx = torch.randperm(n, generator=g)[:max(1, n // 1000)]
        t[idx] = 0
        assert torch.equal(_dgc._zeros(t), torch.nonzero(t == 0).view(-1))
        assert _dgc._all_zero(t) == (n == 1)
        z = torch.zeros(n)
        assert _dgc._all_zero(z)
        assert _dgc._zeros(z).numel() == n
        if n > 1:
            z[n - 1 if (n - 1) % 1024 else n - 2] = 1.0  # off the sampled stride
            assert not _dgc._all_zero(z)
