"""Checkpointing the error-feedback residuals of mgs.tensorflow's gradient reductions.

With MGS_COMPRESSOR set, every rank keeps, per sparsified gradient, the part
it has not sent yet (its residual); a resumed job continues as the
uninterrupted one would only with each rank's residuals and the runtime's
sparse progress (step counter, agreed-index leaders) restored. The runtime
names a gradient after the DistributedGradientTape (or Keras
DistributedOptimizer) that reduced it and its source variable:
"allreduce.grad.<tape name>.<index>.<variable name>"; a saved state keys each
residual by "<index>.<variable name>" (the variable's position among the
sources given to tape.gradient(), and its path or name), so loading needs the
same variables in the same order (the tape may be named otherwise).

The state is a dict of numpy arrays, ints and strings (picklable), this
rank's alone: every rank saves its own and loads it back.
"""

import warnings

import numpy as np
import tensorflow as tf

from .. import _checkpoint, _runtime
from .gradient_tape import TAPE_NAME, gradient_names


def entries(variables, tape_name, set_id=0):
    """(key, the runtime's name of its gradient, shape) of every floating-point source in `variables`.

    The positions are the ones DistributedGradientTape.gradient() gives them (tf.nest.flatten of the sources).
    set_id: the process set the gradients are reduced in (the runtime keeps a set's residuals under
    "<name> [process set <id>]").
    """
    out = []
    for i, v in enumerate(tf.nest.flatten(variables)):
        dtype = getattr(v, "dtype", None)
        if dtype is None or not tf.as_dtype(dtype).is_floating:
            continue
        key, _, full = gradient_names(tape_name, i, v)
        full = _runtime.qualified_name(full, set_id)
        shape = tuple(v.shape)
        if any(d is None for d in shape):
            raise ValueError(f"source '{key}' has a shape with unknown dimensions, {list(shape)}: the size of "
                             "its residual is not known")
        out.append((key, full, tuple(int(d) for d in shape)))
    return out


def _read(runtime_name, shape):
    """This rank's residual of `runtime_name` as a float32 array of `shape`, or None where it has none."""
    n = int(np.prod(shape, dtype=np.int64))
    buf = np.empty(n, np.float32)
    if n and _runtime.residual_copy(runtime_name, buf.ctypes.data, n):
        return buf.reshape(shape)
    return None


def save(items, api):
    """This rank's saved state for `items` (see entries()); ValueError when mgs is not running."""
    if _checkpoint.running() is None:
        raise ValueError(f"{api}: mgs is not running on this rank (init() not called, or shut down): there "
                         "are no error-feedback residuals to save")
    state = _checkpoint.header()
    residuals = {}
    for key, runtime_name, shape in items:
        r = _read(runtime_name, shape)
        if r is not None:
            residuals[key] = r
    state["residuals"] = residuals
    state["sparse_state"] = np.frombuffer(_runtime.sparse_state(), dtype=np.uint8).copy()
    return state


def _float32(t):
    if isinstance(t, np.ndarray):
        return None if t.dtype == np.float32 else f"{t.dtype}"
    return type(t).__name__


def _blob_ok(blob):
    return isinstance(blob, (bytes, bytearray)) or (
        isinstance(blob, np.ndarray) and blob.dtype == np.uint8 and blob.ndim == 1)


def wording(api, owner, owners, unknown_hint):
    return _checkpoint.Wording(api=api, container="residual state", entry="the residual state", kind="array",
                               owner=owner, owners=owners, unknown_hint=unknown_hint, target="the variable",
                               drop_hint="load None instead to start the residuals from zero")


def load(state, items, words, stacklevel=3):
    """Check `state` against `items` (nothing loaded if it does not fit), then restore it; None: zeros."""
    if state is not None:
        _checkpoint.check(state, words, {key: shape for key, _, shape in items}, _float32, _blob_ok,
                          stacklevel=stacklevel)
    where = _checkpoint.running()
    if where is None:
        return  # None loaded while not running: nothing held, nothing to clear
    if state is None and _checkpoint.compressor_set():
        warnings.warn(f"{words.api} on rank {where[0]}: no residual state was given (None), so the error-feedback "
                      "residuals start from zero: the gradient they held is not sent", RuntimeWarning,
                      stacklevel=stacklevel)
    residuals = state["residuals"] if state is not None else {}
    for key, runtime_name, shape in items:
        r = residuals.get(key)
        if r is not None:
            r = np.ascontiguousarray(r, dtype=np.float32).reshape(-1)
            _runtime.residual_restore(runtime_name, r.ctypes.data, r.size)
            continue
        # Not in the state: zero, as in a job that never sparsified it (only if it holds one now).
        current = _read(runtime_name, shape)
        if current is not None:
            current = np.zeros(current.size, np.float32)
            _runtime.residual_restore(runtime_name, current.ctypes.data, current.size)
    if state is not None:
        blob = state["sparse_state"]
        _checkpoint.restore_sparse_state(state, bytes(blob) if isinstance(blob, (bytes, bytearray)) else
                                         blob.tobytes())


def residual_state(variables, name=None, process_set=None):
    """This rank's error-feedback state for the gradients of `variables` reduced by DistributedGradientTape.

    variables: the sources given to tape.gradient() (e.g. model.trainable_variables), in the same order.
    name: the DistributedGradientTape's name= (None: its default).
    process_set: the tape's process_set= (None: the global set).
    Returns a dict of numpy arrays, ints and strings: "residuals" (by "<index>.<variable name>", float32
    arrays shaped like the variables; gradients never sparsified on this rank have none), "rank",
    "world_size", "settings", "sparse_state" (uint8) and "version". Every rank saves its own. Call it
    eagerly, between steps.
    """
    return save(entries(variables, name or TAPE_NAME, _set_id(process_set)), "mgs.tensorflow.residual_state()")


def _set_id(process_set):
    if process_set is None:
        return 0
    from . import mpi_ops
    return mpi_ops.process_set_and_id(process_set)[1]


def load_residual_state(state, variables, name=None, process_set=None):
    """Restore a residual_state() of this rank: its residuals and the runtime's sparse progress.

    variables, name: as given to residual_state() (the same variables in the same order; the tape name
    may differ). The state is checked first (same world size, this rank's own, every residual naming one of
    `variables` with its shape): a mismatch raises ValueError naming the rank and the tensor, and nothing
    is loaded. state=None starts every residual from zero (with a warning when a compressor is set). Call it
    eagerly, between steps, on every rank with the state that rank saved.
    """
    load(state, entries(variables, name or TAPE_NAME, _set_id(process_set)),
         wording("mgs.tensorflow.load_residual_state()", "a floating-point variable in the variables given",
                 "their names", "was it saved from another model, or with other variables or in another order?"))
