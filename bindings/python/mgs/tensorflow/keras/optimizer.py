"""DistributedOptimizer for Keras 3 optimizers: apply() reduces the gradients over all ranks first."""

import tensorflow as tf

from ... import _masking
from ... import _runtime
from .. import checkpoint, mpi_ops
from ..compression import Compression
from ..gradient_tape import gradient_names, reduce_gradients
from . import _dgc

# The name of a DistributedOptimizer's gradients when it is given none.
KERAS_NAME = "keras"


def _runtime_names(name, variables, set_id):
    """(index, the runtime's name) of each variable's gradient, as reduce_gradients names them."""
    out = []
    for i, v in enumerate(variables):
        out.append((i, _runtime.qualified_name(gradient_names(name, i, v)[2], set_id)))
    return out


class _DistributedKerasOptimizer:
    """Mixed in before the wrapped optimizer's class; see DistributedOptimizer()."""

    _mgs_settings = None  # (name, op, compression, sparse_as_dense, predivide, process_set), set per instance

    _mgs_dgc = None       # (MomentumCorrection or None, local clip norm or None), set per instance
    _mgs_at_reference = None  # during apply(): keys (_var_key) of the variables to update at the reference lr

    def build(self, variables):
        super().build(variables)
        mc = self._mgs_dgc[0] if self._mgs_dgc else None
        if mc is not None:
            mc.build(variables)

    def apply(self, grads, trainable_variables=None):
        # Keras 3's apply_gradients() and model.fit's train step both come here.
        variables = trainable_variables if trainable_variables is not None else self._trainable_variables
        grads = list(grads)
        name, op, compression, sparse_as_dense, predivide, process_set = self._mgs_settings
        mc, clip = self._mgs_dgc or (None, None)
        if clip is not None and process_set.included():
            grads = _dgc.clip_local(grads, clip, process_set.size())
        sends = nexts = None
        if mc is not None and process_set.included():
            if not self.built:
                self.build(variables)
            sends, nexts = mc.send(grads)
            grads = sends
        reduced = reduce_gradients(grads, list(variables), name, op, compression, sparse_as_dense, predivide,
                                   process_set)
        at_reference = None
        if sends is not None:
            set_id = mpi_ops.process_set_and_id(process_set)[1]
            names = [e[1] for e in _runtime_names(name, variables, set_id)]
            with tf.control_dependencies(mc.commit(sends, nexts, reduced, names)):
                reduced = [tf.identity(r) if r is not None and not isinstance(r, tf.IndexedSlices) else r
                           for r in reduced]
            if mc.lr_weighted:
                at_reference = {self._var_key(v) for v, u in zip(variables, nexts) if u is not None}
        self._mgs_at_reference = at_reference
        try:
            return super().apply(reduced, trainable_variables)
        finally:
            self._mgs_at_reference = None

    def update_step(self, gradient, variable, learning_rate):
        # Learning-rate weighting: a momentum-corrected variable's average was weighted by lr / lr_ref
        # on every rank, so it is applied at lr_ref (_dgc.py); everything else at the step's rate.
        at_reference = self._mgs_at_reference
        if at_reference and self._var_key(variable) in at_reference:
            learning_rate = tf.cast(self._mgs_dgc[0].lr_reference(), tf.convert_to_tensor(learning_rate).dtype)
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        # Saved models hold the wrapped optimizer's own config: they load without mgs.
        return super().get_config()

    # ------------------------------------------------------- checkpoints --

    def get_residual_state(self, variables=None):
        """This rank's error-feedback state: the residuals of the gradients this optimizer reduced, and the
        runtime's sparse progress (a dict of numpy arrays, ints and strings; see
        mgs.tensorflow.residual_state). Residuals are keyed "<index>.<variable path>" over `variables`
        (None: the variables the optimizer was built with, which model.fit uses). Every rank saves its own.
        Call it eagerly, between steps (e.g. in a callback's on_epoch_end)."""
        return checkpoint.save(self._mgs_entries(variables, "get_residual_state()"),
                               "DistributedOptimizer.get_residual_state()")

    def set_residual_state(self, state, variables=None):
        """Restore a get_residual_state() of this rank (state=None: residuals start from zero).

        The optimizer must be built (model.fit builds it; or optimizer.build(model.trainable_variables))
        unless `variables` is given. The state is checked first (same world size, this rank's own, every
        residual naming one of the variables with its shape): a mismatch raises ValueError naming the rank
        and the tensor, and nothing is loaded. Call it eagerly, between steps, on every rank with the
        state that rank saved."""
        checkpoint.load(state, self._mgs_entries(variables, "set_residual_state()"),
                        checkpoint.wording("DistributedOptimizer.set_residual_state()",
                                           "a trainable variable of this optimizer", "its variables",
                                           "was it saved from another model, or is this model built otherwise "
                                           "(Keras names unnamed layers in creation order)?"))

    def _mgs_entries(self, variables, what):
        if variables is None:
            if not self.built:
                raise ValueError(f"DistributedOptimizer.{what}: the optimizer is not built yet, so its variables "
                                 "are not known: call optimizer.build(model.trainable_variables) first (model.fit "
                                 "builds it), or pass variables=")
            variables = self._trainable_variables
        process_set = self._mgs_settings[5]
        return checkpoint.entries(list(variables), self._mgs_settings[0],
                                  mpi_ops.process_set_and_id(process_set)[1])


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=mpi_ops.Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0,
                         groups=None, process_set=mpi_ops.global_process_set, momentum_correction="auto",
                         momentum_masking=None, local_clip_norm=None, lr_weighting=None):
    """Horovod's hvd.DistributedOptimizer for a Keras 3 optimizer (an instance of the same class).

    Gradients are averaged (op=Average) or summed over ranks before the update;
    dense ones are enqueued together with MGS_FLAG_SPARSE_OK (sparsified under
    MGS_COMPRESSOR), IndexedSlices are allgathered unless sparse_as_dense.
    backward_passes_per_step > 1 maps to Keras's own gradient_accumulation_steps
    (the reduction then runs every step on the step's gradients). num_groups and
    groups are accepted; mgs's planner forms the buckets. get_residual_state() and
    set_residual_state() carry this rank's error-feedback residuals in a checkpoint.
    process_set: reduce over that set only (sparsified by the set's own pipeline under MGS_COMPRESSOR); a
    rank outside it applies its own gradients.
    DGC's techniques (docs/convergence.md): momentum_correction="auto" (default: on when init() set a
    compressor and the optimizer is a keras.optimizers.SGD with momentum, else off; the resolved value is
    the wrapped optimizer's `momentum_correction` attribute) or True (keras.optimizers.SGD
    only, any other optimizer raises ValueError): each rank's velocity is what is sparsified, and SGD
    applies the average with its momentum off; momentum_masking clears the velocity of the entries this
    rank sent: None (default: True with momentum correction) every step, DGC's rule; "after_warmup" from
    the first step after the runtime's density warm-up (MGS_WARMUP_STEPS) on; False never;
    local_clip_norm=C scales this rank's gradients to global norm C / sqrt(ranks) first; lr_weighting
    (default: on with momentum correction; True without it raises ValueError) hands the allreduce
    (lr / lr_ref) * velocity and applies the average at lr_ref, lr_ref being the first positive learning
    rate (optimizer variable "mgs_lr_reference"), so an entry the residual delayed is applied at the
    rates of its own steps; False keeps DGC's rule.
    """
    if not hasattr(optimizer, "apply") or not hasattr(optimizer, "get_config"):
        raise TypeError(f"mgs.tensorflow.keras.DistributedOptimizer needs a Keras 3 optimizer, got "
                        f"{type(optimizer).__name__}")
    op = mpi_ops._resolve_op(op, None)
    if op not in (mpi_ops.Sum, mpi_ops.Average):
        raise ValueError(f"gradients can be reduced with Sum or Average, not {mpi_ops._runtime.op_name(op)}")
    if backward_passes_per_step < 1:
        raise ValueError(f"backward_passes_per_step must be >= 1, got {backward_passes_per_step}")
    if num_groups and groups is not None:
        raise ValueError("give num_groups or groups, not both")
    process_set = mpi_ops.process_set_and_id(process_set)[0]  # a removed or unregistered set fails here
    momentum_correction = _dgc.resolve(momentum_correction, optimizer)
    momentum_masking = _masking.resolve(momentum_masking, momentum_correction)
    if lr_weighting and not momentum_correction:
        raise ValueError("lr_weighting=True needs momentum_correction=True (it weights DGC's velocity)")
    if local_clip_norm is not None and not float(local_clip_norm) > 0:
        raise ValueError(f"local_clip_norm must be a positive number, got {local_clip_norm!r}")
    momentum = nesterov = None
    if momentum_correction:
        momentum, nesterov = _dgc.check_optimizer(optimizer)
    base = type(optimizer)
    cls = type(base.__name__, (_DistributedKerasOptimizer, base), {})
    config = optimizer.get_config()
    if backward_passes_per_step > 1:
        config["gradient_accumulation_steps"] = backward_passes_per_step
    if momentum_correction and momentum != 0:
        config["momentum"], config["nesterov"] = 0.0, False  # the velocity is DGC's, kept below
    wrapped = cls.from_config(config)
    mc = None
    if momentum_correction and momentum != 0:
        mc = _dgc.MomentumCorrection(wrapped, momentum, nesterov, momentum_masking,
                                     lr_weighting is None or bool(lr_weighting))
    wrapped._mgs_dgc = (mc, None if local_clip_norm is None else float(local_clip_norm))
    wrapped.momentum_correction = bool(momentum_correction)  # as resolved
    wrapped._mgs_settings = (name or KERAS_NAME, op, compression, sparse_as_dense, float(gradient_predivide_factor),
                             process_set)
    del average_aggregated_gradients, device_dense, device_sparse  # Horovod knobs with no meaning here
    return wrapped


