"""Collectives on torch tensors, with Horovod's names and semantics, over the mgs C ABI.

Every operation is asynchronous underneath: it is enqueued with a name (ops
are matched across ranks by name), returns an integer handle, and completes
on the runtime's coordinator thread. `synchronize(handle)` waits and returns
the result; the blocking functions are enqueue + synchronize.

Names: an op named "x" is sent to the runtime as "<kind>.x" (kind is
allreduce, allgather, broadcast, alltoall or reducescatter), so the same user
name may be in flight once per kind (and per process set). Unnamed ops get
"<kind>.noname.<n>" from a counter per kind and process set: ranks must issue
their unnamed ops of a kind in a set in the same order.

Every collective takes `process_set=` (a ProcessSet from add_process_set();
the default, global_process_set, is every rank).
"""

import itertools
import threading

import torch

from .. import _process_sets, _runtime
from .._lib import MgsRuntimeError as HorovodInternalError  # noqa: F401 - Horovod's name for a failed collective
from .._process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set  # noqa: F401
from .._runtime import (Adasum, Average, Max, Min, Product, Sum, ccl_built, cross_rank, cross_size,  # noqa: F401
                        cuda_built, ddl_built, gloo_built, gloo_enabled, is_homogeneous, is_initialized, local_rank,
                        local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built,
                        shutdown, size)
from . import _tensor
from .compression import Compression


def init(comm=None, process_sets=None):
    """Start the runtime on every rank (collective). Calling it again while running is a no-op.

    `comm` exists for Horovod compatibility; mgs always uses MPI_COMM_WORLD.
    `process_sets`: ProcessSet objects (or lists of ranks) to add at once, in
    this order, on every rank; "dynamic" (Horovod's switch) changes nothing:
    mgs always lets sets be added and removed later.
    """
    _process_sets.init("mgs.torch", comm, process_sets)


def barrier(process_set=global_process_set):
    """Block until every rank (of `process_set`) has called barrier()."""
    _runtime.barrier(_sid(process_set))


def join(device=-1):
    """Horovod's join(): call when this rank has no more data; returns the rank that joined last.

    Until every rank has joined, this rank takes part in the other ranks'
    allreduces with zeros (with op=Average the zeros count in the average, as
    in Horovod), so their training steps complete. Other collectives issued
    while a rank has joined (allgather, broadcast, alltoall, reducescatter)
    fail on the ranks that issued them. `device` is accepted for Horovod
    compatibility (mgs needs none).
    """
    del device
    return _runtime.join()


def _sid(process_set):
    return _process_sets.process_set_id(process_set)


# ------------------------------------------------------------ pending ops --

class _Pending:
    """Everything an in-flight op needs kept alive, and how to turn it into a result."""

    __slots__ = ("descriptors", "finish", "rank_sizes")

    def __init__(self, descriptors, finish):
        self.descriptors = descriptors  # keep tensor memory (and CUDA events) alive until completion
        self.finish = finish            # finish(handle, self) -> result, after a successful wait
        self.rank_sizes = None


_lock = threading.Lock()
_pending = {}                  # C handle -> _Pending
_groups = {}                   # group handle (negative) -> [C handles]
_group_ids = itertools.count(1)
_full_name = _runtime.full_name


def _describe(*tensors):
    """Descriptors for tensors that one op uses; CUDA ones share an event recorded after all of them exist."""
    event = None
    if any(t.is_cuda for t in tensors):
        event = _tensor.ready_event(torch.cuda.current_stream(next(t for t in tensors if t.is_cuda).device))
    return [_tensor.Descriptor(t, event) for t in tensors]


def _register(handle, descriptors, finish):
    with _lock:
        _pending[handle] = _Pending(descriptors, finish)
    return handle


def _resolve_op(op, average):
    return _runtime.resolve_op(op, average, "mgs.torch")


# ----------------------------------------------------------------- allreduce --

_GATHER_REDUCE = {Min: lambda t: t.amin(0), Max: lambda t: t.amax(0), Product: lambda t: t.prod(0)}


def _gather_reduce_async(tensor, output, full_name, op, prescale_factor, postscale_factor, process_set=0):
    """Min/Max/Product (not in the C ABI): allgather every rank's tensor, reduce locally.

    The result is postscale_factor * reduce(prescale_factor * tensor), in the input's dtype.
    """
    work = tensor.detach()
    if prescale_factor != 1.0:
        work = (work * prescale_factor).to(tensor.dtype)
    handle = _allgather_async(work.reshape((1,) + tuple(tensor.shape)), full_name, process_set)
    pending = _pending[handle]
    gathered = pending.finish

    def finish(h, p):
        out = _GATHER_REDUCE[op](gathered(h, p)).to(tensor.dtype)  # prod() widens integers to int64
        if postscale_factor != 1.0:
            out = (out * postscale_factor).to(tensor.dtype)
        if output is tensor:
            with torch.no_grad():
                tensor.copy_(out)
            return tensor
        return out
    pending.finish = finish
    return handle


