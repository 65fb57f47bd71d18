"""Model, optimizer and object synchronisation built on the collectives (Horovod's helpers)."""

import pickle

import torch

from . import mpi_ops


def broadcast_parameters(params, root_rank, prefix="parameters"):
    """Overwrite every rank's tensors with root_rank's, in place.

    params: a model's state_dict(), named_parameters(), a list of (name, tensor)
    pairs, or a plain list of tensors (matched by position). Names must be the same on every rank; all broadcasts are enqueued
    before any is waited for.
    """
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
        if items and all(torch.is_tensor(i) for i in items):
            items = [(str(i), t) for i, t in enumerate(items)]  # a plain list: named by position
        elif items and not all(isinstance(i, tuple) and len(i) == 2 for i in items):
            raise ValueError("broadcast_parameters expects a state_dict, (name, tensor) pairs or a list of "
                             "tensors")
    for name, tensor in items:
        if tensor is not None and not torch.is_tensor(tensor):
            raise ValueError(f"broadcast_parameters: {name!r} is a {type(tensor).__name__}, not a tensor")
    names = [name for name, _ in items]
    dups = sorted({str(n) for n in names if names.count(n) > 1})
    if dups:
        raise ValueError(f"broadcast_parameters: duplicate names {', '.join(dups)}")
    _broadcast_all([(f"{prefix}.{name}", t.data) for name, t in items if t is not None], root_rank)


def _broadcast_all(named_tensors, root_rank):
    """In-place broadcasts of (name, tensor) pairs: all enqueued, then all waited for."""
    handles = []
    try:
        for name, tensor in named_tensors:
            handles.append(mpi_ops.broadcast_async_(tensor, root_rank, name=name))
    except Exception:
        _synchronize_all(handles)  # the ops already enqueued use live buffers: finish them first
        raise
    _synchronize_all(handles)


def _synchronize_all(handles):
    error = None
    for h in handles:  # wait for every op before raising: each uses a live buffer
        try:
            mpi_ops.synchronize(h)
        except Exception as e:  # noqa: BLE001 - re-raised below
            error = error or e
    if error is not None:
        raise error


class _TensorSpec:
    """Stands for a tensor in the picklable skeleton of a state dict."""

    def __init__(self, tensor):
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.dtype


def _skeleton(obj, path, tensors):
    """A copy of `obj` with every tensor replaced by a _TensorSpec; `tensors` maps path -> tensor."""
    if torch.is_tensor(obj):
        tensors[path] = obj
        return _TensorSpec(obj)
    if isinstance(obj, dict):
        return {k: _skeleton(v, path + (k,), tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_skeleton(v, path + (i,), tensors) for i, v in enumerate(obj))
    return obj


def _fill(obj, path, tensors):
    if isinstance(obj, _TensorSpec):
        return tensors[path]
    if isinstance(obj, dict):
        return {k: _fill(v, path + (k,), tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fill(v, path + (i,), tensors) for i, v in enumerate(obj))
    return obj


def broadcast_optimizer_state(optimizer, root_rank, prefix="optimizer", model=None):
    """Make every rank's optimizer state (hyperparameters and per-parameter state) equal to root_rank's.

    Works for any torch optimizer, wrapped by DistributedOptimizer or not, and
    whether or not a rank's state is initialised yet: the structure and the
    non-tensor values travel as one pickled broadcast, the tensors as in-place
    broadcasts into this rank's own state tensors (zeros where it has none).
    `model` is accepted for Horovod compatibility: the optimizer's state_dict
    already names its parameters by position, so the model is not needed.
    As in Horovod, when the optimizer has no state yet, parameters that require
    a gradient and have none get a zero gradient (sparse for SparseAdam).
    """
    del model
    if not optimizer.state:
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
                    if isinstance(optimizer, torch.optim.SparseAdam):
                        p.grad = p.grad.to_sparse()
    # A DistributedOptimizer's residuals are this rank's own: only the wrapped optimizer's state travels.
    state_of = getattr(optimizer, "_base_state_dict", optimizer.state_dict)
    load = getattr(optimizer, "_load_base_state_dict", optimizer.load_state_dict)
    own = {}
    skeleton = _skeleton(state_of(), (), own)
    is_root = mpi_ops.rank() == root_rank
    skeleton = broadcast_object(skeleton if is_root else None, root_rank, name=f"{prefix}.skeleton")
    specs = {}
    _skeleton_specs(skeleton, (), specs)
    tensors = {}
    for path, spec in specs.items():
        t = own.get(path)
        if t is None or tuple(t.shape) != spec.shape or t.dtype != spec.dtype:
            t = torch.zeros(spec.shape, dtype=spec.dtype)
        tensors[path] = t
    _broadcast_all([(f"{prefix}.{i}", t) for i, t in enumerate(tensors.values())], root_rank)
    if not is_root:
        load(_fill(skeleton, (), tensors))


def _skeleton_specs(obj, path, out):
    if isinstance(obj, _TensorSpec):
        out[path] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _skeleton_specs(v, path + (k,), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _skeleton_specs(v, path + (i,), out)


def _dumps(obj):
    return torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)


def _loads(data):
    return pickle.loads(data.numpy().tobytes())


def broadcast_object(obj, root_rank=0, name=None, process_set=mpi_ops.global_process_set):
    """root_rank's picklable `obj` on every rank (of `process_set`; other ranks' `obj` is ignored)."""
    base = f"object.{name or 'noname'}"
    is_root = mpi_ops.rank() == root_rank
    payload = _dumps(obj) if is_root else None
    length = torch.tensor([payload.numel() if is_root else 0], dtype=torch.int64)
    mpi_ops.broadcast_(length, root_rank, name=f"{base}.length", process_set=process_set)
    if not is_root:
        payload = torch.empty(int(length.item()), dtype=torch.uint8)
    mpi_ops.broadcast_(payload, root_rank, name=f"{base}.payload", process_set=process_set)
    return obj if is_root else _loads(payload)


def allgather_object(obj, name=None, process_set=mpi_ops.global_process_set):
    """A list with every rank's (of `process_set`) picklable `obj`, in rank order."""
    base = f"object.{name or 'noname'}"
    gathered, sizes = mpi_ops._allgather_with_sizes(_dumps(obj), name=base, process_set=process_set)
    out, offset = [], 0
    for n in sizes:
        out.append(_loads(gathered.narrow(0, offset, n)))
        offset += n
    return out
