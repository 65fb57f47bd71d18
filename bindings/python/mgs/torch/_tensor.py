"""torch.Tensor -> mgs_tensor_t, without copying.

CPU tensors are passed by their data pointer. CUDA tensors are passed by the
device pointer, the current stream of their device and an event recorded on
that stream after the data was written, so the runtime can order its own
work after the framework's without a host synchronisation.
"""

import ctypes

import torch

from .. import _abi
from .._lib import MgsTensor

# torch dtypes the runtime can reduce, with their mgs_dtype_t.
_REDUCIBLE = {
    torch.float32: _abi.MGS_FLOAT32,
    torch.float64: _abi.MGS_FLOAT64,
    torch.float16: _abi.MGS_FLOAT16,
    torch.bfloat16: _abi.MGS_BFLOAT16,
    torch.int32: _abi.MGS_INT32,
    torch.int64: _abi.MGS_INT64,
    torch.uint8: _abi.MGS_UINT8,
}


def reducible(dtype):
    return dtype in _REDUCIBLE


def mgs_dtype(dtype):
    try:
        return _REDUCIBLE[dtype]
    except KeyError:
        supported = ", ".join(str(d) for d in _REDUCIBLE)
        raise TypeError(f"mgs cannot reduce tensors of type {dtype}; supported: {supported}") from None


def as_bytes(tensor):
    """A uint8 view of a contiguous tensor of any dtype (for byte-exact broadcast and allgather).

    The first dimension keeps its meaning for tensors of 2+ dims; for 1-D tensors
    it is scaled by the element size, which concatenation along it preserves.
    """
    if tensor.dtype in _REDUCIBLE:
        return tensor
    if tensor.dim() == 0:
        tensor = tensor.reshape(1)
    return tensor.view(torch.uint8)


def from_bytes(tensor, dtype, shape=None):
    """Inverse of as_bytes: view a uint8 tensor as `dtype` (and `shape` if given)."""
    if tensor.dtype == dtype:
        return tensor if shape is None else tensor.reshape(shape)
    out = tensor.view(dtype)
    return out if shape is None else out.reshape(shape)


class Descriptor:
    """An mgs_tensor_t for `tensor`, and everything that must outlive the call using it.

    The shape array is read only during the enqueue call, but the data (and the
    CUDA event) must stay alive until the operation's handle completes: the
    pending-operation record keeps the Descriptor until then.
    """

    __slots__ = ("tensor", "_shape", "_event", "c")

    def __init__(self, tensor, event=None):
        if not tensor.is_contiguous():
            raise ValueError("internal error: mgs needs contiguous tensors")
        self.tensor = tensor
        self._shape = (ctypes.c_int64 * max(tensor.dim(), 1))(*tensor.shape)
        self._event = None
        if tensor.dim() > _abi.MGS_MAX_DIMS:
            raise ValueError(f"mgs supports tensors of at most {_abi.MGS_MAX_DIMS} dimensions, "
                             f"got {tensor.dim()}")
        device, stream, ready = _abi.MGS_DEVICE_CPU, None, None
        if tensor.is_cuda:
            device = tensor.device.index
            cuda_stream = torch.cuda.current_stream(tensor.device)
            stream = cuda_stream.cuda_stream
            if event is None:
                event = ready_event(cuda_stream)
            self._event = event
            ready = getattr(event, "cuda_event", None) or None
        elif tensor.device.type != "cpu":
            raise TypeError(f"mgs supports CPU and CUDA tensors, not {tensor.device.type}")
        self.c = MgsTensor(tensor.data_ptr() or None, mgs_dtype(tensor.dtype), tensor.dim(),
                           self._shape, device, stream, ready)

    def ref(self):
        return ctypes.byref(self.c)


def ready_event(stream):
    """A CUDA event recorded on `stream` now: everything enqueued before it has written its data."""
    event = torch.cuda.Event()
    event.record(stream)
    return event
