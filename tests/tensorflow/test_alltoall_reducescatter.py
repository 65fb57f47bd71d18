"""alltoall, reducescatter, grouped_reducescatter and grouped_allgather of mgs.tensorflow, eagerly and
inside tf.function: results and received splits against what every rank sent (rebuilt here from
the same formulas), gradients against their closed forms (Horovod's definitions), and the errors:
on every rank, naming the tensor, never a hang (also when only one rank's splits are wrong)."""

import numpy as np
import pytest
import tensorflow as tf

import mgs.tensorflow as hvd
from mgs._lib import MgsRuntimeError

MODES = ["eager", "function"]


def run(mode, fn, *args):
    """fn(*args) eagerly, or traced into a fresh tf.function."""
    if mode == "eager":
        return fn(*args)
    return tf.function(fn, autograph=False)(*args)


def rows_sent(r, size):
    """Rank r sends (r + q) % 3 rows to rank q (rank 0 sends none to itself)."""
    return [(r + q) % 3 for q in range(size)]


def block(r, q, k):
    """The k rows rank r sends to rank q: [r, q, i] for i < k."""
    return [[r, q, i] for i in range(k)]


def sent_by(r, size):
    return [row for q, k in enumerate(rows_sent(r, size)) for row in block(r, q, k)]


# ------------------------------------------------------------------ alltoall --

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.bfloat16, tf.int32, tf.int64, tf.uint8, tf.int8,
                                   tf.int16, tf.bool])
def test_alltoall_with_splits(mode, dtype, rank, size):
    mine = np.array(sent_by(rank, size), np.int64).reshape(-1, 3)
    x = tf.cast(tf.constant(mine), dtype) if dtype != tf.bool else tf.constant(mine % 2 == 1)
    splits = rows_sent(rank, size)
    out, received = run(mode, lambda t: hvd.alltoall(t, tf.constant(splits, tf.int64), name=f"a2a.{mode}.{dtype.name}"),
                        x)
    assert out.dtype == dtype and received.dtype == tf.int32
    assert received.numpy().tolist() == [rows_sent(s, size)[rank] for s in range(size)]
    expected = np.array([row for s in range(size) for row in block(s, rank, rows_sent(s, size)[rank])],
                        np.int64).reshape(-1, 3)
    want = expected % 2 == 1 if dtype == tf.bool else expected
    np.testing.assert_array_equal(tf.cast(out, tf.int64).numpy() if dtype != tf.bool else out.numpy(), want)


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_equal_parts_returns_the_tensor_alone(mode, rank, size):
    x = tf.cast(tf.range(2 * size) + 100 * rank, tf.int16)  # 1-D, a dtype the runtime cannot reduce: sent as bytes
    out = run(mode, lambda t: hvd.alltoall(t, name=f"a2a.equal.{mode}"), x)
    assert isinstance(out, tf.Tensor) and out.dtype == tf.int16
    assert out.numpy().tolist() == [100 * s + 2 * rank + i for s in range(size) for i in range(2)]
    # Python list splits; a 3-D tensor with an empty part.
    y = tf.fill([size, 2, 2], float(rank))
    got, received = hvd.alltoall(y, splits=[size] + [0] * (size - 1), name="a2a.list")
    assert received.numpy().tolist() == ([size] * size if rank == 0 else [0] * size)
    assert got.shape == ((size * size, 2, 2) if rank == 0 else (0, 2, 2))
    if rank == 0:
        np.testing.assert_array_equal(got.numpy()[:, 0, 0], np.repeat(np.arange(size, dtype=np.float32), size))


@pytest.mark.parametrize("mode", MODES)
def test_alltoall_gradient_is_the_alltoall_back(mode, rank, size):
    """d(sum(out_q * w_q))/d(x_r row) is the weight the receiver q gave that row."""
    splits = rows_sent(rank, size)
    x = tf.Variable(tf.cast(tf.reshape(tf.range(sum(splits) * 2), [-1, 2]), tf.float32))

    def weights(q, n_rows):
        return np.arange(n_rows * 2, dtype=np.float32).reshape(n_rows, 2) + 1000 * q

    w = tf.constant(weights(rank, sum(rows_sent(s, size)[rank] for s in range(size))))

    def grad():
        with tf.GradientTape() as tape:
            out, received = hvd.alltoall(x, splits, name=f"a2a.grad.{mode}")
            loss = tf.reduce_sum(out * w)
        return tape.gradient(loss, x), received
    g, received = tf.function(grad)() if mode == "function" else grad()
    expected = []
    for q in range(size):
        first = sum(rows_sent(s, size)[q] for s in range(rank))  # my rows' position in q's output
        n_q = sum(rows_sent(s, size)[q] for s in range(size))
        expected.extend(weights(q, n_q)[first:first + splits[q]])
    np.testing.assert_array_equal(g.numpy(), np.array(expected, np.float32).reshape(-1, 2))
    assert received.numpy().tolist() == [rows_sent(s, size)[rank] for s in range(size)]


