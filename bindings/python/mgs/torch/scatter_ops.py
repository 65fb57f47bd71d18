"""alltoall and reducescatter with Horovod's names and semantics (see mpi_ops for handles and names)."""

import torch

from .. import _process_sets, _runtime
from .._process_sets import global_process_set
from . import _tensor
from .compression import Compression
from .mpi_ops import (Average, Sum, _describe, _full_name, _group_handle, _grouped_names, _register, _sid,
                      allgather_async, synchronize)


def _splits_list(splits, n):
    """`splits` (a tensor or sequence of integers, or None) as a list of ints."""
    if splits is None:
        return None
    if torch.is_tensor(splits):
        if splits.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"alltoall splits must hold 32- or 64-bit integers, got {splits.dtype}")
        splits = splits.detach().cpu().reshape(-1).tolist()
    else:
        splits = list(splits)
        if any(not isinstance(x, int) or isinstance(x, bool) for x in splits):
            raise ValueError(f"alltoall splits must be integers, got {splits!r}")
    if len(splits) != n:
        raise ValueError(f"alltoall needs one split per rank of the process set ({n}), got {len(splits)}")
    return splits


def _refuse_everywhere(full_name, tensor, sid):
    """This rank refuses its alltoall (bad splits, a scalar): submit an empty one of another dtype under
    the same name and wait for it, so that ranks whose input was fine fail with the runtime's report of the
    disagreement (naming the tensor and the ranks) instead of waiting forever. Where every rank refused
    alike, the stand-ins agree and complete. The caller then raises its own error."""
    try:
        sent = _tensor.as_bytes(tensor.detach().contiguous()).dtype
    except Exception:  # noqa: BLE001 - a dtype mgs cannot even view as bytes
        sent = tensor.dtype
    stand_in = torch.empty(0, dtype=torch.int64 if sent == torch.uint8 else torch.uint8)
    _runtime.submit_stand_in(lambda: _runtime.enqueue_alltoall(full_name, _describe(stand_in)[0], None, sid))


def _alltoall_async(tensor, splits, full_name, sid, splits_like=None):
    try:
        if tensor.dim() == 0:
            raise ValueError("alltoall needs a tensor with at least one dimension (it splits the first)")
        n = _process_sets.set_size(sid)
        parts = _splits_list(splits, n)
        dtype, work = tensor.dtype, tensor.contiguous()
        raw = _tensor.as_bytes(work)
        # A 1-D tensor viewed as bytes has its first dimension scaled by the element size.
        scale = raw.shape[0] // work.shape[0] if work.dim() == 1 and work.shape[0] and raw is not work else 1
        if raw is not work and work.dim() == 1 and work.shape[0] == 0:
            scale = work.element_size()
        descs = _describe(raw)
        handle = _runtime.enqueue_alltoall(full_name, descs[0], None if parts is None else [p * scale for p in parts],
                                           sid)
    except ValueError:
        _refuse_everywhere(full_name, tensor, sid)
        raise
    like = splits if torch.is_tensor(splits) else splits_like

    def finish(h, pending):
        shape, sizes = _runtime.allgather_output(h, n)
        out = torch.empty(shape, dtype=raw.dtype, device=raw.device)
        _runtime.allgather_copy(h, _describe(out)[0])
        received = [s // scale for s in sizes]
        pending.rank_sizes = received
        device = like.device if like is not None else torch.device("cpu")
        return _tensor.from_bytes(out, dtype), torch.tensor(received, dtype=torch.int32, device=device)
    return _register(handle, descs, finish)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Start an alltoall; synchronize() returns (received tensor, received splits)."""
    sid = _sid(process_set)
    return _alltoall_async(tensor, splits, _full_name("alltoall", name, sid), sid)


class _AlltoallFn(torch.autograd.Function):
    """alltoall with a gradient: the gradients sent back along the same splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        sid = _sid(process_set)
        out, received = synchronize(_alltoall_async(tensor, splits, _full_name("alltoall", name, sid), sid))
        ctx.args = (received, name, process_set)
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad_output, _):
        received, name, process_set = ctx.args
        sid = _sid(process_set)
        grad_name = _full_name("alltoall", None if name is None else f"grad.{name}", sid)
        grad, _ = synchronize(_alltoall_async(grad_output.contiguous(), received, grad_name, sid))
        return grad, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Send splits[q] rows of `tensor` (along the first dimension, in order) to the q-th rank of the set.

    Returns the rows every rank sent here, concatenated in rank order; with
    `splits` given, (that tensor, the rows received from each rank as an int32
    tensor). Without `splits` the first dimension is split equally.
    Differentiable: the gradient travels back along the same splits.
    """
    _sid(process_set)
    out, received = _AlltoallFn.apply(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


# ------------------------------------------------------------ reducescatter --

_resolve_scatter_op = _runtime.resolve_scatter_op


def _reducescatter_async(tensor, full_name, op, prescale_factor, postscale_factor, sid):
    _tensor.mgs_dtype(tensor.dtype)  # TypeError for dtypes the runtime cannot reduce
    if tensor.dim() == 0:
        raise ValueError("reducescatter needs a tensor with at least one dimension (it splits the first)")
    work = tensor.contiguous()
    ranks = _process_sets.set_size(sid)
    me = max(_runtime.rank() if sid == 0 else _set_index(sid), 0)
    d0 = work.shape[0]
    rows = d0 // ranks + (1 if me < d0 % ranks else 0)
    out = torch.empty((rows,) + tuple(work.shape[1:]), dtype=work.dtype, device=work.device)
    descs = _describe(work, out)
    handle = _runtime.enqueue_reducescatter(full_name, descs[0], descs[1], op, prescale_factor, postscale_factor, sid)
    return _register(handle, descs, lambda *_: out)


def _set_index(sid):
    ranks = _runtime.process_set_ranks(sid)
    me = _runtime.rank()
    return ranks.index(me) if me in ranks else -1


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0):
    """Start a reducescatter; synchronize() returns this rank's part of the reduced tensor."""
    op = _resolve_scatter_op(op)
    sid = _sid(process_set)
    return _reducescatter_async(tensor, _full_name("reducescatter", name, sid), op, prescale_factor,
                                postscale_factor, sid)


