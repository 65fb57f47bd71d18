"""alltoall, reducescatter and grouped_reducescatter on TensorFlow tensors, with Horovod's names,
semantics and gradients (see mpi_ops for how tensors reach the runtime, and for names).

Errors a rank finds alone (splits that do not fit its tensor, a scalar) would
leave the ranks whose input is fine waiting for an op that never comes. So a
rank that refuses its alltoall still submits an empty one under the same
name, which makes the op fail on every rank that submitted it (the runtime
reports the disagreement, naming the tensor and the ranks), and then raises
its own, more precise error.
"""

import numpy as np
import tensorflow as tf

from .. import _abi, _process_sets, _runtime
from .._process_sets import global_process_set
from .compression import Compression
from .mpi_ops import (_REDUCIBLE, Average, Sum, _Desc, _no_autograph, _Op, allgather_raw, enqueue_all,
                      full_name, grad_name, grouped_names, mgs_dtype, process_set_and_id, run_numpy, wait_all,
                      with_gradients)

# ------------------------------------------------------------------ alltoall --


def _splits_list(splits, n):
    """`splits` (a numpy array or sequence of integers) as a list of n ints, or ValueError."""
    arr = np.asarray(splits)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise ValueError(f"alltoall splits must be integers, got {arr.dtype.name} values {arr.tolist()!r}")
    parts = [int(x) for x in arr.reshape(-1)]
    if len(parts) != n:
        raise ValueError(f"alltoall needs one split per rank of the process set ({n}), got {len(parts)}: {parts}")
    return parts


def np_alltoall(array, code, splits, name, process_set=0):
    """Enqueue an alltoall of `array`; its result is (received array, int32 array of rows from each rank).

    `code`: the array's mgs dtype, or None for a dtype the runtime does not know
    (sent as bytes: the last dimension widened by the item size, so the first
    keeps its meaning). `splits`: rows to each rank of the set (None: equal parts).
    """
    work = np.asarray(array, order="C")
    n = _process_sets.set_size(process_set)
    sent_code = _abi.MGS_UINT8 if code is None else code
    try:
        if work.ndim == 0:
            raise ValueError("alltoall needs a tensor with at least one dimension (it splits the first); "
                             "reshape a scalar to [1]")
        parts = None if splits is None else _splits_list(splits, n)
        raw = work if code is not None else \
            (work.reshape(work.shape + (1,)) if work.ndim == 1 else work).view(np.uint8)
        d = _Desc(raw, sent_code)
        handle = _runtime.enqueue_alltoall(name, d, parts, process_set)
    except ValueError:
        _fail_on_every_rank(name, sent_code, process_set)
        raise

    def finish(h):
        shape, sizes = _runtime.allgather_output(h, n)
        out = np.empty(shape, raw.dtype)
        _runtime.allgather_copy(h, _Desc(out, sent_code))
        if code is None:
            out = out.view(work.dtype).reshape((shape[0],) + work.shape[1:])
        return out, np.asarray(sizes, np.int32)
    return _Op(handle, (d,), finish)


def _fail_on_every_rank(name, sent_code, process_set):
    """Submit an empty alltoall under `name`, of a dtype other than `sent_code`, and wait for it.

    The ranks whose input was fine fail with the runtime's report of the
    disagreement instead of waiting forever. If every rank refused alike, the
    stand-ins agree and complete, and each rank raises its own error."""
    if sent_code == _abi.MGS_UINT8:
        stand_in, code = np.empty((0,), np.int64), _abi.MGS_INT64
    else:
        stand_in, code = np.empty((0,), np.uint8), _abi.MGS_UINT8
    _runtime.submit_stand_in(lambda: _runtime.enqueue_alltoall(name, _Desc(stand_in, code), None, process_set))


def _alltoall_raw(tensor, splits, name, set_id):
    """(received tensor, received splits int32 [set size]) for one alltoall, eagerly or in a graph."""
    code = _REDUCIBLE.get(tensor.dtype)
    n = _process_sets.set_size(set_id)

    def fn(arrays):
        return wait_all([np_alltoall(arrays[0], code, arrays[1] if len(arrays) > 1 else None, name, set_id)])[0]
    inputs = [tensor] if splits is None else [tensor, splits]
    shape = tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank is not None else None
    return run_numpy(lambda arrays: list(fn(arrays)), inputs, [tensor.dtype, tf.int32], [shape, tf.TensorShape([n])])


