"""DistributedGradientTape: a tf.GradientTape whose gradient() averages (or sums) over all ranks.

Dense gradients are enqueued together, in one call, with MGS_FLAG_SPARSE_OK:
with MGS_COMPRESSOR other than "none" the runtime sparsifies and merges them
(error feedback included). tf.IndexedSlices gradients (embeddings) are
allgathered, as in Horovod. Each gradient's name comes from its source
variable (position and name), so it is the same at every step: the runtime
recognises a step by a gradient name recurring. With `process_set=` the
gradients are reduced over that set only (sparsified, under MGS_COMPRESSOR, by
the set's own pipeline), and a rank outside the set keeps its own gradients.
"""

import tensorflow as tf

from .. import _abi
from . import mpi_ops
from .compression import Compression


# The name of a DistributedGradientTape's gradients when it is given none.
TAPE_NAME = "tape"


def _source_name(i, source):
    name = getattr(source, "path", None) or getattr(source, "name", None) or "tensor"
    return f"{i}.{str(name).replace(':', '_')}"


def gradient_names(tape_name, i, source):
    """(key, label, runtime name) of the gradient of source `i` reduced under `tape_name`.

    The label names its ops (an IndexedSlices gradient's allgathers); the runtime name is its dense
    allreduce's, whose residual a checkpoint keys by `key`, "<index>.<variable name>" (see checkpoint.py).
    """
    key = _source_name(i, source)
    label = f"grad.{tape_name}.{key}"
    return key, label, f"allreduce.{label}"


class _DistributedGradientTape:
    """Wraps a tf.GradientTape; every attribute but gradient() is the wrapped tape's."""

    def __init__(self, tape, compression=Compression.none, sparse_as_dense=False, op=mpi_ops.Average,
                 gradient_predivide_factor=1.0, name=None, process_set=mpi_ops.global_process_set):
        op = mpi_ops._resolve_op(op, None)
        if op not in (mpi_ops.Sum, mpi_ops.Average):
            raise ValueError(f"gradients can be reduced with Sum or Average, not {mpi_ops._runtime.op_name(op)}")
        self._tape = tape
        self._compression = compression
        self._sparse_as_dense = sparse_as_dense
        self._op = op
        self._predivide = float(gradient_predivide_factor)
        self._name = name or TAPE_NAME
        self._process_set = mpi_ops.process_set_and_id(process_set)[0]  # a removed or unregistered set fails here

    def __getattr__(self, attr):
        return getattr(self._tape, attr)

    def __enter__(self):
        self._tape.__enter__()
        return self

    def __exit__(self, *exc):
        return self._tape.__exit__(*exc)

    @tf.autograph.experimental.do_not_convert
    def gradient(self, target, sources, output_gradients=None, **kwargs):
        grads = self._tape.gradient(target, sources, output_gradients=output_gradients, **kwargs)
        flat_sources = tf.nest.flatten(sources)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        reduced = self._allreduce(flat_grads, flat_sources)
        return tf.nest.pack_sequence_as(grads, reduced, expand_composites=False) \
            if tf.nest.is_nested(grads) else reduced[0]

    def _allreduce(self, grads, sources):
        return reduce_gradients(grads, sources, self._name, self._op, self._compression, self._sparse_as_dense,
                                self._predivide, self._process_set)


def reduce_gradients(grads, sources, name, op, compression, sparse_as_dense, predivide,
                     process_set=mpi_ops.global_process_set):
    """Gradients (None allowed) reduced over the ranks of `process_set`, named after their sources; shared
    with Keras. A rank outside the set gets its own gradients back."""
    process_set, set_id = mpi_ops.process_set_and_id(process_set)
    if not process_set.included():
        return list(grads)
    if process_set.size() == 1 and op == mpi_ops.Average and predivide == 1.0:
        return list(grads)
    # Horovod's gradient_predivide_factor: scale by 1/f before the sum, f/size after (Average).
    pre, post = 1.0, 1.0
    if predivide != 1.0:
        pre, post = 1.0 / predivide, predivide
    out = list(grads)
    dense_idx, dense, names, ctxs = [], [], [], []
    for i, (g, s) in enumerate(zip(grads, sources)):
        if g is None:
            continue
        _, label, full = gradient_names(name, i, s)
        if isinstance(g, tf.IndexedSlices):
            if sparse_as_dense:
                g = tf.convert_to_tensor(g)
            else:
                out[i] = mpi_ops._allreduce_indexed_slices(g, label, op, pre, post, set_id)
                continue
        c, ctx = compression.compress(g)
        dense_idx.append(i)
        dense.append(c)
        names.append(full)
        ctxs.append(ctx)
    if dense:
        reduced = mpi_ops.grouped_allreduce_raw(dense, names, op, pre, post, flags=_abi.MGS_FLAG_SPARSE_OK,
                                                process_set=set_id)
        for i, r, ctx in zip(dense_idx, reduced, ctxs):
            out[i] = compression.decompress(r, ctx)
    return out


def DistributedGradientTape(gradtape, device_dense="", device_sparse="", compression=Compression.none,
                            sparse_as_dense=False, op=mpi_ops.Average, gradient_predivide_factor=1.0,
                            num_groups=0, groups=None, process_set=mpi_ops.global_process_set, name=None):
    """Horovod's DistributedGradientTape: `tape.gradient(...)` returns gradients reduced over all ranks.

        with tf.GradientTape() as tape:
            loss = ...
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    Works eagerly and inside tf.function. `name` distinguishes several tapes
    used in one step (their gradients need distinct names). `process_set`:
    reduce over that set only; a rank outside it gets its own gradients.
    num_groups and groups are accepted; mgs's planner forms the buckets.
    """
    if num_groups and groups is not None:
        raise ValueError("give num_groups or groups, not both")
    return _DistributedGradientTape(gradtape, compression, sparse_as_dense, op, gradient_predivide_factor, name,
                                    process_set)
