"""Collectives on TensorFlow tensors, with Horovod's TF2 names, over the mgs C ABI.

Integration: every collective works on host numpy arrays. An eager tensor is
handed over with `.numpy()` (for CPU tensors a view of TensorFlow's buffer, no
copy) and the result is wrapped back with `tf.convert_to_tensor`. Inside a
`tf.function` the same Python code runs through `tf.py_function`, which calls
back into the interpreter when the graph executes (see docs/tensorflow.md for
why this was chosen over a custom op, and its measured cost per step).

Names: as in mgs.torch, an op named "x" goes to the runtime as "<kind>.x";
unnamed ops get "<kind>.noname.<n>" from a counter per kind and process set
(in a tf.function the counter is read when the function is traced, so a
traced op keeps its name across calls). Ranks must issue unnamed ops of a
kind in a set in the same order.

Every collective takes `process_set=` (a ProcessSet from add_process_set();
the default, global_process_set, is every rank). alltoall and reducescatter
are in scatter_ops.
"""

import numpy as np
import tensorflow as tf

from .. import _abi, _process_sets, _runtime
from .._process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401
from .._runtime import (Adasum, Average, Max, Min, Product, Sum, cross_rank, cross_size, cuda_built,  # noqa: F401
                        gloo_built, is_homogeneous, is_initialized, local_rank, local_size, mpi_built, nccl_built,
                        rank, shutdown, size)
from .compression import Compression

# AutoGraph must not rewrite this module's Python when it runs inside a tf.function.
_no_autograph = tf.autograph.experimental.do_not_convert

# TensorFlow dtypes the runtime can reduce, with their mgs_dtype_t.
_REDUCIBLE = {
    tf.float32: _abi.MGS_FLOAT32,
    tf.float64: _abi.MGS_FLOAT64,
    tf.float16: _abi.MGS_FLOAT16,
    tf.bfloat16: _abi.MGS_BFLOAT16,
    tf.int32: _abi.MGS_INT32,
    tf.int64: _abi.MGS_INT64,
    tf.uint8: _abi.MGS_UINT8,
}


def mgs_dtype(dtype):
    try:
        return _REDUCIBLE[tf.as_dtype(dtype)]
    except KeyError:
        supported = ", ".join(d.name for d in _REDUCIBLE)
        raise TypeError(f"mgs cannot reduce tensors of type {tf.as_dtype(dtype).name}; "
                        f"supported: {supported}") from None


@_no_autograph
def init(comm=None, process_sets=None):
    """Start the runtime on every rank (collective). Calling it again while running is a no-op.

    `process_sets`: ProcessSet objects (or lists of ranks) to add at once, in
    this order, on every rank; "dynamic" (Horovod's switch) changes nothing:
    sets may always be added and removed later.
    """
    _process_sets.init("mgs.tensorflow", comm, process_sets)


def barrier(process_set=global_process_set):
    """Block until every rank (of `process_set`) has called barrier()."""
    _runtime.barrier(sid(process_set))


def sid(process_set):
    """The runtime id of a ProcessSet; ValueError for a removed or unregistered one."""
    return _process_sets.process_set_id(process_set)


# ------------------------------------------------------ numpy-level operations --
# Each enqueues one op on a contiguous numpy array and returns an _Op; wait_all()
# waits for a list of them (all enqueued first, so the runtime can fuse and merge).
# `process_set` is a runtime id here (0: every rank).

full_name = _runtime.full_name


def grouped_names(kind, name, n, set_id=0):
    """Runtime names of the n ops of a grouped call (counted as one unnamed op of `kind`)."""
    base = full_name(kind, name if name is None else f"group.{name}", set_id)
    return [f"{base}.{i}" for i in range(n)]


def _Desc(array, dtype):
    """A CTensor for a contiguous numpy array (kept alive by it)."""
    return _runtime.CTensor(array, dtype, array.shape, address=array.ctypes.data)


class _Op:
    __slots__ = ("handle", "keep", "finish")

    def __init__(self, handle, keep, finish):
        self.handle, self.keep, self.finish = handle, keep, finish


def _as_bytes(array):
    """A uint8 view of any array (for byte-exact broadcast and allgather), and how to undo it."""
    if array.ndim == 0:
        array = array.reshape(1)
    return np.asarray(array, order="C").view(np.uint8)


