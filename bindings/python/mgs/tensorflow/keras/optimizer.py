"""DistributedOptimizer for Keras 3 optimizers: apply() reduces the gradients over all ranks first."""

from .. import mpi_ops
from ..compression import Compression
from ..gradient_tape import reduce_gradients


class _DistributedKerasOptimizer:
    """Mixed in before the wrapped optimizer's class; see DistributedOptimizer()."""

    _mgs_settings = None  # (name, op, compression, sparse_as_dense, predivide), set per instance

    def apply(self, grads, trainable_variables=None):
        # Keras 3's apply_gradients() and model.fit's train step both come here.
        variables = trainable_variables if trainable_variables is not None else self._trainable_variables
        grads = list(grads)
        name, op, compression, sparse_as_dense, predivide = self._mgs_settings
        reduced = reduce_gradients(grads, list(variables), name, op, compression, sparse_as_dense, predivide)
        return super().apply(reduced, trainable_variables)

    def get_config(self):
        # Saved models hold the wrapped optimizer's own config: they load without mgs.
        return super().get_config()




def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, gradient_predivide_factor=1.0, op=mpi_ops.Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0,
                         groups=None):
    """Horovod's hvd.DistributedOptimizer for a Keras 3 optimizer (an instance of the same class).

    Gradients are averaged (op=Average) or summed over ranks before the update;
    dense ones are enqueued together with MGS_FLAG_SPARSE_OK (sparsified under
    MGS_COMPRESSOR), IndexedSlices are allgathered unless sparse_as_dense.
    backward_passes_per_step > 1 maps to Keras's own gradient_accumulation_steps
    (the reduction then runs every step on the step's gradients). num_groups and
    groups are accepted; mgs's planner forms the buckets.
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
    base = type(optimizer)
    cls = type(base.__name__, (_DistributedKerasOptimizer, base), {})
    config = optimizer.get_config()
    if backward_passes_per_step > 1:
        config["gradient_accumulation_steps"] = backward_passes_per_step
    wrapped = cls.from_config(config)
    wrapped._mgs_settings = (name or "keras", op, compression, sparse_as_dense, float(gradient_predivide_factor))
    del average_aggregated_gradients, device_dense, device_sparse  # Horovod knobs with no meaning here
    return wrapped