def _allreduce_async(tensor, output, full_name, op, prescale_factor, postscale_factor, flags=0, process_set=0):
    """Enqueue an allreduce of `tensor` into `output` (None: a new tensor; `tensor`: in place)."""
    if op in _runtime.GATHER_OPS:
        return _gather_reduce_async(tensor, output, full_name, op, prescale_factor, postscale_factor, process_set)
    _tensor.mgs_dtype(tensor.dtype)  # TypeError for dtypes the runtime cannot reduce
    work = tensor.contiguous()
    in_place = output is tensor
    if in_place:
        out = work
    else:
        out = torch.empty_like(work, memory_format=torch.contiguous_format)
    descs = _describe(work) if out is work else _describe(work, out)
    handle = _runtime.enqueue_allreduce(full_name, descs[0], descs[-1], op, prescale_factor, postscale_factor,
                                        flags, process_set)

    def finish(*_):
        if in_place and out is not tensor:  # a non-contiguous tensor was reduced through a copy
            with torch.no_grad():
                tensor.copy_(out)
            return tensor
        return out
    return _register(handle, descs, finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set):
    """Start an allreduce of `tensor` into a new tensor; returns a handle for poll()/synchronize()."""
    op = _resolve_op(op, average)
    sid = _sid(process_set)
    return _allreduce_async(tensor, None, _full_name("allreduce", name, sid), op, prescale_factor, postscale_factor,
                            process_set=sid)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set):
    """Start an in-place allreduce of `tensor`; returns a handle for poll()/synchronize()."""
    op = _resolve_op(op, average)
    sid = _sid(process_set)
    return _allreduce_async(tensor, tensor, _full_name("allreduce", name, sid), op, prescale_factor,
                            postscale_factor, process_set=sid)


def _grad_name(name):
    return None if name is None else f"grad.{name}"


class _AllreduceFn(torch.autograd.Function):
    """allreduce with a gradient: the gradient of an allreduce is the same allreduce of the gradients."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (name, op, prescale_factor, postscale_factor, process_set)
        return synchronize(allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor, process_set=process_set))

    @staticmethod
    def backward(ctx, grad_output):
        name, op, pre, post, process_set = ctx.args
        if op in _runtime.GATHER_OPS:
            raise RuntimeError(f"mgs.torch.allreduce(op={_runtime.op_name(op)}) has no gradient; "
                               "only Sum and Average are differentiable")
        grad = synchronize(allreduce_async(grad_output, name=_grad_name(name), op=op, prescale_factor=pre,
                                           postscale_factor=post, process_set=process_set))
        return grad, None, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Average (default) or sum `tensor` over all ranks (of `process_set`) into a new tensor; differentiable.

    The result is prescale_factor * sum(tensor) * postscale_factor (/ the set's size for Average).
    """
    op = _resolve_op(op, average)
    _sid(process_set)  # a removed or unregistered set fails here, before anything runs
    compressed, ctx = compression.compress(tensor)
    summed = _AllreduceFn.apply(compressed, name, op, prescale_factor, postscale_factor, process_set)
    return compression.decompress(summed, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    """In-place allreduce of `tensor`; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                        process_set))


def _group_handle(handles, post=None):
    """One handle for several; synchronize() returns post(list of results) (the list if post is None)."""
    gid = -next(_group_ids)
    with _lock:
        _groups[gid] = (handles, post)
    return gid


def _grouped_names(kind, name, n, sid=0):
    base = _full_name(kind, name if name is None else f"group.{name}", sid)
    return [f"{base}.{i}" for i in range(n)]


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Start allreduces of a list of tensors; one handle whose synchronize() returns the list."""
    op = _resolve_op(op, average)
    sid = _sid(process_set)
    names = _grouped_names("allreduce", name, len(tensors), sid)
    return _group_handle([_allreduce_async(t, None, n, op, prescale_factor, postscale_factor, process_set=sid)
                          for t, n in zip(tensors, names)])


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In-place form of grouped_allreduce_async."""
    op = _resolve_op(op, average)
    sid = _sid(process_set)
    names = _grouped_names("allreduce", name, len(tensors), sid)
    return _group_handle([_allreduce_async(t, t, n, op, prescale_factor, postscale_factor, process_set=sid)
                          for t, n in zip(tensors, names)])


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (name, op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(grouped_allreduce_async(list(tensors), name=name, op=op,
                                                         prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor,
                                                         process_set=process_set)))

    @staticmethod
    def backward(ctx, *grads):
        name, op, pre, post, process_set = ctx.args
        out = synchronize(grouped_allreduce_async(list(grads), name=_grad_name(name), op=op,
                                                  prescale_factor=pre, postscale_factor=post,
                                                  process_set=process_set))
        return (None, None, None, None, None) + tuple(out)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Allreduce each tensor of a list (all enqueued before any is waited for); differentiable."""
    op = _resolve_op(op, average)
    if not tensors:
        return []
    _sid(process_set)
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, process_set,
                                     *(p[0] for p in pairs))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set):
    """In-place grouped allreduce; returns the list of tensors."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                process_set))


# ----------------------------------------------------------------- allgather --

def _allgather_async(tensor, full_name, process_set=0):
    if tensor.dim() == 0:
        raise ValueError("allgather needs a tensor with at least one dimension (it concatenates along "
                         "the first); reshape a scalar to [1]")
    dtype, work = tensor.dtype, tensor.contiguous()
    raw = _tensor.as_bytes(work)
    # A 1-D tensor viewed as bytes has its first dimension scaled by the element size.
    scale = raw.shape[0] // work.shape[0] if work.dim() == 1 and work.shape[0] and raw is not work else 1
    descs = _describe(raw)
    handle = _runtime.enqueue_allgather(full_name, descs[0], process_set)
    ranks = _process_sets.set_size(process_set)

    def finish(h, pending):
        shape, sizes = _runtime.allgather_output(h, ranks)
        out = torch.empty(shape, dtype=raw.dtype, device=raw.device)
        _runtime.allgather_copy(h, _describe(out)[0])
        pending.rank_sizes = [s // scale for s in sizes]
        return _tensor.from_bytes(out, dtype)
    return _register(handle, descs, finish)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Start an allgather (concatenation along the first dimension, in rank order); returns a handle."""
    sid = _sid(process_set)
    return _allgather_async(tensor, _full_name("allgather", name, sid), sid)


