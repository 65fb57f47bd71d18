"""Keras loss scaling over mgs (MGS_NONFINITE=propagate, the default): an Inf gradient on one
rank must flow out of the reduction, not raise, so that LossScaleOptimizer skips the step and
lowers its scale on every rank alike."""

import numpy as np
import tensorflow as tf

import mgs.tensorflow.keras as hvd

keras = tf.keras


def test_loss_scale_optimizer_skips_an_overflow_step_on_every_rank(rank, size):
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
    # Reduce first, then let LossScaleOptimizer judge the reduced gradients: the
    # same verdict on every rank (the other order would let the rank with the
    # Inf skip the reduction that the others enter).
    opt = hvd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.05),
                                                                       initial_scale=1024.0))
    g = np.random.default_rng(rank)
    x = g.normal(0, 1, (8, 5)).astype(np.float32)
    y = g.normal(0, 1, (8, 1)).astype(np.float32)
    variables = model.trainable_variables
    scales, changed = [], []
    for step in range(3):
        with tf.GradientTape() as tape:
            loss = opt.scale_loss(tf.reduce_mean(tf.square(model(x) - y)))
        grads = tape.gradient(loss, variables)
        if step == 1 and rank == size - 1:
            grads[0] = tf.tensor_scatter_nd_update(grads[0], [[0, 0]], [np.inf])  # an overflow on one rank
        before = [v.numpy().copy() for v in variables]
        opt.apply(grads, variables)  # must not raise
        changed.append(any(not np.array_equal(b, v.numpy()) for b, v in zip(before, variables)))
        scales.append(float(opt.dynamic_scale.numpy()))
    assert changed == [True, False, True], f"rank {rank}: weights changed per step {changed}"
    assert scales[1] == scales[0] / 2, f"rank {rank}: scale per step {scales}"
    everyone = hvd.allgather_object([w.tolist() for w in model.get_weights()] + [scales], name="nonfinite.keras")
    assert all(other == everyone[0] for other in everyone), "weights or scales differ across ranks"
