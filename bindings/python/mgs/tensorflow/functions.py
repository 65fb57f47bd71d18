"""Variable and object synchronisation built on the collectives (Horovod's helpers)."""

import pickle

import numpy as np
import tensorflow as tf

from . import mpi_ops


@tf.autograph.experimental.do_not_convert
def broadcast_variables(variables, root_rank, process_set=mpi_ops.global_process_set, inplace=False,
                        prefix="variables"):
    """Assign root_rank's values to every rank's `variables` (a list of tf.Variable).

    Eager: all broadcasts are enqueued, then all waited for, then assigned. In a
    tf.function: returns the group of assign ops (one tf.py_function for all).
    Variables are matched across ranks by their position in the list.
    `process_set`: broadcast within that set (root_rank is a world rank in it).
    `inplace` is Horovod's choice of kernel; the variables are assigned either way.
    """
    del inplace
    set_id = mpi_ops.sid(process_set)
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    names = [f"broadcast.{prefix}.{i}" for i in range(len(variables))]
    values = mpi_ops.grouped_broadcast([v.read_value() if hasattr(v, "read_value") else v for v in variables],
                                       root_rank, names, set_id)
    assigns = [v.assign(x) for v, x in zip(variables, values)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def _dumps(obj):
    return np.frombuffer(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), dtype=np.uint8)


def broadcast_object(obj, root_rank=0, name=None, process_set=mpi_ops.global_process_set):
    """root_rank's picklable `obj` on every rank (of `process_set`; other ranks' `obj` is ignored). Eager only."""
    set_id = mpi_ops.sid(process_set)
    base = f"broadcast.object.{name or 'noname'}"
    is_root = mpi_ops.rank() == root_rank
    payload = _dumps(obj) if is_root else None
    length = np.array([payload.size if is_root else 0], dtype=np.int64)
    length = mpi_ops.wait_all([mpi_ops.np_broadcast(length, root_rank, f"{base}.length", set_id)])[0]
    if not is_root:
        payload = np.zeros(int(length[0]), dtype=np.uint8)
    payload = mpi_ops.wait_all([mpi_ops.np_broadcast(payload, root_rank, f"{base}.payload", set_id)])[0]
    return obj if is_root else pickle.loads(payload.tobytes())


def allgather_object(obj, name=None, process_set=mpi_ops.global_process_set):
    """A list with every rank's (of `process_set`) picklable `obj`, in rank order. Eager only."""
    set_id = mpi_ops.sid(process_set)
    full = f"allgather.object.{name or 'noname'}"
    gathered, sizes = mpi_ops.wait_all([mpi_ops.np_allgather(_dumps(obj), full, set_id)])[0]
    out, offset = [], 0
    for n in sizes:
        out.append(pickle.loads(gathered[offset:offset + n].tobytes()))
        offset += n
    return out