def test_alltoall_errors_on_every_rank(rank, size):
    with pytest.raises(ValueError, match="not a multiple"):
        hvd.alltoall(tf.ones([size + 1]), name="a2a.err.equal")
    with pytest.raises(ValueError, match="more than the first dimension"):
        hvd.alltoall(tf.ones([size - 1]), tf.ones([size], tf.int32), name="a2a.err.sum")
    with pytest.raises(ValueError, match="integers"):
        hvd.alltoall(tf.ones([size]), tf.ones([size]), name="a2a.err.type")
    with pytest.raises(ValueError, match="one split per rank"):
        hvd.alltoall(tf.ones([size]), [1] * (size + 1), name="a2a.err.count")
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.alltoall(tf.constant(1.0), name="a2a.err.scalar")
    # Ranks disagree: every rank fails, naming the tensor.
    with pytest.raises(MgsRuntimeError, match="alltoall.a2a.err.dtype.*dtype"):
        hvd.alltoall(tf.ones([size], tf.int32 if rank % 2 else tf.float32), name="a2a.err.dtype")
    with pytest.raises(MgsRuntimeError, match="a2a.err.shape"):
        hvd.alltoall(tf.ones([2 * size, 3 + rank]), name="a2a.err.shape")
    with pytest.raises(tf.errors.OpError, match="a2a.err.fn"):
        tf.function(lambda t: hvd.alltoall(t, name="a2a.err.fn"))(tf.ones([size, 1 + rank]))
    # The runtime keeps working.
    assert hvd.alltoall(tf.fill([size], rank), name="a2a.after").numpy().tolist() == list(range(size))


@pytest.mark.parametrize("mode", MODES)
def test_one_rank_with_bad_splits_fails_every_rank(mode, rank, size):
    """Only the last rank's splits overrun its tensor: it raises that, the others fail naming the tensor."""
    last = size - 1
    splits = [1] * size if rank != last else [2] + [1] * (size - 1)
    try:
        run(mode, lambda t: hvd.alltoall(t, splits, name=f"a2a.bad.{mode}"), tf.ones([size, 2]))
    except (ValueError, MgsRuntimeError, tf.errors.OpError) as e:
        msg = str(e)
    else:
        msg = None
    assert msg is not None
    if rank == last:
        assert "more than the first dimension" in msg and f"a2a.bad.{mode}" in msg, msg
    else:
        assert f"alltoall.a2a.bad.{mode}" in msg and f"rank {last}" in msg, msg
    assert hvd.alltoall(tf.ones([size]), name=f"a2a.bad.after.{mode}").numpy().tolist() == [1.0] * size


# ------------------------------------------------------------- reducescatter --

