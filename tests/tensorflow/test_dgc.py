"""DGC's techniques in the Keras DistributedOptimizer: momentum correction, masking, local clipping.

As tests/python/test_dgc.py for torch: one sparsified weight W (4096 elements, MGS_MIN_SPARSE_ELEMENTS)
and one dense bias b, gradients given directly to apply(), every value a small dyadic rational and
momentum, learning rate and 1/ranks powers of two, so every sum is exact in float32 whatever its order:
the result must equal DGC computed by hand, bit for bit, on 2 or 4 ranks. Each rank computes every
rank's gradients from seeds, so the reference needs no collective.
"""

import numpy as np
import pytest
import tensorflow as tf

import mgs.tensorflow as hvd
import mgs.tensorflow.keras as hvd_keras
from test_checkpoint import sparse_runtime

keras = tf.keras
N = 4096
LR, M = 0.25, 0.5


def dyadic(g, n):
    """n values +-k/64 with distinct k in 1..n (distinct magnitudes, exact in float32)."""
    k = (g.permutation(n) + 1).astype(np.float32) / 64
    return np.where(g.random(n) < 0.5, -k, k).astype(np.float32)


def grads(rank, step):
    g = np.random.default_rng(1000 * step + 10 * rank)
    return dyadic(g, N).reshape(64, 64), dyadic(g, 8)


def initial():
    g = np.random.default_rng(7)
    return dyadic(g, N).reshape(64, 64), dyadic(g, 8)


def dgc_reference(steps, size, k, masking=True, nesterov=False, lrs=None, weighted=True, first_masked=0):
    """DGC by hand (per rank u = m*u + g, v += u, send v's top k (`k`: one for every step or a list of
    each step's), clear v and (masking, from step `first_masked` on) u there;
    W -= lr * mean of what was sent; the bias dense: u = m*u + g, all of u sent). W, b, this rank's u
    after every step. Nesterov: u = m*(u + g), u + g handed. `lrs`: each step's learning rate (default
    LR throughout); with `weighted` (learning-rate weighting) what is handed is (lr_s / lrs[0]) times
    the above and the averages are applied at lrs[0], else at lr_s."""
    lrs = [LR] * steps if lrs is None else lrs
    w0, b0 = initial()
    w, b = w0.reshape(-1).copy(), b0.copy()
    u = [np.zeros(N, np.float32) for _ in range(size)]
    v = [np.zeros(N, np.float32) for _ in range(size)]
    ub = [np.zeros(8, np.float32) for _ in range(size)]
    out = []
    for s in range(steps):
        k_s = k[s] if isinstance(k, list) else k
        f = np.float32(lrs[s] / lrs[0] if weighted else 1.0)
        lr = np.float32(lrs[0] if weighted else lrs[s])
        total, total_b = np.zeros(N, np.float32), np.zeros(8, np.float32)
        for r in range(size):
            gw, gb = grads(r, s)
            gw = gw.reshape(-1)
            if nesterov:
                u[r] = np.float32(M) * (u[r] + gw)
                send = u[r] + gw
                ubn = np.float32(M) * (ub[r] + gb)
                total_b += f * (ubn + gb)
                ub[r] = ubn
            else:
                u[r] = np.float32(M) * u[r] + gw
                send = u[r]
                ub[r] = np.float32(M) * ub[r] + gb
                total_b += f * ub[r]
            v[r] = v[r] + f * send
            mags = np.sort(np.abs(v[r]))[::-1]
            assert mags[k_s - 1] > mags[k_s], "a tie at the k-th entry: choose other values"
            idx = np.argsort(-np.abs(v[r]), kind="stable")[:k_s]
            total[idx] += v[r][idx]
            v[r][idx] = 0
            if masking and s >= first_masked:
                u[r][idx] = 0
        w = w - lr * (total / np.float32(size))
        b = b - lr * (total_b / np.float32(size))
        out.append((w.copy(), b.copy(), [x.copy() for x in u]))
    return out


def make(**dist):
    w0, b0 = initial()
    variables = [tf.Variable(w0, name="w"), tf.Variable(b0, name="b")]
    sgd = keras.optimizers.SGD(learning_rate=dist.pop("learning_rate", LR), momentum=M,
                               nesterov=dist.pop("nesterov", False))
    return variables, hvd_keras.DistributedOptimizer(sgd, **dist)


