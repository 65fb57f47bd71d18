"""Collectives of mgs.tensorflow, eagerly and inside tf.function, against numpy references."""

import numpy as np
import pytest
import tensorflow as tf

import mgs.tensorflow as hvd
from mgs._lib import MgsRuntimeError

MODES = ["eager", "function"]


def run(mode, fn, *args):
    """fn(*args) eagerly, or traced into a fresh tf.function (one py_function per collective)."""
    if mode == "eager":
        return fn(*args)
    return tf.function(fn, autograph=False)(*args)


def rank_tensor(r, shape, dtype):
    """A tensor that differs per rank, exactly representable in every tested dtype."""
    base = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) % 7 - 3
    return (base * (r + 1) + r).astype(dtype)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("op", ["sum", "average"])
def test_allreduce(mode, dtype, op, rank, size):
    shape = (3, 5)
    expected_sum = sum(rank_tensor(r, shape, np.float64) for r in range(size))
    name = f"ar.{mode}.{np.dtype(dtype).name}.{op}"
    hop = hvd.Sum if op == "sum" else hvd.Average
    out = run(mode, lambda t: hvd.allreduce(t, op=hop, name=name), tf.constant(rank_tensor(rank, shape, dtype)))
    assert out.dtype == tf.as_dtype(dtype) and tuple(out.shape) == shape
    if op == "sum":
        expected = expected_sum
    elif np.issubdtype(dtype, np.integer):
        expected = np.trunc(expected_sum / size)  # integers: scaled in double, rounded toward zero
    else:
        expected = expected_sum / size
    np.testing.assert_allclose(out.numpy(), expected.astype(dtype), rtol=1e-6)


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16, tf.int64, tf.uint8])
def test_allreduce_other_dtypes(dtype, rank, size):
    out = hvd.allreduce(tf.cast(tf.fill([2, 3], rank + 1), dtype), op=hvd.Sum, name=f"ar.other.{dtype.name}")
    assert out.dtype == dtype
    np.testing.assert_array_equal(tf.cast(out, tf.float64).numpy(), np.full((2, 3), size * (size + 1) / 2))


@pytest.mark.parametrize("mode", MODES)
def test_allreduce_scalar_unnamed_and_scaled(mode, rank, size):
    out = run(mode, lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5),
              tf.constant(float(rank + 1)))
    assert out.shape == () and out.numpy() == pytest.approx(size * (size + 1) / 2)


def test_grouped_allreduce(rank, size):
    outs = hvd.grouped_allreduce([tf.fill([4], float(rank)), tf.fill([2, 2], rank)], op=hvd.Sum, name="grp")
    total = size * (size - 1) // 2
    assert outs[0].numpy().tolist() == [float(total)] * 4
    assert outs[1].numpy().tolist() == [[total] * 2] * 2


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_allgather_per_rank_sizes(mode, dtype, rank, size):
    rows = lambda r: r % 3  # noqa: E731 - rank 0 (and every third) contributes no rows
    mine = (np.full((rows(rank), 3), rank + 1)).astype(dtype)
    out = run(mode, lambda t: hvd.allgather(t, name=f"ag.{mode}.{np.dtype(dtype).name}"), tf.constant(mine))
    expected = np.concatenate([np.full((rows(r), 3), r + 1).astype(dtype) for r in range(size)])
    assert out.dtype == tf.as_dtype(dtype)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_allgather_1d(rank, size):
    out = hvd.allgather(tf.range(rank + 1, dtype=tf.float64), name="ag.1d")
    np.testing.assert_array_equal(out.numpy(), np.concatenate([np.arange(r + 1) for r in range(size)]))


@pytest.mark.parametrize("mode", MODES)
def test_broadcast(mode, rank, size):
    root = size - 1
    for dtype in (np.float32, np.int32, np.uint8, np.bool_):
        mine = (np.arange(6).reshape(2, 3) * (rank + 1) % 2).astype(dtype)
        out = run(mode, lambda t: hvd.broadcast(t, root, name=f"bc.{mode}.{np.dtype(dtype).name}"),
                  tf.constant(mine))
        np.testing.assert_array_equal(out.numpy(), (np.arange(6).reshape(2, 3) * size % 2).astype(dtype))


def test_mismatched_shapes_fail_on_every_rank(rank, size):
    with pytest.raises(MgsRuntimeError, match="(?i)shape|mismatch"):
        hvd.allreduce(tf.ones([rank + 1]), name="mismatch.eager")
    with pytest.raises(tf.errors.OpError, match="(?i)shape|mismatch"):
        tf.function(lambda t: hvd.allreduce(t, name="mismatch.function"))(tf.ones([2, rank + 1]))
    # The runtime keeps working after a failed op.
    assert hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="after.mismatch").numpy().tolist() == [size, size]


@pytest.mark.parametrize("mode", MODES)
def test_indexed_slices_go_through_allgather(mode, rank, size):
    def fn():
        slices = tf.IndexedSlices(tf.fill([2, 3], float(rank + 1)), tf.constant([rank, rank + 1], tf.int64),
                                  dense_shape=tf.constant([size + 1, 3], tf.int64))
        out = hvd.allreduce(slices, op=hvd.Average, name=f"slices.{mode}")
        return out.values, out.indices
    values, indices = run(mode, fn)
    assert indices.numpy().tolist() == [i for r in range(size) for i in (r, r + 1)]
    np.testing.assert_allclose(values.numpy(), np.repeat([(r + 1) / size for r in range(size)], 2)[:, None]
                               * np.ones((1, 3)))


def test_broadcast_variables_and_object(rank, size):
    a = tf.Variable(tf.fill([3, 2], float(rank)))
    b = tf.Variable(rank, dtype=tf.int64)
    hvd.broadcast_variables([a, b], root_rank=1 % size)
    assert a.numpy().tolist() == [[float(1 % size)] * 2] * 3 and int(b.numpy()) == 1 % size

    c = tf.Variable(tf.fill([4], float(rank)))
    @tf.function
    def in_graph():
        hvd.broadcast_variables([c], root_rank=0, prefix="fn")
    in_graph()
    assert c.numpy().tolist() == [0.0] * 4

    obj = {"rank": rank, "payload": list(range(rank * 10))}
    got = hvd.broadcast_object(obj, root_rank=size - 1, name="obj")
    assert got == {"rank": size - 1, "payload": list(range((size - 1) * 10))}
    assert hvd.allgather_object(rank * "x", name="objs") == [r * "x" for r in range(size)]


def test_keras_callback_broadcasts_initial_weights(rank, size):
    tf.random.set_seed(1000 + rank)  # different initial weights on every rank
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3)])
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.0), loss="mse")
    x, y = np.ones((8, 4), np.float32) * rank, np.zeros((8, 3), np.float32)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[hvd.BroadcastGlobalVariablesCallback(0)])
    kernel = model.layers[0].kernel
    gathered = hvd.allgather(tf.reshape(kernel, [1, -1]), name="keras.kernels").numpy()
    for r in range(size):
        np.testing.assert_array_equal(gathered[r], gathered[0])


def test_topology(rank, size):
    assert 0 <= rank < size and 0 <= hvd.local_rank() < hvd.local_size() <= size
    assert hvd.is_initialized() and hvd.mpi_built()