@_no_autograph
def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Send splits[q] rows of `tensor` (along the first dimension, in order) to the q-th rank of the set.

    Returns the rows every rank of the set sent here, concatenated in rank order;
    with `splits` given, (that tensor, the rows received from each rank as an
    int32 tensor). Without `splits` the first dimension is split equally.
    Differentiable, as in Horovod: the gradient is the alltoall of the output
    gradient with the received splits (each row's gradient travels back to its sender).
    """
    process_set, set_id = process_set_and_id(process_set)
    tensor = tf.convert_to_tensor(tensor)
    # Every check of the input happens in np_alltoall, where a refusal also fails the other ranks' op.
    splits_t = None if splits is None else tf.convert_to_tensor(splits)
    full = full_name("alltoall", name, set_id)
    results = []

    def forward(ts):
        results[:] = _alltoall_raw(ts[0], splits_t, full, set_id)
        return list(results)

    def backward(dys):
        out, received = results
        dy = tf.zeros_like(out) if dys[0] is None else dys[0]
        grad, _ = _alltoall_raw(dy, received, full_name("alltoall", grad_name(name), set_id), set_id)
        return [grad]
    out, received = with_gradients([tensor], forward, backward)
    return out if splits is None else (out, received)


# ------------------------------------------------------------- reducescatter --

_resolve_scatter_op = _runtime.resolve_scatter_op


def _rows_here(d0, process_set):
    """Rows of a d0-row reducescatter that this rank keeps: d0 // n, one more for the first d0 % n ranks."""
    n = process_set.size()
    me = max(process_set.rank(), 0)  # a rank outside the set: the runtime fails the op, naming it
    return d0 // n + (1 if me < d0 % n else 0)


def np_reducescatter(array, code, rows, name, op, prescale_factor, postscale_factor, process_set=0):
    """Enqueue a reducescatter of `array` (mgs dtype `code`) into a new array of `rows` rows."""
    work = np.asarray(array, order="C")
    out = np.empty((rows,) + work.shape[1:], work.dtype)
    dins, douts = _Desc(work, code), _Desc(out, code)
    handle = _runtime.enqueue_reducescatter(name, dins, douts, op, prescale_factor, postscale_factor, process_set)
    return _Op(handle, (dins, douts), lambda h: out)


def _reducescatter_raw(tensors, names, op, prescale_factor, postscale_factor, process_set, set_id):
    codes = [mgs_dtype(t.dtype) for t in tensors]  # TypeError for dtypes the runtime cannot reduce

    def rows(d0):
        return _rows_here(int(d0), process_set)

    def fn(arrays):
        return wait_all(enqueue_all(
            [lambda a=a, c=c, n=n: np_reducescatter(a, c, rows(a.shape[0]), n, op, prescale_factor,
                                                    postscale_factor, set_id)
             for a, c, n in zip(arrays, codes, names)]))
    shapes = []
    for t in tensors:
        if t.shape.rank is None:
            shapes.append(None)
        else:
            d0 = t.shape[0]
            shapes.append(tf.TensorShape([None if d0 is None else rows(d0)]).concatenate(t.shape[1:]))
    return run_numpy(fn, tensors, [t.dtype for t in tensors], shapes)


def _scattered_gradients(dys, outs, name, op, prescale_factor, postscale_factor, process_set, set_id, grouped):
    """Horovod's gradient of a reducescatter: the output gradients allgathered over the set, times
    the scale factors and, for Sum, the set's size."""
    dys = [tf.zeros_like(o) if dy is None else dy for dy, o in zip(dys, outs)]
    if grouped:
        names = grouped_names("allgather", grad_name(name), len(dys), set_id)
    else:
        names = [full_name("allgather", grad_name(name), set_id)]
    gathered, _ = allgather_raw(dys, names, set_id)
    factor = prescale_factor * postscale_factor * (process_set.size() if op == Sum else 1)
    return [g * tf.cast(factor, g.dtype) if factor != 1 else g for g in gathered]


def _check_scatterable(tensors):
    for t in tensors:
        mgs_dtype(t.dtype)
        if t.shape.rank == 0:
            raise ValueError("reducescatter needs a tensor with at least one dimension (it splits the first); "
                             "reshape a scalar to [1]")


@_no_autograph
def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduce `tensor` over the ranks (of `process_set`) and keep this rank's part of the first dimension.

    With d rows over n ranks, the set's q-th rank gets d // n rows, one more for
    q < d % n. op: Average (the default, as in Horovod) or Sum; the result is
    prescale_factor * reduce(tensor) * postscale_factor. Differentiable, as in
    Horovod: the gradient is the output gradient allgathered over the set (times
    the set's size for Sum, and the scale factors).
    """
    op = _resolve_scatter_op(op)
    process_set, set_id = process_set_and_id(process_set)
    tensor = tf.convert_to_tensor(tensor)
    _check_scatterable([tensor])
    full = full_name("reducescatter", name, set_id)
    outs = []

    def forward(ts):
        compressed, ctx = compression.compress(ts[0])
        out = _reducescatter_raw([compressed], [full], op, prescale_factor, postscale_factor, process_set,
                                 set_id)[0]
        outs[:] = [compression.decompress(out, ctx)]
        return outs

    def backward(dys):
        return _scattered_gradients(dys, outs, name, op, prescale_factor, postscale_factor, process_set, set_id,
                                    grouped=False)
    return with_gradients([tensor], forward, backward)[0]


@_no_autograph
def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0, name=None):
    """Reducescatter each tensor of a list (all enqueued before any is waited for); differentiable as
    reducescatter."""
    op = _resolve_scatter_op(op)
    process_set, set_id = process_set_and_id(process_set)
    if not tensors:
        return []
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    _check_scatterable(tensors)
    names = grouped_names("reducescatter", name, len(tensors), set_id)
    outs = []

    def forward(ts):
        pairs = [compression.compress(t) for t in ts]
        reduced = _reducescatter_raw([p[0] for p in pairs], names, op, prescale_factor, postscale_factor,
                                     process_set, set_id)
        outs[:] = [compression.decompress(r, p[1]) for r, p in zip(reduced, pairs)]
        return list(outs)

    def backward(dys):
        return _scattered_gradients(dys, outs, name, op, prescale_factor, postscale_factor, process_set, set_id,
                                    grouped=True)
    return with_gradients(tensors, forward, backward)
