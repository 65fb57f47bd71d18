"""DGC's rank-local techniques for the Keras DistributedOptimizer (Lin et al., ICLR 2018), as in
mgs.torch (bindings/python/mgs/torch/_dgc.py; docs/convergence.md has the measurements).

- Momentum correction (keras.optimizers.SGD with momentum only): each rank keeps its velocity
  u = m*u + g (Nesterov: u = m*(u + g), sending u + g) in an optimizer variable and hands it to the
  sparse allreduce, so the runtime's error-feedback residual accumulates velocity; the wrapped SGD
  then applies the average with its momentum off.
- Momentum factor masking: after the exchange, u is cleared where this rank's entry was sent: where
  its residual became exactly 0 while what it accumulated (what it handed + the residual before) was
  not. The residual is read once per variable and step (mgs_residual_copy) and kept in another
  optimizer variable as the next step's "before". A variable delivered whole (residual 0 everywhere:
  dense fallback, density 1) or never sparsified keeps its velocity. Every step by default (DGC's rule);
  momentum_masking="after_warmup" (mgs/_masking.py) starts it after the runtime's density warm-up, the
  steps counted in an optimizer variable, "mgs_momentum_correction_steps" (made only then), so
  checkpoints carry them.
- Local gradient clipping: this rank's gradients scaled to global norm at most C / sqrt(P) before
  they enter the velocity (tf.clip_by_global_norm).
- Learning-rate weighting (on by default with momentum correction, as in mgs.torch): each rank hands
  the allreduce (lr / lr_ref) * u, lr being the optimizer's learning rate for this step (a schedule's
  value, or what a callback assigned) and lr_ref the first positive one it had (an optimizer variable,
  "mgs_lr_reference", so checkpoints of the optimizer carry it); the wrapped SGD applies the average
  of the momentum-corrected variables at lr_ref. An entry the residual delayed is so applied at the
  rates of the steps it came from, not at the rate of the step that sends it (DGC's rule, which
  lr_weighting=False keeps). A constant rate gives the factor 1 exactly: nothing changes, bit for bit.
  Keras's decoupled weight decay stays the wrapped SGD's own, at this step's rate.

A step whose reduced gradient is not finite (MGS_NONFINITE=propagate) leaves the velocity as it was,
as the runtime leaves its residual. Works eagerly and inside tf.function (model.fit).
"""

import numpy as np
import tensorflow as tf

from ... import _masking
from ... import _runtime
from .. import mpi_ops


def resolve(momentum_correction, optimizer):
    """momentum_correction as DistributedOptimizer runs it: True/False as given; "auto" (the default) is on
    exactly when init() set a compressor (MGS_COMPRESSOR) and the optimizer is a keras.optimizers.SGD with
    momentum. ValueError for anything else."""
    if momentum_correction is True or momentum_correction is False:
        return momentum_correction
    if momentum_correction != "auto":
        raise ValueError(f"momentum_correction must be True, False or 'auto', got {momentum_correction!r}")
    if (_runtime.init_settings().get("MGS_COMPRESSOR") or "none") == "none":
        return False
    import keras
    if not isinstance(optimizer, keras.optimizers.SGD):
        return False
    return float(optimizer.get_config().get("momentum", 0.0)) != 0


def check_optimizer(optimizer):
    """(momentum, nesterov) of a Keras SGD optimizer; ValueError naming any other optimizer."""
    import keras
    if not isinstance(optimizer, keras.optimizers.SGD):
        raise ValueError(f"momentum_correction=True needs keras.optimizers.SGD (DGC's velocity replaces SGD's "
                         f"momentum), got {type(optimizer).__name__}")
    config = optimizer.get_config()
    return float(config.get("momentum", 0.0)), bool(config.get("nesterov", False))


def clip_local(grads, max_norm, world_size):
    """Dense gradients scaled to global 2-norm <= max_norm / sqrt(world_size); None and IndexedSlices kept."""
    idx = [i for i, g in enumerate(grads) if g is not None and not isinstance(g, tf.IndexedSlices)]
    if not idx:
        return grads
    clipped, _ = tf.clip_by_global_norm([grads[i] for i in idx], max_norm / world_size ** 0.5)
    out = list(grads)
    for i, c in zip(idx, clipped):
        out[i] = c
    return out


def _residual(runtime_name, n):
    """(has, this rank's residual of runtime_name as float32[n]) for a py_function."""
    buf = np.empty(n, np.float32)
    if _runtime.residual_copy(runtime_name, buf.ctypes.data, n):
        return np.array(True), buf
    return np.array(False), np.zeros(n, np.float32)