def np_allreduce(array, dtype, name, op, prescale_factor=1.0, postscale_factor=1.0, flags=0, process_set=0):
    """Enqueue an allreduce of `array` (mgs dtype `dtype`) into a new array."""
    if op in _runtime.GATHER_OPS:
        return _np_gather_reduce(array, name, op, prescale_factor, postscale_factor, process_set)
    work = np.asarray(array, order="C")
    out = np.empty_like(work)
    dins, douts = _Desc(work, dtype), _Desc(out, dtype)
    handle = _runtime.enqueue_allreduce(name, dins, douts, op, prescale_factor, postscale_factor, flags,
                                        process_set)
    return _Op(handle, (dins, douts), lambda h: out)


def np_allgather(array, name, process_set=0):
    """Enqueue an allgather; its result is (concatenated array, [first dimension of every rank])."""
    if array.ndim == 0:
        raise ValueError("allgather needs a tensor with at least one dimension (it concatenates along "
                         "the first); reshape a scalar to [1]")
    work = np.asarray(array, order="C")
    dtype = work.dtype
    row_bytes = int(np.prod(work.shape[1:], dtype=np.int64)) * work.itemsize
    raw = work.reshape(work.shape[0], -1).view(np.uint8) if work.size else \
        np.empty((work.shape[0], row_bytes), np.uint8)
    d = _Desc(raw, _abi.MGS_UINT8)
    handle = _runtime.enqueue_allgather(name, d, process_set)
    ranks = _process_sets.set_size(process_set)

    def finish(h):
        shape, sizes = _runtime.allgather_output(h, ranks)
        total = int(shape[0])
        out = np.empty((total, row_bytes), np.uint8)
        _runtime.allgather_copy(h, _Desc(out, _abi.MGS_UINT8))
        result = out.view(dtype).reshape((total,) + work.shape[1:]) if row_bytes else \
            np.empty((total,) + work.shape[1:], dtype)
        return result, [int(s) for s in sizes]
    return _Op(handle, (d,), finish)


_GATHER_REDUCE = {Min: np.min, Max: np.max, Product: np.prod}


def _np_gather_reduce(array, name, op, prescale_factor, postscale_factor, process_set):
    """Min/Max/Product (not in the C ABI): allgather every rank's array, reduce locally.

    The result is postscale_factor * reduce(prescale_factor * array), in the input's dtype."""
    work = np.asarray(array)
    dtype = work.dtype
    if prescale_factor != 1.0:
        work = (work * prescale_factor).astype(dtype)
    gather = np_allgather(work.reshape((1,) + work.shape), name, process_set)

    def finish(h):
        out = _GATHER_REDUCE[op](gather.finish(h)[0], axis=0).astype(dtype)
        if postscale_factor != 1.0:
            out = (out * postscale_factor).astype(dtype)
        return np.ascontiguousarray(out)
    return _Op(gather.handle, gather.keep, finish)


def np_broadcast(array, root_rank, name, process_set=0):
    """Enqueue a broadcast of root_rank's (a world rank) `array` into a new array."""
    work = np.array(array, copy=True, order="C")
    raw = _as_bytes(work)
    d = _Desc(raw, _abi.MGS_UINT8)
    handle = _runtime.enqueue_broadcast(name, d, root_rank, process_set)
    return _Op(handle, (d,), lambda h: work)


def wait_all(ops):
    """Wait for every op (even after a failure: each uses a live buffer); results in order, or raise."""
    results, error = [], None
    for op in ops:
        try:
            _runtime.wait(op.handle)
            results.append(op.finish(op.handle) if error is None else None)
        except Exception as e:  # noqa: BLE001 - re-raised below
            error = error or e
        finally:
            _runtime.release(op.handle)
    if error is not None:
        raise error
    return results


def enqueue_all(thunks):
    """Call each thunk (each enqueues an op); if one fails, wait for those already enqueued, then raise."""
    ops = []
    try:
        for t in thunks:
            ops.append(t())
    except Exception:
        try:
            wait_all(ops)
        except Exception:  # noqa: BLE001 - the enqueue error is the one to report
            pass
        raise
    return ops


# ----------------------------------------------------------- TF integration --

def _to_numpy(t):
    return t.numpy() if hasattr(t, "numpy") else np.asarray(t)


@_no_autograph
def run_numpy(fn, tensors, out_dtypes, out_shapes):
    """Run fn(list of numpy arrays) -> list of numpy arrays on tensors, eagerly or inside a graph.

    Eager: `.numpy()` in, `tf.convert_to_tensor` out. In a tf.function: a
    tf.py_function node; the outputs get `out_shapes` (None entries: unknown).
    """
    if tf.executing_eagerly():
        outs = fn([_to_numpy(t) for t in tensors])
        return [tf.convert_to_tensor(o, dtype=d) for o, d in zip(outs, out_dtypes)]

    def body(*ts):
        return fn([t.numpy() for t in ts])
    outs = tf.py_function(body, inp=list(tensors), Tout=list(out_dtypes))
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    for o, s in zip(outs, out_shapes):
        if s is not None:
            o.set_shape(s)
    return list(outs)


