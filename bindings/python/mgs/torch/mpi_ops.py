"""Collectives on torch tensors, with Horovod's names and semantics, over the mgs C ABI.

Every operation is asynchronous underneath: it is enqueued with a name (ops
are matched across ranks by name), returns an integer handle, and completes
on the runtime's coordinator thread. `synchronize(handle)` waits and returns
the result; the blocking functions are enqueue + synchronize.

Names: an op named "x" is sent to the runtime as "<kind>.x" (kind is
allreduce, allgather or broadcast), so the same user name may be in flight
once per kind. Unnamed ops get "<kind>.noname.<n>" from a per-kind counter:
ranks must issue their unnamed ops of a kind in the same order.
"""

import atexit
import ctypes
import itertools
import os
import threading
import warnings

import torch

from .. import _abi
from .._lib import lib
from . import _tensor
from .compression import Compression

# Reduction ops (Horovod's names). The values are mgs_reduce_op_t.
Sum = _abi.MGS_REDUCE_SUM
Average = _abi.MGS_REDUCE_AVERAGE

# ----------------------------------------------------------------- lifecycle --

_atexit_registered = False


def init(comm=None):
    """Start the runtime on every rank (collective). Calling it again while running is a no-op.

    `comm` exists for Horovod compatibility; mgs always uses MPI_COMM_WORLD.
    """
    global _atexit_registered
    if comm is not None:
        raise ValueError("mgs.torch.init(): mgs runs on MPI_COMM_WORLD; a communicator cannot be given")
    L = lib()
    if L.mgs_is_initialized():
        return
    # MGS_LIBRARY is the bindings' variable; the runtime rejects MGS_* names it does not
    # know, so hide it while mgs_init reads the environment.
    library_var = os.environ.pop("MGS_LIBRARY", None)
    try:
        status = L.mgs_init()
    finally:
        if library_var is not None:
            os.environ["MGS_LIBRARY"] = library_var
    L.check(status)
    if not _atexit_registered:
        # Shut down while Python objects still exist: operations still in flight
        # reference tensor memory that interpreter teardown frees.
        atexit.register(shutdown)
        _atexit_registered = True


def shutdown():
    """Stop the runtime. Operations still pending fail with MGS_ERR_SHUTDOWN. Idempotent."""
    L = lib()
    L.check(L.mgs_shutdown())


def is_initialized():
    return bool(lib().mgs_is_initialized())


def _topology(fn_name):
    def get():
        L = lib()
        out = ctypes.c_int(0)
        L.check(getattr(L, fn_name)(ctypes.byref(out)))
        return out.value
    get.__name__ = fn_name[len("mgs_"):]
    get.__doc__ = f"{get.__name__} of this process (ValueError before init())."
    return get


rank = _topology("mgs_rank")
size = _topology("mgs_size")
local_rank = _topology("mgs_local_rank")
local_size = _topology("mgs_local_size")


def barrier():
    """Block until every rank has called barrier()."""
    L = lib()
    L.check(L.mgs_barrier())


def mpi_built():
    return True


def gloo_built():
    return False


def cuda_built():
    """True if libmgs was built with its CUDA kernels."""
    return bool(lib().mgs_built_with_cuda())


def nccl_built():
    return bool(lib().mgs_built_with_nccl())


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
_noname = {}                   # kind -> next unnamed index


def _full_name(kind, name):
    if name is None:
        with _lock:
            n = _noname.get(kind, 0)
            _noname[kind] = n + 1
        return f"{kind}.noname.{n}"
    return f"{kind}.{name}"


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


def _enqueue(fn, *args):
    L = lib()
    handle = ctypes.c_uint64(0)
    L.check(fn(*args, ctypes.byref(handle)))
    return handle.value


