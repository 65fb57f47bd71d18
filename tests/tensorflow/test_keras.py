"""mgs.tensorflow.keras: model.fit trains distributed with DistributedOptimizer and Horovod's
callbacks (Keras 3), and the collectives are differentiable eagerly and inside tf.function."""

import numpy as np
import pytest
import tensorflow as tf

import mgs.tensorflow as hvd_tf
import mgs.tensorflow.keras as hvd

from conftest import COMPRESSOR

keras = tf.keras
dense_only = pytest.mark.skipif(COMPRESSOR != "none", reason="exact gradients need MGS_COMPRESSOR=none")


def data(r, n=16):
    g = np.random.default_rng(10 + r)
    x = g.normal(0, 1, (n, 5)).astype(np.float32)
    return x, (x @ np.arange(1, 6, dtype=np.float32).reshape(5, 1) + 0.5).astype(np.float32)


def make_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])


@dense_only
def test_fit_averages_gradients_and_broadcasts_initial_weights(rank, size):
    model = make_model(seed=rank)  # different initial weights on every rank
    root_weights = hvd.broadcast_object([w.copy() for w in model.get_weights()], root_rank=0, name="keras.init")
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse", jit_compile=False)
    x, y = data(rank)
    history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                   hvd.callbacks.MetricAverageCallback()])
    # The reference: rank 0's initial weights, each step's gradient averaged over every rank's batch.
    ref = make_model(seed=0)
    ref.set_weights(root_weights)
    sgd = keras.optimizers.SGD(0.05)
    for _ in range(2):
        for step in range(2):
            grads = None
            for r in range(size):
                xr, yr = data(r)
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(tf.square(ref(xr[8 * step:8 * step + 8]) - yr[8 * step:8 * step + 8]))
                g = tape.gradient(loss, ref.trainable_variables)
                grads = g if grads is None else [a + b for a, b in zip(grads, g)]
            sgd.apply([g / size for g in grads], ref.trainable_variables)
    for got, want in zip(model.get_weights(), ref.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    losses = hvd.allgather_object(history.history["loss"], name="keras.losses")
    assert all(np.allclose(losses[0], other) for other in losses)  # MetricAverageCallback: same on every rank


def test_warmup_reaches_the_initial_lr(size):
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(self.model.optimizer.learning_rate.numpy()))

    model = make_model(seed=1)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", jit_compile=False)
    x, y = data(0)
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
              callbacks=[hvd.callbacks.LearningRateWarmupCallback(0.4, warmup_epochs=2), Record()])
    assert seen[0] == pytest.approx(0.4 / size)
    assert seen == sorted(seen)  # grows during warm-up
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.4)


def test_schedule_callback_multiplies_per_epoch():
    seen = []

    class Record(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append(float(self.model.optimizer.learning_rate.numpy()))

    model = make_model(seed=2)
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse", jit_compile=False)
    x, y = data(0, n=8)
    sched = hvd.callbacks.LearningRateScheduleCallback(0.2, lambda e: 0.5 ** e, start_epoch=1)
    model.fit(x, y, batch_size=8, epochs=3, verbose=0, callbacks=[sched, Record()])
    assert seen == pytest.approx([0.1, 0.1, 0.05])


def test_optimizer_arguments():
    with pytest.raises(ValueError, match="Adasum"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum)
    with pytest.raises(ValueError, match="not Min"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Min)
    with pytest.raises(TypeError, match="Keras 3 optimizer"):
        hvd.DistributedOptimizer(object())
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.01), backward_passes_per_step=2)
    assert isinstance(opt, keras.optimizers.Adam) and opt.gradient_accumulation_steps == 2


@pytest.mark.parametrize("graph", [False, True])
def test_allreduce_is_differentiable(rank, size, graph):
    x = tf.Variable([1.0 + rank, 2.0])

    def grad():
        with tf.GradientTape() as tape:
            y = hvd_tf.allreduce(x * x, op=hvd_tf.Sum, name=f"diff.allreduce.{graph}")
            loss = tf.reduce_sum(y * tf.constant([1.0, 3.0]))
        return tape.gradient(loss, x)
    g = tf.function(grad)() if graph else grad()
    # d/dx_r sum_q loss_q = sum over ranks of the upstream gradient times 2 x_r
    np.testing.assert_allclose(g.numpy(), size * np.array([1.0, 3.0]) * 2 * x.numpy())


@pytest.mark.parametrize("graph", [False, True])
def test_allgather_and_broadcast_are_differentiable(rank, size, graph):
    x = tf.Variable(tf.fill([rank + 1, 2], float(rank)))

    def grads():
        with tf.GradientTape(persistent=True) as tape:
            gathered = hvd_tf.allgather(x, name=f"diff.allgather.{graph}")
            weights = tf.cast(tf.range(tf.shape(gathered)[0])[:, None] + 1, tf.float32)
            loss_g = tf.reduce_sum(gathered * weights * float(rank + 1))
            loss_b = tf.reduce_sum(hvd_tf.broadcast(x[:1] * 2.0, root_rank=0, name=f"diff.bcast.{graph}")
                                   * float(rank + 1))
        return tape.gradient(loss_g, x), tape.gradient(loss_b, x)
    g_gather, g_bcast = tf.function(grads)() if graph else grads()
    # Horovod's definitions: this rank's rows of the output gradient averaged over the ranks; for a
    # broadcast, the output gradient averaged over the ranks on the root, zero elsewhere.
    mean = sum(r + 1 for r in range(size)) / size
    offset = sum(r + 1 for r in range(rank))
    expected = mean * (np.arange(offset, offset + rank + 1, dtype=np.float32)[:, None] + 1) * np.ones((1, 2))
    np.testing.assert_allclose(g_gather.numpy(), expected)
    want_b = np.zeros((rank + 1, 2), np.float32)
    if rank == 0:
        want_b[0] = 2.0 * mean
    np.testing.assert_allclose(g_bcast.numpy(), want_b)


def test_min_max_product(rank, size):
    t = tf.constant([rank + 1.0, 2.0])
    assert hvd_tf.allreduce(t, op=hvd_tf.Min, name="tf.min").numpy().tolist() == [1.0, 2.0]
    assert hvd_tf.allreduce(t, op=hvd_tf.Max, name="tf.max").numpy().tolist() == [float(size), 2.0]
    assert hvd_tf.allreduce(t, op=hvd_tf.Product, name="tf.prod").numpy().tolist() == \
        [float(np.prod(np.arange(1, size + 1))), 2.0 ** size]
    assert hvd.cross_size() >= 1 and 0 <= hvd.cross_rank() < hvd.cross_size()