def _resolve_op(op, average):
    return _runtime.resolve_op(op, average, "mgs.tensorflow")


def process_set_and_id(process_set):
    """(the ProcessSet, its runtime id); None means the global set."""
    if process_set is None:
        process_set = global_process_set
    return process_set, sid(process_set)


@_no_autograph
def grouped_allreduce_raw(tensors, names, op, prescale_factor=1.0, postscale_factor=1.0, flags=0, process_set=0):
    """Allreduce dense tensors under the given full names: all enqueued, then all waited for (one call)."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    codes = [mgs_dtype(t.dtype) for t in tensors]

    def fn(arrays):
        return wait_all(enqueue_all(
            [lambda a=a, c=c, n=n: np_allreduce(a, c, n, op, prescale_factor, postscale_factor, flags, process_set)
             for a, c, n in zip(arrays, codes, names)]))
    return run_numpy(fn, tensors, [t.dtype for t in tensors], [t.shape for t in tensors])


def _check_not_scalar(t, what):
    if t.shape.rank == 0:
        raise ValueError(f"{what} needs a tensor with at least one dimension (it works along the first); "
                         "reshape a scalar to [1]")


@_no_autograph
def allgather_raw(tensors, names, process_set=0):
    """Allgather tensors under the given full names (one call).

    Returns (gathered tensors, with an unknown first dimension in a graph;
    for each, every rank's first dimension as an int64 tensor [set size])."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        _check_not_scalar(t, "allgather")
    ranks = _process_sets.set_size(process_set)

    def fn(arrays):
        outs = wait_all(enqueue_all([lambda a=a, n=n: np_allgather(a, n, process_set)
                                     for a, n in zip(arrays, names)]))
        return [o[0] for o in outs] + [np.asarray(o[1], np.int64) for o in outs]
    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) if t.shape.rank is not None else None
              for t in tensors]
    outs = run_numpy(fn, tensors, [t.dtype for t in tensors] + [tf.int64] * len(tensors),
                     shapes + [tf.TensorShape([ranks])] * len(tensors))
    return outs[:len(tensors)], outs[len(tensors):]


@_no_autograph
def _allreduce_indexed_slices(slices, name, op, prescale_factor, postscale_factor, process_set=0):
    """Horovod's sparse allreduce: allgather the values and the indices (duplicates sum when applied)."""
    base = full_name("allgather", name if name is None else f"slices.{name}", process_set)
    (values, indices), _ = allgather_raw([slices.values, slices.indices], [f"{base}.values", f"{base}.indices"],
                                         process_set)
    scale = prescale_factor * postscale_factor
    if op == Average:
        scale /= _process_sets.set_size(process_set)
    if scale != 1.0:
        values = values * tf.cast(scale, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def grad_name(name):
    return None if name is None else f"grad.{name}"


def with_gradients(tensors, forward, backward):
    """forward(tensors) (a list of outputs), with backward(output gradients) -> input gradients as its
    gradient, eagerly and inside tf.function.

    Only floating-point inputs carry gradients: with any other input the op runs without one.
    backward gets one gradient per output, None where TensorFlow gives none (integer outputs)."""
    if not all(t.dtype.is_floating or t.dtype.is_complex for t in tensors):
        return forward(tensors)

    @tf.custom_gradient
    def fn(*ts):
        outs = forward(list(ts))

        def grad(*dys):
            return backward(list(dys))
        return outs, grad
    return list(fn(*tensors))


def _with_gradient(tensor, forward, backward):
    """with_gradients for one input and one output."""
    return with_gradients([tensor], lambda ts: [forward(ts[0])], lambda dys: [backward(dys[0])])[0]


@_no_autograph
def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Average (default) or sum `tensor` over all ranks (of `process_set`); differentiable (the gradient
    is the same allreduce of the output gradient). Min, Max and Product have no gradient.

    The result is prescale_factor * sum(tensor) * postscale_factor (/ the set's size
    for Average). A tf.IndexedSlices is allgathered (values and indices), as Horovod does.
    """
    op = _resolve_op(op, average)
    process_set, set_id = process_set_and_id(process_set)
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_indexed_slices(tensor, name, op, prescale_factor, postscale_factor, set_id)
    full = full_name("allreduce", name, set_id)

    def forward(t):
        compressed, ctx = compression.compress(t)
        out = grouped_allreduce_raw([compressed], [full], op, prescale_factor, postscale_factor,
                                    process_set=set_id)[0]
        return compression.decompress(out, ctx)

    def backward(dy):
        _check_differentiable_op(op)
        return allreduce(dy, op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                         name=grad_name(name), process_set=process_set)
    return _with_gradient(tf.convert_to_tensor(tensor), forward, backward)


def _check_differentiable_op(op):
    if op in _runtime.GATHER_OPS:
        raise ValueError(f"mgs.tensorflow.allreduce(op={_runtime.op_name(op)}) has no gradient; only Sum "
                         "and Average are differentiable")


@_no_autograph
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Allreduce each tensor of a list (of `process_set`), all enqueued before any is waited for;
    differentiable as allreduce (the gradients are grouped too)."""
    op = _resolve_op(op, average)
    process_set, set_id = process_set_and_id(process_set)
    if not tensors:
        return []
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    names = grouped_names("allreduce", name, len(tensors), set_id)

    def forward(ts):
        pairs = [compression.compress(t) for t in ts]
        outs = grouped_allreduce_raw([p[0] for p in pairs], names, op, prescale_factor, postscale_factor,
                                     process_set=set_id)
        return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]

    def backward(dys):
        _check_differentiable_op(op)
        dys = [tf.zeros_like(t) if dy is None else dy for dy, t in zip(dys, tensors)]
        return grouped_allreduce(dys, op=op, prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                 process_set=process_set, name=grad_name(name))
    return with_gradients(tensors, forward, backward)