def _resolve_op(op, average):
    if average is not None:
        if op is not None:
            raise ValueError("give either op= or the deprecated average=, not both")
        warnings.warn("the 'average' argument is deprecated; use op=mgs.torch.Average or op=mgs.torch.Sum",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    if op is None:
        return Average
    if op not in (Sum, Average):
        raise ValueError(f"mgs supports op=Sum ({Sum}) and op=Average ({Average}), got {op!r}")
    return op


# ----------------------------------------------------------------- allreduce --

def _allreduce_async(tensor, output, full_name, op, prescale_factor, postscale_factor, flags=0):
    """Enqueue an allreduce of `tensor` into `output` (None: a new tensor; `tensor`: in place)."""
    _tensor.mgs_dtype(tensor.dtype)  # TypeError for dtypes the runtime cannot reduce
    work = tensor.contiguous()
    in_place = output is tensor
    if in_place:
        out = work
    else:
        out = torch.empty_like(work, memory_format=torch.contiguous_format)
    descs = _describe(work) if out is work else _describe(work, out)
    L = lib()
    handle = _enqueue(L.mgs_allreduce_async, full_name.encode(), descs[0].ref(), descs[-1].ref(), int(op),
                      float(prescale_factor), float(postscale_factor), int(flags))

    def finish(*_):
        if in_place and out is not tensor:  # a non-contiguous tensor was reduced through a copy
            with torch.no_grad():
                tensor.copy_(out)
            return tensor
        return out
    return _register(handle, descs, finish)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """Start an allreduce of `tensor` into a new tensor; returns a handle for poll()/synchronize()."""
    op = _resolve_op(op, average)
    return _allreduce_async(tensor, None, _full_name("allreduce", name), op, prescale_factor, postscale_factor)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """Start an in-place allreduce of `tensor`; returns a handle for poll()/synchronize()."""
    op = _resolve_op(op, average)
    return _allreduce_async(tensor, tensor, _full_name("allreduce", name), op, prescale_factor,
                            postscale_factor)


def _grad_name(name):
    return None if name is None else f"grad.{name}"


class _AllreduceFn(torch.autograd.Function):
    """allreduce with a gradient: the gradient of an allreduce is the same allreduce of the gradients."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor):
        ctx.args = (name, op, prescale_factor, postscale_factor)
        return synchronize(allreduce_async(tensor, name=name, op=op, prescale_factor=prescale_factor,
                                           postscale_factor=postscale_factor))

    @staticmethod
    def backward(ctx, grad_output):
        name, op, pre, post = ctx.args
        grad = synchronize(allreduce_async(grad_output, name=_grad_name(name), op=op, prescale_factor=pre,
                                           postscale_factor=post))
        return grad, None, None, None, None


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0):
    """Average (default) or sum `tensor` over all ranks into a new tensor; differentiable.

    The result is prescale_factor * sum(tensor) * postscale_factor (/ size() for Average).
    """
    op = _resolve_op(op, average)
    compressed, ctx = compression.compress(tensor)
    summed = _AllreduceFn.apply(compressed, name, op, prescale_factor, postscale_factor)
    return compression.decompress(summed, ctx)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """In-place allreduce of `tensor`; returns `tensor`."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor))


def _group_handle(handles):
    gid = -next(_group_ids)
    with _lock:
        _groups[gid] = handles
    return gid


def _grouped_names(name, n):
    base = _full_name("allreduce", name if name is None else f"group.{name}")
    return [f"{base}.{i}" for i in range(n)]


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0):
    """Start allreduces of a list of tensors; one handle whose synchronize() returns the list."""
    op = _resolve_op(op, average)
    names = _grouped_names(name, len(tensors))
    return _group_handle([_allreduce_async(t, None, n, op, prescale_factor, postscale_factor)
                          for t, n in zip(tensors, names)])


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0):
    """In-place form of grouped_allreduce_async."""
    op = _resolve_op(op, average)
    names = _grouped_names(name, len(tensors))
    return _group_handle([_allreduce_async(t, t, n, op, prescale_factor, postscale_factor)
                          for t, n in zip(tensors, names)])


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, *tensors):
        ctx.args = (name, op, prescale_factor, postscale_factor)
        return tuple(synchronize(grouped_allreduce_async(list(tensors), name=name, op=op,
                                                         prescale_factor=prescale_factor,
                                                         postscale_factor=postscale_factor)))

    @staticmethod
    def backward(ctx, *grads):
        name, op, pre, post = ctx.args
        out = synchronize(grouped_allreduce_async(list(grads), name=_grad_name(name), op=op,
                                                  prescale_factor=pre, postscale_factor=post))
        return (None, None, None, None) + tuple(out)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0):
    """Allreduce each tensor of a list (all enqueued before any is waited for); differentiable."""
    op = _resolve_op(op, average)
    if not tensors:
        return []
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, *(p[0] for p in pairs))
    return [compression.decompress(o, p[1]) for o, p in zip(outs, pairs)]


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0):
    """In-place grouped allreduce; returns the list of tensors."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor))


# ----------------------------------------------------------------- allgather --

def _allgather_async(tensor, full_name):
    if tensor.dim() == 0:
        raise ValueError("allgather needs a tensor with at least one dimension (it concatenates along "
                         "the first); reshape a scalar to [1]")
    dtype, work = tensor.dtype, tensor.contiguous()
    raw = _tensor.as_bytes(work)
    # A 1-D tensor viewed as bytes has its first dimension scaled by the element size.
    scale = raw.shape[0] // work.shape[0] if work.dim() == 1 and work.shape[0] and raw is not work else 1
    descs = _describe(raw)
    L = lib()
    handle = _enqueue(L.mgs_allgather_async, full_name.encode(), descs[0].ref())

    def finish(h, pending):
        ndim, shape = ctypes.c_int32(0), (ctypes.c_int64 * _abi.MGS_MAX_DIMS)()
        L.check(L.mgs_allgather_output_shape(h, ctypes.byref(ndim), shape))
        sizes = (ctypes.c_int64 * size())()
        L.check(L.mgs_allgather_rank_sizes(h, sizes))
        out = torch.empty(list(shape[:ndim.value]), dtype=raw.dtype, device=raw.device)
        L.check(L.mgs_allgather_copy_output(h, _describe(out)[0].ref()))
        pending.rank_sizes = [s // scale for s in sizes]
        return _tensor.from_bytes(out, dtype)
    return _register(handle, descs, finish)


def allgather_async(tensor, name=None):
    """Start an allgather (concatenation along the first dimension, in rank order); returns a handle."""
    return _allgather_async(tensor, _full_name("allgather", name))


def _allgather_with_sizes(tensor, name=None):
    """The gathered tensor and every rank's first dimension."""
    out, pending = _wait(allgather_async(tensor, name))
    return out, pending.rank_sizes