def _allgather_with_sizes(tensor, name=None, process_set=global_process_set):
    """The gathered tensor and every rank's first dimension."""
    out, pending = _wait(allgather_async(tensor, name, process_set))
    return out, pending.rank_sizes


def _allgather_grad(grad_output, name, sizes, process_set):
    """Horovod's gradient of an allgather: this rank's rows of the gradients averaged over the set."""
    averaged = synchronize(allreduce_async(grad_output, name=_grad_name(name), op=Average,
                                           process_set=process_set))
    me = rank() if process_set is None else process_set.rank()
    return averaged.narrow(0, sum(sizes[:me]), sizes[me])


class _AllgatherFn(torch.autograd.Function):
    """allgather with a gradient: each rank's slice of the output gradients averaged over the ranks."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        out, sizes = _allgather_with_sizes(tensor, name, process_set)
        ctx.args = (name, sizes, process_set)
        return out

    @staticmethod
    def backward(ctx, grad_output):
        return _allgather_grad(grad_output, *ctx.args), None, None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenate `tensor` from every rank along the first dimension (which may differ per rank).

    Differentiable: as in Horovod, the gradient is this rank's slice of the
    gradient averaged over the ranks (of `process_set`).
    """
    _sid(process_set)
    return _AllgatherFn.apply(tensor, name, process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Start allgathers of a list of tensors; one handle whose synchronize() returns the list."""
    sid = _sid(process_set)
    names = _grouped_names("allgather", name, len(tensors), sid)
    return _group_handle([_allgather_async(t, n, sid) for t, n in zip(tensors, names)])


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        sid = _sid(process_set)
        names = _grouped_names("allgather", name, len(tensors), sid)
        handles = [_allgather_async(t, n, sid) for t, n in zip(tensors, names)]
        outs, error = [], None
        for h in handles:  # wait for all before raising: each uses a live buffer
            try:
                outs.append(_wait(h))
            except Exception as e:  # noqa: BLE001 - re-raised below
                error = error or e
        if error is not None:
            raise error
        ctx.sizes = [p.rank_sizes for _, p in outs]
        ctx.args = (name, process_set)
        return tuple(o for o, _ in outs)

    @staticmethod
    def backward(ctx, *grads):
        name, process_set = ctx.args
        return (None, None) + tuple(_allgather_grad(g, None if name is None else f"{name}.{i}", sizes, process_set)
                                    for i, (g, sizes) in enumerate(zip(grads, ctx.sizes)))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgather each tensor of a list (all enqueued before any is waited for); differentiable."""
    if not tensors:
        return []
    _sid(process_set)
    return list(_GroupedAllgatherFn.apply(name, process_set, *tensors))


class _SparseHandle(int):
    """sparse_allreduce_async's handle: Horovod's is called to get the result; synchronize() takes it too."""

    def __call__(self):
        return synchronize(self)


def sparse_allreduce_async(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                           process_set=global_process_set):
    """Start a reduction of a sparse COO tensor (e.g. a sparse nn.Embedding gradient).

    As in Horovod, every rank's (indices, values) are allgathered and summed
    where indices repeat: traffic grows with the number of ranks, not the size
    of the dense tensor. The handle is callable (Horovod's form: handle() waits
    and returns the coalesced sparse result); synchronize(handle) does the same.
    """
    if not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async needs a sparse COO tensor (tensor.is_sparse)")
    if op not in (Sum, Average):
        raise ValueError(f"a sparse tensor can be reduced with Sum or Average, not {_runtime.op_name(op)}")
    sid = _sid(process_set)
    t = tensor.coalesce()
    values = t.values()
    scale = prescale_factor * postscale_factor
    base = _full_name("allgather", None if name is None else f"sparse.{name}", sid)
    handles = [_allgather_async(t.indices().t().contiguous(), f"{base}.indices", sid),
               _allgather_async(values.contiguous(), f"{base}.values", sid)]
    ranks = _process_sets.set_size(sid)

    def post(results):
        indices, vals = results
        factor = scale / ranks if op == Average else scale
        if factor != 1.0:
            vals = vals * factor
        return torch.sparse_coo_tensor(indices.t(), vals, tensor.shape).coalesce()
    return _SparseHandle(_group_handle(handles, post))


# ----------------------------------------------------------------- broadcast --

def _broadcast_async(tensor, root_rank, full_name, in_place, process_set=0):
    if in_place:
        work = tensor.contiguous()
    else:
        work = tensor.detach().clone(memory_format=torch.contiguous_format)
    raw = _tensor.as_bytes(work)
    descs = _describe(raw)
    handle = _runtime.enqueue_broadcast(full_name, descs[0], root_rank, process_set)

    def finish(*_):
        if in_place and work is not tensor:
            with torch.no_grad():
                tensor.copy_(work)
            return tensor
        return work
    return _register(handle, descs, finish)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Start a broadcast of root_rank's `tensor` into a new tensor; returns a handle."""
    sid = _sid(process_set)
    return _broadcast_async(tensor, root_rank, _full_name("broadcast", name, sid), False, sid)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Start an in-place broadcast of root_rank's `tensor`; returns a handle."""
    sid = _sid(process_set)
    return _broadcast_async(tensor, root_rank, _full_name("broadcast", name, sid), True, sid)


class _BroadcastFn(torch.autograd.Function):
    """broadcast with a gradient: as in Horovod, the root gets the gradients averaged over the ranks, others zero."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.args = (root_rank, name, process_set)
        return synchronize(broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad_output):
        root_rank, name, process_set = ctx.args
        averaged = synchronize(allreduce_async(grad_output, name=_grad_name(name), op=Average,
                                               process_set=process_set))
        if rank() != root_rank:
            averaged.zero_()
        return averaged, None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """root_rank's `tensor` on every rank (of `process_set`; root_rank is a world rank), as a new tensor;
    differentiable."""
    _sid(process_set)
    return _BroadcastFn.apply(tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrite `tensor` with root_rank's; returns `tensor`."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# ------------------------------------------------------------------- handles --

def poll(handle):
    """True if the op (or every op of a group handle) has completed; never blocks."""
    if handle < 0:
        with _lock:
            entry = _groups.get(handle)
        if entry is None:
            raise ValueError(f"unknown or already synchronized handle {handle}")
        return all(poll(h) for h in list(entry[0]))
    return _runtime.poll(handle)


def synchronize(handle):
    """Wait for an op and return its output tensor (a list for a group handle).

    Raises RuntimeError with the runtime's message if the op failed (for example
    when ranks disagreed on its shape, dtype or root).
    """
    if handle < 0:
        with _lock:
            entry = _groups.pop(handle, None)
        if entry is None:
            raise ValueError(f"unknown or already synchronized handle {handle}")
        members, post = entry
        results, error = [], None
        for h in members:  # wait for every member even after a failure: they all use live buffers
            try:
                results.append(synchronize(h))
            except Exception as e:  # noqa: BLE001 - re-raised below
                error = error or e
        if error is not None:
            raise error
        return results if post is None else post(results)
    return _wait(handle)[0]


def _wait(handle):
    """Wait for one C handle, release it, and return (result, its _Pending record)."""
    with _lock:
        pending = _pending.pop(handle, None)
    if pending is None:
        raise ValueError(f"unknown or already synchronized handle {handle}")
    try:
        _runtime.wait(handle)
        return pending.finish(handle, pending), pending
    finally:
        _runtime.release(handle)