def _gather_with_gradient(tensors, names, process_set, set_id, name, grouped):
    """Allgather `tensors` under `names`, differentiable as in Horovod: the gradient of each input is
    this rank's rows of the output gradient averaged over the set."""
    sizes = []

    def forward(ts):
        outs, rank_sizes = allgather_raw(ts, names, set_id)
        sizes[:] = rank_sizes
        return outs

    def backward(dys):
        dys = [tf.zeros_like(t) if dy is None else dy for dy, t in zip(dys, tensors)]
        if grouped:
            grad_names = grouped_names("allreduce", grad_name(name), len(dys), set_id)
        else:
            grad_names = [full_name("allreduce", grad_name(name), set_id)]
        averaged = grouped_allreduce_raw(dys, grad_names, Average, process_set=set_id)
        me = process_set.rank()
        grads = []
        for g, rows in zip(averaged, sizes):
            offset = tf.reduce_sum(rows[:me])
            grads.append(g[offset:offset + rows[me]])
        return grads
    return with_gradients(tensors, forward, backward)


@_no_autograph
def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenate `tensor` from every rank (of `process_set`) along the first dimension, which may
    differ per rank.

    Differentiable, as in Horovod: the gradient is this rank's rows of the output
    gradient averaged over the ranks (of the set)."""
    tensor = tf.convert_to_tensor(tensor)
    _check_not_scalar(tensor, "allgather")
    process_set, set_id = process_set_and_id(process_set)
    return _gather_with_gradient([tensor], [full_name("allgather", name, set_id)], process_set, set_id, name,
                                 grouped=False)[0]


@_no_autograph
def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Allgather each tensor of a list (all enqueued before any is waited for); differentiable as allgather."""
    process_set, set_id = process_set_and_id(process_set)
    if not tensors:
        return []
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        _check_not_scalar(t, "allgather")
    names = grouped_names("allgather", name, len(tensors), set_id)
    return _gather_with_gradient(tensors, names, process_set, set_id, name, grouped=True)


@_no_autograph
def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """root_rank's `tensor` on every rank (of `process_set`; root_rank is a world rank), as a new tensor.

    Differentiable, as in Horovod: root_rank's gradient is the output gradient
    averaged over the ranks (of the set), the others' zero."""
    tensor = tf.convert_to_tensor(tensor)
    process_set, set_id = process_set_and_id(process_set)
    full = full_name("broadcast", name, set_id)

    def forward(t):
        return grouped_broadcast([t], root_rank, [full], set_id)[0]

    def backward(dy):
        averaged = allreduce(dy, op=Average, name=grad_name(name), process_set=process_set)
        return averaged if rank() == root_rank else tf.zeros_like(averaged)
    return _with_gradient(tensor, forward, backward)


@_no_autograph
def grouped_broadcast(tensors, root_rank, names, process_set=0):
    """Broadcast a list of tensors under the given full names (one call)."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []

    def fn(arrays):
        return wait_all(enqueue_all([lambda a=a, n=n: np_broadcast(a, root_rank, n, process_set)
                                     for a, n in zip(arrays, names)]))
    return run_numpy(fn, tensors, [t.dtype for t in tensors], [t.shape for t in tensors])