def assert_step(s, ref, variables, opt, rule):
    """W, b and this rank's velocity after step s are bit for bit ref[s] (`rule` names the reference)."""
    w, b, u = ref[s]
    assert np.array_equal(variables[0].numpy().reshape(-1), w), f"step {s}: W differs from {rule}"
    assert np.array_equal(variables[1].numpy(), b), f"step {s}: the dense bias differs"
    got_u = opt._mgs_dgc[0].velocity(0).numpy().reshape(-1)
    assert np.array_equal(got_u, u[hvd.rank()]), f"step {s}: the velocity differs"


@pytest.mark.parametrize("masking,nesterov,graph", [(True, False, False), (False, False, False),
                                                    (True, False, True), (True, True, False)])
def test_momentum_correction_matches_dgc_by_hand(masking, nesterov, graph):
    steps, density = 4, 0.01
    ref = dgc_reference(steps, hvd.size(), int(N * density), masking, nesterov)
    with sparse_runtime(MGS_EXCHANGE="allgather"):
        variables, opt = make(momentum_correction=True, momentum_masking=masking, nesterov=nesterov)

        def apply(gw, gb):
            opt.apply([tf.convert_to_tensor(gw), tf.convert_to_tensor(gb)], variables)
        step = tf.function(apply) if graph else apply
        for s in range(steps):
            step(*grads(hvd.rank(), s))
            assert_step(s, ref, variables, opt, "DGC by hand")


@pytest.mark.parametrize("masking,graph", [(None, False), ("after_warmup", False), ("after_warmup", True)])
def test_masking_every_step_or_after_the_density_warmup(masking, graph):
    """MGS_WARMUP_STEPS=3 at density 0.01: steps 0 to 2 select 1295, 409 and 129 entries of 4096, then
    40 (the runtime's warm-up, as tests/python/test_dgc.py computes it; 3 steps because 2 give these
    gradients a tie at the k-th entry). By default every step masks (DGC's rule); with "after_warmup"
    the sent entries keep their velocity in the warm-up steps, eagerly and in a tf.function. Bit for bit
    the by-hand reference; the two rules differ."""
    steps, density, warmup = 5, 0.01, 3
    c = density ** (1.0 / (warmup + 1))
    ks = [int(np.floor((max(c ** (s + 1), density) if s < warmup else density) * N)) for s in range(steps)]
    assert ks == [1295, 409, 129, 40, 40]
    first = warmup if masking == "after_warmup" else 0
    ref = dgc_reference(steps, hvd.size(), ks, first_masked=first)
    other = dgc_reference(steps, hvd.size(), ks, first_masked=warmup - first)
    assert not np.array_equal(ref[-1][0], other[-1][0]), "the warm-up does not tell the two rules apart"
    with sparse_runtime(MGS_EXCHANGE="allgather", MGS_DENSITY="0.01", MGS_WARMUP_STEPS=str(warmup)):
        variables, opt = make(momentum_correction=True, **({} if masking is None else {"momentum_masking": masking}))

        def apply(gw, gb):
            opt.apply([tf.convert_to_tensor(gw), tf.convert_to_tensor(gb)], variables)
        step = tf.function(apply) if graph else apply
        for s in range(steps):
            step(*grads(hvd.rank(), s))
            assert_step(s, ref, variables, opt, f"masking from step {first} by hand")
        counter = opt._mgs_dgc[0]._steps  # made only for "after_warmup": other checkpoints keep their variables
        assert (None if counter is None else int(counter.numpy())) == (steps if masking else None)


@pytest.mark.parametrize("weighted,how", [(True, "assign"), (False, "assign"), (True, "schedule")])
def test_lr_weighting_under_a_decaying_rate_matches_by_hand(weighted, how):
    """The learning rate halved every step (powers of two keep every sum exact), assigned between steps
    as Keras's callbacks do, or by a LearningRateSchedule inside tf.function: with learning-rate
    weighting (the default) the residual accumulates (lr / first lr) * u and the momentum-corrected
    averages are applied at the first lr, bit for bit the by-hand reference; without it, DGC's rule
    (each step's lr on what it sends). The two rules differ, and the optimizer's rate is left as set."""
    steps, density = 4, 0.01
    lrs = [LR * 0.5 ** s for s in range(steps)]
    ref = dgc_reference(steps, hvd.size(), int(N * density), lrs=lrs, weighted=weighted)
    other = dgc_reference(steps, hvd.size(), int(N * density), lrs=lrs, weighted=not weighted)
    assert not np.array_equal(ref[-1][0], other[-1][0]), "the schedule does not tell the two rules apart"
    with sparse_runtime(MGS_EXCHANGE="allgather"):
        rate = LR if how == "assign" else keras.optimizers.schedules.ExponentialDecay(LR, 1, 0.5, staircase=True)
        variables, opt = make(learning_rate=rate, momentum_correction=True,
                              **({} if weighted else {"lr_weighting": False}))

        def apply(gw, gb):
            opt.apply([tf.convert_to_tensor(gw), tf.convert_to_tensor(gb)], variables)
        step = tf.function(apply) if how == "schedule" else apply
        for s in range(steps):
            if how == "assign":
                opt.learning_rate = lrs[s]
            assert float(opt.learning_rate) == lrs[s]
            step(*grads(hvd.rank(), s))
            assert_step(s, ref, variables, opt, "the by-hand rule")
            if how == "assign":
                assert float(opt.learning_rate) == lrs[s], "apply() left the optimizer's rate changed"
        got_ref = opt._mgs_dgc[0].lr_reference()
        assert (got_ref is None) if not weighted else float(got_ref) == LR
    with pytest.raises(ValueError, match="lr_weighting=True needs momentum_correction=True"):
        make(momentum_correction=False, lr_weighting=True)


