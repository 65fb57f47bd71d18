"""Horovod's Keras callbacks (hvd.callbacks.*) for Keras 3."""

import numpy as np
import tensorflow as tf

from .. import mpi_ops
from ..callbacks import BroadcastGlobalVariablesCallback

__all__ = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateWarmupCallback",
           "LearningRateScheduleCallback"]


class MetricAverageCallback(tf.keras.callbacks.Callback):
    """Replace each epoch's metrics in `logs` by their average over ranks.

    Put it before callbacks that read the metrics (checkpointing, early stopping,
    ReduceLROnPlateau) so they all see the same numbers on every rank. Metrics
    are matched by name; every rank must report the same ones.
    """

    def __init__(self):
        super().__init__()
        self._epoch = 0

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or not logs:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        values = tf.constant([float(logs[k]) for k in names], dtype=tf.float64)
        averaged = mpi_ops.allreduce(values, op=mpi_ops.Average, name=f"keras.metrics.{epoch}").numpy()
        for k, v in zip(names, averaged):
            logs[k] = float(v)


def _set_lr(optimizer, value):
    lr = optimizer.learning_rate
    if hasattr(lr, "assign"):
        lr.assign(value)
    else:
        optimizer.learning_rate = value


class LearningRateScheduleCallback(tf.keras.callbacks.Callback):
    """lr = initial_lr * multiplier(epoch) for start_epoch <= epoch < end_epoch (Horovod's schedule).

    multiplier is a number or a function of the epoch. staircase=True sets it at
    each epoch's start; staircase=False per batch with a fractional epoch
    (needs steps_per_epoch, or the `steps` fit() reports). momentum_correction is
    accepted for compatibility; mgs does not rescale momentum.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch, m=float(multiplier): m)
        self.start_epoch, self.end_epoch = start_epoch, end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = 0
        del momentum_correction

    def _active(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _apply(self, epoch):
        lr = self.initial_lr * self.multiplier(epoch)
        _set_lr(self.model.optimizer, lr)
        return lr

    def on_train_begin(self, logs=None):
        if self.steps_per_epoch is None:
            self.steps_per_epoch = self.params.get("steps") if getattr(self, "params", None) else None

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self._active(epoch) and self.staircase:
            lr = self._apply(epoch)
            if self.verbose and mpi_ops.rank() == 0:
                print(f"\nEpoch {epoch + 1}: learning rate set to {lr:.6g}")

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase or not self._active(self.current_epoch):
            return
        if not self.steps_per_epoch:
            raise ValueError("LearningRateScheduleCallback(staircase=False) needs steps_per_epoch")
        self._apply(self.current_epoch + batch / self.steps_per_epoch)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Horovod's warm-up: the learning rate grows from initial_lr / size() to initial_lr over
    warmup_epochs, per batch (Goyal et al., "Accurate, Large Minibatch SGD")."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        size = mpi_ops.size()

        def multiplier(epoch):
            # epoch is fractional here: at 0 the lr is initial_lr / size, at warmup_epochs initial_lr.
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch,
                         verbose=verbose)
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.warmup_epochs - 1:
            _set_lr(self.model.optimizer, self.initial_lr)
            if self.verbose and mpi_ops.rank() == 0:
                print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to {self.initial_lr:.6g}.")
