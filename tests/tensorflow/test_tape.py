"""DistributedGradientTape: dense gradients are the average of the per-rank gradients; with a
selector (MGS_COMPRESSOR) they equal the average of what every rank actually sent, rebuilt from
the runtime's error-feedback residuals (sent = grad + residual_before - residual_after)."""

import ctypes

import numpy as np
import pytest
import tensorflow as tf

import mgs.tensorflow as hvd
from mgs._lib import lib
from mgs.tensorflow.gradient_tape import _source_name

from conftest import COMPRESSOR

dense_only = pytest.mark.skipif(COMPRESSOR != "none", reason="exact gradients need MGS_COMPRESSOR=none")
sparse_only = pytest.mark.skipif(COMPRESSOR == "none", reason="needs a selector (MGS_COMPRESSOR)")


def make_vars(n_in=64, n_hidden=96, n_out=10, seed=7):
    g = np.random.default_rng(seed)
    return [tf.Variable(g.normal(0, 0.1, (n_in, n_hidden)).astype(np.float32), name="w1"),
            tf.Variable(np.zeros(n_hidden, np.float32), name="b1"),
            tf.Variable(g.normal(0, 0.1, (n_hidden, n_out)).astype(np.float32), name="w2"),
            tf.Variable(np.zeros(n_out, np.float32), name="b2")]


def batch(r, step=0, n=8, n_in=64, n_out=10):
    g = np.random.default_rng(100 * r + step)
    return (tf.constant(g.normal(0, 1, (n, n_in)).astype(np.float32)),
            tf.constant(g.integers(0, n_out, n).astype(np.int64)))


def loss_of(variables, x, y):
    w1, b1, w2, b2 = variables
    logits = tf.nn.relu(x @ w1 + b1) @ w2 + b2
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))


def local_grads(variables, x, y):
    with tf.GradientTape() as tape:
        loss = loss_of(variables, x, y)
    return [g.numpy() for g in tape.gradient(loss, variables)]


def distributed_grads(variables, x, y, op=hvd.Average, name=None):
    with tf.GradientTape() as tape:
        loss = loss_of(variables, x, y)
    tape = hvd.DistributedGradientTape(tape, op=op, name=name)
    return tape.gradient(loss, variables)


@dense_only
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("op", ["average", "sum"])
def test_dense_gradients_are_the_average_of_per_rank_gradients(mode, op, rank, size):
    variables = make_vars()
    hop = hvd.Average if op == "average" else hvd.Sum
    fn = distributed_grads if mode == "eager" else tf.function(distributed_grads)
    for step in range(2):
        got = fn(variables, *batch(rank, step), op=hop, name=f"dense.{mode}.{op}")
        per_rank = [local_grads(variables, *batch(r, step)) for r in range(size)]
        for i, g in enumerate(got):
            expected = sum(p[i] for p in per_rank) / (size if op == "average" else 1)
            np.testing.assert_allclose(g.numpy(), expected, rtol=1e-5, atol=1e-6)


@dense_only
def test_indexed_slices_gradients_are_gathered(rank, size):
    table = tf.Variable(np.arange(20, dtype=np.float32).reshape(10, 2))

    def grads(r):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(table, [r % 10, (r + 3) % 10]) * float(r + 1))
        return tape, loss
    tape, loss = grads(rank)
    got = hvd.DistributedGradientTape(tape, name="slices").gradient(loss, [table])[0]
    assert isinstance(got, tf.IndexedSlices)
    expected = np.zeros((10, 2), np.float32)
    for r in range(size):
        t, l = grads(r)
        expected += tf.convert_to_tensor(t.gradient(l, [table])[0]).numpy() / size
    np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(), expected, rtol=1e-6)


def _residual(name, n):
    """This rank's residual of gradient `name` (zeros before the tensor was first sparsified)."""
    L = lib()
    fn = L.cdll.mgs_residual_copy
    fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t]
    out = np.zeros(n, np.float32)
    status = fn(name.encode(), out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n)
    if status == L.code("MGS_ERR_INVALID_ARGUMENT"):
        return np.zeros(n, np.float32)
    L.check(status)
    return out


@sparse_only
@pytest.mark.parametrize("mode", ["eager", "function"])
def test_sparse_gradients_equal_the_reference_from_the_selected_pairs(mode, rank, size):
    """Average of every rank's sent vector (gradient + residual before - residual after), step by step."""
    variables = make_vars(n_in=128, n_hidden=128)  # 16k-element kernel: above MGS_MIN_SPARSE_ELEMENTS
    tape_name = f"sparse.{mode}"
    names = [f"allreduce.grad.{tape_name}.{_source_name(i, v)}" for i, v in enumerate(variables)]
    fn = distributed_grads if mode == "eager" else tf.function(distributed_grads)
    sparsified = 0
    for step in range(8):
        x, y = batch(rank, step, n_in=128)
        grads = local_grads(variables, x, y)
        before = [_residual(n, g.size) for n, g in zip(names, grads)]
        got = fn(variables, x, y, name=tape_name)
        after = [_residual(n, g.size) for n, g in zip(names, grads)]
        sent = [(g.ravel() + b - a).reshape(g.shape) for g, b, a in zip(grads, before, after)]
        # The reference: an exact average (no sparse flag) of what every rank sent.
        reference = hvd.grouped_allreduce([tf.constant(s) for s in sent], op=hvd.Average, name=f"ref.{mode}")
        for g, ref in zip(got, reference):
            np.testing.assert_allclose(g.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
        kernel_sent = np.count_nonzero(sent[0])
        if kernel_sent < sent[0].size // 2:
            sparsified += 1
        # Apply the update so the gradients change from step to step.
        for v, g in zip(variables, got):
            v.assign_sub(0.1 * g)
    assert sparsified > 0, "the 16k-element kernel was never sparsified"