def test_without_momentum_correction_sgd_keeps_its_momentum():
    """The switch off: the wrapped SGD keeps its own momentum (no velocity variables of mgs)."""
    variables, opt = make(momentum_correction=False)
    assert opt._mgs_dgc == (None, None) and opt.get_config()["momentum"] == M
    assert opt.momentum_correction is False


def test_momentum_correction_is_on_by_default_when_sparsifying():
    """momentum_correction='auto' (the default): with a compressor, a Keras SGD with momentum runs DGC with
    masking, bit for bit the reference; other optimizers and dense jobs leave it off."""
    steps, density = 3, 0.01
    ref = dgc_reference(steps, hvd.size(), int(N * density), True, False)
    with sparse_runtime(MGS_EXCHANGE="allgather"):
        variables, opt = make()
        assert opt.momentum_correction is True and opt.get_config()["momentum"] == 0
        for s in range(steps):
            gw, gb = grads(hvd.rank(), s)
            opt.apply([tf.convert_to_tensor(gw), tf.convert_to_tensor(gb)], variables)
        assert np.array_equal(variables[0].numpy().reshape(-1), ref[-1][0]), "the default is not DGC with masking"
        assert hvd_keras.DistributedOptimizer(keras.optimizers.Adam()).momentum_correction is False
    with sparse_runtime(MGS_COMPRESSOR="none"):
        assert make()[1].momentum_correction is False
    with pytest.raises(ValueError, match="True, False or 'auto'"):
        make(momentum_correction="yes")


def test_local_clipping_scales_to_max_norm_over_sqrt_ranks():
    size = hvd.size()
    variables = [tf.Variable(np.zeros((64, 64), np.float32)), tf.Variable(np.zeros(8, np.float32))]
    gw, gb = grads(hvd.rank(), 0)
    with sparse_runtime(MGS_COMPRESSOR="none"):  # dense: every clipped entry is applied at once
        opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0), local_clip_norm=1.0)
        opt.apply([tf.constant(gw), tf.constant(gb)], variables)
    # Every rank clipped to norm 1/sqrt(P), then the average was applied with lr 1.
    want = 0
    for r in range(size):
        gwr, gbr = grads(r, 0)
        norm = np.sqrt(np.sum(gwr.astype(np.float64) ** 2) + np.sum(gbr.astype(np.float64) ** 2))
        want = want + gwr.astype(np.float64) * min(1.0, (1.0 / np.sqrt(size)) / norm)
    np.testing.assert_allclose(-variables[0].numpy(), want / size, rtol=1e-5, atol=1e-9)


def test_momentum_correction_refuses_other_optimizers():
    with pytest.raises(ValueError, match="Adam"):
        hvd_keras.DistributedOptimizer(keras.optimizers.Adam(), momentum_correction=True)
    for masking in (True, "after_warmup"):
        with pytest.raises(ValueError, match=f"momentum_masking={masking!r} needs momentum_correction"):
            hvd_keras.DistributedOptimizer(keras.optimizers.SGD(momentum=0.9), momentum_correction=False,
                                           momentum_masking=masking)
    with pytest.raises(ValueError, match="momentum_masking must be None, True, False or 'after_warmup'"):
        hvd_keras.DistributedOptimizer(keras.optimizers.SGD(momentum=0.9), momentum_correction=True,
                                       momentum_masking="sometimes")
    with pytest.raises(ValueError, match="local_clip_norm"):
        hvd_keras.DistributedOptimizer(keras.optimizers.SGD(), local_clip_norm=0)