class MomentumCorrection:
    """The velocity and last residual of every trainable variable, as optimizer variables."""

    def __init__(self, optimizer, momentum, nesterov, masking, lr_weighted=True):
        self.momentum, self.nesterov, self.masking = momentum, nesterov, masking  # masking: True, False, AFTER_WARMUP
        self.lr_weighted = lr_weighted
        self._opt = optimizer
        self._velocity = None   # one per trainable variable, in its order
        self._before = None     # masking: this rank's residual after the last exchange (flat float32)
        self._have_before = None
        self._steps = None      # masking after the warm-up: exchanges finished (int64 optimizer variable)
        self._lr_reference = None  # learning-rate weighting: the first positive learning rate (0: none yet)

    def build(self, variables):
        if self._velocity is not None:
            return
        opt = self._opt
        self._velocity = [opt.add_variable_from_reference(v, name="mgs_velocity") for v in variables]
        if self.masking:
            self._before = [opt.add_variable((int(np.prod(v.shape)),), initializer="zeros", dtype="float32",
                                             name="mgs_residual_before") for v in variables]
            self._have_before = [opt.add_variable((), initializer="zeros", dtype="float32",
                                                  name="mgs_residual_known") for _ in variables]
            if self.masking == _masking.AFTER_WARMUP:  # (only then: other checkpoints keep their variables)
                self._steps = opt.add_variable((), initializer="zeros", dtype="int64",
                                               name="mgs_momentum_correction_steps")
        if self.lr_weighted:
            self._lr_reference = opt.add_variable((), initializer="zeros", dtype="float32",
                                                  name="mgs_lr_reference")

    def lr_reference(self):
        """The reference learning rate (a float32 tensor; 0 while every rate so far was 0), or None
        without learning-rate weighting. Read it after send() of the same step."""
        return None if self._lr_reference is None else self._lr_reference.value

    def _lr_factor(self):
        """lr / lr_ref for this step's send (lr_ref set from lr the first time lr > 0); 0 while lr_ref is 0."""
        lr = tf.cast(self._opt.learning_rate, tf.float32)
        known = self._lr_reference.value
        ref = tf.where(known > 0, known, tf.maximum(lr, 0.0))
        self._lr_reference.assign(ref)
        return tf.math.divide_no_nan(lr, ref)

    def velocity(self, i):
        return self._velocity[i]

    def send(self, grads):
        """What each rank hands to the allreduce, and the velocity to commit after it."""
        m = tf.constant(self.momentum)
        factor = self._lr_factor() if self.lr_weighted else None
        sends, nexts = [], []
        for i, g in enumerate(grads):
            if g is None or isinstance(g, tf.IndexedSlices):
                sends.append(g)
                nexts.append(None)
                continue
            u = tf.cast(self._velocity[i].value, g.dtype)
            if self.nesterov:
                u_next = tf.cast(m, g.dtype) * (u + g)
                send = u_next + g
            else:
                u_next = tf.cast(m, g.dtype) * u + g
                send = u_next
            if factor is not None:  # learning-rate weighting: u_next stays the velocity, the send is weighted
                send = send * tf.cast(factor, g.dtype)
            sends.append(send)
            nexts.append(u_next)
        return sends, nexts

    def commit(self, sends, nexts, reduced, runtime_names):
        """After the exchange: the new velocity, masked where this rank's entry was sent (from the first
        masked step on)."""
        ops = []
        masks_now = tf.constant(True)
        if self._steps is not None:
            # Read when the step is traced (model.fit) or run (eagerly): the runtime's warm-up is fixed at init.
            masks_now = self._steps.value >= _masking.first_masked_step(self.masking)
            ops.append(self._steps.assign_add(1))
        for i, (s, u_next, r) in enumerate(zip(sends, nexts, reduced)):
            if u_next is None:
                continue
            finite = tf.reduce_all(tf.math.is_finite(r))
            new_u = u_next
            if self.masking and s.dtype.is_floating:
                n = int(np.prod(s.shape))
                # The read depends on the reduced tensor: it runs after this variable's exchange.
                has, after = mpi_ops.run_numpy(
                    lambda arrays, name=runtime_names[i], n=n: list(_residual(name, n)), [r],
                    [tf.bool, tf.float32], [tf.TensorShape([]), tf.TensorShape([n])])
                known = self._have_before[i].value > 0
                before = tf.where(known, self._before[i].value, tf.zeros([n], tf.float32))
                acc = tf.reshape(tf.cast(s, tf.float32), [-1]) + before
                sent = tf.logical_and(tf.equal(after, 0.0), tf.not_equal(acc, 0.0))
                # Delivered whole (residual 0 everywhere) or not sparsified: keep the velocity.
                mask = tf.logical_and(sent, tf.logical_and(has, tf.logical_not(tf.reduce_all(tf.equal(after, 0.0)))))
                mask = tf.logical_and(mask, masks_now)
                new_u = tf.where(tf.reshape(mask, tf.shape(u_next)), tf.zeros_like(u_next), u_next)
                ops.append(tf.cond(tf.logical_and(finite, has),
                                   lambda i=i, after=after: self._store_before(i, after),
                                   lambda: tf.constant(False)))
            ops.append(tf.cond(finite,
                               lambda i=i, new_u=new_u: self._store_velocity(i, new_u),
                               lambda: tf.constant(False)))
        return ops

    def _store_velocity(self, i, u):
        self._velocity[i].assign(tf.cast(u, self._velocity[i].dtype))
        return tf.constant(True)

    def _store_before(self, i, after):
        self._before[i].assign(after)
        self._have_before[i].assign(1.0)
        return tf.constant(True)