def _scatter_grad(grad, name, op, pre, post, process_set):
    """Horovod's gradient of a reducescatter: the parts allgathered (times the set's size for Sum)."""
    sid = _sid(process_set)
    gathered = synchronize(allgather_async(grad.contiguous(), name=None if name is None else f"grad.{name}",
                                           process_set=process_set))
    factor = pre * post * (_process_sets.set_size(sid) if op == Sum else 1)
    return gathered * factor if factor != 1 else gathered


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, pre, post, process_set):
        ctx.args = (name, op, pre, post, process_set)
        return synchronize(reducescatter_async(tensor, name, op, process_set, pre, post))

    @staticmethod
    def backward(ctx, grad_output):
        return (_scatter_grad(grad_output, *ctx.args),) + (None,) * 5


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce `tensor` over the ranks (of `process_set`) and keep this rank's part of the first dimension.

    With d rows over n ranks, rank q gets d // n rows, one more for q < d % n.
    Differentiable (the gradient is allgathered, as in Horovod).
    """
    op = _resolve_scatter_op(op)
    _sid(process_set)
    compressed, ctx = compression.compress(tensor)
    out = _ReducescatterFn.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(out, ctx)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Start reducescatters of a list of tensors; one handle whose synchronize() returns the list."""
    op = _resolve_scatter_op(op)
    sid = _sid(process_set)
    names = _grouped_names("reducescatter", name, len(tensors), sid)
    return _group_handle([_reducescatter_async(t, n, op, prescale_factor, postscale_factor, sid)
                          for t, n in zip(tensors, names)])


class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, pre, post, process_set, *tensors):
        ctx.args = (name, op, pre, post, process_set)
        return tuple(synchronize(grouped_reducescatter_async(list(tensors), name, op, process_set, pre, post)))

    @staticmethod
    def backward(ctx, *grads):
        name, op, pre, post, process_set = ctx.args
        return (None,) * 5 + tuple(_scatter_grad(g, None if name is None else f"{name}.{i}", op, pre, post,
                                                 process_set) for i, g in enumerate(grads))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter each tensor of a list (all enqueued before any is waited for); differentiable."""
    op = _resolve_scatter_op(op)
    if not tensors:
        return []
    _sid(process_set)
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedReducescatterFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                         *(p[0] for p in pairs))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


__all__ = ["alltoall", "alltoall_async", "reducescatter", "reducescatter_async", "grouped_reducescatter",
           "grouped_reducescatter_async"]