def rows_of(d0, size):
    return [d0 // size + (1 if q < d0 % size else 0) for q in range(size)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.int32, tf.int64])
def test_reducescatter_sum_and_average_with_uneven_rows(mode, dtype, rank, size):
    d0 = 2 * size + 1
    full = [np.arange(d0 * 3, dtype=np.float64).reshape(d0, 3) * (r + 1) for r in range(size)]
    total = sum(full)
    rows = rows_of(d0, size)
    lo = sum(rows[:rank])
    mine = tf.cast(tf.constant(full[rank]), dtype)
    summed = run(mode, lambda t: hvd.reducescatter(t, op=hvd.Sum, name=f"rs.sum.{mode}.{dtype.name}"), mine)
    assert summed.dtype == dtype and tuple(summed.shape) == (rows[rank], 3)
    np.testing.assert_array_equal(tf.cast(summed, tf.float64).numpy(), total[lo:lo + rows[rank]])
    averaged = run(mode, lambda t: hvd.reducescatter(t, name=f"rs.avg.{mode}.{dtype.name}"), mine)  # Average
    want = total[lo:lo + rows[rank]] / size
    if dtype.is_integer:
        want = np.trunc(want)
    np.testing.assert_allclose(tf.cast(averaged, tf.float64).numpy(), want, rtol=1e-6)


def test_reducescatter_scale_factors(rank, size):
    x = tf.range(4 * size, dtype=tf.float32) + rank
    out = hvd.reducescatter(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25, name="rs.scaled")
    total = sum(np.arange(4 * size, dtype=np.float32) + r for r in range(size))
    np.testing.assert_allclose(out.numpy(), total[4 * rank:4 * rank + 4] * 0.5)
    avg = hvd.reducescatter(x, op=hvd.Average, postscale_factor=3.0, name="rs.scaled.avg")
    np.testing.assert_allclose(avg.numpy(), total[4 * rank:4 * rank + 4] * 3.0 / size, rtol=1e-6)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter_gradient_is_allgathered(mode, op, rank, size):
    x = tf.Variable(tf.ones([2 * size, 3]))

    def grad():
        with tf.GradientTape() as tape:
            out = hvd.reducescatter(x, op=getattr(hvd, op), prescale_factor=2.0, name=f"rs.grad.{mode}.{op}")
            loss = tf.reduce_sum(out * float(rank + 1))
        return tape.gradient(loss, x)
    g = tf.function(grad)() if mode == "function" else grad()
    # Horovod's definition: the parts' gradients allgathered, times the scale factors and, for Sum, the set's size.
    factor = 2.0 * (size if op == "Sum" else 1)
    expected = np.concatenate([np.full((2, 3), float(r + 1)) for r in range(size)]) * factor
    np.testing.assert_array_equal(g.numpy(), expected)


def test_reducescatter_errors(rank, size):
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.reducescatter(tf.constant(float(rank)), name="rs.err.scalar")
    for bad in (hvd.Adasum, hvd.Min):
        with pytest.raises(RuntimeError, match="op=Sum and op=Average"):
            hvd.reducescatter(tf.ones([size]), op=bad)
    with pytest.raises(TypeError, match="int16"):
        hvd.reducescatter(tf.ones([size], tf.int16), name="rs.err.dtype")
    with pytest.raises(MgsRuntimeError, match="rs.err.shape.*shape"):
        hvd.reducescatter(tf.ones([2 * size + rank, 3]), name="rs.err.shape")
    with pytest.raises(MgsRuntimeError, match="rs.err.type.*dtype"):
        hvd.reducescatter(tf.ones([size], tf.int32 if rank % 2 else tf.float32), name="rs.err.type")


@pytest.mark.parametrize("mode", MODES)
def test_grouped_reducescatter_and_gradients(mode, rank, size):
    xs = [tf.Variable(tf.range(2.0 * size * (i + 1)) * (rank + 1)) for i in range(3)]

    def fn():
        with tf.GradientTape() as tape:
            outs = hvd.grouped_reducescatter(xs, op=hvd.Sum, name=f"grs.{mode}")
            loss = tf.add_n([tf.reduce_sum(o) for o in outs])
        return outs, tape.gradient(loss, xs)
    outs, grads = tf.function(fn)() if mode == "function" else fn()
    scale = sum(r + 1 for r in range(size))
    for i, (o, g) in enumerate(zip(outs, grads)):
        n = 2 * (i + 1)
        np.testing.assert_array_equal(o.numpy(), np.arange(n * rank, n * rank + n, dtype=np.float32) * scale)
        np.testing.assert_array_equal(g.numpy(), np.full(2 * size * (i + 1), float(size)))
    averaged = hvd.grouped_reducescatter([tf.ones([size, 2]) * rank], name="grs.avg")
    np.testing.assert_allclose(averaged[0].numpy(), np.full((1, 2), (size - 1) / 2))


# ---------------------------------------------------------- grouped_allgather --

@pytest.mark.parametrize("mode", MODES)
def test_grouped_allgather_and_gradients(mode, rank, size):
    xs = [tf.Variable(tf.fill([rank + 1, 2], float(rank + i))) for i in range(3)]

    def fn():
        with tf.GradientTape() as tape:
            outs = hvd.grouped_allgather(xs, name=f"gag.{mode}")
            loss = tf.add_n([tf.reduce_sum(o * float(rank + 1)) for o in outs])
        return outs, tape.gradient(loss, xs)
    outs, grads = tf.function(fn)() if mode == "function" else fn()
    for i, o in enumerate(outs):
        assert o.numpy().tolist() == [[float(r + i)] * 2 for r in range(size) for _ in range(r + 1)]
    mean = sum(r + 1 for r in range(size)) / size  # averaged over the ranks, as in Horovod
    for g in grads:
        np.testing.assert_allclose(g.numpy(), np.full((rank + 1, 2), mean))
    mixed = hvd.grouped_allgather([tf.constant([rank]), tf.constant([[True]])], name="gag.mixed")
    assert mixed[0].numpy().tolist() == list(range(size)) and mixed[1].numpy().tolist() == [[True]] * size
