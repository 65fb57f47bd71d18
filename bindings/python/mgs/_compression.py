"""Horovod's Compression interface, shared by mgs.torch and mgs.tensorflow.

These are wire-format casts applied in Python before a tensor is handed to
mgs. mgs's own sparsification (MGS_COMPRESSOR) happens inside the runtime and
is independent of them. Each framework supplies only its float16 cast.
"""

import abc


class Compressor(abc.ABC):
    """compress(tensor) -> (tensor to send, context); decompress(tensor, context) -> tensor."""

    @classmethod
    @abc.abstractmethod
    def compress(cls, tensor):
        """Return the tensor to send and what decompress() needs to undo it."""

    @classmethod
    @abc.abstractmethod
    def decompress(cls, tensor, ctx):
        """Undo compress() on the reduced tensor."""


class NoneCompressor(Compressor):
    """Send tensors as they are."""

    @classmethod
    def compress(cls, tensor):
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor


class FP16CompressorBase(Compressor):
    """Send floating-point tensors as float16 and cast the result back.

    Subclasses set `half` (the framework's float16 dtype) and define
    is_float(tensor) and cast(tensor, dtype)."""

    half = None

    @staticmethod
    def is_float(tensor):
        raise TypeError("FP16CompressorBase needs a framework subclass")

    @staticmethod
    def cast(tensor, dtype):
        raise TypeError("FP16CompressorBase needs a framework subclass")

    @classmethod
    def compress(cls, tensor):
        if cls.is_float(tensor) and tensor.dtype != cls.half:
            return cls.cast(tensor, cls.half), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else cls.cast(tensor, ctx)