class _AllgatherFn(torch.autograd.Function):
    """allgather with a gradient: each rank's slice of the summed output gradients."""

    @staticmethod
    def forward(ctx, tensor, name):
        out, sizes = _allgather_with_sizes(tensor, name)
        ctx.name = name
        ctx.offset = sum(sizes[:rank()])
        ctx.count = tensor.shape[0]
        return out

    @staticmethod
    def backward(ctx, grad_output):
        summed = synchronize(allreduce_async(grad_output, name=_grad_name(ctx.name), op=Sum))
        return summed.narrow(0, ctx.offset, ctx.count), None


def allgather(tensor, name=None):
    """Concatenate `tensor` from every rank along the first dimension (which may differ per rank).

    Differentiable: the gradient is this rank's slice of the gradient summed over ranks.
    """
    return _AllgatherFn.apply(tensor, name)


# ----------------------------------------------------------------- broadcast --

def _broadcast_async(tensor, root_rank, full_name, in_place):
    if in_place:
        work = tensor.contiguous()
    else:
        work = tensor.detach().clone(memory_format=torch.contiguous_format)
    raw = _tensor.as_bytes(work)
    descs = _describe(raw)
    L = lib()
    handle = _enqueue(L.mgs_broadcast_async, full_name.encode(), descs[0].ref(), int(root_rank))

    def finish(*_):
        if in_place and work is not tensor:
            with torch.no_grad():
                tensor.copy_(work)
            return tensor
        return work
    return _register(handle, descs, finish)


def broadcast_async(tensor, root_rank, name=None):
    """Start a broadcast of root_rank's `tensor` into a new tensor; returns a handle."""
    return _broadcast_async(tensor, root_rank, _full_name("broadcast", name), in_place=False)


def broadcast_async_(tensor, root_rank, name=None):
    """Start an in-place broadcast of root_rank's `tensor`; returns a handle."""
    return _broadcast_async(tensor, root_rank, _full_name("broadcast", name), in_place=True)


class _BroadcastFn(torch.autograd.Function):
    """broadcast with a gradient: the root gets the sum of every rank's gradient, others zero."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root_rank, ctx.name = root_rank, name
        return synchronize(broadcast_async(tensor, root_rank, name))

    @staticmethod
    def backward(ctx, grad_output):
        summed = synchronize(allreduce_async(grad_output, name=_grad_name(ctx.name), op=Sum))
        if rank() != ctx.root_rank:
            summed.zero_()
        return summed, None, None


def broadcast(tensor, root_rank, name=None):
    """root_rank's `tensor` on every rank, as a new tensor; differentiable."""
    return _BroadcastFn.apply(tensor, root_rank, name)


def broadcast_(tensor, root_rank, name=None):
    """Overwrite `tensor` with root_rank's; returns `tensor`."""
    return synchronize(broadcast_async_(tensor, root_rank, name))


# ------------------------------------------------------------------- handles --

def poll(handle):
    """True if the op (or every op of a group handle) has completed; never blocks."""
    if handle < 0:
        with _lock:
            members = _groups.get(handle)
        if members is None:
            raise ValueError(f"unknown or already synchronized handle {handle}")
        return all(poll(h) for h in list(members))
    L = lib()
    done = ctypes.c_int(0)
    L.check(L.mgs_poll(handle, ctypes.byref(done)))
    return bool(done.value)


def synchronize(handle):
    """Wait for an op and return its output tensor (a list for a group handle).

    Raises RuntimeError with the runtime's message if the op failed (for example
    when ranks disagreed on its shape, dtype or root).
    """
    if handle < 0:
        with _lock:
            members = _groups.pop(handle, None)
        if members is None:
            raise ValueError(f"unknown or already synchronized handle {handle}")
        results, error = [], None
        for h in members:  # wait for every member even after a failure: they all use live buffers
            try:
                results.append(synchronize(h))
            except Exception as e:  # noqa: BLE001 - re-raised below
                error = error or e
        if error is not None:
            raise error
        return results
    return _wait(handle)[0]


def _wait(handle):
    """Wait for one C handle, release it, and return (result, its _Pending record)."""
    with _lock:
        pending = _pending.pop(handle, None)
    if pending is None:
        raise ValueError(f"unknown or already synchronized handle {handle}")
    L = lib()
    try:
        status = L.mgs_wait(handle)  # ctypes releases the GIL for the wait
        if status != 0:
            raise L.error(status, L.mgs_handle_error(handle).decode(errors="replace"), at_enqueue=False)
        return pending.finish(handle, pending), pending
    finally:
        L.mgs_release(handle)

